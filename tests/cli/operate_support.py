"""Stores holding several key spaces, for the operator commands' tests (usage, purge, health, metrics)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from hicache_storage import load_backend, make_config
from hicache_storage import testing as kit
from hicache_storage.cli.commands import run
from hicache_storage.listing import MANIFEST_BYTES, MANIFEST_KEY, KeySpaceManifest
from hicache_storage.pools import BatchContext

SPACES = [("model-a", "r1", ""), ("model-b", "r1", ""), ("model-b", "r2", "tenant-x")]
SERVICES = kit.TestServices(Path(__file__).resolve().parents[2])
#: Backends every operator command is tried on (those that list and delete, and two that cannot list).
LISTING = ["file", "slab", "sim", "redis", "s3", "fsspec"]


def options_for(name: str, tmp_path: Path) -> dict[str, Any]:
    """Options of a fresh, empty, existing store of backend ``name``."""
    tag = uuid.uuid4().hex[:8]
    if name == "file":
        os.makedirs(tmp_path / "store", exist_ok=True)
        return {"path": str(tmp_path / "store")}
    if name == "slab":
        os.makedirs(tmp_path / "slab", exist_ok=True)
        return {"path": str(tmp_path / "slab"), "capacity_bytes": 8 << 20}  # the smallest store
    if name == "redis":
        SERVICES.start("redis")
        env = SERVICES.settings()
        return {"url": env["HICACHE_TEST_REDIS_URL"], "key_prefix": f"operate-{tag}:"}
    if name == "s3":
        SERVICES.start("s3")
        env = SERVICES.settings()
        bucket = f"operate-{tag}"
        SERVICES.s3_bucket(bucket, env)
        return kit.s3_backend_options(env, bucket)
    if name == "fsspec":
        return {"url": f"memory://operate-{tag}"}
    return {"store": f"operate-{tag}"}  # a named sim store: every instance sees it


def fill(name: str, options: dict[str, Any]) -> dict[tuple[str, str, str], tuple[list[str], list[bytes]]]:
    """Three key spaces of 3, 4 and 5 pages; what each stored."""
    written = {}
    for count, (model, revision, namespace) in enumerate(SPACES, start=3):
        pool = kit.make_pool(seed=count)
        extra = {**options, "model_revision": revision, "namespace": namespace}
        with load_backend(name, make_config(model, extra_config=extra)) as storage:
            storage.register_mem_pool_host(pool)
            keys = kit.random_keys(count)
            assert storage.batch_set_v1(keys, kit.page_indices(0, count)) == [True] * count
            written[(model, revision, namespace)] = (keys, [kit.page_bytes(pool, p) for p in range(count)])
    return written


def read_back(name: str, options: dict[str, Any], space: tuple[str, str, str], keys: list[str]) -> list[bytes | None]:
    model, revision, namespace = space
    pool = kit.make_pool(seed=None)
    extra = {**options, "model_revision": revision, "namespace": namespace}
    with load_backend(name, make_config(model, extra_config=extra)) as storage:
        storage.register_mem_pool_host(pool)
        hits = storage.batch_get_v1(keys, kit.page_indices(0, len(keys)))
    return [kit.page_bytes(pool, p) if hit else None for p, hit in enumerate(hits)]


def cli(*args: str) -> int:
    return run(list(args))


def store_contents(name: str, options: dict[str, Any]) -> list[str]:
    """Everything the store holds, as the service itself lists it (not through the SDK): the paths
    under a directory (directories included), the keys under a Redis prefix, the objects of a
    bucket, the keys of a sim or in-memory fsspec store."""
    if name in ("file", "slab"):
        root = Path(options["path"])
        return sorted(str(path.relative_to(root)) + ("/" if path.is_dir() else "") for path in root.rglob("*"))
    if name == "redis":
        import redis

        client = redis.Redis.from_url(options["url"])
        try:
            return sorted(key.decode() for key in client.scan_iter(match=options["key_prefix"] + "*"))
        finally:
            client.close()
    if name == "s3":
        client = kit.s3_client(SERVICES.settings())
        listed = client.list_objects_v2(Bucket=options["bucket"])
        return sorted(item["Key"] for item in listed.get("Contents", []))
    if name == "fsspec":
        import fsspec

        memory = fsspec.filesystem("memory")
        root = options["url"].removeprefix("memory://")
        return sorted(memory.find(root, withdirs=True)) if memory.exists(root) else []
    from hicache_storage_sim.store import open_store

    return sorted(open_store(options["store"], None, False).keys())


def plant_manifest(
    name: str, options: dict[str, Any], host_model: str, named: KeySpaceManifest
) -> tuple[str, list[str], list[bytes]]:
    """Two pages in ``host_model``'s key space, and there a manifest record that names another key
    space; (the host's prefix, its page keys, their bytes)."""
    pool = kit.make_pool(seed=7)
    with load_backend(name, make_config(host_model, extra_config={**options, "manifests": False})) as storage:
        storage.register_mem_pool_host(pool)
        keys = kit.random_keys(2)
        assert storage.batch_set_v1(keys, kit.page_indices(0, 2)) == [True, True]
        space = storage.pool_keyspace()
        key = f"{space.prefix}{MANIFEST_KEY}.tp9of9"
        record = bytearray(named.to_bytes())
        context = BatchContext(pool="", keyspace=space, record_bytes=MANIFEST_BYTES)
        assert storage.backend.write_pages([key], [[memoryview(record)]], context) == [True]  # behind the SDK
        return space.prefix, keys, [kit.page_bytes(pool, page) for page in range(2)]

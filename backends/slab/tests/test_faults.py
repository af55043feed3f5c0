"""Fault cases: a disk too small for the slab, a read-only directory, scribbled slab bytes."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hicache_storage_slab import SlabBackend
from slab_support import indices, kv_slab, make_backend, make_pool, page_bytes, slab_backend

from hicache_storage import BackendFault, ConfigError, HiCacheStorage, KeySpace, make_config
from hicache_storage import testing as kit
from hicache_storage.plugin import BatchContext


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (skips the test where mounting is not allowed)."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp") or "slab-" in p.name)


def test_disk_full_at_preallocation_is_a_config_error(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "1m") as mount:
        config = make_config("m", extra_config={"path": str(mount), "capacity_bytes": 8 << 20})
        backend = HiCacheStorage(SlabBackend, config)
        with pytest.raises(ConfigError) as caught:
            backend.register_mem_pool_host(make_pool())
        assert caught.value.option == "extra_config.capacity_bytes"
        assert "free space" in str(caught.value) and "No space left" in str(caught.value)
        assert sorted(p.name for p in mount.iterdir()) == []  # the partial file is gone, and the lock file
        backend.close()


def test_a_preallocation_that_fails_part_way_removes_every_file_it_made(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "3m") as mount:  # the first two 1 MiB files fit, the rest does not
        config = make_config("m", extra_config={"path": str(mount), "capacity_bytes": 6 << 20, "file_bytes": 1 << 20})
        backend = HiCacheStorage(SlabBackend, config)
        with pytest.raises(ConfigError) as caught:
            backend.register_mem_pool_host(make_pool())
        assert caught.value.option == "extra_config.capacity_bytes"
        assert backend.stats.get("slabs_created") >= 1  # some files were made before the disk filled
        assert sorted(p.name for p in mount.iterdir()) == []  # and none is left, nor the lock file
        backend.close()


def test_file_size_limit_at_preallocation_is_a_config_error(tmp_path: Path) -> None:
    """Without a small file system to mount: a file-size limit makes ``posix_fallocate`` fail the same way."""
    script = textwrap.dedent(
        f"""
        import resource, signal
        from hicache_storage import ConfigError, HiCacheStorage, make_config, testing as kit
        from hicache_storage_slab import SlabBackend
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        config = make_config("m", extra_config={{"path": {str(tmp_path)!r}, "capacity_bytes": 8 << 20}})
        backend = HiCacheStorage(SlabBackend, config)
        try:
            backend.register_mem_pool_host(kit.make_pool())
        except ConfigError as error:
            print("ConfigError", error.option)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["ConfigError", "extra_config.capacity_bytes"], done.stderr[-2000:]
    assert _leftovers(tmp_path) == []


def test_a_pool_whose_slab_does_not_fit_fails_its_calls_and_backs_off(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mount:
        pool = make_pool()
        backend = kit.make_backend(
            SlabBackend,
            {
                "path": str(mount),
                "capacity_bytes": 512 * 1024,
                "pool_capacity_bytes": {"big": 8 << 20},
                "resilience": False,
            },
            pool,
        )
        space = KeySpace(
            model_name="m", dtype="uint8", layout="state", page_size=1, page_bytes=4096, is_mla=False, pool="big"
        )
        big = BatchContext(pool="big", keyspace=space)
        page = [memoryview(bytearray(4096))]
        (skey,) = space.storage_keys(kit.random_keys(1))
        slabs = slab_backend(backend)
        for _ in range(2):
            with pytest.raises(BackendFault, match="No space left"):  # the SDK turns it into False / a miss
                slabs.write_pages([skey], [page], big)
        with pytest.raises(BackendFault):
            slabs.read_pages([skey], [page], big)
        assert backend.stats.get("slab_open_failures") == 1  # the later calls did not try again
        keys = kit.random_keys(2)
        assert backend.batch_set_v1(keys, indices(0, 2)) == [True, True]  # the KV pool is unaffected
        assert backend.batch_get_v1(keys, indices(4, 2)) == [True, True]
        assert [n for n in _leftovers(mount) if n.endswith(".tmp")] == []
        backend.close()


def test_read_only_directory_is_a_config_error(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "ro", "4m") as mount:
        writer = make_backend(mount, capacity_bytes=1 << 20)  # a slab exists before the directory turns read-only
        writer.close()
        done = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {done.stderr.decode(errors='replace').strip()}")
        with pytest.raises(ConfigError) as caught:
            make_backend(mount, capacity_bytes=1 << 20)
        assert caught.value.option == "extra_config.path" and "not writable" in str(caught.value)
        with pytest.raises(ConfigError) as missing:
            make_backend(mount / "below", capacity_bytes=1 << 20)
        assert missing.value.option == "extra_config.path"


def test_scribbled_slab_bytes_never_read_as_data(tmp_path: Path) -> None:
    pool = make_pool(num_pages=48)
    backend = make_backend(tmp_path, pool, capacity_bytes=1 << 20)
    keys = kit.random_keys(24)
    assert backend.batch_set_v1(keys, indices(0, 24)) == [True] * 24
    (file,) = kv_slab(backend).files
    size = os.fstat(file.fd).st_size
    rng = random.Random(5)
    for _ in range(2000):  # random bytes over random places: headers, payloads, padding
        offset = rng.randrange(4096, size - 64)
        os.pwrite(file.fd, rng.randbytes(rng.choice([1, 8, 64, 700])), offset)
    hits = backend.batch_get_v1(keys, indices(24, 24))
    for i, hit in enumerate(hits):
        assert not hit or page_bytes(pool, 24 + i) == page_bytes(pool, i), f"page {i} read back wrong bytes"
    assert sum(hits) < 24, "the scribbles hit no stored page"
    assert backend.stats.get("integrity_failures") >= 24 - sum(hits)  # every miss was a failed check
    assert backend.batch_set_v1(keys, indices(0, 24)) == [True] * 24  # and the slab is usable again
    assert backend.batch_get_v1(keys, indices(24, 24)) == [True] * 24
    backend.close()

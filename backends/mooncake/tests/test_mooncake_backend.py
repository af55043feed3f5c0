"""The mooncake backend against a real mooncake_master on 127.0.0.1: what is its own (options, transfer
paths, the stored object, header checks, key prefixes, set-up and segment faults).

Round trips, overwrites, integrity, delete, clear, lifecycle and the master's outage are the
conformance suite's (test_conformance.py, both transfer modes).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
import torch
from hicache_storage_mooncake import MooncakeBackend, MooncakeOptions
from hicache_storage_mooncake.client import INSTALL_HINT
from hicache_storage_mooncake.memory import address
from hicache_storage_mooncake.options import parse_size
from hicache_storage_mooncake.record import FLAG_UNHASHED, HEADER_SIZE, MAGIC, key_digest, payload_checksum
from hicache_storage_mooncake.zero_copy import _ChunkChecks
from mooncake_support import PAGE_SIZE, client_options, ctl, indices, keys_for, make_pool, page_bytes, raw_store

from hicache_storage import BackendFault, ConfigError, HiCacheStorage, HostKVPool, available_backends, make_config

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- options (no server needed)
def test_segment_addresses_of_writable_and_read_only_views() -> None:
    """Transfer pointers: the address of a view's first byte, whether or not the view is writable."""
    data = bytearray(range(256)) * 64
    writable = memoryview(data)[100:4100]
    read_only = memoryview(bytes(data))[100:4100]
    for view in (writable, read_only, writable.toreadonly()):
        assert address(view) == np.frombuffer(view, np.uint8).ctypes.data
    assert address(writable) == address(writable.toreadonly())


def test_options_env_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_MASTER", "10.0.0.1:50051")
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "2GB")
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "rdma")
    options = MooncakeOptions()
    assert options.master_server_address == "10.0.0.1:50051"
    assert options.global_segment_size == 2 << 30
    assert options.protocol == "rdma"
    assert options.metadata_server == "P2PHANDSHAKE"
    assert MooncakeOptions(master_server_address="h:1", protocol="tcp").protocol == "tcp"


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({}, "master_server_address"),
        ({"master_server_address": "nohostport"}, "master_server_address"),
        ({"master_server_address": "h:1", "protocol": "udp"}, "protocol"),
        ({"master_server_address": "h:1", "metadata_server": "bogus"}, "metadata_server"),
        ({"master_server_address": "h:1", "setup_retries": 0}, "setup_retries"),
        ({"master_server_address": "h:1", "key_prefix": "a b"}, "key_prefix"),
        ({"master_server_address": "h:1", "global_segment_size": "lots"}, "global_segment_size"),
        ({"master_server_address": "h:1", "verify_checksum": "yes"}, "verify_checksum"),
        ({"master_server_address": "h:1", "transfer": "rdma"}, "transfer"),
        ({"master_server_address": "h:1", "get_calls": "fastest"}, "get_calls"),
    ],
)
def test_options_rejected(monkeypatch: pytest.MonkeyPatch, values: dict[str, Any], option: str) -> None:
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    with pytest.raises(ConfigError, match=option):
        MooncakeOptions(**values)


def test_no_page_is_checked_once_a_read_has_returned() -> None:
    """A read given up on at its deadline returns while its chunks still land: they are not checked."""
    checked: list[tuple[int, int]] = []
    checks = _ChunkChecks(lambda n, code: checked.append((n, code)))
    checks.chunk([0, 1], [7, 8, 9])
    checks.close()
    checks.chunk([2], [7, 8, 9])
    assert checked == [(0, 7), (1, 8)]


def test_parse_size() -> None:
    assert parse_size("16mb", "x") == 16 << 20
    assert parse_size("4 GiB", "x") == 4 << 30
    assert parse_size(123, "x") == 123


def test_entry_points_listed() -> None:
    from importlib import metadata

    from hicache_storage_mooncake.conformance import MooncakeHooks

    assert "mooncake" in [info.name for info in available_backends()]
    (hooks,) = [e for e in metadata.entry_points(group="hicache_storage.conformance_hooks") if e.name == "mooncake"]
    assert hooks.load() is MooncakeHooks


def test_missing_client_gives_install_hint() -> None:
    code = (
        "import sys; sys.modules['mooncake'] = None\n"
        "from hicache_storage_mooncake.client import import_store\n"
        "try:\n    import_store()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False).stdout
    assert "mooncake-transfer-engine-non-cuda" in out and "mooncake-transfer-engine " in out
    assert "mooncake-transfer-engine-non-cuda" in INSTALL_HINT


# ---------------------------------------------------------------- data path
TRANSFERS = ("zero_copy", "staged")


@pytest.mark.parametrize("get_calls", ["session", "plain", "auto"])
def test_every_get_call_reads_the_pages_and_is_counted(open_backend: Any, get_calls: str) -> None:
    """``get_calls``: the session and the plain reads return the same pages; ``auto`` tries both first."""
    pool = make_pool(num_pages=24)
    backend = open_backend({"transfer": "zero_copy", "get_calls": get_calls}, pool=pool)
    keys = keys_for(6)
    assert backend.batch_set_v1(keys, indices(0, 6)) == [True] * 6
    for round_number in range(4):
        base = 6 + 3 * round_number
        assert backend.batch_get_v1(keys[:3], indices(base, 3)) == [True] * 3
        assert [page_bytes(pool, base + n) for n in range(3)] == [page_bytes(pool, n) for n in range(3)]
    counters = backend.get_stats()["counters"]
    used = {way: counters.get(f"mooncake_{way}_gets", 0) for way in ("session", "plain")}
    if get_calls == "auto":
        assert used == {"session": 2, "plain": 2}  # the ways take turns until each has its samples
        assert all(cost is not None and cost > 0 for cost in backend.backend.get_calls.costs().values())
    else:
        assert used[get_calls] == 4 and sum(used.values()) == 4


def test_staged_and_zero_copy_clients_read_each_others_pages(open_backend: Any) -> None:
    """Both transfers store the same object; each client moves pages the way its ``transfer`` says."""
    pool = make_pool("layer_first")
    staged = open_backend({"transfer": "staged"}, pool=pool)
    direct = open_backend({"transfer": "zero_copy", "key_prefix": staged.options.key_prefix}, pool=pool)
    keys = keys_for(4)
    assert staged.batch_set_v1(keys[:2], indices(0, 2)) == [True, True]
    assert direct.batch_set_v1(keys[2:], indices(2, 2)) == [True, True]
    assert direct.batch_get_v1(keys, indices(4, 4)) == [True] * 4
    assert staged.batch_get_v1(keys, indices(8, 4)) == [True] * 4
    expected = [page_bytes(pool, n) for n in range(4)]
    assert [page_bytes(pool, 4 + n) for n in range(4)] == expected
    assert [page_bytes(pool, 8 + n) for n in range(4)] == expected
    for client, moved in ((staged, (2, 4)), (direct, (0, 0))):
        counters = client.get_stats()["counters"]
        assert (counters.get("mooncake_staged_writes", 0), counters.get("mooncake_staged_reads", 0)) == moved


def test_auto_transfer_stages_small_segments_over_tcp(open_backend: Any) -> None:
    """``auto`` copies pages whose segments average under 256 KiB; 256 KiB segments travel by pointer."""
    small = open_backend(pool=make_pool())  # segments of a few hundred bytes
    keys = keys_for(2)
    assert small.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert small.get_stats()["counters"]["mooncake_staged_writes"] == 2
    big_pool = HostKVPool(num_pages=4, page_size=32, layer_num=4, head_num=8, head_dim=128, layout="page_first")
    assert [s.nbytes for s in big_pool.page_segments(0)] == [256 << 10, 256 << 10]
    big = open_backend(pool=big_pool)
    assert big.batch_set_v1(keys, torch.arange(0, 64)) == [True, True]
    assert big.batch_get_v1(keys, torch.arange(64, 128)) == [True, True]
    assert "mooncake_staged_writes" not in big.get_stats()["counters"]
    assert bytes(big_pool.get_data_page(64).view(torch.uint8).numpy()) == bytes(
        big_pool.get_data_page(0).view(torch.uint8).numpy()
    )


@pytest.mark.parametrize("transfer", TRANSFERS)
def test_clients_with_and_without_sessions_share_pages(open_backend: Any, transfer: str) -> None:
    """Put/get sessions and the plain calls of clients without them (remove + multi-buffer put and
    multi-buffer get; staged: upsert and get) store the same object: each reads and overwrites the
    other's pages."""
    pool = make_pool()
    sessions = open_backend({"transfer": transfer}, pool=pool)
    plain = open_backend({"transfer": transfer, "key_prefix": sessions.options.key_prefix}, pool=pool)
    assert sessions.backend.put_sessions and sessions.backend.get_sessions
    plain.backend.put_sessions = plain.backend.get_sessions = False
    keys = keys_for(4)
    assert plain.batch_set_v1(keys[:2], indices(0, 2)) == [True, True]
    assert sessions.batch_set_v1(keys[2:], indices(2, 2)) == [True, True]
    for reader, first in ((sessions, 4), (plain, 8)):
        assert reader.batch_get_v1(keys, indices(first, 4)) == [True] * 4
        assert [page_bytes(pool, first + n) for n in range(4)] == [page_bytes(pool, n) for n in range(4)]
    assert plain.batch_set_v1(keys[2:3], indices(12, 1)) == [True]  # overwrites a session-written page
    assert sessions.batch_set_v1(keys[:1], indices(13, 1)) == [True]  # and the other way round
    assert sessions.batch_get_v1([keys[0], keys[2]], indices(14, 2)) == [True, True]
    assert [page_bytes(pool, 14), page_bytes(pool, 15)] == [page_bytes(pool, 13), page_bytes(pool, 12)]


def test_write_of_a_key_another_write_holds_is_false(open_backend: Any) -> None:
    """A key reserved by a put session still running elsewhere can neither be put nor removed: the
    write is ``False`` (counted as ``mooncake_replica_not_ready``) and the key stays a miss; once the
    other session ends, writes succeed."""
    pool = make_pool()
    backend = open_backend({"transfer": "zero_copy"}, pool=pool)
    other = open_backend({"key_prefix": backend.options.key_prefix}, pool=make_pool())  # another client
    (key,) = keys_for(1)
    client = other.backend.client
    name = backend.backend.mooncake_key(backend.keyspace.storage_key(key))
    assert client.batch_put_session_start([name], [HEADER_SIZE + pool.bytes_per_page], backend.backend.replicate) == [0]
    try:
        assert backend.batch_set_v1([key], indices(0, 1)) == [False]
        assert backend.get_stats()["counters"]["mooncake_replica_not_ready"] == 1
        assert backend.batch_get_v1([key], indices(1, 1)) == [False]
    finally:
        client.batch_put_session_revoke([name])
    assert backend.batch_set_v1([key], indices(0, 1)) == [True]
    assert backend.batch_get_v1([key], indices(1, 1)) == [True]
    assert page_bytes(pool, 1) == page_bytes(pool, 0)


def test_size_mismatch_is_a_miss(open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend(pool=pool)
    short, long = keys_for(2)
    raw = raw_store(backend)
    raw[backend.keyspace.storage_key(short)] = b"x" * 10
    raw[backend.keyspace.storage_key(long)] = b"x" * (pool.bytes_per_page + 8)
    before = page_bytes(pool, 3)
    assert backend.batch_get_v1([short, long], indices(3, 2)) == [False, False]
    assert backend.batch_get([short, long]) == [None, None]
    assert backend.get_stats()["counters"]["mooncake_size_mismatch"] >= 1
    assert len(before) == pool.bytes_per_page


def test_stored_object_is_header_then_page(open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend(pool=pool)
    (key,) = keys_for(1)
    assert backend.batch_set_v1([key], indices(0, 1)) == [True]
    stored = raw_store(backend)[backend.keyspace.storage_key(key)]
    magic, version, flags, _, length, digest, kd = struct.unpack_from("<4sBBHQQQ", stored)
    assert (magic, version, flags, length) == (MAGIC, 1, 0, pool.bytes_per_page)
    assert stored[HEADER_SIZE:] == page_bytes(pool, 0)
    assert digest == payload_checksum([stored[HEADER_SIZE:]])
    assert kd == key_digest(backend.backend.mooncake_key(backend.keyspace.storage_key(key)))
    assert backend.capabilities.verifies_integrity is True


@pytest.mark.parametrize("transfer", TRANSFERS)
@pytest.mark.parametrize("verify", [True, False])
def test_another_keys_bytes_are_a_miss(open_backend: Any, verify: bool, transfer: str) -> None:
    """What a read racing an overwrite can receive (reused memory): another object's header and page."""
    pool = make_pool()
    backend = open_backend({"verify_checksum": verify, "transfer": transfer}, pool=pool)
    mine, other = keys_for(2)
    assert backend.batch_set_v1([mine, other], indices(0, 2)) == [True, True]
    raw = raw_store(backend)
    raw[backend.keyspace.storage_key(mine)] = raw[backend.keyspace.storage_key(other)]
    assert backend.batch_get_v1([mine, other], indices(4, 2)) == [False, True]
    assert backend.batch_get([mine])[0] is None
    assert backend.get_stats()["counters"]["mooncake_key_mismatch"] == 2
    assert page_bytes(pool, 5) == page_bytes(pool, 1)


@pytest.mark.parametrize("transfer", TRANSFERS)
def test_corruption_detection_follows_verify_checksum(open_backend: Any, transfer: str) -> None:
    pool = make_pool()
    checked = open_backend({"transfer": transfer}, pool=pool)
    unchecked = open_backend(
        {"key_prefix": checked.options.key_prefix, "verify_checksum": False, "transfer": transfer}, pool=pool
    )
    assert unchecked.capabilities.verifies_integrity is False
    assert MooncakeBackend.capabilities.verifies_integrity is True
    (key,) = keys_for(1)
    assert checked.batch_set_v1([key], indices(0, 1)) == [True]
    raw = raw_store(checked)
    stored = bytearray(raw[checked.keyspace.storage_key(key)])
    stored[-1] ^= 0x5A
    raw[checked.keyspace.storage_key(key)] = bytes(stored)
    assert checked.batch_get_v1([key], indices(2, 1)) == [False]
    assert checked.batch_get([key]) == [None]
    assert checked.get_stats()["counters"]["mooncake_checksum_mismatch"] == 2
    assert unchecked.batch_get_v1([key], indices(2, 1)) == [True]  # header intact: accepted, unhashed


def test_pages_are_checked_chunk_by_chunk_as_they_land(open_backend: Any) -> None:
    """A zero-copy read of 20 pages moves 3 chunks; damage in the first and the last is found there."""
    pool = make_pool(num_pages=48)
    backend = open_backend({"transfer": "zero_copy"}, pool=pool)
    assert backend.backend.pipeline_pages < 20 <= 3 * backend.backend.pipeline_pages
    keys = keys_for(20)
    assert backend.batch_set_v1(keys, indices(0, 20)) == [True] * 20
    raw = raw_store(backend)
    for position in (1, 19):
        stored = bytearray(raw[backend.keyspace.storage_key(keys[position])])
        stored[HEADER_SIZE + 7] ^= 0x21
        raw[backend.keyspace.storage_key(keys[position])] = bytes(stored)
    hits = backend.batch_get_v1(keys, indices(24, 20))
    assert hits == [position not in (1, 19) for position in range(20)]
    assert all(page_bytes(pool, 24 + n) == page_bytes(pool, n) for n in range(20) if hits[n])
    assert backend.get_stats()["counters"]["mooncake_checksum_mismatch"] == 2


def test_unhashed_pages_are_misses_for_verifying_readers(open_backend: Any) -> None:
    pool = make_pool()
    writer = open_backend({"verify_checksum": False}, pool=pool)
    reader = open_backend({"key_prefix": writer.options.key_prefix}, pool=pool)
    keys = keys_for(2)
    assert writer.batch_set_v1(keys[:1], indices(0, 1)) == [True]
    assert writer.batch_set(keys[1:], [pool.get_data_page(4 * PAGE_SIZE).clone()]) is True  # staged path
    for key in keys:
        flags = raw_store(writer)[writer.keyspace.storage_key(key)][5]
        assert flags == FLAG_UNHASHED
    assert writer.batch_get_v1(keys, indices(2, 2)) == [True, True]
    assert [page_bytes(pool, 2), page_bytes(pool, 3)] == [page_bytes(pool, 0), page_bytes(pool, 4)]
    assert reader.batch_get_v1(keys, indices(6, 2)) == [False, False]
    assert reader.get_stats()["counters"]["mooncake_unverified"] == 2


def test_key_prefix_separates_deployments(open_backend: Any) -> None:
    """Same model and pool, another ``key_prefix``: none of the pages; the same prefix: all of them."""
    first = open_backend(pool=make_pool(), model="model-a")
    other_prefix = open_backend(pool=make_pool(), model="model-a")
    keys = keys_for(3)
    assert first.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert other_prefix.batch_exists_each(keys) == [False] * 3
    same = open_backend({"key_prefix": first.options.key_prefix}, pool=make_pool(), model="model-a")
    assert same.batch_exists_each(keys) == [True] * 3


def test_clear_removes_only_its_own_key_spaces(open_backend: Any) -> None:
    """Two deployments under one ``key_prefix``: ``clear()`` (a regex remove) leaves the other's pages."""
    prefix = client_options()["key_prefix"]
    mine = open_backend({"key_prefix": prefix}, model="mine")
    neighbour = open_backend({"key_prefix": prefix}, model="neighbour")
    keys = keys_for(4)
    assert mine.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    assert neighbour.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    mine.clear()
    assert mine.batch_exists_each(keys) == [False] * 4
    assert neighbour.batch_exists_each(keys) == [True] * 4, "clear() removed another deployment's pages"


def test_batch_larger_than_the_staging_buffer(open_backend: Any) -> None:
    """50 staged pages through slabs of one page each (a staging buffer of 7 pages): several rounds."""
    pool = make_pool(num_pages=60)
    keys = keys_for(50)
    values = [pool.get_data_page(n * PAGE_SIZE).clone() for n in range(50)]
    small = open_backend({"staging_buffer_size": pool.bytes_per_page * 7}, pool=pool)
    assert small.batch_set(keys, values) is True
    got = small.batch_get(keys)
    assert all(g is not None and torch.equal(g.view(torch.uint8), v.view(torch.uint8)) for g, v in zip(got, values))
    assert small.get_stats()["counters"]["mooncake_staged_writes"] == 50


# ---------------------------------------------------------------- faults (real master, killed and restarted)
def test_setup_fails_fast_without_master(mooncake: None) -> None:
    options = client_options(master_server_address="127.0.0.1:15559")  # nothing listens here
    begin = time.monotonic()
    with pytest.raises(BackendFault, match=r"127\.0\.0\.1:15559"):
        HiCacheStorage(MooncakeBackend, make_config("m", extra_config=options))
    assert time.monotonic() - begin < 15


def test_no_space_is_false_and_counted(open_backend: Any) -> None:
    """Segment holder gone: writes fail (TRANSFER_FAIL, then NO_AVAILABLE_HANDLE once the master notices).

    Either way they return False and the code is counted; nothing raises.
    """
    backend = open_backend()
    keys = keys_for(2)
    ctl("stop", "mooncake-segment")
    try:
        assert backend.batch_set_v1(keys, indices(0, 2)) == [False, False]
        counters = backend.get_stats()["counters"]
        assert counters.get("mooncake_transfer_fail", 0) + counters.get("mooncake_no_available_handle", 0) == 2
        assert backend.batch_exists_each(keys) == [False, False]
    finally:
        ctl("start", "mooncake")
    deadline = time.monotonic() + 20
    while backend.batch_set_v1(keys, indices(0, 2)) != [True, True]:
        assert time.monotonic() < deadline, "writes did not work again within 20 s of the segment's return"
        time.sleep(0.2)
    assert backend.backend.check_codes([-200, 0], 2, "probe") == [-200, 0]
    assert backend.get_stats()["counters"]["mooncake_no_available_handle"] >= 1

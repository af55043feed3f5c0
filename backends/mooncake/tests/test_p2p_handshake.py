"""The mooncake backend in its default metadata mode, P2PHANDSHAKE, against private masters (no HTTP metadata).

Clients find each other's segments by a direct handshake with the segment's owner, so the tests run
a ``mooncake_master`` of their own (:mod:`p2p_support`): the shared services' segment holder is an
HTTP-mode client that P2PHANDSHAKE clients cannot reach (see :func:`test_http_mode_holder_cannot_serve_p2p_clients`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
import torch
from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.base import category_of
from hicache_storage_mooncake import MooncakeBackend
from hicache_storage_mooncake.record import HEADER_SIZE
from mooncake_support import PAGE_SIZE, client_options, indices, keys_for, make_pool, page_bytes, raw_store
from p2p_support import P2P, PrivateMaster, free_port

from hicache_storage import BackendFault, HiCacheStorage, HostKVPool, make_config

pytestmark = pytest.mark.timeout(120)

#: Memory a segment-holding test client lends the store.
SEGMENT = 16 << 20

Opener = Callable[..., HiCacheStorage]


def failure_counters(backend: Any) -> dict[str, int]:
    """The backend's counters without the ones that count staged pages (how pages travelled, not faults)."""
    return {k: v for k, v in backend.get_stats()["counters"].items() if not k.startswith("mooncake_staged_")}


@pytest.fixture(scope="module")
def p2p_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMaster]:
    """A master without HTTP metadata server and without segments: each test brings its own."""
    master = PrivateMaster(tmp_path_factory.mktemp("mooncake-p2p"))
    yield master
    master.close()


@pytest.fixture(scope="module")
def http_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMaster]:
    """A master with HTTP metadata server and an HTTP-mode segment holder, set up as in scripts/services."""
    master = PrivateMaster(tmp_path_factory.mktemp("mooncake-http"), http_metadata=True)
    try:
        master.start_holder(SEGMENT)
        yield master
    finally:
        master.close()


@pytest.fixture
def open_client() -> Iterator[Opener]:
    """Factory ``open_client(master, pool, **options)``; every client is cleared and closed afterwards."""
    opened: list[HiCacheStorage] = []

    def factory(master: PrivateMaster, pool: HostKVPool, **options: Any) -> HiCacheStorage:
        backend = HiCacheStorage(MooncakeBackend, make_config("m", extra_config=master.options(**options)))
        opened.append(backend)
        backend.register_mem_pool_host(pool)
        return backend

    yield factory
    for backend in reversed(opened):  # readers first, segment holders last
        if not backend.closed:
            backend.clear()
            backend.close()


def seeded_pool(layout: str, is_mla: bool, seed: int) -> HostKVPool:
    """A pool of random bytes of its own (two clients' pools never hold the same pages)."""
    pool = make_pool(layout, is_mla)
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)))
    return pool


def pages(pool: HostKVPool, first: int, count: int) -> list[bytes]:
    return [page_bytes(pool, first + n) for n in range(count)]


def only_segment(master: PrivateMaster) -> tuple[str, int, int]:
    """(name, allocated bytes, capacity) of the master's one mounted segment."""
    ((name, (allocated, capacity)),) = master.segments().items()
    return name, allocated, capacity


def test_client_with_own_segment_round_trip(p2p_master: PrivateMaster, open_client: Opener) -> None:
    """One client lends the only segment and reads back what it wrote, zero-copy (v1) and staged (v0)."""
    pool = make_pool()
    client = open_client(p2p_master, pool, global_segment_size=SEGMENT)
    assert client.options.metadata_server == P2P
    name, allocated, capacity = only_segment(p2p_master)
    assert (allocated, capacity) == (0, SEGMENT)

    keys = keys_for(6)
    expected = pages(pool, 0, 5)
    assert client.batch_set_v1(keys[:4], indices(0, 4)) == [True] * 4
    assert client.batch_set([keys[4]], [pool.get_data_page(4 * PAGE_SIZE).clone()]) is True
    assert client.batch_exists_each(keys) == [True] * 5 + [False]
    assert p2p_master.segments()[name][0] >= 5 * (HEADER_SIZE + pool.bytes_per_page)

    assert client.batch_get_v1(keys[:5], indices(8, 5)) == [True] * 5
    assert pages(pool, 8, 5) == expected
    got = client.batch_get([keys[4], keys[5]])
    assert got[1] is None and got[0] is not None
    assert bytes(got[0].view(torch.uint8).numpy()) == expected[4]
    stored = raw_store(client)[client.keyspace.storage_key(keys[0])]  # the byte-level calls too
    assert stored[HEADER_SIZE:] == expected[0]

    assert client.delete(keys[:2]) == [True, True]
    assert client.batch_exists_each(keys[:3]) == [False, False, True]
    client.clear()
    assert client.batch_exists_each(keys) == [False] * 6
    assert p2p_master.segments()[name] == (0, SEGMENT)
    assert failure_counters(client) == {}


@pytest.mark.parametrize(
    ("layout", "is_mla"), [("page_first", False), ("layer_first", False), ("page_first_direct", True)]
)
def test_two_clients_one_segment(p2p_master: PrivateMaster, open_client: Opener, layout: str, is_mla: bool) -> None:
    """A holder lends the only segment, a reader lends none: each reads the other's pages byte for byte."""
    holder_pool, reader_pool = seeded_pool(layout, is_mla, 1), seeded_pool(layout, is_mla, 2)
    holder = open_client(p2p_master, holder_pool, global_segment_size=SEGMENT)
    reader = open_client(p2p_master, reader_pool, key_prefix=holder.options.key_prefix)
    name, _, capacity = only_segment(p2p_master)
    assert capacity == SEGMENT

    holder_keys, reader_keys = keys_for(4), keys_for(4)
    assert holder.batch_set_v1(holder_keys, indices(0, 4)) == [True] * 4
    assert reader.batch_set_v1(reader_keys, indices(0, 4)) == [True] * 4  # into the holder's memory
    assert p2p_master.segments()[name][0] >= 8 * (HEADER_SIZE + holder_pool.bytes_per_page)
    for source, target, keys in (
        (holder_pool, (reader, reader_pool), holder_keys),
        (reader_pool, (holder, holder_pool), reader_keys),
    ):
        client, pool = target
        expected = pages(source, 0, 4)
        assert all(before != page for before, page in zip(pages(pool, 8, 4), expected))
        assert client.batch_exists(keys) == 4
        assert client.batch_get_v1(keys, indices(8, 4)) == [True] * 4
        assert pages(pool, 8, 4) == expected

    holder.close()  # its segment, and every page in it, leaves the store with it
    assert p2p_master.segments() == {}
    assert reader.batch_exists_each(holder_keys + reader_keys) == [False] * 8
    assert reader.batch_get_v1(reader_keys, indices(12, 4)) == [False] * 4
    assert reader.batch_set_v1(reader_keys[:1], indices(0, 1)) == [False]
    assert failure_counters(reader) == {"mooncake_no_available_handle": 1}


def test_http_mode_holder_cannot_serve_p2p_clients(http_master: PrivateMaster, open_client: Opener) -> None:
    """Space is allocated in the HTTP-mode holder's segment, but the handshake with it fails: writes are ``False``."""
    client = open_client(http_master, make_pool(), metadata_server=P2P)
    keys = keys_for(4)
    assert client.batch_set_v1(keys, indices(0, 4)) == [False] * 4
    assert failure_counters(client) == {"mooncake_transfer_fail": 4}
    assert client.batch_exists_each(keys) == [False] * 4
    assert client.batch_get_v1(keys, indices(8, 4)) == [False] * 4


def test_http_mode_client_cannot_use_p2p_segments(
    p2p_master: PrivateMaster, http_master: PrivateMaster, open_client: Opener
) -> None:
    """An HTTP-mode client of a master whose only segment is a P2P client's: its writes fail, the owner's work."""
    owner = open_client(p2p_master, make_pool(), global_segment_size=SEGMENT)
    other = open_client(p2p_master, make_pool(), metadata_server=http_master.metadata)
    keys = keys_for(4)
    assert other.batch_set_v1(keys, indices(0, 4)) == [False] * 4
    assert failure_counters(other) == {"mooncake_transfer_fail": 4}
    assert owner.batch_set_v1(keys, indices(0, 4)) == [True] * 4


def test_setup_without_master_blames_only_the_master() -> None:
    """P2PHANDSHAKE has no metadata server, so a failed set-up names the master alone."""
    address = f"127.0.0.1:{free_port()}"
    begin = time.monotonic()
    with pytest.raises(BackendFault, match=address) as caught:
        HiCacheStorage(
            MooncakeBackend,
            make_config("m", extra_config=client_options(master_server_address=address, metadata_server=P2P)),
        )
    assert "metadata server" not in str(caught.value)
    assert time.monotonic() - begin < 15


#: Conformance categories run in this mode (roundtrip in one dtype: the transfers move bytes);
#: test_conformance.py runs them all, in every dtype, with HTTP metadata.
P2P_CATEGORIES = ("roundtrip", "batch", "overwrite", "integrity", "concurrency", "delete", "clear")
P2P_DTYPE = "bfloat16"


class TestMooncakeP2PConformance(BackendConformance):
    """The core conformance categories with P2PHANDSHAKE clients of a private master and segment holder."""

    backend = "mooncake"
    master: ClassVar[PrivateMaster | None] = None

    @pytest.fixture(scope="class", autouse=True)
    def p2p_store(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        master = PrivateMaster(tmp_path_factory.mktemp("mooncake-p2p-conformance"))
        try:
            master.start_holder(64 << 20)  # a P2PHANDSHAKE mooncake_client, so pages outlive their writers
            request.cls.master = master
            yield
        finally:
            request.cls.master = None
            master.close()

    @pytest.fixture(autouse=True)
    def core_categories(self, request: pytest.FixtureRequest) -> None:
        if category_of(type(self), request.function.__name__) not in P2P_CATEGORIES:
            pytest.skip(f"P2PHANDSHAKE runs {', '.join(P2P_CATEGORIES)}; test_conformance.py runs every category")
        spec = getattr(request.node, "callspec", None)
        if spec is not None and getattr(spec.params.get("spec"), "dtype", P2P_DTYPE) != P2P_DTYPE:
            pytest.skip(f"P2PHANDSHAKE runs roundtrip in {P2P_DTYPE}; test_conformance.py runs every dtype")

    def backend_options(self, tmp_path: Any) -> dict[str, Any]:
        assert self.master is not None
        return self.master.options()

"""roundtrip: byte-exact pages through v1 and v0, for every layout, MHA and MLA, several dtypes."""

from __future__ import annotations

import pytest

from ..harness import Harness
from ..pages import PoolSpec, tensor_bytes, tensor_of

LAYOUTS = ("layer_first", "page_first", "page_first_direct")
DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "uint8")
SPECS = [
    pytest.param(PoolSpec(layout=layout, dtype=dtype, is_mla=mla), id=f"{'mla' if mla else 'mha'}-{layout}-{dtype}")
    for mla in (False, True)
    for layout in LAYOUTS
    for dtype in DTYPES
]


class RoundTripTests:
    """Every byte written comes back, whichever path wrote or read it."""

    category = "roundtrip"

    @pytest.mark.parametrize("spec", SPECS)
    def test_roundtrip_pages(self, harness: Harness, spec: PoolSpec) -> None:
        handle = harness.open(spec)
        if harness.target.has_v1:
            keys = harness.keys(3)
            assert handle.set_v1(keys, slots=[5, 0, 9]) == [True] * 3, "batch_set_v1 failed"
            got = handle.get_v1(keys, slots=[2, 7, 1])
            assert handle.same(got, [handle.content(k) for k in keys]), (
                f"v1 write, v1 read: {spec.label} not byte-exact"
            )
            # v1 write → v0 read
            assert handle.same(handle.get_v0(keys), [handle.content(k) for k in keys]), (
                "v1 write, v0 read: bytes differ"
            )
        keys = harness.keys(3)
        assert handle.set_v0(keys, versions=7) is True, "batch_set (v0) failed"
        assert handle.same(handle.get_v0(keys), [handle.content(k, 7) for k in keys]), "v0 write, v0 read: bytes differ"
        if harness.target.has_v1:
            # v0 write → v1 read
            got = handle.get_v1(keys, slots=[3, 4, 8])
            assert handle.same(got, [handle.content(k, 7) for k in keys]), "v0 write, v1 read: bytes differ"

    def test_roundtrip_single_key_calls(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.backend.set(key, tensor_of(handle.pool, handle.content(key, 3))) is True, "set() failed"
        assert handle.backend.exists(key) is True, "exists() is not True after set()"
        value = handle.backend.get(key, tensor_of(handle.pool, bytes(handle.page_bytes)))
        assert value is not None, "get() missed a page just set"
        assert tensor_bytes(value) == handle.content(key, 3), "get() returned different bytes"
        assert handle.backend.get(harness.key(), tensor_of(handle.pool, bytes(handle.page_bytes))) is None, (
            "get() of a key never written must return None"
        )

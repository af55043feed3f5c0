"""roundtrip: byte-exact pages through v1 and v0, for every layout, MHA and MLA, several dtypes."""

from __future__ import annotations

import pytest

from ..checks import check, check_equal
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
        """Every byte written comes back: v1 and v0 writes, v1 and v0 reads, from and into non-zero host slots."""
        handle = harness.open(spec)
        if harness.target.has_v1:
            keys = harness.keys(3)
            check_equal(handle.set_v1(keys, slots=[5, 0, 9]), [True] * 3, f"batch_set_v1 of 3 {spec.label} pages")
            handle.check_pages(handle.get_v1(keys, slots=[2, 7, 1]), keys, 0, "v1 write, v1 read into other slots")
            handle.check_pages(handle.get_v0(keys), keys, 0, "v1 write, v0 read")
        keys = harness.keys(3)
        check_equal(handle.set_v0(keys, versions=7), True, f"batch_set (v0) of 3 {spec.label} pages")
        handle.check_pages(handle.get_v0(keys), keys, 7, "v0 write, v0 read")
        if harness.target.has_v1:
            handle.check_pages(handle.get_v1(keys, slots=[3, 4, 8]), keys, 7, "v0 write, v1 read")

    def test_roundtrip_single_key_calls(self, harness: Harness) -> None:
        """The single-key calls set(), exists() and get() round-trip one page; get() of an absent key is None."""
        handle = harness.open()
        key = harness.key()
        check_equal(handle.backend.set(key, tensor_of(handle.pool, handle.content(key, 3))), True, "set(key, page)")
        check_equal(handle.backend.exists(key), True, "exists(key) after set()")
        value = handle.backend.get(key, tensor_of(handle.pool, bytes(handle.page_bytes)))
        handle.check_pages([None if value is None else tensor_bytes(value)], [key], 3, "get(key) after set()")
        missing = handle.backend.get(harness.key(), tensor_of(handle.pool, bytes(handle.page_bytes)))
        check(missing is None, "get() of a key never written", "None", f"a {type(missing).__name__}")

import pytest
import torch

from hicache_storage import ConfigError, HostKVPool, HostPoolError

LAYOUTS = ["layer_first", "page_first", "page_first_direct"]
L, P, H, D, C = 3, 4, 2, 8, 12


def make(layout: str, mla: bool, dtype: str = "bfloat16") -> HostKVPool:
    pool = HostKVPool(
        num_pages=5,
        page_size=P,
        layer_num=L,
        head_num=H,
        head_dim=D,
        kv_cache_dim=C,
        dtype=dtype,
        layout=layout,
        is_mla=mla,
    )
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    return pool


def reference_page(pool: HostKVPool, t: int) -> torch.Tensor:
    kb = pool.kv_buffer
    if pool.is_mla:
        return {"layer_first": kb[:, t : t + P], "page_first": kb[t : t + P], "page_first_direct": kb[t // P]}[
            pool.layout
        ].flatten()
    return {"layer_first": kb[:, :, t : t + P], "page_first": kb[:, t : t + P], "page_first_direct": kb[:, t // P]}[
        pool.layout
    ].flatten()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_shapes_and_sizes_follow_sglang(layout, mla):
    pool = make(layout, mla)
    expected_shape = {
        (False, "layer_first"): (2, L, 5 * P, H, D),
        (False, "page_first"): (2, 5 * P, L, H, D),
        (False, "page_first_direct"): (2, 5, L, P, H, D),
        (True, "layer_first"): (L, 5 * P, 1, C),
        (True, "page_first"): (5 * P, L, 1, C),
        (True, "page_first_direct"): (5, L, P, 1, C),
    }[(mla, layout)]
    assert tuple(pool.kv_buffer.shape) == expected_shape
    assert pool.size_per_token == (C * L * 2 if mla else 2 * H * D * L * 2)
    ptrs, sizes = pool.get_page_buffer_meta(torch.arange(4, 12))
    per_page = {(False, "layer_first"): 2 * L, (True, "layer_first"): L}.get((mla, layout), 1 if mla else 2)
    assert len(ptrs) == len(sizes) == 2 * per_page
    assert sum(sizes) == 2 * pool.bytes_per_page
    if not mla and layout != "layer_first":
        assert sizes[0] == L * P * H * D * 2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn", "uint8"])
def test_flat_page_matches_tensor_slicing_and_round_trips(layout, mla, dtype):
    pool = make(layout, mla, dtype)
    page = pool.get_data_page(8)
    assert torch.equal(page.view(torch.uint8), reference_page(pool, 8).contiguous().view(torch.uint8))
    segments = b"".join(bytes(s) for s in pool.page_segments(8))
    assert segments == page.view(torch.uint8).numpy().tobytes()
    ptrs, _ = pool.get_page_buffer_meta(torch.arange(8, 12))
    first = pool.page_segments(8)[0]
    import numpy as np

    assert ptrs[0] == np.frombuffer(first, dtype=np.uint8).ctypes.data
    pool.set_from_flat_data_page(16, page)
    assert torch.equal(pool.get_data_page(16).view(torch.uint8), page.view(torch.uint8))


def test_segments_are_zero_copy_views():
    pool = make("page_first", False)
    before = pool.get_data_page(4).view(torch.uint8)[0].item()
    pool.page_segments(4)[0][0] = (before + 1) % 256
    assert pool.get_data_page(4).view(torch.uint8)[0].item() == (before + 1) % 256


def test_allocator_refuses_double_free_and_tracks_owners():
    pool = make("page_first", False)
    a = pool.alloc(8, owner="op-a")
    assert a is not None and a.tolist() == list(range(int(a[0]), int(a[0]) + 4)) + a[4:].tolist()
    assert pool.owner_of(int(a[0])) == "op-a"
    assert pool.used_pages == 2
    assert pool.alloc(4 * 4) is None  # only 3 pages left
    with pytest.raises(HostPoolError, match="multiple of page_size"):
        pool.alloc(3)
    pool.free(a)
    with pytest.raises(HostPoolError, match="double free"):
        pool.free(a)
    assert pool.used_pages == 0 and pool.free_pages == 5


def test_free_with_bad_index_changes_nothing():
    pool = make("page_first", False)
    a = pool.alloc(8)
    with pytest.raises(HostPoolError, match="not the start of a page"):
        pool.free(torch.tensor([1, 2, 3, 4]))
    assert pool.used_pages == 2
    del a


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"layout": "paged"}, "layout"),
        ({"dtype": "float128"}, "dtype"),
        ({"page_size": 0}, "page_size"),
        ({"head_dim": -1}, "head_dim"),
    ],
)
def test_bad_geometry_names_the_option(kwargs, option):
    base = dict(num_pages=2, page_size=4, layer_num=1)
    with pytest.raises(ConfigError, match=option):
        HostKVPool(**{**base, **kwargs})


def test_flat_page_of_wrong_size_is_rejected():
    pool = make("page_first", False)
    with pytest.raises(HostPoolError, match="bytes"):
        pool.set_from_flat_data_page(0, torch.zeros(3, dtype=torch.bfloat16))


def test_page_head_matches_sglang_shape_and_head_runs_are_contiguous():
    pool = make("page_head", False)
    assert tuple(pool.kv_buffer.shape) == (2, 5, H, P, L, D)
    page = pool.get_data_page(8)
    assert torch.equal(page.view(torch.uint8), pool.kv_buffer[:, 2].flatten().view(torch.uint8))
    k, v = pool.page_segments(8)
    head = P * L * D * 2
    assert bytes(k[head : 2 * head]) == pool.kv_buffer[0, 2, 1].contiguous().view(torch.uint8).numpy().tobytes()
    assert bytes(v[:head]) == pool.kv_buffer[1, 2, 0].contiguous().view(torch.uint8).numpy().tobytes()
    pool.set_from_flat_data_page(16, page)
    assert torch.equal(pool.get_data_page(16).view(torch.uint8), page.view(torch.uint8))
    assert tuple(pool.get_data_page(8, flat=False).shape) == (2, 1, H, P, L, D)


def test_page_head_refuses_mla():
    with pytest.raises(ConfigError, match="page_head"):
        make("page_head", True)

"""Flat tensors as one-segment pages (the v0 calls' buffers)."""

from __future__ import annotations

import gc

import pytest
import torch

from hicache_storage.errors import InvalidRequestError
from hicache_storage.page_buffers import memory_at, page_nbytes, tensor_page_buffer


def test_the_segment_is_the_tensors_memory_both_ways() -> None:
    tensor = torch.arange(8, dtype=torch.bfloat16)
    (segment,) = tensor_page_buffer(tensor, 16, "page")
    assert segment.nbytes == 16 and segment.format == "B" and not segment.readonly
    assert bytes(segment) == tensor.view(torch.uint8).numpy().tobytes()
    segment[:2] = b"\x00\x00"
    assert tensor[0].item() == 0 and tensor[1].item() == 1


def test_the_segment_keeps_its_tensor_alive() -> None:
    tensor = torch.full((4096,), 7, dtype=torch.uint8)
    page = tensor_page_buffer(tensor, 4096, "page")
    del tensor
    gc.collect()
    churn = [torch.zeros(4096, dtype=torch.uint8) for _ in range(64)]  # reuses freed memory if any
    assert bytes(page[0]) == b"\x07" * 4096 and page_nbytes(page) == 4096
    del churn


def test_memory_at_views_bytes_in_place_and_holds_their_owner() -> None:
    owner = torch.tensor(list(b"abcdefgh"), dtype=torch.uint8)
    view = memory_at(owner.data_ptr() + 2, 4, owner=owner)
    assert bytes(view) == b"cdef" and view.format == "B" and not view.readonly
    view[0] = ord("X")
    assert bytes(owner.numpy()) == b"abXdefgh"
    assert vars(view.obj)["owner"] is owner


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (b"\x00" * 16, "must be a torch.Tensor, got bytes"),
        (torch.zeros(4, 4)[:, 0], "must be contiguous"),
        (torch.zeros(3, dtype=torch.uint8), "holds 3 bytes; a page of this pool holds 16"),
    ],
)
def test_bad_tensors_are_named(tensor: object, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        tensor_page_buffer(tensor, 16, "target_locations[2]")
    with pytest.raises(InvalidRequestError, match=r"target_locations\[2\]"):
        tensor_page_buffer(tensor, 16, "target_locations[2]")

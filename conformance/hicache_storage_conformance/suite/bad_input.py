"""bad_input: malformed requests raise a ValueError subclass at once, and nothing stored changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ..checks import Mismatch, check_equal
from ..harness import Handle, Harness
from ..pages import host_indices, tensor_of, write_slot

BAD_KEYS: list[Any] = ["", 123, None, b"abc", "has space", "../escape"]


RULE = "invalid requests raise a ValueError subclass before anything is written"


def _rejects(call: Callable[[], Any], what: str) -> None:
    try:
        result = call()
    except ValueError:
        return
    except Exception as exc:
        raise Mismatch(what, "a ValueError subclass", f"{type(exc).__name__}: {exc}", rule=RULE) from exc
    raise Mismatch(what, "a ValueError subclass raised", f"it returned {result!r}", rule=RULE)


def _unchanged(handle: Handle, kept: str, fresh: list[str]) -> None:
    handle.expect([kept], 1, "the stored page after the rejected requests", rule=RULE)
    check_equal(handle.exists_each(fresh), [False] * len(fresh), "exists of the keys of rejected writes", rule=RULE)


class BadInputTests:
    """SDK surface only: SGLang's class does not define how bad requests are reported."""

    category = "bad_input"

    def _setup(self, harness: Harness) -> tuple[Handle, str, list[str]]:
        harness.require_sdk("request validation")
        handle = harness.open()
        kept = harness.key()
        handle.store([kept], 1, "writing the page the bad requests must not change")
        return handle, kept, harness.keys(2)

    def test_bad_input_host_indices_length(self, harness: Harness) -> None:
        """host_indices of the wrong length (too few, too many, a partial page) raise a ValueError subclass."""
        handle, kept, fresh = self._setup(harness)
        for slot in range(3):
            write_slot(handle.pool, slot, handle.content(kept, 2))
        short = host_indices(handle.pool, [0])
        long = host_indices(handle.pool, [0, 1, 2])
        backend = handle.backend
        _rejects(lambda: backend.batch_set_v1([fresh[0], kept], short), "batch_set_v1 with too few host_indices")
        _rejects(lambda: backend.batch_set_v1([fresh[1], kept], long), "batch_set_v1 with too many host_indices")
        _rejects(lambda: backend.batch_get_v1([kept, fresh[0]], short), "batch_get_v1 with too few host_indices")
        _rejects(lambda: backend.batch_set_v1([kept], short[:-1]), "batch_set_v1 with a partial page of indices")
        _unchanged(handle, kept, fresh)

    @pytest.mark.parametrize("bad", BAD_KEYS, ids=["empty", "int", "none", "bytes", "space", "traversal"])
    def test_bad_input_keys(self, harness: Harness, bad: Any) -> None:
        """A bad key (empty, not a str, a space, a path traversal) raises a ValueError subclass in every call."""
        handle, kept, fresh = self._setup(harness)
        backend = handle.backend
        write_slot(handle.pool, 0, handle.content(kept, 2))
        write_slot(handle.pool, 1, handle.content(fresh[0], 2))
        value = tensor_of(handle.pool, handle.content(kept, 2))
        _rejects(
            lambda: backend.batch_set_v1([fresh[0], bad], host_indices(handle.pool, [1, 0])),
            "batch_set_v1 with a bad key",
        )
        _rejects(lambda: backend.batch_set([kept, bad], [value, value]), "batch_set with a bad key")
        _rejects(lambda: backend.set(bad, value), "set with a bad key")
        _rejects(lambda: backend.batch_get_v1([bad], host_indices(handle.pool, [0])), "batch_get_v1 with a bad key")
        _rejects(lambda: backend.batch_exists([kept, bad]), "batch_exists with a bad key")
        _rejects(lambda: backend.exists(bad), "exists with a bad key")
        _rejects(lambda: backend.get(bad), "get with a bad key")
        _unchanged(handle, kept, fresh)

    def test_bad_input_wrong_page_size(self, harness: Harness) -> None:
        """v0 values of the wrong size or count raise a ValueError subclass."""
        handle, kept, fresh = self._setup(harness)
        backend = handle.backend
        good = tensor_of(handle.pool, handle.content(fresh[0], 2))
        short = torch.zeros(handle.page_bytes - 2, dtype=torch.uint8)
        long = torch.zeros(handle.page_bytes * 2, dtype=torch.uint8)
        _rejects(
            lambda: backend.batch_set([fresh[0], kept], [good, short]), "batch_set with a value one page too short"
        )
        _rejects(lambda: backend.batch_set([kept], [long]), "batch_set with a value of two pages")
        _rejects(lambda: backend.set(kept, short), "set with a value of the wrong size")
        _rejects(lambda: backend.batch_set([fresh[0], fresh[1]], [good]), "batch_set with fewer values than keys")
        _unchanged(handle, kept, fresh)

"""Salted page hashes bit for bit against the released SGLang 0.5.23 (opt-in: ``scripts/sglang-test.sh``).

SGLang seeds a request's storage chain with its ``extra_key`` (e.g. the LoRA adapter) and
``cache_salt`` (the tenant): ``get_storage_hash_str(key, prior_hash, page_size)`` reads both from the
key object (``RadixKey``) when no prior hash is given. ``hicache_storage.keys.page_hashes(...,
extra_key=, cache_salt=)`` must give the same keys for every input.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hicache_storage.integrations.sglang import sglang_available
from hicache_storage.keys import page_hashes, storage_namespace_seed

sys.path.insert(0, str(Path(__file__).parent))

NO_SGLANG = "sglang is not importable; run scripts/sglang-test.sh (installs sglang==0.5.23, no dependencies)"
if os.environ.get("HICACHE_SGLANG_REQUIRED") and not sglang_available():
    raise RuntimeError("HICACHE_SGLANG_REQUIRED is set, but SGLang's HiCacheStorage cannot be imported")
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not sglang_available(), reason=NO_SGLANG)]

DATA = Path(__file__).resolve().parents[1] / "data"

tokens_st = st.lists(st.integers(0, 2**32 - 1), max_size=70)
page_size_st = st.integers(1, 17)
# None, empty, ASCII, and any Unicode text (NUL, combining marks, astral characters included)
salt_st = st.one_of(st.none(), st.just(""), st.text(alphabet="ab", max_size=3), st.text(max_size=12))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Key:
    """A request key as ``get_storage_hash_str`` reads it: tokens, ``extra_key``, ``cache_salt``."""

    def __init__(self, token_ids: list[int], extra_key: str | None, cache_salt: str | None) -> None:
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.cache_salt = cache_salt

    def __len__(self) -> int:
        return len(self.token_ids)


def sglang_hash() -> Any:
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    return get_storage_hash_str


@SETTINGS
@given(tokens=tokens_st, page_size=page_size_st, extra_key=salt_st, cache_salt=salt_st)
def test_salted_chain_is_sglangs(
    tokens: list[int], page_size: int, extra_key: str | None, cache_salt: str | None
) -> None:
    theirs = sglang_hash()(Key(tokens, extra_key, cache_salt), None, page_size=page_size)
    assert page_hashes(tokens, page_size, extra_key=extra_key, cache_salt=cache_salt) == theirs


@SETTINGS
@given(extra_key=salt_st, cache_salt=salt_st)
def test_namespace_seed_is_sglangs(extra_key: str | None, cache_salt: str | None) -> None:
    from sglang.srt.mem_cache.utils import storage_namespace_seed as theirs

    assert storage_namespace_seed(extra_key, cache_salt) == theirs(extra_key, cache_salt)


@SETTINGS
@given(parent=tokens_st, child=tokens_st, page_size=page_size_st, extra_key=salt_st, cache_salt=salt_st)
def test_a_child_node_continues_the_salted_chain(
    parent: list[int], child: list[int], page_size: int, extra_key: str | None, cache_salt: str | None
) -> None:
    """A child node's chain starts from its parent's last page hash, which already carries the seed."""
    usable = len(parent) // page_size * page_size
    parent_keys = page_hashes(parent[:usable], page_size, extra_key=extra_key, cache_salt=cache_salt)
    prior = parent_keys[-1] if parent_keys else None
    theirs = sglang_hash()(Key(child, extra_key, cache_salt), prior, page_size=page_size)
    if prior is None:
        ours = page_hashes(child, page_size, extra_key=extra_key, cache_salt=cache_salt)
    else:
        ours = page_hashes(child, page_size, prior_hash=prior)
    assert ours == theirs


@SETTINGS
@given(tokens=tokens_st, page_size=page_size_st, extra_key=salt_st, cache_salt=salt_st)
def test_sglangs_radix_key_hashes_alike(
    tokens: list[int], page_size: int, extra_key: str | None, cache_salt: str | None
) -> None:
    """With SGLang's own ``RadixKey`` (int64 token array): it stores an empty ``cache_salt`` as ``None``."""
    import sglang_controllers

    radix_key = _radix_key_class(sglang_controllers)
    key = radix_key(array("q", tokens), extra_key, cache_salt=cache_salt)
    assert key.cache_salt == (cache_salt or None)
    theirs = sglang_hash()(key, None, page_size=page_size)
    assert page_hashes(tokens, page_size, extra_key=key.extra_key, cache_salt=key.cache_salt) == theirs


_RADIX_KEY: dict[str, type[Any]] = {}


def _radix_key_class(module: Any) -> type[Any]:
    if "cls" not in _RADIX_KEY:
        _RADIX_KEY["cls"] = module.load_radix_key()
    return _RADIX_KEY["cls"]


def _generator() -> ModuleType:
    path = DATA / "make_salted_page_hash_vectors.py"
    spec = importlib.util.spec_from_file_location("make_salted_page_hash_vectors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stored_vectors_are_sglangs() -> None:
    """``tests/data/salted_page_hash_vectors.json`` (checked by the core tests without SGLang) is SGLang's output."""
    import json

    from sglang.srt.mem_cache.utils import storage_namespace_seed as theirs_seed

    stored = json.loads((DATA / "salted_page_hash_vectors.json").read_text("utf-8"))
    generator = _generator()
    assert generator.check_against_sglang(stored["cases"], sglang_hash(), theirs_seed) == []
    assert stored == generator.document(stored["checked_against"])


def test_a_salted_key_differs_from_the_unsalted_one() -> None:
    tokens = list(range(8))
    plain = sglang_hash()(tokens, None, page_size=4)
    for extra_key, cache_salt in [("", None), (None, ""), ("lora", None), (None, "tenant")]:
        salted = sglang_hash()(Key(tokens, extra_key, cache_salt), None, page_size=4)
        assert salted != plain
        assert page_hashes(tokens, 4, extra_key=extra_key, cache_salt=cache_salt) == salted

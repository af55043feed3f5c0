import hashlib
import json
import struct
from pathlib import Path

import pytest

from hicache_storage.errors import InvalidKeyError
from hicache_storage.keys import (
    KeySpace,
    namespace_root,
    page_hashes,
    storage_namespace_seed,
    validate_key,
    validate_keys,
)

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "shared" / "spec" / "page_hash_vectors.json").read_text())


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_page_hashes_match_sglang_vectors(case):
    assert page_hashes(case["tokens"], case["page_size"], case["prior_hash"]) == case["page_hashes"]


def test_chain_continues_from_prior():
    whole = page_hashes(list(range(16)), 4)
    assert page_hashes(list(range(8, 16)), 4, prior_hash=whole[1]) == whole[2:]


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True, "3"])
def test_tokens_outside_uint32_are_rejected(bad):
    with pytest.raises(ValueError, match=r"token_ids\[1\]"):
        page_hashes([1, bad], 2)


def test_bad_page_size_and_prior():
    with pytest.raises(ValueError, match="page_size"):
        page_hashes([1], 0)
    with pytest.raises(ValueError, match="prior_hash"):
        page_hashes([1], 1, prior_hash="xyz")


def test_namespace_seeds_the_chain_and_none_keeps_plain_chain():
    plain = page_hashes([1, 2, 3, 4], 2)
    tenant_a = page_hashes([1, 2, 3, 4], 2, namespace="tenant-a")
    tenant_b = page_hashes([1, 2, 3, 4], 2, namespace="tenant-b")
    assert len({plain[0], tenant_a[0], tenant_b[0]}) == 3
    assert page_hashes([1, 2, 3, 4], 2, namespace="tenant-a") == tenant_a
    # continuing a namespaced chain with its prior gives the same pages
    assert page_hashes([3, 4], 2, prior_hash=tenant_a[0]) == tenant_a[1:]
    with pytest.raises(ValueError, match="not both"):
        page_hashes([1], 1, prior_hash=plain[0], namespace="x")


def test_namespace_encoding_is_framed():
    # "ab" + "c" must not collide with "a" + "bc" style concatenations
    assert namespace_root("ab") != namespace_root("a")
    assert namespace_root("a\x00") != namespace_root("a")
    with pytest.raises(ValueError):
        namespace_root("")


@pytest.mark.parametrize("key", ["", "a/b", "../x", ".hidden", "a b", "k\n", "a*", "x" * 257, "é"])
def test_unsafe_keys_rejected(key):
    with pytest.raises(InvalidKeyError):
        validate_key(key)


def test_non_string_key_rejected():
    with pytest.raises(InvalidKeyError, match="must be a str"):
        validate_key(b"abc")


BASE = dict(model_name="m", dtype="bfloat16", layout="page_first", page_size=64, page_bytes=1 << 19, is_mla=False)


@pytest.mark.parametrize(
    "change",
    [
        {"model_name": "m2"},
        {"model_revision": "r2"},
        {"namespace": "tenant"},
        {"dtype": "float16"},
        {"layout": "layer_first"},
        {"page_size": 32},
        {"page_bytes": 1 << 18},
        {"is_mla": True},
        {"tp_rank": 1},
        {"tp_size": 2},
        {"pp_rank": 1},
        {"pp_size": 2},
        {"cp_rank": 1},
        {"cp_size": 2},
        {"format_version": 2},
    ],
)
def test_any_change_gives_disjoint_keys(change):
    a = KeySpace(**BASE)
    b = KeySpace(**{**BASE, **change})
    assert a.storage_key("abc") != b.storage_key("abc")


def test_mla_ranks_share_keys():
    a = KeySpace(**{**BASE, "is_mla": True}, tp_rank=0, tp_size=4)
    b = KeySpace(**{**BASE, "is_mla": True}, tp_rank=3, tp_size=4)
    assert a.storage_key("abc") == b.storage_key("abc")


def test_storage_keys_are_safe_characters():
    import re

    key = KeySpace(**{**BASE, "model_name": "org/model:v1"}, namespace="Tenant With Spaces/../x").storage_key("a" * 64)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", key)
    assert "/" not in key and ".." not in key


# ----------------------------------------------------------------------------- SGLang's request namespace
def _seed_by_hand(extra_key: str | None, cache_salt: str | None) -> bytes:
    """The seed as SGLang's spec words it, written out byte by byte."""
    data = b"sglang-cache-namespace-v1"
    for part in (extra_key, cache_salt):
        if part is None:
            data += b"\x00"
        else:
            raw = part.encode("utf-8")
            data += b"\x01" + len(raw).to_bytes(8, "little") + raw
    return hashlib.sha256(data).digest()


@pytest.mark.parametrize(
    ("extra_key", "cache_salt"), [("lora-a", None), (None, "tenant"), ("", ""), ("a", "b"), ("ab", None), ("ü", "日本")]
)
def test_salted_chain_starts_from_sglangs_namespace_seed(extra_key: str | None, cache_salt: str | None) -> None:
    tokens = list(range(10))
    seed = _seed_by_hand(extra_key, cache_salt)
    assert storage_namespace_seed(extra_key, cache_salt) == seed.hex()
    first = hashlib.sha256(seed + struct.pack("<4I", *tokens[:4])).digest()
    keys = page_hashes(tokens, 4, extra_key=extra_key, cache_salt=cache_salt)
    assert keys[0] == first.hex()
    assert keys[1] == hashlib.sha256(first + struct.pack("<4I", *tokens[4:8])).hexdigest()
    assert page_hashes(tokens, 4, prior_hash=keys[0])[0] != keys[0]


def test_salts_that_run_together_seed_differently() -> None:
    seeds = {
        storage_namespace_seed(*parts) for parts in [("ab", None), ("a", "b"), (None, "ab"), ("", "ab"), ("ab", "")]
    }
    assert len(seeds) == 5
    assert storage_namespace_seed(None, None) is None
    assert page_hashes([1, 2], 2, extra_key=None, cache_salt=None) == page_hashes([1, 2], 2)


def test_seeds_do_not_combine() -> None:
    with pytest.raises(ValueError, match="not both"):
        page_hashes([1], 1, prior_hash="0" * 64, cache_salt="x")
    with pytest.raises(ValueError, match="two different seeds"):
        page_hashes([1], 1, namespace="t", extra_key="x")


@pytest.mark.parametrize("key", ["abc\ndef", "a" * 200 + "\n" + "b" * 200, "ok\n"])
def test_a_newline_never_passes_batch_validation(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_keys(["fine", key])


# ----------------------------------------------------------------------------- salted vectors (tests/data)
SALTED = json.loads((Path(__file__).resolve().parent / "data" / "salted_page_hash_vectors.json").read_text("utf-8"))


@pytest.mark.parametrize("case", SALTED["cases"], ids=[c["name"] for c in SALTED["cases"]])
def test_salted_page_hashes_match_the_vectors(case):
    salts = {"extra_key": case["extra_key"], "cache_salt": case["cache_salt"]}
    if case["prior_hash"] is None:
        assert storage_namespace_seed(**salts) == case["seed"]
        assert page_hashes(case["tokens"], case["page_size"], **salts) == case["page_hashes"]
    else:
        assert page_hashes(case["tokens"], case["page_size"], prior_hash=case["prior_hash"]) == case["page_hashes"]


def test_salted_vectors_are_computed_and_were_checked_against_sglang():
    """The file is what its generator computes (never edited by hand), and SGLang agreed with every case."""
    import importlib.util

    path = Path(__file__).resolve().parent / "data" / "make_salted_page_hash_vectors.py"
    spec = importlib.util.spec_from_file_location("make_salted_page_hash_vectors", path)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.document(SALTED["checked_against"]) == SALTED
    assert SALTED["checked_against"] == "0.5.23"
    names = {case["name"] for case in SALTED["cases"]}
    assert {"unsalted", "empty_cache_salt", "both_empty", "unicode", "continues_salted_chain"} <= names
    unsalted = next(case for case in SALTED["cases"] if case["name"] == "unsalted")
    assert unsalted["seed"] is None and unsalted["page_hashes"] == page_hashes(unsalted["tokens"], 4)
    distinct = {tuple(case["page_hashes"]) for case in SALTED["cases"] if case["name"].startswith("joined_")}
    assert len(distinct) == 5  # salts that run together never seed alike

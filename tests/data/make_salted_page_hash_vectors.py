"""Compute ``salted_page_hash_vectors.json``: page hashes of chains seeded by SGLang's request namespace.

Every value is computed with this SDK's :func:`hicache_storage.keys.page_hashes` and
:func:`~hicache_storage.keys.storage_namespace_seed`. Where SGLang is importable, every case is also
computed with SGLang's own ``get_storage_hash_str`` (a key object carrying ``extra_key`` and
``cache_salt``, as SGLang's ``RadixKey`` does) and ``storage_namespace_seed``, the two must agree,
and the file records the SGLang version it was checked against::

    PYTHONPATH=.venv/sglang-0.5.23 .venv/bin/python tests/data/make_salted_page_hash_vectors.py          # write
    PYTHONPATH=.venv/sglang-0.5.23 .venv/bin/python tests/data/make_salted_page_hash_vectors.py --check  # compare

Without SGLang, writing needs ``--unchecked`` (the file then records ``"checked_against": null``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from hicache_storage.keys import page_hashes, storage_namespace_seed

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "salted_page_hash_vectors.json"
UINT32_MAX = 2**32 - 1

ALGORITHM = (
    "seed = None when extra_key and cache_salt are both None, else lowercase hex SHA-256 of "
    'b"sglang-cache-namespace-v1" followed, for each part in (extra_key, cache_salt), by b"\\x00" when the '
    'part is None or b"\\x01" + len(utf8).to_bytes(8, "little") + utf8; the seed is the prior hash of the '
    "chain's first page: digest_i = SHA256(raw bytes of digest_{i-1} (the seed's for i = 0, omitted when "
    "there is none) || uint32 little-endian of each token of page i); key_i = lowercase hex of digest_i. "
    "A case with prior_hash continues a chain (its seed is already in prior_hash)."
)


def _tokens(seed: int, count: int) -> list[int]:
    generator = random.Random(seed)
    return [generator.randrange(0, UINT32_MAX + 1) for _ in range(count)]


#: (name, extra_key, cache_salt, tokens, page_size)
SEEDED: list[tuple[str, str | None, str | None, list[int], int]] = [
    ("unsalted", None, None, list(range(1, 9)), 4),
    ("extra_key_only", "lora-adapter-7", None, list(range(1, 9)), 4),
    ("cache_salt_only", None, "tenant-a", list(range(1, 9)), 4),
    ("both", "lora-adapter-7", "tenant-a", list(range(1, 9)), 4),
    ("empty_extra_key", "", None, list(range(1, 9)), 4),
    ("empty_cache_salt", None, "", list(range(1, 9)), 4),
    ("both_empty", "", "", list(range(1, 9)), 4),
    ("joined_ab_none", "ab", None, [42, 43], 2),
    ("joined_a_b", "a", "b", [42, 43], 2),
    ("joined_none_ab", None, "ab", [42, 43], 2),
    ("joined_empty_ab", "", "ab", [42, 43], 2),
    ("joined_ab_empty", "ab", "", [42, 43], 2),
    ("unicode", "ü-lora", "日本語テナント", list(range(100, 112)), 4),
    ("emoji_and_combining", "🔑", "e\u0301", list(range(100, 112)), 4),
    ("nul_inside", "a\x00b", "\x00", [7, 8, 9], 3),
    ("page_size_1", "lora", "salt", [0, 1, 2], 1),
    ("page_size_16_ragged", "lora", "salt", list(range(40)), 16),
    ("page_size_64", None, "s", _tokens(64, 128), 64),
    ("max_uint32_tokens", "k", "s", [UINT32_MAX, 0, 2**31, UINT32_MAX - 1], 2),
    ("random_tokens", "adapter", "tenant-b", _tokens(7, 37), 8),
    ("no_tokens", "lora", "salt", [], 4),
]


def compute() -> list[dict[str, Any]]:
    """Every case, computed with this SDK's implementation."""
    cases: list[dict[str, Any]] = []
    for name, extra_key, cache_salt, tokens, page_size in SEEDED:
        cases.append(
            {
                "name": name,
                "tokens": tokens,
                "page_size": page_size,
                "extra_key": extra_key,
                "cache_salt": cache_salt,
                "prior_hash": None,
                "seed": storage_namespace_seed(extra_key, cache_salt),
                "page_hashes": page_hashes(tokens, page_size, extra_key=extra_key, cache_salt=cache_salt),
            }
        )
    # a child node continues its parent's salted chain from the parent's last page hash
    parent = next(case for case in cases if case["name"] == "both")
    tokens = list(range(9, 21))
    cases.append(
        {
            "name": "continues_salted_chain",
            "tokens": tokens,
            "page_size": 4,
            "extra_key": None,
            "cache_salt": None,
            "prior_hash": parent["page_hashes"][-1],
            "seed": None,
            "page_hashes": page_hashes(tokens, 4, prior_hash=parent["page_hashes"][-1]),
        }
    )
    return cases


class _Key:
    """A request's tokens with ``extra_key``/``cache_salt`` (the attributes SGLang's ``RadixKey`` has)."""

    def __init__(self, token_ids: list[int], extra_key: str | None, cache_salt: str | None) -> None:
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.cache_salt = cache_salt

    def __len__(self) -> int:
        return len(self.token_ids)


def sglang_hashes() -> tuple[Any, Any, str] | None:
    """SGLang's ``get_storage_hash_str``, ``storage_namespace_seed`` and version, or ``None`` if not importable."""
    sys.path.insert(0, str(HERE.parent / "integrations"))
    try:
        import importlib
        from importlib.metadata import version

        # the SGLang tests' conftest registers SGLang's package without running its server imports
        if importlib.import_module("conftest").SGLANG_SKIP_REASON is not None:
            return None

        from sglang.srt.mem_cache.utils import get_storage_hash_str
        from sglang.srt.mem_cache.utils import storage_namespace_seed as sglang_seed
    except Exception:
        return None
    return get_storage_hash_str, sglang_seed, version("sglang")


def check_against_sglang(cases: list[dict[str, Any]], hashes: Any, seed: Any) -> list[str]:
    """Where SGLang's answer differs from a case's (empty when they all agree)."""
    problems = []
    for case in cases:
        key = _Key(case["tokens"], case["extra_key"], case["cache_salt"])
        theirs = hashes(key, case["prior_hash"], page_size=case["page_size"])
        if theirs != case["page_hashes"]:
            problems.append(f"{case['name']}: SGLang {theirs} != ours {case['page_hashes']}")
        if case["prior_hash"] is None and seed(case["extra_key"], case["cache_salt"]) != case["seed"]:
            problems.append(f"{case['name']}: SGLang's seed differs")
    return problems


def document(checked_against: str | None) -> dict[str, Any]:
    """The whole file's content."""
    return {
        "algorithm": ALGORITHM,
        "generator": "tests/data/make_salted_page_hash_vectors.py",
        "checked_against": checked_against,
        "cases": compute(),
    }


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    parser.add_argument("--unchecked", action="store_true", help="write without SGLang (checked_against: null)")
    args = parser.parse_args(argv)
    sglang = sglang_hashes()
    cases = compute()
    if sglang is not None:
        problems = check_against_sglang(cases, sglang[0], sglang[1])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        print(f"all {len(cases)} cases agree with SGLang {sglang[2]}", file=sys.stderr)
    if args.check:
        stored = json.loads(OUTPUT.read_text(encoding="utf-8"))
        expected = document(stored.get("checked_against"))
        if stored != expected:
            print(f"{OUTPUT.name} differs from what this script computes", file=sys.stderr)
            return 1
        return 0
    if sglang is None and not args.unchecked:
        print("SGLang is not importable (run scripts/sglang-test.sh first); --unchecked writes anyway", file=sys.stderr)
        return 1
    OUTPUT.write_text(render(document(sglang[2] if sglang else None)), encoding="utf-8")
    print(f"wrote {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

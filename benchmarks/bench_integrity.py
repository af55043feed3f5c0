"""Benchmark: what binding records to their keys, and authenticating them, costs per page.

Per 512 KiB page (two 256 KiB segments, as MHA ``page_first`` K and V), one write and one read of
a record's checks, without any I/O: build the header (``encode``), then parse it under the key and
verify the payload (``check``). Three ways, measured side by side in the same run, rounds
alternating which goes first:

- ``checksum``: what format version 1 did (XXH3-64 of the payload, no key);
- ``key digest``: format version 2 without a secret (XXH3-64 + BLAKE2b-128 of the storage key);
- ``secret``: format version 2 with ``integrity_secret_*`` (also an HMAC-SHA256 over header, key
  and payload, kept to 16 bytes).

Prints the median microseconds per page of each and the ratio to ``checksum``.

    python benchmarks/bench_integrity.py [--pages 64] [--rounds 15] [--json benchmarks/results/bench-integrity.json]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import struct
import sys
import time
from collections.abc import Callable

from machine import describe

from hicache_storage.plugin.page_format import RecordCodec, checksum

PAGE_BYTES = 512 << 10
_V1 = struct.Struct("<4sBBHQQ")


def make_pages(count: int) -> list[tuple[str, list[memoryview]]]:
    """``count`` (storage key, [K, V]) pages of random bytes."""
    pages = []
    for number in range(count):
        data = memoryview(bytearray(secrets.token_bytes(PAGE_BYTES)))
        key = f"hc1-{'0' * 20}.{number:064x}.tp0of1.pp0of1.cp0of1"
        pages.append((key, [data[: PAGE_BYTES // 2], data[PAGE_BYTES // 2 :]]))
    return pages


def checksum_only(key: str, segments: list[memoryview]) -> None:
    length = sum(segment.nbytes for segment in segments)
    header = _V1.pack(b"HCKV", 1, 0, 0, length, checksum(segments))
    _magic, _version, _flags, _reserved, _length, digest = _V1.unpack(header)
    assert checksum(segments) == digest


def with_codec(codec: RecordCodec) -> Callable[[str, list[memoryview]], None]:
    def run(key: str, segments: list[memoryview]) -> None:
        header = codec.header(key, segments)
        parsed = codec.check_header(header, key, PAGE_BYTES)
        assert codec.verify(parsed, key, segments)

    return run


def time_per_page(work: Callable[[str, list[memoryview]], None], pages: list[tuple[str, list[memoryview]]]) -> float:
    begin = time.perf_counter()
    for key, segments in pages:
        work(key, segments)
    return (time.perf_counter() - begin) / len(pages)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=64, help="pages per round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (medians over them)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    pages = make_pages(args.pages)
    ways: dict[str, Callable[[str, list[memoryview]], None]] = {
        "checksum": checksum_only,
        "key digest": with_codec(RecordCodec()),
        "secret": with_codec(RecordCodec(secrets.token_bytes(32))),
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for way in ways.values():  # warm-up
        time_per_page(way, pages[:4])
    for number in range(args.rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        for name in order:
            samples[name].append(time_per_page(ways[name], pages))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["checksum"]
    rows = [
        {
            "way": name,
            "us_per_page": round(value * 1e6, 1),
            "ratio_to_checksum": round(value / base, 3),
            "gb_per_s": round(PAGE_BYTES / value / 1e9, 2),
        }
        for name, value in medians.items()
    ]
    print(f"512 KiB pages, encode + check per page, median of {args.rounds} rounds of {args.pages} pages")
    print(f"{'way':<12} {'us/page':>9} {'GB/s':>7} {'ratio':>7}")
    for row in rows:
        print(f"{row['way']:<12} {row['us_per_page']:>9.1f} {row['gb_per_s']:>7.2f} {row['ratio_to_checksum']:>7.3f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(
                {
                    "page_bytes": PAGE_BYTES,
                    "pages": args.pages,
                    "rounds": args.rounds,
                    "rows": rows,
                    "machine": describe(),
                },
                out,
                indent=2,
            )
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

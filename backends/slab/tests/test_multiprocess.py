"""Several processes on one slab: writers racing on the same sets, a writer killed mid-write.

Pages are stamped (``hicache_storage_conformance.pages``): the first bytes name the key and version
and the rest is derived from both, so a read that returns another key's page, a mix of two writes
or a torn page is caught byte for byte. The workers are separate interpreters (``slab_workers.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hicache_storage_conformance.pages import read_slot
from hicache_storage_slab.layout import ENTRY_SIZE, WRITING
from slab_support import kv_slab
from slab_workers import make_pool, open_backend, stamp_problem

from hicache_storage import testing as kit

WORKERS = Path(__file__).with_name("slab_workers.py")


def _start(mode: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKERS), mode, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# ----------------------------------------------------------------------------- racing writers
#: 2 sets x 4 slots of 64 KiB pages, 10 keys: every set is fought over all the time.
HAMMER_OPTIONS: dict[str, Any] = {"capacity_bytes": 600_000, "ways": 4, "io_threads": 2}
HAMMER_SECONDS = 2.0


def test_writers_in_several_processes_never_expose_a_wrong_page(tmp_path: Path) -> None:
    keys = kit.random_keys(10)
    pool = make_pool(layers=2)
    creator = open_backend(str(tmp_path), pool, HAMMER_OPTIONS)
    assert kv_slab(creator).geometry.sets == 2
    creator.close()
    spec = {"path": str(tmp_path), "options": HAMMER_OPTIONS, "keys": keys, "layers": 2, "seconds": HAMMER_SECONDS}
    workers = [_start("hammer", {**spec, "worker": worker}) for worker in range(3)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        for worker in workers:  # all start together
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        reports = []
        for worker in workers:
            out, err = worker.communicate(timeout=HAMMER_SECONDS + 60)
            assert worker.returncode == 0, err[-2000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    errors = [e for r in reports for e in r["errors"]]
    assert not errors, errors[:3]
    assert all(r["faults"] == 0 for r in reports), reports
    assert sum(r["hits"] for r in reports) > 50, reports
    assert sum(r["written"] for r in reports) > 50, reports
    caught = sum(r["counters"].get("integrity_failures", 0) + r["counters"].get("write_races", 0) for r in reports)
    print(f"\nhammer: {reports}\nraces caught (misses or failed writes, never data): {caught}")


# ----------------------------------------------------------------------------- kill -9
#: 64 slots of 1 MiB pages in sets of 8 for 16 keys: no acknowledged page is ever evicted.
KILL_OPTIONS: dict[str, Any] = {"capacity_bytes": 65 * ((1 << 20) + ENTRY_SIZE) + 16384, "ways": 8, "io_threads": 1}
#: Kills at a random time, then kills of a writer stopped halfway through a payload (claim taken, no commit).
RANDOM_KILLS, MID_WRITE_KILLS = 3, 2


def test_a_writer_killed_mid_write_never_leaves_a_readable_wrong_page(tmp_path: Path) -> None:
    keys = kit.random_keys(16)
    pool = make_pool(layers=16)  # 1 MiB pages
    open_backend(str(tmp_path), pool, KILL_OPTIONS).close()
    acked: dict[int, int] = {}
    rng = random.Random(3)
    claims_left = []
    for round_number in range(RANDOM_KILLS + MID_WRITE_KILLS):
        spec: dict[str, Any] = {"path": str(tmp_path), "options": KILL_OPTIONS, "keys": keys, "layers": 16}
        spec["first_version"] = round_number * 1000
        if round_number >= RANDOM_KILLS:
            spec["pause_after"] = rng.randrange(5, 40)
        writer = _start("writer", spec)
        assert writer.stdout is not None
        first = writer.stdout.readline()  # it is writing
        assert first, writer.communicate()[1][-2000:]
        if "pause_after" in spec:
            lines = [first]
            while lines[-1] not in ("mid\n", ""):
                lines.append(writer.stdout.readline())
            assert lines[-1] == "mid\n", writer.communicate()[1][-2000:]
            first = "".join(lines[:-1])
        else:
            time.sleep(rng.uniform(0.05, 0.3))
        os.kill(writer.pid, signal.SIGKILL)
        # The rest of stdout through the same buffered reader that read the first lines: communicate()
        # would read the pipe itself and lose what that reader had already read ahead.
        out = writer.stdout.read()
        writer.communicate(timeout=30)  # stdout is at its end now: this reaps the writer, closes the pipes
        assert writer.returncode == -signal.SIGKILL
        for line in (first + out).split("\n")[:-1]:  # the last piece may be a line cut short by the kill
            index, version = map(int, line.split())
            acked[index] = max(acked.get(index, 0), version)
        reader = open_backend(str(tmp_path), pool, KILL_OPTIONS)
        slab = kv_slab(reader)
        geometry = slab.geometry
        headers = os.pread(slab.files[0].fd, geometry.slots * ENTRY_SIZE, geometry.header_offset)
        claims_left.append(headers[5::ENTRY_SIZE].count(bytes([WRITING])))
        for index, key in enumerate(keys):
            hit = reader.batch_get_v1([key], kit.page_indices(2, 1, pool.page_size))[0]
            if index in acked:
                assert hit, f"kill {round_number}: key {index}, acknowledged at version {acked[index]}, is missing"
            if hit:
                version, problem = stamp_problem(key, read_slot(pool, 2))
                assert problem is None, f"kill {round_number}: key {index}: {problem}"
                assert version >= acked.get(index, 0), f"kill {round_number}: an older page than the acknowledged one"
        reader.close()
    assert len(acked) == len(keys), "the writer acknowledged too little to test anything"
    assert all(claims_left[RANDOM_KILLS:]), f"a writer stopped mid-payload left no claimed slot: {claims_left}"
    print(f"\nkill -9: slots left claimed mid-write after each kill: {claims_left}")

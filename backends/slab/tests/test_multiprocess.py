"""Several processes on one store: writers racing on a few keys, a writer killed mid-write.

Pages are stamped (``hicache_storage_conformance.pages`` and :func:`slab_workers.stamped_page`): the
first bytes name the key and version and the rest is derived from both, so a read that returns
another key's page, a mix of two writes or a torn page is caught byte for byte. The workers are
processes of their own, forked by a server that imported everything once (``slab_workers.py``); this
process reads what they wrote, as a restarted process would.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_conformance.pages import read_slot
from hicache_storage_slab.allocator import CLAIM_TTL_NS
from slab_support import MIB, STORE_FILES, names, the_store, write_txn
from slab_workers import make_pool, open_backend, stamp_problem

from hicache_storage import testing as kit

WORKERS = Path(__file__).with_name("slab_workers.py")
pytestmark = pytest.mark.timeout(300)


class ForkServer:
    """``slab_workers.py`` as a fork server: :meth:`start` a worker, read its output, kill it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKERS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pids: list[int] = []
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def start(self, mode: str, spec: dict[str, Any], out: Path) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"mode": mode, "spec": spec, "out": str(out)}) + "\n")
        self.process.stdin.flush()
        pid = int(self._line())
        self.pids.append(pid)
        return pid

    def close(self) -> None:
        for pid in self.pids:
            kill(pid)
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)
        assert self.process.stdout is not None
        self.process.stdout.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill(pid: int) -> None:
    """SIGKILL ``pid`` and wait until the fork server's kernel reaping has removed it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, f"worker {pid} survived SIGKILL"
        time.sleep(0.005)


def lines_of(out: Path) -> list[str]:
    """The complete lines a worker has written so far."""
    text = out.read_text() if out.exists() else ""
    return text.split("\n")[:-1]


def wait_for(out: Path, done: Callable[[list[str]], bool], pid: int, timeout: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = lines_of(out)
        if done(lines):
            return lines
        if not alive(pid) or time.monotonic() > deadline:
            raise AssertionError(f"worker {pid} stopped or hung; its output:\n" + out.read_text()[-3000:])
        time.sleep(0.005)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


# ----------------------------------------------------------------------------- racing writers
#: 64 KiB pages in an 8 MiB store, 10 keys, 3 processes: every key is rewritten and read all the time.
HAMMER_OPTIONS: dict[str, Any] = {"capacity_bytes": 8 * MIB, "io_threads": 2}
HAMMER_SECONDS = 2.0


def test_writers_in_several_processes_never_expose_a_wrong_page(tmp_path: Path, fork_server: ForkServer) -> None:
    keys = kit.random_keys(10)
    go = tmp_path / "go"
    spec = {"path": str(tmp_path / "store"), "options": HAMMER_OPTIONS, "keys": keys, "layers": 2}
    spec.update(seconds=HAMMER_SECONDS, go=str(go))
    outs = [tmp_path / f"hammer-{worker}.out" for worker in range(3)]
    pids = [fork_server.start("hammer", {**spec, "worker": worker}, out) for worker, out in enumerate(outs)]
    for pid, out in zip(pids, outs, strict=True):
        wait_for(out, lambda lines: "ready" in lines, pid)
    go.touch()  # all start together
    reports = []
    for pid, out in zip(pids, outs, strict=True):
        lines = wait_for(out, lambda lines: any(line.startswith("{") for line in lines), pid)
        reports.append(json.loads(next(line for line in lines if line.startswith("{"))))
    errors = [e for r in reports for e in r["errors"]]
    assert not errors, errors[:3]
    assert all(r["faults"] == 0 for r in reports), reports
    assert sum(r["hits"] for r in reports) > 50, reports
    assert sum(r["written"] for r in reports) > 50, reports
    caught = sum(r["counters"].get("read_races", 0) + r["counters"].get("write_races", 0) for r in reports)
    assert sum(r["counters"].get("integrity_failures", 0) for r in reports) == 0, reports  # races, never damage
    print(f"\nhammer: {reports}\nraces caught (misses, never data): {caught}")
    assert names(tmp_path / "store") == STORE_FILES  # kept (it holds pages), nothing else


# ----------------------------------------------------------------------------- kill -9
#: 256 KiB pages, 16 keys, a 16 MiB store (52 slots): no acknowledged page is ever evicted.
KILL_OPTIONS: dict[str, Any] = {"capacity_bytes": 16 * MIB, "io_threads": 1}
#: Kills at a random time, then kills of a writer stopped halfway through a payload (claimed, no commit).
RANDOM_KILLS, MID_WRITE_KILLS = 2, 2


def test_a_writer_killed_mid_write_never_leaves_a_readable_wrong_page(tmp_path: Path, fork_server: ForkServer) -> None:
    keys = kit.random_keys(16)
    pool = make_pool(layers=8)  # 256 KiB pages
    root = str(tmp_path / "store")
    acked: dict[int, int] = {}
    rng = random.Random(3)
    claims_left = []
    for round_number in range(RANDOM_KILLS + MID_WRITE_KILLS):
        spec: dict[str, Any] = {"path": root, "options": KILL_OPTIONS, "keys": keys, "layers": 8}
        spec["first_version"] = round_number * 1000
        if round_number >= RANDOM_KILLS:
            spec["pause_after"] = rng.randrange(5, 40)
        out = tmp_path / f"writer-{round_number}.out"
        pid = fork_server.start("writer", spec, out)
        if "pause_after" in spec:
            wait_for(out, lambda lines: "mid" in lines, pid)
        else:
            wait_for(out, lambda lines: len(lines) > 0, pid)
            time.sleep(rng.uniform(0.05, 0.3))
        kill(pid)
        for line in lines_of(out):
            if line != "mid":
                number, version = map(int, line.split())
                acked[number] = max(acked.get(number, 0), version)
        reader = open_backend(root, pool, KILL_OPTIONS)  # another process's view: what the writer left
        index = the_store(reader).opened.index
        claims_left.append(index.claim_count())
        for number, key in enumerate(keys):
            hit = reader.batch_get_v1([key], kit.page_indices(2, 1, pool.page_size))[0]
            if number in acked:
                assert hit, f"kill {round_number}: key {number}, acknowledged at version {acked[number]}, is missing"
            if hit:
                version, problem = stamp_problem(key, read_slot(pool, 2))
                assert problem is None, f"kill {round_number}: key {number}: {problem}"
                assert version >= acked.get(number, 0), f"kill {round_number}: an older page than the acknowledged one"
        assert reader.stats.get("integrity_failures") == 0  # nothing torn was ever published
        reader.close()
    assert len(acked) == len(keys), "the writer acknowledged too little to test anything"
    assert all(claims_left[RANDOM_KILLS:]), f"a writer stopped mid-payload left no claimed slot: {claims_left}"
    # The claims of the writers that died are taken back by a sweep once they are older than the TTL.
    reader = open_backend(root, pool, KILL_OPTIONS)
    index = the_store(reader).opened.index
    left = index.claim_count()
    assert left >= MID_WRITE_KILLS
    with write_txn(index, now=time.time_ns() + CLAIM_TTL_NS) as txn:
        assert txn.sweep_claims() == left
    assert index.claim_count() == 0
    reader.clear()
    reader.close()
    assert os.listdir(root) == []
    print(f"\nkill -9: slots left claimed after each kill: {claims_left}")

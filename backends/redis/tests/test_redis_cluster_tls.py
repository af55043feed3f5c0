"""Redis Cluster over TLS with ACL users, through the real redis backend.

Three TLS-only cluster nodes (cluster bus on TLS too, client certificates required) with a password
for the default user and two ACL users: one over every key, one restricted to ``scoped:*``.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hicache_storage_conformance import BackendConformance
from redis_support import CLUSTER_RESILIENCE

from hicache_storage import ConfigError, HiCacheStorage, load_backend, make_config
from hicache_storage.plugin.page_format import HEADER_SIZE
from hicache_storage.testing.fault_figures import call_limit_s, record_fault_row
from hicache_storage.testing.outage import (
    PAGE_SIZE,
    TimedWorkload,
    assert_clean,
    fault_phase,
    fill_page,
    make_keys,
    make_pool,
    page_content,
    read_page,
    round_trip_ok,
    scramble_pages,
)
from hicache_storage.testing.ports import HOST, free_ports
from hicache_storage.testing.tls_certs import TlsFiles, make_certs

pytestmark = pytest.mark.timeout(120)

USER, PASSWORD = "cacheuser", "pw-" + secrets.token_hex(12)
SCOPED_USER, SCOPED_PASSWORD, SCOPE = "scoped", "sp-" + secrets.token_hex(12), "scoped:"
DEFAULT_PASSWORD = "dp-" + secrets.token_hex(12)  # requirepass: the password of the default user
SECRETS = (PASSWORD, SCOPED_PASSWORD, DEFAULT_PASSWORD)
RESILIENCE = {"retries": 0, "deadline_s": 2.0}
NODE_TIMEOUT_MS = 1000
WAIT_S = 20.0
SLOTS = 16384


class TlsCluster:
    """Three redis-server cluster nodes speaking only TLS, each with its own directory and log."""

    def __init__(self, directory: Path, ports: list[int], tls: TlsFiles) -> None:
        self.dir = directory
        self.ports = ports
        self.tls = tls
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def nodes(self) -> list[str]:
        return [f"{HOST}:{port}" for port in self.ports]

    def options(self, **extra: Any) -> dict[str, Any]:
        """Backend options of a cluster client over TLS presenting the client certificate (``None`` drops one)."""
        options = {
            "cluster": True,
            "nodes": self.nodes,
            "ssl": True,
            "ssl_ca_certs": str(self.tls.ca),
            "ssl_certfile": str(self.tls.client_cert),
            "ssl_keyfile": str(self.tls.client_key),
            **extra,
        }
        return {name: value for name, value in options.items() if value is not None}

    def start(self, port: int) -> None:
        node = self.dir / str(port)
        node.mkdir(exist_ok=True)
        tls = self.tls
        args = [
            *("redis-server", "--bind", HOST, "--port", "0", "--tls-port", str(port)),
            *("--tls-cluster", "yes", "--tls-replication", "yes", "--tls-auth-clients", "yes"),
            *("--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca)),
            *("--cluster-enabled", "yes", "--cluster-config-file", str(node / "nodes.conf")),
            *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
            *("--requirepass", DEFAULT_PASSWORD, "--masteruser", USER, "--masterauth", PASSWORD),
            *("--user", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all"),
            *("--user", SCOPED_USER, "on", f">{SCOPED_PASSWORD}", f"~{SCOPE}*", "+@all"),
            *("--save", "", "--appendonly", "no", "--dir", str(node), "--logfile", str(node / "log")),
        ]
        self.processes[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, port: int) -> None:
        process = self.processes.pop(port, None)
        if process is None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def _login(self) -> dict[str, Any]:
        """redis-py keyword arguments: the all-keys user over TLS with the client certificate."""
        return {
            "username": USER,
            "password": PASSWORD,
            "ssl": True,
            "ssl_ca_certs": str(self.tls.ca),
            "ssl_certfile": str(self.tls.client_cert),
            "ssl_keyfile": str(self.tls.client_key),
            "socket_timeout": 2,
        }

    def admin(self, port: int) -> redis.Redis:
        """A plain (non-cluster) TLS connection to one node as the all-keys user."""
        return redis.Redis(host=HOST, port=port, socket_connect_timeout=2, **self._login())

    def raw_cluster(self) -> Any:
        """A redis-py cluster client as the all-keys user (to look behind the backend's back)."""
        from redis.cluster import ClusterNode, RedisCluster

        return RedisCluster(startup_nodes=[ClusterNode(HOST, port) for port in self.ports], **self._login())

    def _log_tail(self) -> str:
        tails = []
        for port in self.ports:
            log = self.dir / str(port) / "log"
            text = log.read_text(errors="replace") if log.exists() else "(no log)"
            tails.append(f"--- node {port}:\n" + "\n".join(text.splitlines()[-8:]))
        return "\n".join(tails)

    def wait(self, what: str, ready: Any, timeout_s: float = WAIT_S) -> None:
        """Poll ``ready()`` (redis errors count as not ready) until true; fail with the logs after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if ready():
                    return
            except redis.RedisError:
                pass
            for port, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"redis-server on port {port} exited ({process.returncode}):\n{self._log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not reached within {timeout_s}s:\n{self._log_tail()}")
            time.sleep(0.05)

    def info(self, port: int) -> dict[str, str]:
        with self.admin(port) as client:
            return dict(client.execute_command("CLUSTER INFO"))

    def wait_state(self, state: str, ports: list[int] | None = None) -> None:
        """Wait until every node of ``ports`` (default: all) reports ``cluster_state:<state>``."""
        ports = self.ports if ports is None else ports

        def ready() -> bool:
            for port in ports:
                info = self.info(port)
                if info.get("cluster_state") != state:
                    return False
                if state == "ok" and info.get("cluster_known_nodes") != str(len(self.ports)):
                    return False
            return True

        self.wait(f"cluster_state:{state} on ports {ports}", ready)

    def create(self) -> None:
        """Start every node, give each a third of the slots, introduce them, wait for ``cluster_state:ok``."""
        for port in self.ports:
            self.start(port)

        def pinged(port: int) -> bool:
            with self.admin(port) as client:
                return bool(client.ping())

        for port in self.ports:
            self.wait(f"node {port} answering over TLS", lambda port=port: pinged(port))
        share = SLOTS // len(self.ports)
        for number, port in enumerate(self.ports):
            first, last = number * share, SLOTS - 1 if number == len(self.ports) - 1 else (number + 1) * share - 1
            with self.admin(port) as client:
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", number + 1)
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        with self.admin(self.ports[0]) as client:
            for port in self.ports[1:]:
                client.execute_command("CLUSTER", "MEET", HOST, port)
        self.wait_state("ok")

    def close(self) -> None:
        for port in list(self.processes):
            self.stop(port)


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[TlsCluster]:
    """A 3-node TLS-only Redis Cluster with ACL users on spare loopback ports (bus ports = port + 10000)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    directory = Path(tempfile.mkdtemp(prefix="hc-rel-tls-cluster-"))
    cluster = TlsCluster(directory, free_ports(3, bus_offset=10000), make_certs(directory))
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(directory, ignore_errors=True)


def open_backend(cluster: TlsCluster, **extra: Any) -> HiCacheStorage:
    """The redis backend through the registry, with a fresh key prefix and a registered host pool."""
    options = cluster.options(**{"key_prefix": f"tc{secrets.token_hex(3)}:", "resilience": RESILIENCE, **extra})
    backend = load_backend("redis", make_config("m", extra_config=options))
    backend.register_mem_pool_host(make_pool())
    return backend


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a password leaked in: {text[:300]}"


def secret_texts(backend: HiCacheStorage, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Everything a password could leak into: repr/str of the backend and its options, stats, logs."""
    return [
        repr(backend),
        str(backend),
        repr(backend.backend),
        repr(backend.options),
        str(backend.get_stats()),
        caplog.text,
    ]


# --------------------------------------------------------------------------- round trips
def test_round_trip_byte_exact_across_all_nodes(tls_cluster: TlsCluster) -> None:
    """Several batches written and read back byte for byte; the keys are spread over all three nodes."""
    backend = open_backend(tls_cluster, username=USER, password=PASSWORD)
    pool = backend.mem_pool_host
    nbytes = pool.bytes_per_page
    keys = make_keys(60)
    batches = [keys[begin : begin + 15] for begin in range(0, len(keys), 15)]
    raw = tls_cluster.raw_cluster()
    try:
        for batch in batches:
            indices = pool.alloc(len(batch) * PAGE_SIZE)
            assert indices is not None
            for key, start in zip(batch, indices[::PAGE_SIZE].tolist(), strict=True):
                fill_page(pool, int(start), page_content(key, 0, nbytes))
            assert backend.batch_set_v1(batch, indices) == [True] * len(batch), backend.get_stats()["last_fault"]
            pool.free(indices)
        assert backend.batch_exists(keys) == len(keys)
        for batch in reversed(batches):
            indices = pool.alloc(len(batch) * PAGE_SIZE)
            assert indices is not None
            scramble_pages(pool, indices)
            assert backend.batch_get_v1(batch, indices) == [True] * len(batch), backend.get_stats()["last_fault"]
            for key, start in zip(batch, indices[::PAGE_SIZE].tolist(), strict=True):
                assert read_page(pool, int(start)) == page_content(key, 0, nbytes), f"page {key} differs"
            pool.free(indices)
        assert pool.used_pages == 0

        # Behind the backend's back: which node holds each key, and the stored bytes themselves.
        assert backend.keyspace is not None
        prefix = backend.options.key_prefix
        rkeys = {key: prefix + backend.keyspace.storage_key(key) for key in keys}
        holders: dict[str, int] = {}
        for node in raw.get_primaries():
            found = raw.keys(f"{prefix}*", target_nodes=node)
            holders[node.name] = len([key for key in found if b"._manifest." not in key])  # pages only
        assert sum(holders.values()) == len(keys), holders
        assert len(holders) == 3 and all(holders.values()), f"keys not spread over all three nodes: {holders}"
        for key in keys[:: len(keys) // 6]:
            stored = raw.get(rkeys[key])
            assert stored is not None and stored[HEADER_SIZE:] == page_content(key, 0, nbytes)
    finally:
        backend.clear()
        backend.close()
        raw.close()


# --------------------------------------------------------------------------- conformance
class TestTlsClusterConformance(BackendConformance):
    """The conformance suite over the TLS cluster; the fault category really stops one node."""

    backend = "redis"
    cluster: TlsCluster

    @pytest.fixture(autouse=True)
    def _cluster(self, tls_cluster: TlsCluster) -> None:
        self.cluster = tls_cluster

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return self.cluster.options(
            username=USER,
            password=PASSWORD,
            key_prefix=f"conf{secrets.token_hex(4)}:",
            resilience=CLUSTER_RESILIENCE,
        )

    def stop_server(self, backend: Any) -> None:
        """Stop the last node and wait until the others declare the cluster down (no slot is then served)."""
        self.cluster.stop(self.cluster.ports[-1])
        self.cluster.wait_state("fail", self.cluster.ports[:-1])

    def start_server(self, backend: Any) -> None:
        """Start the node again (it rejoins from its nodes.conf) and wait for ``cluster_state:ok`` everywhere."""
        self.cluster.start(self.cluster.ports[-1])
        self.cluster.wait_state("ok")


# --------------------------------------------------------------------------- refused credentials
AUTH_REFUSED = r"username-password|NOAUTH|authenticat"
#: Options of each refused client, and what its fault says (``None``: not checked, it varies).
REFUSED: dict[str, tuple[dict[str, Any], str | None]] = {
    "wrong_password": ({"username": USER, "password": "wrong-" + PASSWORD}, AUTH_REFUSED),
    "unknown_user": ({"username": "nobody", "password": PASSWORD}, AUTH_REFUSED),
    "default_user_without_password": ({}, AUTH_REFUSED),
    "untrusted_server_certificate": (
        {"username": USER, "password": PASSWORD, "ssl_ca_certs": None},
        "CERTIFICATE_VERIFY_FAILED",
    ),
    "no_client_certificate": (
        {"username": USER, "password": PASSWORD, "ssl_certfile": None, "ssl_keyfile": None},
        None,  # TLS 1.3: the server's alert may arrive after the client's first write (a plain EOF then)
    ),
    "plain_text_to_tls_port": (
        {
            "username": USER,
            "password": PASSWORD,
            "ssl": False,
            **dict.fromkeys(("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")),
        },
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_connections_fail_cleanly(tls_cluster: TlsCluster, caplog: pytest.LogCaptureFixture, case: str) -> None:
    """Bad credentials or TLS settings: misses and ``False``, counted as faults; no exception, no leaked password."""
    caplog.set_level(logging.DEBUG)
    options, fault = REFUSED[case]
    backend = open_backend(tls_cluster, **options)
    try:
        begin = time.monotonic()
        assert not round_trip_ok(backend), f"expected a refusal ({case})"
        assert time.monotonic() - begin < 30
        stats = backend.get_stats()
        assert stats["faults"] > 0 and stats["last_fault"]
        if fault is not None:
            assert re.search(fault, stats["last_fault"]), stats["last_fault"]
        assert_no_secret(*secret_texts(backend, caplog))
    finally:
        backend.close()


def test_bad_options_are_config_errors(tls_cluster: TlsCluster, tmp_path: Path) -> None:
    """Unusable options fail at construction with a ConfigError naming the option, never showing a password."""
    cases = {
        "extra_config.ssl_ca_certs": {"ssl_ca_certs": str(tmp_path / "missing-ca.pem"), "password": PASSWORD},
        "extra_config.ssl_certfile": {"ssl_certfile": str(tmp_path / "missing.pem"), "password": PASSWORD},
        "extra_config.nodes": {"nodes": [f"{HOST}-no-port"], "password": PASSWORD},
        "extra_config.password": {"password": [PASSWORD]},
        "extra_config.db": {"db": 1, "password": PASSWORD},
    }
    for option, extra in cases.items():
        with pytest.raises(ConfigError) as caught:
            load_backend("redis", make_config("m", extra_config=tls_cluster.options(**extra)))
        assert option in str(caught.value), str(caught.value)
        assert_no_secret(str(caught.value), repr(caught.value))


# --------------------------------------------------------------------------- ACL key patterns
def write_pages(backend: HiCacheStorage, keys: list[str], version: int) -> list[bool]:
    """``batch_set_v1`` of pages holding ``page_content(key, version)``."""
    pool = backend.mem_pool_host
    indices = pool.alloc(len(keys) * PAGE_SIZE)
    assert indices is not None
    try:
        for key, start in zip(keys, indices[::PAGE_SIZE].tolist(), strict=True):
            fill_page(pool, int(start), page_content(key, version, pool.bytes_per_page))
        return backend.batch_set_v1(keys, indices)
    finally:
        pool.free(indices)


def read_pages(backend: HiCacheStorage, keys: list[str]) -> list[bytes | None]:
    """``batch_get_v1`` into scrambled slots: each page's bytes, ``None`` for a miss."""
    pool = backend.mem_pool_host
    indices = pool.alloc(len(keys) * PAGE_SIZE)
    assert indices is not None
    try:
        scramble_pages(pool, indices)
        hits = backend.batch_get_v1(keys, indices)
        starts = indices[::PAGE_SIZE].tolist()
        return [read_page(pool, int(start)) if hit else None for start, hit in zip(starts, hits, strict=True)]
    finally:
        pool.free(indices)


def test_acl_key_pattern_restricts_user_to_its_prefix(
    tls_cluster: TlsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A user limited to ``~scoped:*`` works under that prefix; outside it every call is a miss or ``False``."""
    caplog.set_level(logging.DEBUG)
    scoped = {"username": SCOPED_USER, "password": SCOPED_PASSWORD}
    inside = open_backend(tls_cluster, **scoped, key_prefix=f"{SCOPE}{secrets.token_hex(3)}:")
    outside_prefix = f"other{secrets.token_hex(3)}:"
    owner = open_backend(tls_cluster, username=USER, password=PASSWORD, key_prefix=outside_prefix)
    outside = open_backend(tls_cluster, **scoped, key_prefix=outside_prefix)
    try:
        assert round_trip_ok(inside), inside.get_stats()["last_fault"]
        assert round_trip_ok(inside)

        keys = make_keys(12)
        nbytes = owner.mem_pool_host.bytes_per_page
        assert write_pages(owner, keys, 0) == [True] * len(keys)  # pages the scoped user may not touch
        assert outside.batch_exists(keys) == 0
        assert outside.batch_exists_each(keys) == [False] * len(keys)
        assert outside.exists(keys[0]) is False
        assert read_pages(outside, keys) == [None] * len(keys)
        assert write_pages(outside, keys, 1) == [False] * len(keys)
        assert write_pages(outside, make_keys(4), 0) == [False] * 4
        assert outside.delete(keys[:2]) == [False, False]
        assert not round_trip_ok(outside)
        expected = [page_content(key, 0, nbytes) for key in keys]
        assert read_pages(owner, keys) == expected, "the refused user changed pages outside its key pattern"
        for backend in (inside, owner, outside):
            assert_no_secret(*secret_texts(backend, caplog))
    finally:
        for backend in (inside, owner):
            backend.clear()
        for backend in (inside, owner, outside):
            backend.close()


# --------------------------------------------------------------------------- a hung TLS node
def test_hung_tls_node_costs_at_most_the_deadline(tls_cluster: TlsCluster) -> None:
    """One TLS node stopped (``SIGSTOP``) mid-run of a warmed-up client: every call returns within its
    deadline + 100 ms (plus twice the thread wake-up delay measured beside it), only that node's pages
    fail, nothing wrong is served, and the node serves again once resumed."""
    deadline = 0.5
    resilience = {"deadline_s": deadline, "retries": 1, "breaker_threshold": 0}
    backend = open_backend(tls_cluster, username=USER, password=PASSWORD, resilience=resilience)
    port = tls_cluster.ports[1]
    pid = tls_cluster.processes[port].pid
    workload = TimedWorkload(backend, backend.mem_pool_host, batch=12, universe=96)
    try:
        # The first calls build the cluster client and open a TLS connection to each node, which on a
        # loaded machine can take longer than the deadline: done before the timed run.
        ready_by = time.monotonic() + WAIT_S
        while not round_trip_ok(backend):
            assert time.monotonic() < ready_by, backend.get_stats()["last_fault"]
        timings = fault_phase(
            workload,
            healthy_s=0.6,
            inject=lambda: os.kill(pid, signal.SIGSTOP),
            outage_s=1.5,
            restore=lambda: os.kill(pid, signal.SIGCONT),
            recover_timeout_s=30,
        )
        node_faults = backend.stats.get("node_faults")
    finally:
        os.kill(pid, signal.SIGCONT)
        backend.clear()
        backend.close()
        tls_cluster.wait_state("ok")
    row = record_fault_row(
        "redis-cluster (TLS)",
        "node hung (SIGSTOP)",
        deadline_s=deadline,
        workload=workload,
        recovery_s=timings["recovery_s"],
        scheduling_lag_s=round(float(timings["scheduling_lag_s"] or 0.0), 4),
    )
    assert_clean(workload)
    assert node_faults > 0 and timings["hits_before"]
    assert row["worst_call_s"] <= call_limit_s(row), row
    assert timings["recovery_s"] is not None

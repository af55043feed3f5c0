"""The SDK's metrics where SGLang serves its own: prometheus_client's multiprocess directory, or a textfile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from hicache_storage import make_config, testing
from hicache_storage.errors import ConfigError
from hicache_storage.integrations.sglang import SGLangBackend, extra_config_for

#: A scheduler-like process: SGLang's adapter over the file backend, with metrics on (the env var set).
RANK = textwrap.dedent(
    """
    import json, sys
    from hicache_storage import make_config, testing
    from hicache_storage.integrations.sglang import SGLangBackend, extra_config_for

    path, rank = sys.argv[1], int(sys.argv[2])
    config = make_config("m", tp_rank=rank, tp_size=2, extra_config=extra_config_for("file", path=path))
    store = SGLangBackend(config, {})
    pool = testing.make_pool(num_pages=8)
    store.register_mem_pool_host(pool)
    keys = testing.random_keys(4)
    assert store.batch_set_v1(keys, testing.page_indices(0, 4)) == [True] * 4
    assert store.batch_get_v1(keys + ["absent"], testing.page_indices(0, 5)) == [True] * 4 + [False]
    assert store.batch_exists(keys) == 4
    store.backend.clear()
    store.close()
    """
)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.startswith("hicache_storage_"):
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "pid"))
                found[(sample.name, labels)] = found.get((sample.name, labels), 0.0) + sample.value
    return found


def test_two_ranks_metrics_are_read_back_as_sglangs_http_process_does(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    for rank in (0, 1):
        done = subprocess.run(
            [sys.executable, "-c", RANK, str(tmp_path / "pages"), str(rank)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    samples = _samples(registry)
    for rank in ("0", "1"):
        labels = (("backend", "FileBackend"), ("op", "set"), ("pool", "kv"), ("tp_rank", rank))
        assert samples[("hicache_storage_pages_ok_total", labels)] == 4
        get = (("backend", "FileBackend"), ("op", "get"), ("pool", "kv"), ("tp_rank", rank))
        assert samples[("hicache_storage_pages_total", get)] == 5
        assert samples[("hicache_storage_pages_failed_total", get)] == 1
        assert samples[("hicache_storage_bytes_total", get)] == 4 * testing.make_pool(num_pages=8).bytes_per_page
        assert samples[("hicache_storage_call_seconds_count", get)] == 1
        breaker = (("backend", "FileBackend"), ("direction", "read"), ("tp_rank", rank))
        assert samples[("hicache_storage_breaker_state", breaker)] == 0  # closed
    assert not any(name.startswith("hicache_storage_faults") and value for (name, _), value in samples.items())


def test_a_textfile_per_rank_instead(tmp_path: Path) -> None:
    extra = extra_config_for("sim", metrics_textfile=str(tmp_path / "rank{tp_rank}.prom"), metrics_interval_s=3600)
    store = SGLangBackend(make_config("m", tp_rank=3, tp_size=4, extra_config=extra), {})
    store.register_mem_pool_host(testing.make_pool(num_pages=8))
    keys = testing.random_keys(2)
    assert store.batch_set_v1(keys, testing.page_indices(0, 2)) == [True, True]
    store.close()
    text = (tmp_path / "rank3.prom").read_text()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    ok = [s for s in families["hicache_storage_pages_ok"].samples if s.labels.get("op") == "set"]
    assert [(s.labels["tp_rank"], s.value) for s in ok] == [("3", 2.0)]
    assert not list(tmp_path.glob(".hicache-metrics-*")), "a temporary file was left behind"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"metrics_textfile": "/no/such/dir/rank.prom"}, "extra_config.metrics_textfile"),
        ({"metrics_textfile": "", "metrics_interval_s": 1}, "extra_config.metrics_textfile"),
        ({"metrics_textfile": "{tmp}/r.prom", "metrics_interval_s": 0}, "extra_config.metrics_interval_s"),
    ],
)
def test_bad_metrics_options_name_the_option(tmp_path: Path, options: dict[str, Any], option: str) -> None:
    values = json.loads(json.dumps(options).replace("{tmp}", str(tmp_path)))
    with pytest.raises(ConfigError) as caught:
        SGLangBackend(make_config("m", extra_config=extra_config_for("sim", **values)), {})
    assert caught.value.option == option

"""Metrics as a dict and as Prometheus text."""

from __future__ import annotations

import re

from pipeline_support import chain, make_pipeline, make_span

from hicache_storage.pipeline import PipelineMetrics, PrefetchRequest


def test_prometheus_text_is_well_formed_and_matches_the_dict() -> None:
    pipe = make_pipeline()
    clock = pipe.clock
    span = make_span(pipe, 1, chain(3))
    pipe.enqueue_backup(span)
    pipe.enqueue_backup(make_span(pipe, 2, chain(1, seed=1), parent="f" * 64))
    clock.advance(0.5)  # type: ignore[attr-defined]
    pipe.tick()
    pipe.prefetch(PrefetchRequest("r", chain(3)))
    pipe.tick()
    clock.advance(0.25)  # type: ignore[attr-defined]
    pipe.admit("r", 0)
    values = pipe.metrics.as_dict()
    assert values["latency"]["backup_queue"] == {"count": 1, "sum_s": 0.5, "max_s": 0.5}
    assert values["latency"]["staged_wait"]["sum_s"] == 0.25
    text = pipe.metrics.prometheus_text(labels={"rank": "0"})
    sample = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$')
    for line in text.splitlines():
        assert line.startswith("# ") or sample.match(line), line
    assert 'hicache_pipeline_backup_stored_tokens_total{rank="0"} 12' in text
    assert 'hicache_pipeline_backup_dropped_tokens_total{rank="0",gate="parent"} 4' in text
    assert 'hicache_pipeline_stage_seconds_sum{rank="0",stage="backup_queue"} 0.5' in text
    assert "# TYPE hicache_pipeline_backlog_tokens gauge" in text


def test_fresh_metrics_are_zero() -> None:
    metrics = PipelineMetrics()
    values = metrics.as_dict()
    assert values["ticks"] == 0 and values["backup_dropped_tokens"] == {"parent": 0, "backlog": 0, "oversize": 0}
    assert 'gate="oversize"} 0' in metrics.prometheus_text()

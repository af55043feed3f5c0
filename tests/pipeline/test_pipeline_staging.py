"""HostStaging hands out ascending pages again after release, so copies stay one run per span."""

from __future__ import annotations

from pipeline_support import chain, make_device_pool

from hicache_storage.pipeline import BufferPageCache, PipelineMetrics
from hicache_storage.pipeline.staging import HostStaging


def test_pages_come_back_ascending_and_owner_tagged() -> None:
    host = make_device_pool().host_pool(8)
    staging = HostStaging(host, None, PipelineMetrics())
    first = staging.alloc(4, ("backup", 1))
    assert first == [0, 1, 2, 3]
    assert set(host.owners().values()) == {("backup", 1)}
    staging.release(chain(4), first, [True] * 4, 4)
    assert host.used_pages == 0
    assert staging.alloc(6, ("load", "r")) == [0, 1, 2, 3, 4, 5]
    assert staging.alloc(3, ("load", "s")) is None  # only 2 free: nothing allocated
    assert host.used_pages == 6


def test_valid_pages_are_retained_and_reclaimed_for_a_later_allocation() -> None:
    host = make_device_pool().host_pool(4)
    metrics = PipelineMetrics()
    staging = HostStaging(host, BufferPageCache(), metrics)
    pages = staging.alloc(3, ("load", "r"))
    assert pages is not None
    staging.release(chain(3), pages, [True] * 3, valid=2)  # the third page's read failed: freed
    assert host.used_pages == 2 and staging.retained_owner == {0: ("load", "r"), 1: ("load", "r")}
    assert staging.alloc(4, ("backup", 7)) is not None  # 2 free + 2 reclaimed
    assert metrics.counters["retained_reclaimed_pages"] == 2 and staging.retained_owner == {}

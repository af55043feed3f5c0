"""The whole conformance suite against this backend, plus checks of its own options."""

from __future__ import annotations

from importlib import metadata
from typing import Any, ClassVar

import pytest
import torch
from hicache_storage_conformance import BackendConformance
from hicache_storage_example import ExampleBackend
from hicache_storage_example.conformance import ExampleHooks

from hicache_storage import ConfigError, HostKVPool, load_backend, make_config


class TestExampleConformance(BackendConformance):
    """Every contract rule; the suite skips only what the backend's capabilities do not declare."""

    backend = ExampleBackend  # once installed, the entry-point name "example" works as well
    config: ClassVar[dict[str, Any]] = {"max_pages": 0}
    hooks = ExampleHooks  # the test-only hooks (found by entry point when installed)
    profile = "strict"  # a skip for a missing hook fails: every promise made is checked


def test_entry_point_names_the_class() -> None:
    entry_points = [ep for ep in metadata.entry_points(group="hicache_storage.backends") if ep.name == "example"]
    if not entry_points:
        pytest.skip("hicache-storage-example is not installed (pip install -e .)")
    assert entry_points[0].load() is ExampleBackend


def test_max_pages_limits_writes() -> None:
    storage = load_backend(ExampleBackend, make_config(extra_config={"max_pages": 2}))
    storage.register_mem_pool_host(HostKVPool(num_pages=4, page_size=2, layer_num=1, head_num=1, head_dim=4))
    assert storage.batch_set_v1(["a", "b", "c"], torch.arange(6)) == [True, True, False]


def test_bad_option_is_named() -> None:
    with pytest.raises(ConfigError, match="max_pages"):
        load_backend(ExampleBackend, make_config(extra_config={"max_pages": -1}))

"""PipelineConfig: SGLang's host-memory rules and defaults."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pipeline_support import make_device_pool, sim_backend

import hicache_storage.pipeline as pipeline_package
from hicache_storage import ConfigError, load_backend, make_config
from hicache_storage.pipeline import BufferOnlyPipeline, PipelineConfig


def test_defaults_follow_the_mode() -> None:
    assert PipelineConfig().ratio == 1.2
    assert PipelineConfig(host_memory_mode="cache").ratio == 2.0
    assert PipelineConfig(host_to_device_ratio=3).ratio == 3.0
    assert PipelineConfig().host_pages_for(10) == 12
    assert PipelineConfig().backlog_cap_for(100) == 200
    assert PipelineConfig(backlog_cap_tokens=7).backlog_cap_for(100) == 7


def test_write_back_is_refused_in_buffer_only_naming_both_options() -> None:
    with pytest.raises(ConfigError) as info:
        PipelineConfig(write_policy="write_back")
    assert "write_policy" in str(info.value) and "host_memory_mode" in str(info.value)
    assert PipelineConfig(host_memory_mode="cache", write_policy="write_back").write_policy == "write_back"


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({"host_memory_mode": "disk"}, "host_memory_mode"),
        ({"write_policy": "sometimes"}, "write_policy"),
        ({"host_to_device_ratio": 0}, "host_to_device_ratio"),
        ({"storage_batch_pages": 0}, "storage_batch_pages"),
        ({"backlog_cap_tokens": -1}, "backlog_cap_tokens"),
        ({"pool_name": ""}, "pool_name"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_values_name_the_option(values: dict[str, object], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_dict(values)
    assert info.value.option == option


def test_pipeline_does_not_load_backends() -> None:
    """The pipeline takes a storage object: nothing under pipeline/ imports the backend registry."""
    for path in Path(pipeline_package.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(alias.name for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(name.split(".")[-1] == "registry" for name in names), f"{path.name}: {names}"


def test_buffer_only_requires_a_storage_object_built_by_the_caller() -> None:
    with pytest.raises(ConfigError) as info:
        BufferOnlyPipeline(PipelineConfig(), make_device_pool(), None)  # type: ignore[arg-type]
    assert "host_memory_mode" in str(info.value) and info.value.option == "storage_backend"
    config = PipelineConfig(storage_backend="sim", storage_options={"sim_op_latency_us": 0, "resilience": False})
    backend = load_backend(config.storage_backend or "", make_config(extra_config=config.storage_options))
    pipe = BufferOnlyPipeline(config, make_device_pool(num_pages=10), backend)
    assert pipe.storage is backend and type(pipe.storage.backend).__name__ == "SimBackend"
    assert pipe.storage.mem_pool_host is pipe.host_pool and pipe.host_pool.page_num == 12
    with pytest.raises(ConfigError, match="buffer_only"):
        BufferOnlyPipeline(PipelineConfig(host_memory_mode="cache"), make_device_pool(), sim_backend())

"""``check_config``: an extra_config checked as the backend will check it, with nothing opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_storage import BackendLoadError, ConfigError
from hicache_storage.preflight import check_config


def test_a_good_config_gives_options_capabilities_and_store_directory(tmp_path: Path) -> None:
    root = tmp_path / "not-yet"
    checked = check_config("file", {"path": str(root), "max_bytes": 1 << 30, "namespace": "t", "resilience": False})
    assert checked.options.max_bytes == 1 << 30
    assert checked.capabilities.may_evict and checked.capabilities.supports_list
    assert checked.store_directory() == root and not root.exists()
    read_only = check_config("file", {"path": str(tmp_path), "read_only": True})
    assert not read_only.capabilities.supports_delete  # what an instance with these options declares
    assert check_config("redis", {"url": "redis://127.0.0.1:1/0"}).store_directory() is None
    assert check_config("fsspec", {"url": f"file://{tmp_path}"}).store_directory() == tmp_path
    assert check_config("fsspec", {"url": "memory://x"}).store_directory() is None


@pytest.mark.parametrize(
    ("backend", "extra", "error", "message"),
    [
        ("nosuch", {}, BackendLoadError, "no backend named 'nosuch'"),
        (
            "file",
            {"path": "/x", "pathh": 1},
            ConfigError,
            r"extra_config\.pathh: unknown option \(did you mean path\?\)",
        ),
        ("file", {"path": "/x", "pinnned": True}, ConfigError, r"did you mean pinned\?"),
        ("file", {"path": "/x", "zzz": 1}, ConfigError, r"zzz: unknown option; valid options of file: fanout_levels"),
        ("file", {"path": "/x", "namespace": 3}, ConfigError, r"extra_config\.namespace: expected a str, got 3"),
        ("file", {"path": "/x", "max_bytes": -1}, ConfigError, r"extra_config\.max_bytes: must be a positive"),
        ("file", {"path": "/x", "resilience": 3}, ConfigError, r"extra_config\.resilience"),
        ("sim", {1: 2}, ConfigError, "option names must be strings"),
    ],
)
def test_bad_configs_name_the_option(
    backend: str, extra: dict[object, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check_config(backend, extra)  # type: ignore[arg-type]
    assert not Path("/x").exists()

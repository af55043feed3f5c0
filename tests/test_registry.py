"""Discovery and loading, tested with fake .dist-info folders on a private path."""

import sys
import textwrap
from pathlib import Path

import pytest

from hicache_storage import ApiVersionError, BackendLoadError, HiCacheStorage, make_config
from hicache_storage.registry import (
    available_backends,
    check_api_version,
    load_backend,
    register_backend,
    resolve_backend,
    unregister_backend,
)


def fake_dist(root: Path, dist: str, version: str, entry_points: dict[str, str]) -> None:
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[hicache_storage.backends]\n{lines}\n")


MODULE = textwrap.dedent(
    """
    from hicache_storage.plugin import Backend

    class Good(Backend):
        def write_pages(self, keys, pages, context): return [True] * len(keys)
        def read_pages(self, keys, pages, context): return [False] * len(keys)
        def pages_exist(self, keys, context): return [False] * len(keys)

    class Future(Good):
        api_version = "2.9"

    class NextMajor(Good):
        api_version = "3.0"

    class OldFace(Good):
        api_version = "1.1"

    NotABackend = object
    """
)

#: A plugin written against API 1: a subclass of the caller class, which no longer allows it.
OLD_SUBCLASS_MODULE = textwrap.dedent(
    """
    from hicache_storage import HiCacheStorage

    class Legacy(HiCacheStorage):
        def write_pages(self, keys, pages, context): return [True] * len(keys)
    """
)


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    (tmp_path / "fakeplugin_mod.py").write_text(MODULE)
    (tmp_path / "broken_mod.py").write_text("raise RuntimeError('plugin import exploded')\n")
    (tmp_path / "legacy_mod.py").write_text(OLD_SUBCLASS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_dist(tmp_path, "fake-good", "1.2.3", {"good": "fakeplugin_mod:Good", "future": "fakeplugin_mod:Future"})
    fake_dist(tmp_path, "fake-broken", "0.1", {"broken": "broken_mod:Thing", "notclass": "fakeplugin_mod:NotABackend"})
    fake_dist(tmp_path, "fake-dup-a", "1.0", {"dup": "fakeplugin_mod:Good"})
    fake_dist(tmp_path, "fake-dup-b", "2.0", {"dup": "fakeplugin_mod:Future", "major": "fakeplugin_mod:NextMajor"})
    fake_dist(tmp_path, "fake-legacy", "0.9", {"legacy": "legacy_mod:Legacy", "oldface": "fakeplugin_mod:OldFace"})
    yield [str(tmp_path)]
    for name in ("fakeplugin_mod", "broken_mod", "legacy_mod"):
        sys.modules.pop(name, None)


def test_listing_never_crashes_on_broken_plugins(plugin_path):
    infos = {(i.name, i.distribution): i for i in available_backends(path=plugin_path, load=True)}
    assert infos[("good", "fake-good")].ok
    assert infos[("good", "fake-good")].version == "1.2.3"
    assert "plugin import exploded" in infos[("broken", "fake-broken")].error
    assert "not a subclass" in infos[("notclass", "fake-broken")].error
    assert "claimed by" in infos[("dup", "fake-dup-a")].error
    assert "API 2.9" in infos[("future", "fake-good")].error


def test_load_by_entry_point(plugin_path):
    storage = load_backend("good", make_config(), path=plugin_path)
    assert isinstance(storage, HiCacheStorage) and type(storage.backend).__name__ == "Good"
    assert storage.resilience is not None
    assert load_backend("good", make_config(), path=plugin_path, resilience=False).resilience is None


def test_broken_plugin_error_names_entry_point_distribution_and_cause(plugin_path):
    with pytest.raises(BackendLoadError) as info:
        resolve_backend("broken", path=plugin_path)
    message = str(info.value)
    assert "'broken'" in message and "fake-broken 0.1" in message and "broken_mod:Thing" in message
    assert "pip install --force-reinstall fake-broken" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_duplicate_names_error_names_both(plugin_path):
    with pytest.raises(BackendLoadError, match=r"fake-dup-a 1\.0.*fake-dup-b 2\.0"):
        resolve_backend("dup", path=plugin_path)


@pytest.mark.parametrize(("name", "pattern"), [("future", "minor version <= 0"), ("major", "major version 2")])
def test_api_version_check(plugin_path, name, pattern):
    with pytest.raises(ApiVersionError, match=pattern):
        resolve_backend(name, path=plugin_path)


def test_api_version_rules():
    check_api_version("2.0")
    with pytest.raises(ApiVersionError, match=r"MAJOR\.MINOR"):
        check_api_version("one")
    with pytest.raises(ApiVersionError):
        check_api_version("2.1")


@pytest.mark.parametrize("name", ["legacy", "oldface"])
def test_a_plugin_of_the_old_face_gets_an_error_naming_the_new_base_class(plugin_path, name):
    with pytest.raises(BackendLoadError, match=r"hicache_storage\.plugin\.Backend.*Migrating from API 1"):
        resolve_backend(name, path=plugin_path)


def test_the_caller_class_cannot_be_subclassed_or_parametrized():
    with pytest.raises(TypeError, match=r"hicache_storage\.plugin\.Backend"):
        type("Sub", (HiCacheStorage,), {})
    with pytest.raises(TypeError, match=r"hicache_storage\.plugin\.Backend"):
        HiCacheStorage[int]  # type: ignore[misc]


def test_unknown_name_lists_known_and_hints_install(plugin_path):
    with pytest.raises(
        BackendLoadError, match=r"no backend named 'nosuch' \(known: .*good.*pip install hicache-storage-nosuch"
    ):
        resolve_backend("nosuch", path=plugin_path)


def test_module_class_path_and_registration_take_precedence(plugin_path):
    cls, info = resolve_backend("fakeplugin_mod:Good", path=plugin_path)
    assert cls.__name__ == "Good" and info.source == "import path"
    register_backend("good", "fakeplugin_mod:Future")
    try:
        with pytest.raises(ApiVersionError):
            resolve_backend("good", path=plugin_path)
        with pytest.raises(ValueError, match="already registered"):
            register_backend("good", cls)
    finally:
        unregister_backend("good")
    with pytest.raises(BackendLoadError, match="cannot import backend class"):
        resolve_backend("no_such_module_xyz:Thing", path=plugin_path)

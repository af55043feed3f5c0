"""``hicache-storage new-backend``: names, files and renames (fast); install + conformance (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from importlib import metadata
from pathlib import Path

import pytest
import torch

from hicache_storage import ConfigError, HiCacheStorage, HostKVPool, make_config
from hicache_storage.cli.scaffold import create_backend_package, find_template, validate_name


def _generate(tmp_path: Path, name: str = "my_store") -> Path:
    return create_backend_package(name, tmp_path)


def test_creates_renamed_package(tmp_path: Path) -> None:
    root = _generate(tmp_path)
    assert root == tmp_path.resolve() / "hicache-storage-my-store"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "conftest.py",
        "hicache_storage_my_store/__init__.py",
        "hicache_storage_my_store/backend.py",
        "hicache_storage_my_store/conformance.py",
        "hicache_storage_my_store/py.typed",
        "pyproject.toml",
        "tests/test_my_store_conformance.py",
    ]
    pyproject = (root / "pyproject.toml").read_text()
    assert 'name = "hicache-storage-my-store"' in pyproject
    assert 'my_store = "hicache_storage_my_store:MyStoreBackend"' in pyproject
    backend_text = (root / "hicache_storage_my_store/backend.py").read_text()
    assert "class MyStoreBackend(Backend[MyStoreOptions])" in backend_text
    test_text = (root / "tests/test_my_store_conformance.py").read_text()
    assert "class TestMyStoreConformance(BackendConformance)" in test_text
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".toml", ".md"):
            text = path.read_text()
            assert "xample" not in text, f"{path.relative_to(root)} still names the template"
            if path.suffix == ".py":
                compile(text, str(path), "exec")


def test_generated_backend_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suffix = uuid.uuid4().hex[:8]
    root = _generate(tmp_path, f"scaf_{suffix}")
    monkeypatch.syspath_prepend(str(root))
    module = __import__(f"hicache_storage_scaf_{suffix}")
    backend_cls = getattr(module, f"Scaf{suffix.capitalize()}Backend")
    with HiCacheStorage(backend_cls, make_config(extra_config={"resilience": False})) as backend:
        pool = HostKVPool(num_pages=2, page_size=2, layer_num=1, head_num=1, head_dim=8, dtype="float32")
        pool.kv_buffer.normal_()
        before = pool.get_data_page(0).clone()
        backend.register_mem_pool_host(pool)
        assert backend.batch_set_v1(["k"], torch.arange(2)) == [True]
        assert backend.batch_get_v1(["k"], torch.arange(2, 4)) == [True]
        assert torch.equal(pool.get_data_page(2), before)


@pytest.mark.parametrize("bad", ["", "My", "1abc", "a-b", "a b", "class", "example", "a__b", "trailing_", "x" * 41])
def test_invalid_names_are_rejected(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="name"):
        create_backend_package(bad, tmp_path)
    assert not any(tmp_path.iterdir())


def test_installed_name_is_rejected() -> None:
    installed = [ep.name for ep in metadata.entry_points(group="hicache_storage.backends")]
    if not installed:
        pytest.skip("no backend plugin installed")
    with pytest.raises(ConfigError, match="already installed"):
        validate_name(installed[0])


def test_existing_directory_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "hicache-storage-taken"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        create_backend_package("taken", tmp_path)
    assert (target / "keep.txt").read_text() == "mine"


def test_cli_new_backend(tmp_path: Path) -> None:
    from hicache_storage.cli.commands import run

    assert run(["new-backend", "cli_store", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "hicache-storage-cli-store" / "hicache_storage_cli_store" / "backend.py").is_file()
    assert run(["new-backend", "Bad-Name", "--dir", str(tmp_path)]) == 2


def test_template_is_found() -> None:
    assert (find_template() / "hicache_storage_example" / "backend.py").is_file()


@pytest.mark.slow
def test_generated_package_installs_and_passes_conformance(tmp_path: Path) -> None:
    """``pip install -e`` the new package (into a private site dir) and run the conformance CLI on it."""
    name = f"scaf_{uuid.uuid4().hex[:8]}"
    root = create_backend_package(name, tmp_path / "src")
    site_dir = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pip += ["--no-build-isolation", "--no-deps", "--target", str(site_dir), "-e", str(root)]
    subprocess.run(pip, check=True, capture_output=True, timeout=120)
    runner = tmp_path / "run_in_site.py"
    runner.write_text(
        "import site, sys\n"
        "site.addsitedir(sys.argv[1])\n"
        "if sys.argv[2] == 'pytest':\n"
        "    import pytest\n"
        "    sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', *sys.argv[3:]]))\n"
        "from hicache_storage.cli import main\n"
        "sys.exit(main(sys.argv[2:]))\n"
    )
    base = [sys.executable, str(runner), str(site_dir)]
    report = tmp_path / "report.json"
    done = subprocess.run(
        [*base, "conformance", name, "--json", str(report)],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert report.is_file()
    tests = subprocess.run(
        [*base, "pytest", str(root / "tests")], check=False, capture_output=True, text=True, timeout=180, cwd=root
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-4000:]
    assert "is not installed" not in tests.stdout, "the entry-point test was skipped: the install is not visible"


#: Helpers a storage author writes first, named like the caller API's methods; appended to the generated class.
AUTHOR_HELPERS = """

    # ---- the author's own helpers (names the caller API uses too; they must not collide with it)
    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self.records.get(key)

    def set(self, key: str, record: bytes) -> None:
        with self._lock:
            self.records[key] = record

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def delete(self, key: str) -> None:
        with self._lock:
            self.records.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self.records.clear()

    def close(self) -> None:
        self.clear()

    def stats(self) -> dict[str, int]:
        return {"records": len(self.records)}
"""


#: The ``hicache-storage`` command of this interpreter.
CLI = [sys.executable, "-c", "import sys; from hicache_storage.cli import main; sys.exit(main(sys.argv[1:]))"]


def test_a_backend_with_helpers_named_like_the_caller_api_passes_the_whole_suite(tmp_path: Path) -> None:
    """A new author's helpers ``get``/``set``/``exists``/``clear``/``close``/``delete``/``stats`` are their own:
    they replace nothing of the caller API, and the scaffolded backend using them passes every category."""
    name = f"helpers_{uuid.uuid4().hex[:8]}"
    root = create_backend_package(name, tmp_path / "src")
    package = f"hicache_storage_{name}"
    module = root / package / "backend.py"
    text = module.read_text()
    assert text.rstrip().endswith("del self.records[key]"), "the template's backend class no longer ends the file"
    read = "            with self._lock:\n                record = self.records.get(key)\n"
    exist = "        with self._lock:\n            return [key in self.records for key in keys]\n"
    assert read in text and exist in text, "the template's primitives changed: update this test"
    text = text.replace(read, "            record = self.get(key)\n")
    text = text.replace(exist, "        return [self.exists(key) for key in keys]\n")
    module.write_text(text.rstrip() + "\n" + AUTHOR_HELPERS)
    camel = "".join(part.capitalize() for part in name.split("_"))
    cls, hooks = f"{camel}Backend", f"{camel}Hooks"
    report = tmp_path / "report.json"
    args = ["conformance", f"{package}.backend:{cls}", "--hooks", f"{package}.conformance:{hooks}"]
    done = subprocess.run(
        [*CLI, *args, "--profile", "strict", "--json", str(report)],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads(report.read_text())["summary"]
    assert summary["failed"] == 0 and summary["passed"] >= 80, summary  # the rest: capabilities not declared

"""``hicache-storage new-backend NAME``: a new backend plugin package copied from the plugin template.

The template is ``examples/plugin-template`` (the ``example`` backend). Copying renames the
distribution (``hicache-storage-NAME``), the import package (``hicache_storage_NAME``), the classes
(``NameBackend``, ``NameOptions``), the entry point and the test file. The result installs with
``pip install -e`` and passes ``hicache-storage conformance NAME`` unedited.
"""

from __future__ import annotations

import keyword
import re
import shutil
from importlib import metadata
from pathlib import Path

from ..errors import ConfigError

__all__ = ["TEMPLATE_NAME", "create_backend_package", "find_template", "validate_name"]

#: Backend name used inside the template.
TEMPLATE_NAME = "example"

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_SKIP = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid new backend name, else raise :class:`ConfigError`."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None or name.endswith("_") or "__" in name:
        raise ConfigError(
            "name",
            f"{name!r} is not a valid backend name: use 1-40 lowercase letters, digits and single "
            "underscores, starting with a letter (e.g. 'mystore' or 'my_store')",
        )
    if keyword.iskeyword(name):
        raise ConfigError("name", f"{name!r} is a Python keyword; choose another backend name")
    if name == TEMPLATE_NAME:
        raise ConfigError("name", f"{name!r} is the template's own name; choose another backend name")
    for ep in metadata.entry_points(group="hicache_storage.backends"):
        if ep.name == name:
            raise ConfigError("name", f"a backend named {name!r} is already installed ({ep.value}); choose another")
    return name


def find_template() -> Path:
    """Directory of the plugin template (shipped package data first, then the source tree)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_plugin_template", here.parents[1] / "examples" / "plugin-template"):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    raise FileNotFoundError(
        "the plugin template (examples/plugin-template) is not available in this installation; "
        "install hicache-storage from its source tree (pip install -e .)"
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _rename(text: str, name: str) -> str:
    old = TEMPLATE_NAME
    camel_old, camel_new = _camel(old), _camel(name)
    text = text.replace(f"hicache-storage-{old}", f"hicache-storage-{name.replace('_', '-')}")
    text = text.replace(f"hicache_storage_{old}", f"hicache_storage_{name}")
    text = text.replace(f"test_{old}_conformance", f"test_{name}_conformance")
    text = re.sub(rf"{camel_old}(?=[A-Z])", camel_new, text)
    text = re.sub(rf'^{old} = "', f'{name} = "', text, flags=re.MULTILINE)
    for quote in ('"', "`"):
        text = text.replace(f"{quote}{old}{quote}", f"{quote}{name}{quote}")
    return re.sub(rf"(conformance|--hicache-backend) {old}\b", rf"\1 {name}", text)


def create_backend_package(name: str, directory: Path) -> Path:
    """Create ``directory/hicache-storage-NAME`` from the template and return its path.

    Raises :class:`ConfigError` for an invalid or already installed name, or when the target
    directory exists and is not empty.
    """
    validate_name(name)
    template = find_template()
    target = Path(directory).expanduser().resolve() / f"hicache-storage-{name.replace('_', '-')}"
    if target.exists() and any(target.iterdir()):
        raise ConfigError("--dir", f"{target} already exists and is not empty")
    for source in sorted(template.rglob("*")):
        relative = source.relative_to(template)
        if any(part in _SKIP or part.endswith(".egg-info") for part in relative.parts):
            continue
        destination = target / Path(*(_rename(part, name) for part in relative.parts))
        if source.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix in (".py", ".toml", ".md", ".txt", ".cfg"):
            destination.write_text(_rename(source.read_text(encoding="utf-8"), name), encoding="utf-8")
        else:
            shutil.copyfile(source, destination)
    return target

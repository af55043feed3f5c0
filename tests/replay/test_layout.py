"""The replay's imports: the pipeline through its package only, and no import cycle inside replay/."""

from __future__ import annotations

import ast
from pathlib import Path

import hicache_storage.replay as replay_package

REPLAY = Path(replay_package.__file__).parent


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every ``from ... import`` in ``path``."""
    tree = ast.parse(path.read_text())
    return [(node.level, node.module or "") for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]


def test_replay_uses_the_pipeline_package_not_its_modules() -> None:
    for path in REPLAY.glob("*.py"):
        for level, module in _imports(path):
            if level == 2 and module.startswith("pipeline"):
                assert module == "pipeline", f"{path.name} imports hicache_storage.{module}"


def test_replay_modules_import_no_cycle() -> None:
    graph = {
        path.stem: {module.split(".")[0] for level, module in _imports(path) if level == 1 and module}
        for path in REPLAY.glob("*.py")
    }

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == target or (nxt not in seen and reaches(nxt, target, seen | {nxt})):
                return True
        return False

    cycles = [name for name in graph if name != "__init__" and reaches(name, name, {name})]
    assert cycles == []

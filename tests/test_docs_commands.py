"""Every command the documentation shows must work.

- ``hicache-storage ...`` / ``hicache-storage-conformance ...`` in ```bash blocks: the sub-command
  and every flag exist in the CLI's parsers.
- ``python -m sglang.launch_server ...``: the ``--hicache-storage-backend-extra-config`` JSON is
  valid, names the adapter, and its options are accepted by the backend (when installed).
- ```python blocks preceded by ``<!-- runnable -->`` run (the blocks of one page, in order, as one
  script); ``<!-- same-as: PATH -->`` blocks are identical to that file of the repository.
- Nothing a user reads or runs names a path outside the repository, and the documented replay
  command runs with the repository's files alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hicache_storage.cli.commands import build_parser
from hicache_storage.errors import BackendLoadError
from hicache_storage.integrations.sglang import LOADER_KEYS
from hicache_storage.preflight import check_config
from hicache_storage.registry import resolve_backend

ROOT = Path(__file__).resolve().parent.parent
#: Backends documented by this project (a missing one is skipped, an unknown one fails).
OUR_BACKENDS = ("file", "slab", "sim", "redis", "s3", "fsspec", "mooncake", "example")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*([\w-]+)(?::\s*(.*?))?\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int
    language: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    files = sorted((ROOT / "docs").rglob("*.md"))
    files += [p for p in (ROOT / "README.md",) if p.is_file()]
    files += sorted((ROOT / "examples").glob("*/README.md"))
    return files


def blocks_of(path: Path) -> list[Block]:
    blocks: list[Block] = []
    markers: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = _MARKER.match(line)
        if marker:
            markers[marker.group(1)] = marker.group(2) or ""
            index += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            indent, language = fence.group(1), fence.group(2)
            body: list[str] = []
            index += 1
            while index < len(lines) and lines[index].strip() != "```":
                body.append(lines[index][len(indent) :])
                index += 1
            blocks.append(Block(path, index - len(body), language, "\n".join(body) + "\n", markers))
        elif line.strip():
            markers = {}
        if fence:
            markers = {}
        index += 1
    return blocks


ALL_BLOCKS = [block for path in doc_files() for block in blocks_of(path)]


def shell_commands(block: Block) -> list[list[str]]:
    """Simple commands of a shell block (continuations joined, split at ``&&``, ``;``, ``|``)."""
    text = re.sub(r"\\\n\s*", " ", block.text)
    commands: list[list[str]] = []
    for line in text.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split("#", 1)[0].split()
        current: list[str] = []
        for token in tokens:
            if token in ("&&", "||", ";", "|"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    cleaned = []
    for command in commands:
        while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", command[0]):
            command = command[1:]
        if command:
            cleaned.append(command)
    return cleaned


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _conformance_parser() -> argparse.ArgumentParser | None:
    try:
        from hicache_storage_conformance.cli import build_parser as conformance_parser
    except ImportError:
        return None
    parser: argparse.ArgumentParser = conformance_parser()
    return parser


def _flags(tokens: list[str]) -> list[str]:
    flags = []
    for token in tokens:
        token = token.strip("[]|")
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token):
            flags.append(token.split("=", 1)[0])
    return flags


def check_cli_command(command: list[str]) -> None:
    program, args = command[0], [t for t in command[1:] if t.strip("[]|") and t != "..."]
    if program == "hicache-storage-conformance":
        parser = _conformance_parser()
        if parser is None:
            pytest.skip("hicache-storage-conformance is not installed")
        unknown = [f for f in _flags(args) if f not in _options(parser)]
        assert not unknown, f"hicache-storage-conformance has no option {unknown}"
        return
    top = build_parser()
    subcommand = next((t for t in args if not t.startswith("-")), None)
    if subcommand is None:
        unknown = [f for f in _flags(args) if f not in _options(top)]
        assert not unknown, f"hicache-storage has no option {unknown}"
        return
    commands = _subparsers(top)
    assert subcommand in commands, f"hicache-storage has no sub-command {subcommand!r} (has {sorted(commands)})"
    rest = args[args.index(subcommand) + 1 :]
    parser = commands[subcommand]
    if subcommand == "conformance":
        conformance = _conformance_parser()
        if conformance is None:
            pytest.skip("hicache-storage-conformance is not installed")
        parser = conformance
    unknown = [f for f in _flags(rest) if f not in _options(parser)]
    assert not unknown, f"'hicache-storage {subcommand}' has no option {unknown}"


def check_sglang_launch(command: list[str]) -> None:
    assert "--hicache-storage-backend" in command, "an SGLang launch without --hicache-storage-backend"
    assert command[command.index("--hicache-storage-backend") + 1] == "dynamic"
    extra = json.loads(command[command.index("--hicache-storage-backend-extra-config") + 1])
    for key, value in LOADER_KEYS.items():
        assert extra.get(key) == value, f"extra config: {key} should be {value!r}, not {extra.get(key)!r}"
    name = extra["backend"]
    try:
        resolve_backend(name)
    except BackendLoadError:
        if name in OUR_BACKENDS or (ROOT / "backends" / name).is_dir():
            pytest.skip(f"backend {name!r} is not installed here")
        raise
    check_config(name, extra)  # the backend's options and the SDK's, as sglang-args checks them


SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.language in ("bash", "sh", "shell", "console")]
CLI_COMMANDS = [
    pytest.param(command, id=f"{block.where()}:{' '.join(command)[:60]}")
    for block in SHELL_BLOCKS
    for command in shell_commands(block)
    if command[0] in ("hicache-storage", "hicache-storage-conformance")
]
SGLANG_LAUNCHES = [
    pytest.param(command, id=block.where())
    for block in SHELL_BLOCKS
    for command in shell_commands(block)
    if command[:3] == ["python", "-m", "sglang.launch_server"]
]


def test_docs_show_commands() -> None:
    assert len(CLI_COMMANDS) >= 10 and SGLANG_LAUNCHES, "the documentation lost its command examples"


@pytest.mark.parametrize("command", CLI_COMMANDS)
def test_cli_command_exists(command: list[str]) -> None:
    check_cli_command(command)


@pytest.mark.parametrize("command", SGLANG_LAUNCHES)
def test_sglang_launch_config_is_valid(command: list[str]) -> None:
    check_sglang_launch(command)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where()) for b in ALL_BLOCKS if "same-as" in b.markers])
def test_block_matches_repository_file(block: Block) -> None:
    source = ROOT / block.markers["same-as"]
    assert block.text == source.read_text(encoding="utf-8"), f"{block.where()} differs from {source}"


RUNNABLE_PAGES = sorted({b.path for b in ALL_BLOCKS if "runnable" in b.markers and b.language == "python"})


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in RUNNABLE_PAGES])
def test_runnable_python_blocks(page: Path, tmp_path: Path) -> None:
    script = "\n".join(b.text for b in ALL_BLOCKS if b.path == page and "runnable" in b.markers)
    (tmp_path / "page.py").write_text(script, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "page.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{page.relative_to(ROOT)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_parser_finds_blocks_and_markers(tmp_path: Path) -> None:
    text = "<!-- runnable -->\n```python\nprint(1)\n```\n\nprose\n```bash\nhicache-storage backends \\\n  --json\n```\n"
    page = tmp_path / "probe.md"
    page.write_text(text, encoding="utf-8")
    blocks = blocks_of(page)
    assert [(b.language, b.markers) for b in blocks] == [("python", {"runnable": ""}), ("bash", {})]
    assert shell_commands(blocks[1]) == [["hicache-storage", "backends", "--json"]]


#: What a user reads or runs: none of it may need a file outside the repository.
USER_FACING = ["docs", "README.md", "scripts", "benchmarks/*.py", "benchmarks/*.sh", "examples"]


def test_nothing_a_user_runs_points_outside_the_repository() -> None:
    files = [p for pattern in USER_FACING for p in sorted(ROOT.glob(pattern))]
    files = [f for path in files for f in ([path] if path.is_file() else sorted(path.rglob("*"))) if f.is_file()]
    outside = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if path.suffix in (".md", ".py", ".sh", ".toml", ".yml", ".json", "")
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        if "../shared" in line or "/work/shared" in line
    ]
    assert not outside, f"paths outside the repository: {outside}"


def test_the_documented_replay_command_runs_with_the_repository_files(tmp_path: Path) -> None:
    """The replay example of docs/replay.md, run as written from a directory holding only the files of
    the repository it names (the sample trace), as in a fresh clone."""
    replays = [
        command
        for block in SHELL_BLOCKS
        if block.path.name == "replay.md"
        for command in shell_commands(block)
        if command[:2] == ["hicache-storage", "replay"]
    ]
    assert len(replays) == 1, replays
    command = replays[0]
    trace = Path(command[2])
    assert not trace.is_absolute() and (ROOT / trace).is_file(), f"{trace} is not a file of the repository"
    (tmp_path / trace).parent.mkdir(parents=True)
    (tmp_path / trace).write_bytes((ROOT / trace).read_bytes())
    cli = Path(sys.executable).with_name("hicache-storage")
    done = subprocess.run(
        [str(cli), *command[1:]], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "oracle (infinite cache)" in done.stdout
    assert json.loads((tmp_path / "out.json").read_text())["requests"] == int(command[command.index("--requests") + 1])
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["replay-hit-rate.png", "replay-ttft-cdf.png"]


def test_the_sample_trace_ships_with_its_licence_and_source() -> None:
    folder = ROOT / "benchmarks" / "traces"
    assert "Apache License" in (folder / "LICENSE").read_text(encoding="utf-8")
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "github.com/kvcache-ai/Mooncake" in readme and "FAST25-release/traces" in readme
    lines = (folder / "conversation_trace_sample.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1500 and all(set(json.loads(line)) >= {"timestamp", "hash_ids"} for line in lines[:5])


def test_every_backend_has_a_launch_line_and_every_list_of_backends_names_slab() -> None:
    launched = {
        json.loads(command[command.index("--hicache-storage-backend-extra-config") + 1])["backend"]
        for block in SHELL_BLOCKS
        if block.path.name == "sglang.md"
        for command in shell_commands(block)
        if command[:3] == ["python", "-m", "sglang.launch_server"]
    }
    shipped = {path.name for path in (ROOT / "backends").iterdir() if (path / "pyproject.toml").is_file()}
    assert shipped <= launched, f"docs/sglang.md has no launch line for {sorted(shipped - launched)}"
    others = ("file", "sim", "redis", "s3", "fsspec", "mooncake")
    lists = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in doc_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if all(re.search(rf"\b{name}\b", line.lower()) for name in others) and "slab" not in line.lower()
    ]
    assert not lists, f"lines listing every backend but slab: {lists}"
    tables = {"capabilities.md": "| [`slab`](backends/slab.md) |", "reliability.md": "| event | file | slab |"}
    for page, row in tables.items():
        assert row in (ROOT / "docs" / page).read_text(encoding="utf-8"), f"docs/{page} has no slab in its table"

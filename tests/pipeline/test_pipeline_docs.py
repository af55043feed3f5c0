"""The examples in docs/pipeline.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"


def test_docs_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2  # KV only, then with sidecars
    for number, block in enumerate(blocks):
        exec(compile(block, f"{DOC}#{number}", "exec"), {"__name__": "docs_example"})

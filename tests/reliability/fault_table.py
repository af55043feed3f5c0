"""Render the rows saved by a run of the deadline tests as the markdown table of docs/reliability.md.

HICACHE_FAULT_TABLE=benchmarks/results/reliability-faults.json .venv/bin/python -m pytest tests/reliability
.venv/bin/python tests/reliability/fault_table.py benchmarks/results/reliability-faults.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rel_support import fault_table


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(fault_table(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

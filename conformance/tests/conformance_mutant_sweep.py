"""Run the suite on every mutant in one process and report which tests failed on each.

``python conformance_mutant_sweep.py [--expected-only] [--markdown]``: prints JSON (mutant → failed test ids),
or with ``--markdown`` the table that docs/conformance.md carries. ``--expected-only`` runs only
the category each mutant is expected to fail (fast; what the test suite uses).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_mutants import HOOKLESS, MUTANTS
from hicache_storage_conformance.cli import main


def sweep(expected_only: bool) -> dict[str, dict[str, object]]:
    """Mutant name → {rule, expected, rc, failed: [category/test]}."""
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (rule, category) in MUTANTS.items():
            report = Path(tmp) / f"{name}.json"
            argv = [f"conformance_mutants:{name}", "--json", str(report), "--max-examples", "20"]
            if name not in HOOKLESS:
                argv += ["--hooks", "conformance_mutants:MutantHooks"]
            if expected_only:
                argv += ["--only", category]
            with contextlib.redirect_stdout(io.StringIO()):
                rc = main(argv)
            data = json.loads(report.read_text())
            failed = [f"{r['category']}/{r['test']}" for r in data["results"] if r["outcome"] == "FAIL"]
            results[name] = {"rule": rule, "expected": category, "rc": rc, "failed": failed}
    return results


def markdown(results: dict[str, dict[str, object]]) -> str:
    """The mutant table for the docs."""
    lines = ["| mutant | rule it breaks | failing tests |", "|---|---|---|"]
    for name, row in results.items():
        failed = row["failed"]
        assert isinstance(failed, list)
        shown = ", ".join(f"`{t}`" for t in failed[:6]) + (f" (+{len(failed) - 6} more)" if len(failed) > 6 else "")
        lines.append(f"| `{name}` | {row['rule']} | {shown or '**none**'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--expected-only", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    options = parser.parse_args()
    outcome = sweep(options.expected_only)
    print(markdown(outcome) if options.markdown else json.dumps(outcome))

#!/usr/bin/env bash
# Opt-in tests against the released SGLang: runs the adapter inside SGLang's own storage backend
# factory and SGLang's HiCacheFile through the conformance suite, and runs benchmarks/bench_vs_sglang.py
# on a few pages (pytest -m sglang tests/integrations tests/benchmarks).
#
# scripts/sglang-install.sh puts sglang==0.5.23 (no dependencies) into .venv/sglang-0.5.23 first; only
# this tier has it on PYTHONPATH. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
unset PYTHONDONTWRITEBYTECODE  # as scripts/test.sh: compiled modules cached, not compiled per process
OVERLAY="$(bash scripts/sglang-install.sh)"
PY="${HICACHE_VENV:-$ROOT/.venv}/bin/python"

echo "[sglang-test] pytest tests/integrations tests/benchmarks -m sglang" >&2
# The packages are installed: a module that fails to import is a set-up bug, so nothing may skip for it.
HICACHE_SGLANG_REQUIRED=1 PYTHONPATH="$OVERLAY${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -m sglang tests/integrations tests/benchmarks "$@"

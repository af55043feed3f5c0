#!/usr/bin/env bash
# Set everything up, start the test servers on 127.0.0.1 (Redis, Redis Cluster, S3, Mooncake master),
# run ruff, mypy, the documentation build and the whole test suite, then stop the servers.
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# This checkout's own environment, whatever HICACHE_VENV a shell that ran another checkout left set.
VENV="$ROOT/.venv"
export HICACHE_VENV="$VENV"
bash scripts/setup.sh
export PATH="$VENV/bin:$PATH"

if [ -d scripts/services ]; then
  bash scripts/services/install.sh
  # shellcheck source=/dev/null
  source scripts/services/env.sh
  trap 'bash "$ROOT/scripts/services/stop.sh" >/dev/null 2>&1 || true' EXIT
  bash scripts/services/start.sh
fi

echo "[test] ruff" >&2
ruff check .
echo "[test] import layers (lint-imports)" >&2
lint-imports --no-cache
echo "[test] mypy (strict: the core, every plugin, the conformance suite)" >&2
mypy
if [ -f mkdocs.yml ]; then
  echo "[test] mkdocs build --strict" >&2
  mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
fi
echo "[test] pytest" >&2
test_dirs=(tests)
for dir in backends/*/tests conformance/tests examples/plugin-template/tests; do
  [ -d "$dir" ] && test_dirs+=("$dir")
done
python -m pytest -q "${test_dirs[@]}" "$@"
echo "[test] SGLang integration (released sglang package, no GPU)" >&2
bash scripts/sglang-test.sh

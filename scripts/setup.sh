#!/usr/bin/env bash
# Creates .venv in the repository and installs everything (torch==2.13.0 first, so no other torch is
# pulled; then tools, the core, every backend plugin and the conformance suite, editable).
# Re-running is fast: nothing is reinstalled unless a pyproject or requirements file changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HICACHE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
cd "$ROOT"

stamp_inputs() {
  cat scripts/setup.sh scripts/requirements-dev.txt scripts/services/requirements-services.txt 2>/dev/null
  find . -name pyproject.toml -not -path './.venv/*' -not -path './examples/plugin-template/template/*' | sort | xargs cat
}
want="$(stamp_inputs | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.setup-stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

echo "[setup] creating environment in $VENV" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# --no-compile: Python compiles what it imports, once; compiling every module of torch up front costs
# about 20 s of CPU.
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-compile)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -r scripts/requirements-dev.txt
if [ -f scripts/services/requirements-services.txt ]; then
  "${PIP[@]}" -r scripts/services/requirements-services.txt
fi
editables=(-e ".[plot]")
for dir in backends/*/ conformance/ examples/plugin-template/; do
  [ -f "$dir/pyproject.toml" ] && editables+=(-e "$dir")
done
"${PIP[@]}" --no-build-isolation "${editables[@]}"
echo "$want" > "$VENV/.setup-stamp"
echo "[setup] done" >&2

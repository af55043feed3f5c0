#!/usr/bin/env bash
# Set everything up, start the test servers on 127.0.0.1 (Redis, Redis Cluster, S3, Mooncake master),
# run ruff, mypy, the documentation build and the whole test suite, then stop the servers.
# pytest runs in HICACHE_TEST_WORKERS (default 4) pytest-xdist workers, each on test servers of its own
# (hicache_storage/testing/workers.py); HICACHE_TEST_WORKERS=0 runs it in one process.
# The SGLang tier (scripts/sglang-test.sh) runs alongside, on test servers of its own.
# Prints how long each stage took, and pytest's 15 slowest tests. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Python's caches of compiled modules, even where the environment turns them off: without them
# every process that imports torch compiles it again (about 1.7 s of CPU here), and the suite
# starts hundreds of Python processes.
unset PYTHONDONTWRITEBYTECODE
# This checkout's own environment, whatever HICACHE_VENV a shell that ran another checkout left set.
VENV="$ROOT/.venv"
export HICACHE_VENV="$VENV"
WORKERS="${HICACHE_TEST_WORKERS:-4}"

STAGES=()
STAGE_NAME=""
STAGE_BEGIN=0
now() { date +%s.%N; }
stage() { # stage NAME: the previous stage ends, NAME begins
  stage_end
  STAGE_NAME=$1
  STAGE_BEGIN=$(now)
  echo "[test] $1" >&2
}
stage_end() {
  if [ -n "$STAGE_NAME" ]; then
    STAGES+=("$(awk -v a="$STAGE_BEGIN" -v b="$(now)" -v n="$STAGE_NAME" 'BEGIN { printf "%-44s %7.1f s", n, b - a }')")
    STAGE_NAME=""
  fi
}
report_stages() {
  stage_end
  local total line
  total=$(awk -v a="$TEST_BEGIN" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  echo "[test] stage timings (total ${total} s):" >&2
  for line in "${STAGES[@]}"; do echo "[test]   $line" >&2; done
}
# Servers that an xdist worker left running (it stops its own at the end; this covers a crash).
stop_worker_servers() {
  local file
  for file in "${HICACHE_SERVICES_DIR:-$ROOT/.services}"/xdist/*/worker.env; do
    [ -f "$file" ] || continue
    (set +u; . "$file"; bash "$ROOT/scripts/services/stop.sh") >/dev/null 2>&1 || true
  done
}
on_exit() {
  local rc=$?
  [ -n "$TIER_PID" ] && { kill -- "-$TIER_PID" 2>/dev/null || true; }
  if [ -d scripts/services ]; then
    stop_worker_servers
    bash "$ROOT/scripts/services/stop.sh" >/dev/null 2>&1 || true
  fi
  report_stages
  exit $rc
}
TEST_BEGIN=$(now)
TIER_PID=""
trap on_exit EXIT

stage "setup (.venv)"
bash scripts/setup.sh
export PATH="$VENV/bin:$PATH"

if [ -d scripts/services ]; then
  stage "servers (install, start)"
  bash scripts/services/install.sh
  # shellcheck source=/dev/null
  source scripts/services/env.sh
  bash scripts/services/start.sh
fi

# The SGLang tier runs alongside the stages below, on a set of test servers of its own (the next
# worker number), in a process group of its own; its output is printed after pytest's.
TIER_LOG="$VENV/sglang-tier.log"
TIER_SET=$((WORKERS > 0 ? WORKERS : 1))
setsid bash -c 'begin=$(date +%s.%N)
  rc=0
  HICACHE_TEST_SERVER_SET='"$TIER_SET"' bash scripts/sglang-test.sh || rc=$?
  awk -v a="$begin" -v b="$(date +%s.%N)" "BEGIN { printf \"%.1f\", b - a }" > "$0.seconds"
  exit $rc' "$TIER_LOG" >"$TIER_LOG" 2>&1 &
TIER_PID=$!

stage "ruff"
ruff check .
stage "import layers (lint-imports)"
lint-imports --no-cache
stage "mypy (strict: the core, every plugin, the conformance suite)"
mypy
if [ -f mkdocs.yml ]; then
  stage "docs (mkdocs build --strict)"
  site="$(mktemp -d)"
  mkdocs build --strict --quiet --site-dir "$site"
  rm -rf "$site"
fi
stage "pytest ($WORKERS workers)"
test_dirs=(tests)
for dir in backends/*/tests conformance/tests examples/plugin-template/tests; do
  [ -d "$dir" ] && test_dirs+=("$dir")
done
parallel=()
[ "$WORKERS" -gt 0 ] && parallel=(-n "$WORKERS" --dist loadgroup)
python -m pytest -q "${parallel[@]}" --durations=15 "${test_dirs[@]}" "$@"
stage "SGLang tier: waiting for it after pytest"
tier_rc=0
wait "$TIER_PID" || tier_rc=$?
TIER_PID=""
stage_end
cat "$TIER_LOG" >&2
STAGES+=("$(printf '%-44s %7.1f s' "SGLang tier (released sglang, no GPU; alongside)" "$(cat "$TIER_LOG.seconds" 2>/dev/null || echo 0)")")
[ "$tier_rc" -eq 0 ] || { echo "[test] SGLang tier failed (exit $tier_rc)" >&2; exit "$tier_rc"; }

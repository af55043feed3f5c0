#!/usr/bin/env bash
# Build an sdist and a wheel of every distribution of this repository into dist/ (or $1): the core,
# the conformance suite, the plugin template and every backend plugin under backends/, then check
# their metadata with `twine check`. Install them from there with
#   pip install --find-links dist hicache-storage hicache-storage-file ...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
cd "$ROOT"
bash scripts/setup.sh
PY="${HICACHE_VENV:-$ROOT/.venv}/bin/python"
projects=(. conformance)
for dir in backends/*/ examples/plugin-template/; do
  [ -f "$dir/pyproject.toml" ] && projects+=("${dir%/}")
done
build_one() { # build_one PROJECT: its sdist and wheel into $OUT
  local project=$1 work
  echo "[build-dists] $project" >&2
  # A copy without build outputs, so an editable install's egg-info never leaks into the sdist.
  work="$(mktemp -d)"
  tar -C "$project" --exclude=.venv --exclude=dist --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.services --exclude=site --exclude=backends --exclude=tests -cf - . | tar -C "$work" -xf -
  "$PY" -m build --no-isolation --sdist --wheel --outdir "$OUT" "$work" >/dev/null
  rm -rf "$work"
}
# A few builds at a time: each is mostly a fresh interpreter importing setuptools, waiting on files.
pids=()
for project in "${projects[@]}"; do
  build_one "$project" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "${BUILD_JOBS:-3}" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do
  wait "$pid"
done
"$PY" -m twine check --strict "$OUT"/*
echo "[build-dists] $(ls "$OUT" | wc -l) files in $OUT" >&2

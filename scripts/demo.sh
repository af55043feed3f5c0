#!/usr/bin/env bash
# Set everything up, then run the main job on the embedded defaults (file backend in a temporary
# directory and the in-memory sim backend): pages through the host pool into storage and back,
# every byte verified. Extra arguments go to `hicache-storage demo`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/hicache-storage" demo "$@"

#!/usr/bin/env bash
# Start SGLang with a hicache-storage backend as its L3 storage.
#
#   examples/sglang/launch.sh MODEL BACKEND [OPTIONS_JSON] [more SGLang arguments...]
#   examples/sglang/launch.sh Qwen/Qwen3-8B file '{"path": "/mnt/nvme/hicache"}' --tp 2
#
# DRY_RUN=1 prints the command instead of running it. PYTHON selects the interpreter (default python).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
MODEL="$1"
BACKEND="$2"
OPTIONS="${3:-{\}}"
shift $(( $# < 3 ? $# : 3 ))
PY="${PYTHON:-python}"
EXTRA="$("$PY" - "$BACKEND" "$OPTIONS" <<'PYEOF'
import json
import sys

from hicache_storage.integrations.sglang import extra_config_for

options = json.loads(sys.argv[2])
if not isinstance(options, dict):
    sys.exit("OPTIONS_JSON must be a JSON object")
print(json.dumps(extra_config_for(sys.argv[1], **options)))
PYEOF
)"
CMD=("$PY" -m sglang.launch_server --model-path "$MODEL" --enable-hierarchical-cache
  --hicache-storage-backend dynamic --hicache-storage-backend-extra-config "$EXTRA" "$@")
if [ "${DRY_RUN:-0}" = "1" ]; then
  printf '%q ' "${CMD[@]}"
  echo
else
  exec "${CMD[@]}"
fi

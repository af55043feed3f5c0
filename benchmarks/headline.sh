#!/usr/bin/env bash
# Headline experiment: none vs cache (host ratio 2.0) vs buffer_only (host ratio 1.2) on the
# Mooncake conversation trace, with the sim backend (5 GB/s, 100 us per call) and the file backend.
# Every knob is an environment variable; run from anywhere: bash benchmarks/headline.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRACE="${TRACE:-$ROOT/../shared/traces/conversation_trace.jsonl}"
REQUESTS="${REQUESTS:-1500}"             # first K requests of the trace (the full trace has 12,031)
DEVICE_TOKENS="${DEVICE_TOKENS:-1048576}" # device prefix cache: 1M tokens
PAGE_SIZE="${PAGE_SIZE:-64}"
BYTES_PER_TOKEN="${BYTES_PER_TOKEN:-32}"  # small pages keep the run fast; bytes are real and verified
PREFILL="${PREFILL:-20000}"               # prefill tokens/s for the TTFT estimate
OUT="${OUT:-$ROOT/benchmarks/results}"
IMG="${IMG:-$ROOT/docs/img}"
CLI="${CLI:-$ROOT/.venv/bin/hicache-storage}"
[ -x "$CLI" ] || CLI="hicache-storage"

mkdir -p "$OUT" "$IMG"
FILE_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/hicache-headline.XXXXXX")"
trap 'rm -rf "$FILE_ROOT"' EXIT

common=(--mode none,cache,buffer_only --requests "$REQUESTS" --device-tokens "$DEVICE_TOKENS"
        --page-size "$PAGE_SIZE" --bytes-per-token "$BYTES_PER_TOKEN" --prefill-tokens-per-s "$PREFILL")

echo "== sim backend (5 GB/s, 100 us per call; modelled I/O time)"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend sim \
    --config '{"sim_write_gbps": 5.0, "sim_op_latency_us": 100.0}' "${common[@]}" \
    --json "$OUT/headline-sim.json" --plot "$IMG" --plot-prefix headline-sim

echo "== file backend ($FILE_ROOT; measured I/O time)"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend file \
    --config "{\"path\": \"$FILE_ROOT\"}" "${common[@]}" \
    --json "$OUT/headline-file.json" --plot "$IMG" --plot-prefix headline-file

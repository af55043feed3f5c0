#!/usr/bin/env bash
# Headline experiment: none vs cache (host ratio 2.0) vs buffer_only (host ratio 1.2) on the
# Mooncake conversation trace, with the sim backend (5 GB/s, 100 us per call) and the file backend,
# then the same for a hybrid model (Mamba/GDN state beside KV) on the sim backend, charging
# model-sized I/O. Every knob is an environment variable; run from anywhere: bash benchmarks/headline.sh
# (ONLY=hybrid runs the hybrid part alone).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The sample shipped in benchmarks/traces (the first 1,500 requests of the Mooncake conversation
# trace); the full trace (12,031 requests) is in kvcache-ai/Mooncake, FAST25-release/traces.
TRACE="${TRACE:-$ROOT/benchmarks/traces/conversation_trace_sample.jsonl}"
REQUESTS="${REQUESTS:-1500}"             # first K requests of the trace
FILE_REQUESTS="${FILE_REQUESTS:-600}"     # the file backend does real file I/O per page: fewer requests
DEVICE_TOKENS="${DEVICE_TOKENS:-1048576}" # device prefix cache: 1M tokens
PAGE_SIZE="${PAGE_SIZE:-64}"
BYTES_PER_TOKEN="${BYTES_PER_TOKEN:-32}"  # small pages keep the run fast; bytes are real and verified
PREFILL="${PREFILL:-20000}"               # prefill tokens/s for the TTFT estimate
MODEL_BYTES_PER_TOKEN="${MODEL_BYTES_PER_TOKEN:-131072}"  # Llama-3-8B KV: 32 layers x 8 heads x 128 x 2 x bf16
OUT="${OUT:-$ROOT/benchmarks/results}"
IMG="${IMG:-$ROOT/docs/img}"
HYBRID_MODEL="${HYBRID_MODEL:-mamba-hybrid}"        # a preset or a JSON geometry file
HYBRID_REQUESTS="${HYBRID_REQUESTS:-1000}"          # each request writes a model state every 512 tokens
HYBRID_BYTES_PER_TOKEN="${HYBRID_BYTES_PER_TOKEN:-8}"  # real bytes per KV token; states scale alike (25 KB)
MODEL_GBPS="${MODEL_GBPS:-5}"                       # storage bandwidth for model-sized bytes
ONLY="${ONLY:-all}"
CLI="${CLI:-$ROOT/.venv/bin/hicache-storage}"
[ -x "$CLI" ] || CLI="hicache-storage"

mkdir -p "$OUT" "$IMG"
FILE_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/hicache-headline.XXXXXX")"
trap 'rm -rf "$FILE_ROOT"' EXIT

common=(--mode none,cache,buffer_only --device-tokens "$DEVICE_TOKENS"
        --page-size "$PAGE_SIZE" --bytes-per-token "$BYTES_PER_TOKEN" --prefill-tokens-per-s "$PREFILL")
# Bandwidth that makes the small pages cost what model-sized pages cost at 5 GB/s.
SCALED_GBPS="$(awk "BEGIN { printf \"%.9f\", 5.0 * $BYTES_PER_TOKEN / $MODEL_BYTES_PER_TOKEN }")"

if [ "$ONLY" != "hybrid" ]; then
echo "== sim backend (5 GB/s, 100 us per call; modelled I/O time)"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend sim \
    --config '{"sim_write_gbps": 5.0, "sim_op_latency_us": 100.0}' "${common[@]}" --requests "$REQUESTS" \
    --json "$OUT/headline-sim.json" --plot "$IMG" --plot-prefix headline-sim

echo "== sim backend, I/O time of $MODEL_BYTES_PER_TOKEN-byte tokens at 5 GB/s ($SCALED_GBPS GB/s on the small pages)"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend sim \
    --config "{\"sim_write_gbps\": $SCALED_GBPS, \"sim_op_latency_us\": 100.0}" "${common[@]}" \
    --requests "$REQUESTS" --json "$OUT/headline-sim-model-io.json" --plot "$IMG" --plot-prefix headline-sim-model-io

echo "== file backend ($FILE_ROOT; measured I/O time)"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend file \
    --config "{\"path\": \"$FILE_ROOT\"}" "${common[@]}" --requests "$FILE_REQUESTS" \
    --json "$OUT/headline-file.json" --plot "$IMG" --plot-prefix headline-file
fi

hybrid=(--device-tokens "$DEVICE_TOKENS" --page-size "$PAGE_SIZE" --bytes-per-token "$HYBRID_BYTES_PER_TOKEN"
        --prefill-tokens-per-s "$PREFILL" --model "$HYBRID_MODEL" --requests "$HYBRID_REQUESTS")
echo "== hybrid model $HYBRID_MODEL, sim backend, model-sized I/O at $MODEL_GBPS GB/s and 100 us per call"
COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --backend sim --config '{"sim_op_latency_us": 100.0}' \
    --model-io-gbps "$MODEL_GBPS" --mode none,cache,buffer_only "${hybrid[@]}" \
    --json "$OUT/headline-hybrid.json" --plot "$IMG" --plot-prefix headline-hybrid

for every in 0 2048; do  # where states are kept decides the ceiling: the oracle alone (device only, fast)
    echo "== hybrid model $HYBRID_MODEL, states every $every tokens (0: at the end of each computed run only)"
    COLUMNS="${COLUMNS:-120}" "$CLI" replay "$TRACE" --mode none --checkpoint-tokens "$every" "${hybrid[@]}" \
        --json "$OUT/headline-hybrid-checkpoint-$every.json"
done

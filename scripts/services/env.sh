# shellcheck shell=bash
# Connection settings of the local test services (redis, redis-cluster, s3, mooncake).
#
#   source scripts/services/env.sh      # from bash: exports the HICACHE_TEST_* variables
#   eval "$(scripts/services/env.sh)"   # same, from any POSIX shell
#   scripts/services/env.sh --json      # prints them as JSON (for non-shell consumers)
#
# Every value can be overridden by exporting it before this file is sourced; the start/stop
# scripts source this same file, so tests and servers always agree on ports.
# Ports are fixed but unusual, all on 127.0.0.1 (never 0.0.0.0).
# shellcheck disable=SC2163  # word splitting of port/name lists is intended

_hc_env_dir="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
: "${HICACHE_REPO_ROOT:=$(cd "$_hc_env_dir/../.." && pwd)}"
: "${HICACHE_VENV:=$HICACHE_REPO_ROOT/.venv}"
: "${HICACHE_SERVICES_DIR:=$HICACHE_REPO_ROOT/.services}"
: "${HICACHE_TEST_HOST:=127.0.0.1}"

# redis: one node, no persistence
: "${HICACHE_TEST_REDIS_PORT:=16379}"
: "${HICACHE_TEST_REDIS_URL:=redis://$HICACHE_TEST_HOST:$HICACHE_TEST_REDIS_PORT/0}"

# redis-cluster: 3 masters, no replicas (cluster bus ports are these + 10000)
: "${HICACHE_TEST_REDIS_CLUSTER_PORTS:=17001 17002 17003}"
if [ -z "${HICACHE_TEST_REDIS_CLUSTER_NODES:-}" ]; then
    HICACHE_TEST_REDIS_CLUSTER_NODES=""
    for _hc_p in $HICACHE_TEST_REDIS_CLUSTER_PORTS; do
        HICACHE_TEST_REDIS_CLUSTER_NODES="${HICACHE_TEST_REDIS_CLUSTER_NODES:+$HICACHE_TEST_REDIS_CLUSTER_NODES,}$HICACHE_TEST_HOST:$_hc_p"
    done
    unset _hc_p
fi
: "${HICACHE_TEST_REDIS_CLUSTER_URL:=redis://$HICACHE_TEST_HOST:${HICACHE_TEST_REDIS_CLUSTER_PORTS%% *}/0}"

# s3: moto standalone server (any access key/secret is accepted)
: "${HICACHE_TEST_S3_PORT:=15000}"
: "${HICACHE_TEST_S3_ENDPOINT:=http://$HICACHE_TEST_HOST:$HICACHE_TEST_S3_PORT}"
: "${HICACHE_TEST_S3_REGION:=us-east-1}"
: "${HICACHE_TEST_S3_ACCESS_KEY_ID:=testing}"
: "${HICACHE_TEST_S3_SECRET_ACCESS_KEY:=testing}"

# mooncake: mooncake_master (RPC) + its embedded HTTP metadata server + its metrics port
: "${HICACHE_TEST_MOONCAKE_RPC_PORT:=15551}"
: "${HICACHE_TEST_MOONCAKE_HTTP_PORT:=15552}"
: "${HICACHE_TEST_MOONCAKE_METRICS_PORT:=15553}"
: "${HICACHE_TEST_MOONCAKE_MASTER:=$HICACHE_TEST_HOST:$HICACHE_TEST_MOONCAKE_RPC_PORT}"
: "${HICACHE_TEST_MOONCAKE_METADATA:=http://$HICACHE_TEST_HOST:$HICACHE_TEST_MOONCAKE_HTTP_PORT/metadata}"
# A long-lived mooncake_client ("segment holder") that mounts this much memory into the store, so
# objects outlive the test clients that wrote them (test clients may then use
# global_segment_size=0). Set to 0 to run no segment holder. Its service port:
: "${HICACHE_TEST_MOONCAKE_SEGMENT_SIZE:=256MB}"
: "${HICACHE_TEST_MOONCAKE_CLIENT_PORT:=15554}"
# Seconds the master keeps a silent client's segment (mooncake_master --client_ttl; its default is
# 10). Stopping the holder waits until its segment is gone, so short keeps the fault tests short.
: "${HICACHE_TEST_MOONCAKE_CLIENT_TTL:=4}"
# Every Mooncake transfer engine (test clients, the segment holder) binds an RPC port it picks at
# random from MC_MIN_RPC_PORT..MC_MAX_RPC_PORT; by default that range covers the fixed ports above,
# so a client could take a port a test server is about to (re)start on. Keep it below them.
: "${MC_MIN_RPC_PORT:=12000}"
: "${MC_MAX_RPC_PORT:=14999}"

_hc_env_vars="HICACHE_REPO_ROOT HICACHE_VENV HICACHE_SERVICES_DIR HICACHE_TEST_HOST
HICACHE_TEST_REDIS_PORT HICACHE_TEST_REDIS_URL
HICACHE_TEST_REDIS_CLUSTER_PORTS HICACHE_TEST_REDIS_CLUSTER_NODES HICACHE_TEST_REDIS_CLUSTER_URL
HICACHE_TEST_S3_PORT HICACHE_TEST_S3_ENDPOINT HICACHE_TEST_S3_REGION
HICACHE_TEST_S3_ACCESS_KEY_ID HICACHE_TEST_S3_SECRET_ACCESS_KEY
HICACHE_TEST_MOONCAKE_RPC_PORT HICACHE_TEST_MOONCAKE_HTTP_PORT HICACHE_TEST_MOONCAKE_METRICS_PORT
HICACHE_TEST_MOONCAKE_MASTER HICACHE_TEST_MOONCAKE_METADATA
HICACHE_TEST_MOONCAKE_SEGMENT_SIZE HICACHE_TEST_MOONCAKE_CLIENT_PORT HICACHE_TEST_MOONCAKE_CLIENT_TTL
MC_MIN_RPC_PORT MC_MAX_RPC_PORT"
# shellcheck disable=SC2086
export $_hc_env_vars

# Executed rather than sourced: print the settings.
if [ "${BASH_SOURCE[0]:-}" = "$0" ]; then
    if [ "${1:-}" = "--json" ]; then
        _hc_first=1
        printf '{'
        for _hc_v in $_hc_env_vars; do
            [ $_hc_first = 1 ] || printf ','
            _hc_first=0
            printf '\n  "%s": "%s"' "$_hc_v" "${!_hc_v}"
        done
        printf '\n}\n'
    else
        for _hc_v in $_hc_env_vars; do
            printf "export %s='%s'\n" "$_hc_v" "${!_hc_v}"
        done
    fi
fi
unset _hc_env_dir _hc_env_vars _hc_v _hc_first

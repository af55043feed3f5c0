#!/usr/bin/env bash
# Control the local test servers (all on 127.0.0.1; ports in scripts/services/env.sh).
#
#   scripts/services/ctl.sh start   [NAME...]   start (idempotent; waits until ready)
#   scripts/services/ctl.sh stop    [NAME...]   SIGTERM, wait, SIGKILL if needed; remove pidfile
#   scripts/services/ctl.sh kill    [NAME...]   SIGKILL at once (crash simulation for fault tests)
#   scripts/services/ctl.sh restart [NAME...]   stop + start
#   scripts/services/ctl.sh status  [NAME...]   one line each; exit 0 only if all are ready
#
# NAME: redis | redis-cluster | s3 | mooncake | all (no NAME = all), or a single unit:
#   redis-cluster-1 .. redis-cluster-3   one cluster node (restart it and it rejoins the cluster)
#   mooncake-master                      mooncake_master only (clients reconnect after a restart)
#   mooncake-segment                     the long-lived mooncake_client that provides memory
# start.sh / stop.sh are `ctl.sh start` / `ctl.sh stop`.
# State (logs, pidfiles, cluster configs): $HICACHE_SERVICES_DIR (default <repo>/.services).
# HICACHE_SERVICES_TIMEOUT (default 30 s): how long each server may take to become ready.
# HICACHE_SERVICES_REUSE=1: if a port is already held by a healthy server this script did not
#   start, use it instead of failing (stop/kill then leave it alone).
# HICACHE_TEST_MOONCAKE_MASTER_ARGS: extra mooncake_master flags, e.g. --default_kv_lease_ttl=500.
# shellcheck disable=SC2086,SC2046,SC2016  # word splitting of port/name lists is intended
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_lib.sh"

H=$HICACHE_TEST_HOST

# ---------------------------------------------------------------------------------------------
# per-unit facts

unit_dir() {
    case "$1" in
        redis) echo "$HICACHE_SERVICES_DIR/redis" ;;
        redis-cluster-*) echo "$HICACHE_SERVICES_DIR/redis-cluster/$(hc_cluster_port "${1#redis-cluster-}")" ;;
        s3) echo "$HICACHE_SERVICES_DIR/s3" ;;
        mooncake-master) echo "$HICACHE_SERVICES_DIR/mooncake/master" ;;
        mooncake-segment) echo "$HICACHE_SERVICES_DIR/mooncake/segment" ;;
    esac
}

unit_port() {
    case "$1" in
        redis) echo "$HICACHE_TEST_REDIS_PORT" ;;
        redis-cluster-*) hc_cluster_port "${1#redis-cluster-}" ;;
        s3) echo "$HICACHE_TEST_S3_PORT" ;;
        mooncake-master) echo "$HICACHE_TEST_MOONCAKE_RPC_PORT" ;;
        mooncake-segment) echo "$HICACHE_TEST_MOONCAKE_CLIENT_PORT" ;;
    esac
}

# Pattern that the unit's /proc/PID/cmdline must contain (guards against pid reuse).
unit_pattern() {
    case "$1" in
        redis | redis-cluster-*) echo "redis-server.*:$(unit_port "$1")" ;;
        s3) echo "moto_server.*$HICACHE_TEST_S3_PORT" ;;
        mooncake-master) echo "mooncake_master.*$HICACHE_TEST_MOONCAKE_RPC_PORT" ;;
        mooncake-segment) echo "mooncake_client.*$HICACHE_TEST_MOONCAKE_CLIENT_PORT" ;;
    esac
}

# Binaries each unit needs (install.sh runs when one is missing).
unit_bins() {
    case "$1" in
        redis | redis-cluster-*) echo "redis-server redis-cli" ;;
        s3) echo "moto_server" ;;
        mooncake-master) echo "mooncake_master" ;;
        mooncake-segment) echo "mooncake_client" ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# readiness probes (each returns 0 when ready)

# (No `probe | grep -q` pipes here: under pipefail an early-exiting grep can fail the probe.)
redis_ping() {
    local r
    r=$(timeout 3 redis-cli -h "$H" -p "$1" ping 2>/dev/null) || return 1
    [ "$r" = PONG ]
}

http_get() { # http_get PORT PATH -> response on stdout
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" "$2" "$0" >&3 && cat <&3' \
        "$H" "$1" "$2" 2>/dev/null
}

s3_ready() {
    local r
    r=$(http_get "$HICACHE_TEST_S3_PORT" /) || true
    [[ "$r" =~ ^HTTP/[0-9.]+\ 200 ]]
}

mooncake_master_ready() {
    local r
    hc_port_open "$HICACHE_TEST_MOONCAKE_RPC_PORT" && hc_port_open "$HICACHE_TEST_MOONCAKE_HTTP_PORT" || return 1
    r=$(http_get "$HICACHE_TEST_MOONCAKE_METRICS_PORT" /health) || true
    [[ "$r" == *'"service_ready":true'* ]]
}

# The master reports memory from some mounted segment ("Mem Storage: used / capacity", capacity > 0).
mooncake_segment_ready() {
    local r re='Mem Storage: [^|/]*/ ([^|]*)\|'
    hc_port_open "$HICACHE_TEST_MOONCAKE_CLIENT_PORT" || return 1
    r=$(http_get "$HICACHE_TEST_MOONCAKE_METRICS_PORT" /metrics/summary) || true
    [[ "$r" =~ $re ]] && [[ "${BASH_REMATCH[1]}" != "0 B"* ]]
}

# How many segments the master has mounted (a stopped holder's stays until --client_ttl expires).
mooncake_segment_count() {
    local r
    r=$(http_get "$HICACHE_TEST_MOONCAKE_METRICS_PORT" /metrics) || return 1
    grep -c '^segment_total_capacity_bytes{' <<<"$r" || true
}

# After the holder stops: wait until the master has dropped its segment, so no later write is
# placed in memory nobody serves (bounded by the master's --client_ttl plus a margin).
mooncake_wait_unmounted() {
    local i n
    mooncake_master_ready || return 0
    for i in $(seq 1 $((HICACHE_TEST_MOONCAKE_CLIENT_TTL * 10 + 50))); do
        n=$(mooncake_segment_count) || return 0
        [ "$n" = 0 ] && return 0
        sleep 0.1
    done
    hc_log "mooncake-segment: the master still lists $n segment(s) after the holder stopped"
}

unit_ready() {
    case "$1" in
        redis | redis-cluster-*) redis_ping "$(unit_port "$1")" ;;
        s3) s3_ready ;;
        mooncake-master) mooncake_master_ready ;;
        mooncake-segment) mooncake_segment_ready ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# start / stop of one unit

ensure_installed() {
    local b
    for b in $(unit_bins "$1"); do
        if ! hc_bin "$b" >/dev/null; then
            hc_log "$b not found; running install.sh"
            "$_HC_LIB_DIR/install.sh" || hc_die "install.sh failed"
            hc_bin "$b" >/dev/null || hc_die "$b still not found after install.sh (venv: $HICACHE_VENV)"
        fi
    done
}

# Returns 0 if the unit is ours and running (after waiting for readiness), 1 if not running,
# and handles "port held by a stranger".
already_running() {
    local unit=$1 dir pid port
    dir=$(unit_dir "$unit")
    port=$(unit_port "$unit")
    if pid=$(hc_live_pid "$dir/pid" "$(unit_pattern "$unit")"); then
        hc_wait "$unit" "$dir/log" "$dir/pid" "$(unit_pattern "$unit")" unit_ready "$unit"
        return 0
    fi
    rm -f "$dir/pid"
    if hc_port_open "$port"; then
        if [ "${HICACHE_SERVICES_REUSE:-0}" = 1 ] && unit_ready "$unit"; then
            hc_log "$unit: reusing the server already on $H:$port (not started by this script)"
            touch "$dir/foreign"
            return 0
        fi
        hc_port_free_or_die "$port" "$unit"
    fi
    rm -f "$dir/foreign"
    return 1
}

start_unit() {
    local unit=$1 dir port
    dir=$(unit_dir "$unit")
    port=$(unit_port "$unit")
    mkdir -p "$dir"
    if already_running "$unit"; then
        return 0
    fi
    ensure_installed "$unit"
    if [ -f "$dir/log" ]; then mv -f "$dir/log" "$dir/log.prev"; fi # keep the last run's log (e.g. a crash)
    case "$unit" in
        redis)
            hc_spawn "$dir/pid" "$dir/log" "$(hc_bin redis-server)" \
                --bind "$H" --port "$port" --dir "$dir" --daemonize no \
                --save '' --appendonly no --protected-mode no --loglevel warning
            ;;
        redis-cluster-*)
            hc_spawn "$dir/pid" "$dir/log" "$(hc_bin redis-server)" \
                --bind "$H" --port "$port" --dir "$dir" --daemonize no \
                --save '' --appendonly no --protected-mode no --loglevel warning \
                --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
                --cluster-node-timeout 2000 --cluster-require-full-coverage no
            ;;
        s3)
            hc_spawn "$dir/pid" "$dir/log" "$(hc_bin moto_server)" -H "$H" -p "$port"
            ;;
        mooncake-master)
            # shellcheck disable=SC2086
            (cd "$dir" && hc_spawn "$dir/pid" "$dir/log" "$(hc_bin mooncake_master)" \
                --rpc_address="$H" --rpc_port="$HICACHE_TEST_MOONCAKE_RPC_PORT" \
                --enable_http_metadata_server=true --http_metadata_server_host="$H" \
                --http_metadata_server_port="$HICACHE_TEST_MOONCAKE_HTTP_PORT" \
                --metrics_host="$H" --metrics_port="$HICACHE_TEST_MOONCAKE_METRICS_PORT" \
                --rpc_thread_num=4 --enable_metric_reporting=false --logtostderr=true \
                --client_ttl="$HICACHE_TEST_MOONCAKE_CLIENT_TTL" \
                ${HICACHE_TEST_MOONCAKE_MASTER_ARGS:-})
            ;;
        mooncake-segment)
            mooncake_master_ready || hc_die "mooncake-segment needs mooncake-master running (ctl.sh start mooncake)"
            (cd "$dir" && MC_TCP_BIND_ADDRESS="$H" MC_STORE_CLIENT_SETUP_RETRIES=3 hc_spawn "$dir/pid" "$dir/log" \
                "$(hc_bin mooncake_client)" --host="$H" --port="$port" \
                --metadata_server="$HICACHE_TEST_MOONCAKE_METADATA" \
                --master_server_address="$HICACHE_TEST_MOONCAKE_MASTER" \
                --global_segment_size="$HICACHE_TEST_MOONCAKE_SEGMENT_SIZE" --protocol=tcp \
                --logtostderr=true)
            ;;
    esac
    hc_wait "$unit" "$dir/log" "$dir/pid" "$(unit_pattern "$unit")" unit_ready "$unit"
    hc_log "$unit: ready on $H:$port (pid $(cat "$dir/pid"))"
}

stop_unit() { # stop_unit UNIT [KILL]
    local unit=$1 hard=${2:-} dir pid
    dir=$(unit_dir "$unit")
    if [ -f "$dir/foreign" ]; then
        rm -f "$dir/foreign"
        return 0
    fi
    if ! pid=$(hc_live_pid "$dir/pid" "$(unit_pattern "$unit")"); then
        rm -f "$dir/pid"
        return 0
    fi
    if [ -n "$hard" ]; then
        kill -KILL "$pid" 2>/dev/null || true
        local i
        for i in $(seq 1 50); do
            hc_pid_is "$pid" "$(unit_pattern "$unit")" || break
            sleep 0.1
        done
        rm -f "$dir/pid"
        hc_log "$unit: killed (pid $pid)"
    else
        hc_kill "$dir/pid" "$(unit_pattern "$unit")" "$unit"
        hc_log "$unit: stopped"
    fi
    if [ "$unit" = mooncake-segment ]; then mooncake_wait_unmounted; fi
}

status_unit() {
    local unit=$1 dir pid
    dir=$(unit_dir "$unit")
    if pid=$(hc_live_pid "$dir/pid" "$(unit_pattern "$unit")"); then
        if unit_ready "$unit"; then
            echo "$unit: running (pid $pid, $H:$(unit_port "$unit"))"
            return 0
        fi
        echo "$unit: running but not ready (pid $pid, $H:$(unit_port "$unit"), log $dir/log)"
        return 1
    fi
    if [ -f "$dir/foreign" ] && unit_ready "$unit"; then
        echo "$unit: reused (not ours, $H:$(unit_port "$unit"))"
        return 0
    fi
    echo "$unit: stopped"
    return 1
}

# ---------------------------------------------------------------------------------------------
# redis cluster: form it once all nodes are up

cluster_ports() { echo "$HICACHE_TEST_REDIS_CLUSTER_PORTS"; }

# All nodes agree: state ok, all slots assigned, every node known, none flagged fail.
cluster_healthy() {
    local p n want
    want=$(set -- $(cluster_ports); echo $#)
    for p in $(cluster_ports); do
        info=$(timeout 3 redis-cli -h "$H" -p "$p" cluster info 2>/dev/null) || return 1
        grep -q '^cluster_state:ok' <<<"$info" || return 1
        grep -q '^cluster_slots_assigned:16384' <<<"$info" || return 1
        grep -q "^cluster_known_nodes:$want" <<<"$info" || return 1
        n=$(timeout 3 redis-cli -h "$H" -p "$p" cluster nodes 2>/dev/null) || return 1
        if grep -Eq 'fail|handshake|noaddr|disconnected' <<<"$n"; then
            return 1
        fi
    done
    return 0
}

cluster_formed() { # the first node knows all nodes and all slots (i.e. 'cluster create' happened)
    local p want info
    want=$(set -- $(cluster_ports); echo $#)
    p=$(set -- $(cluster_ports); echo "$1")
    info=$(timeout 3 redis-cli -h "$H" -p "$p" cluster info 2>/dev/null) || return 1
    grep -q '^cluster_slots_assigned:16384' <<<"$info" && grep -q "^cluster_known_nodes:$want" <<<"$info"
}

cluster_create() {
    local p addrs="" log="$HICACHE_SERVICES_DIR/redis-cluster/create.log"
    for p in $(cluster_ports); do addrs="$addrs $H:$p"; done
    # shellcheck disable=SC2086
    if ! timeout 60 redis-cli --cluster create $addrs --cluster-replicas 0 --cluster-yes >"$log" 2>&1; then
        hc_fail_log "redis-cli --cluster create failed" "$log"
    fi
}

wait_cluster() {
    local deadline=$((SECONDS + HICACHE_SERVICES_TIMEOUT))
    until cluster_healthy; do
        if [ $SECONDS -ge $deadline ]; then
            return 1
        fi
        sleep 0.2
    done
}

# Start the cluster units in $@ (a subset of redis-cluster-N): a fresh cluster if no node was
# running, otherwise the missing nodes rejoin with their nodes.conf.
start_cluster_units() {
    local u any_live=0 i count dir
    count=$(set -- $(cluster_ports); echo $#)
    for i in $(seq 1 "$count"); do
        dir=$(unit_dir "redis-cluster-$i")
        if hc_live_pid "$dir/pid" "$(unit_pattern "redis-cluster-$i")" >/dev/null || [ -f "$dir/foreign" ]; then
            any_live=1
        fi
    done
    if [ $any_live = 0 ]; then
        # Fresh cluster: forget the old topology and start every node, not just those asked for.
        for i in $(seq 1 "$count"); do rm -f "$(unit_dir "redis-cluster-$i")/nodes.conf"; done
        set -- $(for i in $(seq 1 "$count"); do echo "redis-cluster-$i"; done)
    fi
    for u in "$@"; do start_unit "$u"; done
    # Only a full set of nodes can be a healthy cluster.
    for i in $(seq 1 "$count"); do
        status_unit "redis-cluster-$i" >/dev/null || return 0
    done
    if ! cluster_formed; then
        if [ $any_live = 1 ]; then
            hc_log "redis-cluster: topology lost; recreating the cluster"
            for i in $(seq 1 "$count"); do stop_unit "redis-cluster-$i" >/dev/null 2>&1; done
            start_cluster_units
            return
        fi
        cluster_create
    fi
    if ! wait_cluster; then
        local p
        p=$(set -- $(cluster_ports); echo "$1")
        timeout 3 redis-cli -h "$H" -p "$p" cluster info >&2 || true
        timeout 3 redis-cli -h "$H" -p "$p" cluster nodes >&2 || true
        hc_die "redis-cluster: not healthy after ${HICACHE_SERVICES_TIMEOUT}s (cluster info/nodes above; logs under $HICACHE_SERVICES_DIR/redis-cluster)"
    fi
    hc_log "redis-cluster: cluster_state:ok ($HICACHE_TEST_REDIS_CLUSTER_NODES)"
}

# ---------------------------------------------------------------------------------------------

usage() { awk 'NR == 1 { next } /^# shellcheck/ || !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }

[ $# -ge 1 ] || usage
action=$1
shift
case "$action" in
    start | stop | kill | restart | status) ;;
    -h | --help | help) usage ;;
    *) hc_die "unknown action '$action' (start|stop|kill|restart|status)" ;;
esac

hc_expand_names "$@" >/dev/null # validates the names (exits on an unknown one)
mapfile -t units < <(hc_expand_names "$@")
[ ${#units[@]} -gt 0 ] || hc_die "no services selected"

do_start() {
    local u cluster=()
    for u in "$@"; do
        case "$u" in
            redis-cluster-*) cluster+=("$u") ;;
            *)
                # the cluster units come before s3/mooncake in hc_expand_names order
                if [ ${#cluster[@]} -gt 0 ]; then start_cluster_units "${cluster[@]}"; cluster=(); fi
                if [ "$u" = mooncake-segment ] && [ "$HICACHE_TEST_MOONCAKE_SEGMENT_SIZE" = 0 ]; then continue; fi
                start_unit "$u"
                ;;
        esac
    done
    if [ ${#cluster[@]} -gt 0 ]; then start_cluster_units "${cluster[@]}"; fi
}

do_stop() { # reverse order, so the segment holder leaves before the master
    local i
    for ((i = $# ; i >= 1 ; i--)); do
        stop_unit "${!i}" "${HARD:-}"
    done
}

case "$action" in
    start) hc_lock; do_start "${units[@]}" ;;
    stop) hc_lock; do_stop "${units[@]}" ;;
    kill) hc_lock; HARD=1 do_stop "${units[@]}" ;;
    restart) hc_lock; do_stop "${units[@]}"; do_start "${units[@]}" ;;
    status)
        rc=0
        for u in "${units[@]}"; do status_unit "$u" || rc=3; done
        exit $rc
        ;;
esac

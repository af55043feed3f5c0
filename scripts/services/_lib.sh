# shellcheck shell=bash
# Shared helpers for install.sh / start.sh / stop.sh / ctl.sh. Sourced, not executed.
# shellcheck disable=SC2086,SC2016,SC2015  # word splitting of port/name lists is intended

_HC_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
. "$_HC_LIB_DIR/env.sh"

HC_ALL_SERVICES="redis redis-cluster s3 mooncake"
: "${HICACHE_SERVICES_TIMEOUT:=30}"   # seconds each server gets to become ready

hc_log() { printf '[services] %s\n' "$*" >&2; }
hc_die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

# Path of an executable. The pip-installed servers come only from $HICACHE_VENV (a same-named
# command elsewhere on $PATH, e.g. a pyenv shim, may be another version or broken); the rest
# (redis-server, redis-cli) from $PATH.
hc_bin() {
    case "$1" in
        moto_server | mooncake_master | mooncake_client)
            [ -x "$HICACHE_VENV/bin/$1" ] || return 1
            printf '%s\n' "$HICACHE_VENV/bin/$1"
            ;;
        *) command -v "$1" 2>/dev/null || return 1 ;;
    esac
}

# True when something accepts TCP connections on 127.0.0.1:$1.
hc_port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$HICACHE_TEST_HOST/$1" 2>/dev/null
}

# True when pid $1 is a zombie (or gone).
hc_zombie() {
    local st
    st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    st=${st##*) }
    [ "${st%% *}" = Z ]
}

# True when pid $1 is alive and its command line matches the regex $2.
hc_pid_is() {
    local pid=$1 pattern=$2 cmd _
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ -r "/proc/$pid/cmdline" ] || return 0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=""
        if [ -n "$cmd" ]; then
            [[ "$cmd" =~ $pattern ]]
            return
        fi
        # Empty: a zombie, or a process in the middle of execve(). Only the latter deserves a retry.
        hc_zombie "$pid" && return 1
        sleep 0.05
    done
    return 1
}

# True when the pid recorded in pidfile $1 is alive and not a zombie.
hc_pid_running() {
    local pid
    pid=$(head -n1 "$1" 2>/dev/null | tr -dc 0-9)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && ! hc_zombie "$pid"
}

# Pid recorded in pidfile $1 if that process is alive and matches pattern $2.
hc_live_pid() {
    local pidfile=$1 pattern=$2 pid
    [ -s "$pidfile" ] || return 1
    pid=$(head -n1 "$pidfile" 2>/dev/null | tr -dc 0-9)
    hc_pid_is "$pid" "$pattern" || return 1
    printf '%s\n' "$pid"
}

# hc_spawn PIDFILE LOGFILE CMD...: start CMD detached (own session, no inherited stdio,
# so callers that capture our output never wait for the daemon) and record its pid.
hc_spawn() {
    local pidfile=$1 logfile=$2
    shift 2
    rm -f "$pidfile"
    # The inner shell writes its own pid and then execs CMD, so the pid is CMD's.
    # The daemon keeps no other inherited descriptor: not the state-dir lock (fd 9, see hc_lock),
    # and no pipe of whoever ran us, or that caller would wait for the daemon's exit.
    setsid bash -c '
        for fd in /proc/$$/fd/*; do
            fd=${fd##*/}
            if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null; fi
        done
        echo $$ >"$0"
        exec "$@"' "$pidfile" "$@" </dev/null >>"$logfile" 2>&1 9>&- &
    local i
    for i in $(seq 1 50); do
        [ -s "$pidfile" ] && return 0
        sleep 0.1
    done
    hc_die "could not spawn: $*"
}

# hc_wait DESCRIPTION LOGFILE PIDFILE PATTERN CHECK...: poll CHECK until it succeeds or the
# timeout passes; fail (with the log's tail) if the process dies or time runs out.
hc_wait() {
    local what=$1 logfile=$2 pidfile=$3 pattern=$4
    shift 4
    local deadline=$((SECONDS + HICACHE_SERVICES_TIMEOUT))
    while :; do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        # Only a dead process fails the wait: right after hc_spawn the pid may still show the
        # launching shell (before its exec), which would not match the pattern yet.
        if [ -n "$pidfile" ] && ! hc_pid_running "$pidfile"; then
            hc_fail_log "$what exited before becoming ready" "$logfile"
        fi
        if [ $SECONDS -ge $deadline ]; then
            hc_fail_log "$what not ready after ${HICACHE_SERVICES_TIMEOUT}s" "$logfile"
        fi
        sleep 0.2
    done
}

hc_fail_log() {
    printf '[services] ERROR: %s\n' "$1" >&2
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        printf '[services] --- last lines of %s ---\n' "$2" >&2
        tail -n 30 "$2" >&2
        printf '[services] ---\n' >&2
    fi
    exit 1
}

# hc_kill PIDFILE PATTERN NAME: TERM, wait up to 10 s, then KILL; remove the pidfile.
hc_kill() {
    local pidfile=$1 pattern=$2 name=$3 pid i
    if ! pid=$(hc_live_pid "$pidfile" "$pattern"); then
        rm -f "$pidfile"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        hc_pid_is "$pid" "$pattern" || break
        sleep 0.1
    done
    if hc_pid_is "$pid" "$pattern"; then
        hc_log "$name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do
            hc_pid_is "$pid" "$pattern" || break
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
}

# Refuse to start on a port someone else holds.
hc_port_free_or_die() {
    local port=$1 name=$2
    if hc_port_open "$port"; then
        hc_die "$name: port $HICACHE_TEST_HOST:$port is already in use by a process this script did not start (pidfile missing under $HICACHE_SERVICES_DIR). Stop it, or choose another port via the HICACHE_TEST_* variables (see scripts/services/env.sh)."
    fi
}

# Run the rest of the script under an exclusive lock on the state dir, so parallel callers
# (e.g. pytest-xdist workers) do not race.
hc_lock() {
    mkdir -p "$HICACHE_SERVICES_DIR"
    exec 9>"$HICACHE_SERVICES_DIR/.lock"
    if ! flock -w 300 9; then
        hc_die "timed out waiting for the lock $HICACHE_SERVICES_DIR/.lock"
    fi
}

# Expand service names (no names = all) into units, one per line, in start order.
# Units: redis, redis-cluster-1..N, s3, mooncake-master, mooncake-segment.
hc_expand_names() {
    local n i count
    count=$(set -- $HICACHE_TEST_REDIS_CLUSTER_PORTS; echo $#)
    if [ $# -eq 0 ]; then
        set -- $HC_ALL_SERVICES
    fi
    for n in "$@"; do
        case "$n" in
            all) hc_expand_names $HC_ALL_SERVICES ;;
            redis | s3 | mooncake-master | mooncake-segment) printf '%s\n' "$n" ;;
            redis-cluster) for i in $(seq 1 "$count"); do printf 'redis-cluster-%s\n' "$i"; done ;;
            mooncake)
                printf 'mooncake-master\n'
                [ "$HICACHE_TEST_MOONCAKE_SEGMENT_SIZE" = 0 ] || printf 'mooncake-segment\n'
                ;;
            redis-cluster-[0-9] | redis-cluster-[0-9][0-9])
                i=${n#redis-cluster-}
                [ "$i" -ge 1 ] && [ "$i" -le "$count" ] ||
                    hc_die "unknown cluster node '$n' (have redis-cluster-1..redis-cluster-$count)"
                printf '%s\n' "$n"
                ;;
            *) hc_die "unknown service '$n' (known: $HC_ALL_SERVICES; single units: redis-cluster-1..$count, mooncake-master, mooncake-segment)" ;;
        esac
    done
}

# Port of cluster node N (1-based).
hc_cluster_port() {
    local idx=$1
    set -- $HICACHE_TEST_REDIS_CLUSTER_PORTS
    eval "printf '%s\n' \"\${$idx}\""
}

#!/usr/bin/env bash
# Install what the local test services need, skipping whatever is already there.
#
#   scripts/services/install.sh            # apt packages + pip packages
#   scripts/services/install.sh --apt      # only the apt packages
#   scripts/services/install.sh --pip      # only the pip packages (into $HICACHE_VENV)
#
# apt: redis-server redis-tools libibverbs1 ibverbs-providers (apt-get update + install run only
#      when one of them is missing, as checked with dpkg -s). If installing redis-server makes the
#      distribution start its own instance (port 6379), that instance is stopped and disabled.
# pip: scripts/services/requirements-services.txt into $HICACHE_VENV (default <repo>/.venv; created
#      with python3 -m venv if missing); skipped when the pinned versions are already installed.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_lib.sh"

APT_PACKAGES="redis-server redis-tools libibverbs1 ibverbs-providers"
REQS="$_HC_LIB_DIR/requirements-services.txt"

do_apt=1 do_pip=1
case "${1:-}" in
    --apt) do_pip=0 ;;
    --pip) do_apt=0 ;;
    "") ;;
    *) hc_die "usage: $0 [--apt|--pip]" ;;
esac

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        hc_die "need root (or passwordless sudo) to run: $*"
    fi
}

# Stop the distribution's own redis-server instance (started by the package's postinst).
stop_distro_redis() {
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
    fi
    if [ -x /etc/init.d/redis-server ]; then
        as_root /etc/init.d/redis-server stop >/dev/null 2>&1 || true
    fi
    if command -v update-rc.d >/dev/null 2>&1; then
        as_root update-rc.d redis-server disable >/dev/null 2>&1 || true
    fi
    # Anything left that runs the distro config file (not ours: ours never use a config file).
    local pid
    for pid in $(pgrep -x redis-server 2>/dev/null || true); do
        if [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)" == *:6379* ]]; then
            as_root kill "$pid" 2>/dev/null || true
        fi
    done
}

install_apt() {
    local missing="" p
    for p in $APT_PACKAGES; do
        if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]; then
            missing="$missing $p"
        fi
    done
    if [ -z "$missing" ]; then
        return 0
    fi
    hc_log "apt: installing$missing"
    local had_redis=0
    [ "$(dpkg-query -W -f='${Status}' redis-server 2>/dev/null || true)" = "install ok installed" ] && had_redis=1
    local apt_opts=(-q -y -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    mkdir -p "$HICACHE_SERVICES_DIR"
    local log="$HICACHE_SERVICES_DIR/install-apt.log"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update >"$log" 2>&1 ||
        hc_fail_log "apt-get update failed" "$log"
    # shellcheck disable=SC2086
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" --no-install-recommends $missing >>"$log" 2>&1 ||
        hc_fail_log "apt-get install$missing failed" "$log"
    if [ $had_redis = 0 ]; then
        stop_distro_redis
    fi
}

# Versions pinned in the requirements file that are not installed in the venv (empty = all ok).
pip_missing() {
    "$HICACHE_VENV/bin/python" - "$REQS" <<'EOF'
import re, sys
from importlib import metadata
missing = []
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
    if not m:
        missing.append(line)  # unpinned line: let pip decide
        continue
    name, version = m.group(1), m.group(3)
    try:
        if metadata.version(name) != version:
            missing.append(line)
    except metadata.PackageNotFoundError:
        missing.append(line)
print(" ".join(missing))
EOF
}

install_pip() {
    if [ ! -x "$HICACHE_VENV/bin/python" ]; then
        hc_log "pip: creating virtualenv $HICACHE_VENV"
        python3 -m venv "$HICACHE_VENV" || hc_die "python3 -m venv $HICACHE_VENV failed (apt-get install python3-venv?)"
    fi
    local missing
    missing=$(pip_missing)
    if [ -z "$missing" ] && [ -x "$HICACHE_VENV/bin/moto_server" ] && [ -x "$HICACHE_VENV/bin/mooncake_master" ]; then
        return 0
    fi
    hc_log "pip: installing -r $(basename "$REQS") into $HICACHE_VENV"
    mkdir -p "$HICACHE_SERVICES_DIR"
    local log="$HICACHE_SERVICES_DIR/install-pip.log"
    "$HICACHE_VENV/bin/pip" install -q --disable-pip-version-check -r "$REQS" >"$log" 2>&1 ||
        hc_fail_log "pip install -r $REQS failed" "$log"
}

[ $do_apt = 1 ] && install_apt
[ $do_pip = 1 ] && install_pip
exit 0

#!/usr/bin/env bash
# Stop test servers: scripts/services/stop.sh [redis|redis-cluster|s3|mooncake|UNIT...] (none = all).
# Idempotent. See ctl.sh for details.
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ctl.sh" stop "$@"

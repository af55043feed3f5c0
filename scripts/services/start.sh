#!/usr/bin/env bash
# Start test servers: scripts/services/start.sh [redis|redis-cluster|s3|mooncake|UNIT...] (none = all).
# Idempotent; installs what is missing; waits until each is ready. See ctl.sh for details.
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ctl.sh" start "$@"

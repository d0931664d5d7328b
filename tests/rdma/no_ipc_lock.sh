#!/bin/sh
# Runs "$@" without CAP_IPC_LOCK, so that RLIMIT_MEMLOCK bounds what it may pin (root, as in the
# bed, drops the capability from its bounding set; another user holds none to drop).
if [ "$(id -u)" = 0 ]; then exec setpriv --bounding-set -ipc_lock "$@"; fi
exec "$@"

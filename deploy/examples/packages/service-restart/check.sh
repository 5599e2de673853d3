#!/bin/sh
set -eu
root="${NODEROLL_ROOT:-/}"
service="${SERVICE:-containerd}"
limit=1048576
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/limit" ]; then limit=$(tr -d ' \n' < "$NODEROLL_CONFIG_DIR/limit"); fi
grep -qx "LimitNOFILE=$limit" "$root/etc/systemd/system/$service.service.d/90-noderoll.conf" || { echo "drop-in for $service missing or stale"; exit 2; }
echo "drop-in for $service in place"

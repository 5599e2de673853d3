#!/bin/sh
# Write a systemd drop-in for $SERVICE (default containerd) raising its file limit; the Package's
# service interrupt restarts it. Config file `limit` overrides the LimitNOFILE value.
set -eu
root="${NODEROLL_ROOT:-/}"
service="${SERVICE:-containerd}"
limit=1048576
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/limit" ]; then limit=$(tr -d ' \n' < "$NODEROLL_CONFIG_DIR/limit"); fi
dir="$root/etc/systemd/system/$service.service.d"
mkdir -p "$dir"
printf '[Service]\nLimitNOFILE=%s\n' "$limit" > "$dir/90-noderoll.conf"
echo "wrote $dir/90-noderoll.conf (LimitNOFILE=$limit)"

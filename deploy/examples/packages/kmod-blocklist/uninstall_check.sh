#!/bin/sh
set -eu
[ ! -e "${NODEROLL_ROOT:-/}/etc/modprobe.d/noderoll-blocklist.conf" ] || { echo "blocklist still present"; exit 2; }
echo "blocklist absent"

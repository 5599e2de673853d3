#!/bin/sh
set -eu
rm -f "${NODEROLL_ROOT:-/}/etc/modprobe.d/noderoll-blocklist.conf"
echo "removed noderoll-blocklist.conf"

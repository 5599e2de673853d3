#!/bin/sh
set -eu
[ ! -e "${NODEROLL_ROOT:-/}/etc/sysctl.d/90-noderoll.conf" ] || { echo "90-noderoll.conf still present"; exit 2; }
echo "90-noderoll.conf absent"

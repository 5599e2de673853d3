#!/bin/sh
set -eu
rm -f "${NODEROLL_ROOT:-/}/etc/sysctl.d/90-noderoll.conf"
echo "removed 90-noderoll.conf"

#!/bin/sh
set -eu
root="${NODEROLL_ROOT:-/}"
rm -f "$root/etc/default/noderoll-script" "$root/etc/systemd/system/noderoll-script.service"
echo "removed script-config files"

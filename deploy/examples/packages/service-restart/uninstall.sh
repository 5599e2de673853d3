#!/bin/sh
set -eu
rm -f "${NODEROLL_ROOT:-/}/etc/systemd/system/${SERVICE:-containerd}.service.d/90-noderoll.conf"
echo "removed drop-in"

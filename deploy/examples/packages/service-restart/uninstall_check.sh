#!/bin/sh
set -eu
[ ! -e "${NODEROLL_ROOT:-/}/etc/systemd/system/${SERVICE:-containerd}.service.d/90-noderoll.conf" ] || { echo "drop-in still present"; exit 2; }
echo "drop-in absent"

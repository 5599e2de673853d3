#!/bin/sh
set -eu
[ ! -e "${NODEROLL_ROOT:-/}/etc/default/noderoll-script" ] || { echo "settings still present"; exit 2; }
echo "script-config absent"

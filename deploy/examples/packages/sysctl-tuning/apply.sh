#!/bin/sh
# Write the kernel parameters to <root>/etc/sysctl.d/90-noderoll.conf.
# Source: the package config file `sysctl.conf` when given, else the defaults below.
set -eu
root="${NODEROLL_ROOT:-/}"
target="$root/etc/sysctl.d/90-noderoll.conf"
mkdir -p "$(dirname "$target")"
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/sysctl.conf" ]; then
  cp "$NODEROLL_CONFIG_DIR/sysctl.conf" "$target.tmp"
else
  printf '%s\n' "# written by noderoll package sysctl-tuning" \
    "vm.max_map_count = 262144" "net.core.rmem_max = 16777216" "net.core.wmem_max = 16777216" > "$target.tmp"
fi
mv "$target.tmp" "$target"
echo "wrote $target ($(grep -c '=' "$target") parameters)"

#!/bin/sh
# Blocklist kernel modules in <root>/etc/modprobe.d/noderoll-blocklist.conf (takes effect at reboot).
# Modules: the package config file `modules` (one per line) when given, else nouveau.
set -eu
root="${NODEROLL_ROOT:-/}"
target="$root/etc/modprobe.d/noderoll-blocklist.conf"
mkdir -p "$(dirname "$target")"
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/modules" ]; then modules=$(cat "$NODEROLL_CONFIG_DIR/modules"); else modules="nouveau"; fi
{
  echo "# written by noderoll package kmod-blocklist"
  for module in $modules; do echo "blacklist $module"; echo "install $module /bin/false"; done
} > "$target.tmp"
mv "$target.tmp" "$target"
echo "blocklisted: $(echo $modules)"

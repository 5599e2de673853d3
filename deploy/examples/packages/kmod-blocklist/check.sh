#!/bin/sh
set -eu
target="${NODEROLL_ROOT:-/}/etc/modprobe.d/noderoll-blocklist.conf"
[ -f "$target" ] || { echo "missing $target"; exit 2; }
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/modules" ]; then modules=$(cat "$NODEROLL_CONFIG_DIR/modules"); else modules="nouveau"; fi
for module in $modules; do
  grep -qx "blacklist $module" "$target" || { echo "$module not blocklisted"; exit 3; }
done
echo "checked $target"

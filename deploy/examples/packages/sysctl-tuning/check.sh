#!/bin/sh
# Read <root>/etc/sysctl.d/90-noderoll.conf back and compare it with what apply writes.
set -eu
root="${NODEROLL_ROOT:-/}"
target="$root/etc/sysctl.d/90-noderoll.conf"
[ -f "$target" ] || { echo "missing $target"; exit 2; }
if [ -f "${NODEROLL_CONFIG_DIR:-/nonexistent}/sysctl.conf" ]; then
  cmp -s "$NODEROLL_CONFIG_DIR/sysctl.conf" "$target" || { echo "$target differs from config sysctl.conf"; exit 3; }
else
  grep -q '^vm.max_map_count = 262144$' "$target" || { echo "$target lacks vm.max_map_count"; exit 3; }
fi
echo "checked $target"

#!/bin/sh
# Remove what tune.sh wrote.
set -eu
package_name=$(echo "${SKYHOOK_RESOURCE_ID:?SKYHOOK_RESOURCE_ID is required}" | cut -f 2 -d _)
root=""
if [ -f "$SKYHOOK_DIR/configmaps/root" ]; then root=$(cat "$SKYHOOK_DIR/configmaps/root"); fi
rm -f "$root/etc/sysctl.d/999-${package_name}-tuning.conf" "$root/etc/nodewright-tuning/${package_name}.labels.json" \
  "$root/etc/nodewright-tuning/${package_name}.order"
echo "removed $root/etc/sysctl.d/999-${package_name}-tuning.conf"

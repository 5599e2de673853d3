#!/bin/sh
# The drop-in holds exactly the configured parameters.
set -eu
package_name=$(echo "${SKYHOOK_RESOURCE_ID:?SKYHOOK_RESOURCE_ID is required}" | cut -f 2 -d _)
root=""
if [ -f "$SKYHOOK_DIR/configmaps/root" ]; then root=$(cat "$SKYHOOK_DIR/configmaps/root"); fi
cmp -s "$SKYHOOK_DIR/configmaps/sysctl.conf" "$root/etc/sysctl.d/999-${package_name}-tuning.conf"
test -s "$root/etc/nodewright-tuning/${package_name}.labels.json"
echo "checked $root/etc/sysctl.d/999-${package_name}-tuning.conf"

#!/bin/sh
# Write the package's sysctl drop-in, named like NodeWright's tuning package names it.
set -eu
# SKYHOOK_RESOURCE_ID is <owner>-<uid>-<generation>_<package>_<version>: the package is field 2.
package_name=$(echo "${SKYHOOK_RESOURCE_ID:?SKYHOOK_RESOURCE_ID is required}" | cut -f 2 -d _)
root=""
if [ -f "$SKYHOOK_DIR/configmaps/root" ]; then root=$(cat "$SKYHOOK_DIR/configmaps/root"); fi
mkdir -p "$root/etc/sysctl.d" "$root/etc/nodewright-tuning"
cp "$SKYHOOK_DIR/configmaps/sysctl.conf" "$root/etc/sysctl.d/999-${package_name}-tuning.conf"
cp "$SKYHOOK_DIR/node-metadata/labels.json" "$root/etc/nodewright-tuning/${package_name}.labels.json"
echo "${SKYHOOK_NODE_ORDER:-0}" > "$root/etc/nodewright-tuning/${package_name}.order"
echo "wrote $root/etc/sysctl.d/999-${package_name}-tuning.conf (node order ${SKYHOOK_NODE_ORDER:-0})"

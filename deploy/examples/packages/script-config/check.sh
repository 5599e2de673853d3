#!/bin/sh
set -eu
root="${NODEROLL_ROOT:-/}"
cfg="${NODEROLL_CONFIG_DIR:-/nonexistent}"
[ -f "$root/etc/default/noderoll-script" ] || { echo "settings missing"; exit 2; }
if [ -f "$cfg/settings.env" ]; then cmp -s "$cfg/settings.env" "$root/etc/default/noderoll-script" || { echo "settings differ"; exit 3; }; fi
if [ -f "$cfg/motd" ]; then cmp -s "$cfg/motd" "$root/etc/motd" || { echo "motd differs"; exit 3; }; fi
# The settings must be valid shell assignments: source them in a subshell.
( . "$root/etc/default/noderoll-script" ) || { echo "settings do not parse"; exit 4; }
echo "settings and motd in place"

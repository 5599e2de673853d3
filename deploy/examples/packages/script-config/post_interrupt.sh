#!/bin/sh
# After the interrupt: the service restart was recorded (simulation) or the unit is active (real host).
set -eu
root="${NODEROLL_ROOT:-/}"
if [ "$root" != "/" ]; then
  echo "post-interrupt on sandbox $root: settings $(cat "$root/etc/default/noderoll-script" | tr '\n' ' ')"
elif command -v systemctl >/dev/null 2>&1; then
  systemctl is-enabled noderoll-script.service >/dev/null 2>&1 || true
fi
echo "post-interrupt ${1:-} ok"

#!/bin/sh
# The check of a benchmark stage: instant; passes when the stage left its marker.
set -eu
root="${NODEROLL_ROOT:-/}"
test -f "$root/var/lib/bench-sleep/${1:-apply}.done"

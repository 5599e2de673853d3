#!/bin/sh
# The check of a benchmark stage: instant; passes when the stage left its marker.
# BENCH_CHECK_EXIT makes every check fail with that exit code (the bad-input suite's failing check).
set -eu
root="${NODEROLL_ROOT:-/}"
[ "${BENCH_CHECK_EXIT:-0}" = 0 ] || exit "$BENCH_CHECK_EXIT"
test -f "$root/var/lib/bench-sleep/${1:-apply}.done"

#!/bin/sh
# A benchmark stage: takes BENCH_STAGE_SECONDS (default 5) times FLEETSIM_TIME_FACTOR and leaves a marker per stage.
# BENCH_STAGE_OUTPUT_BYTES > 0 prints that many bytes first (the bad-input suite's "10 MB step").
# BENCH_STAGE_EXIT makes the stage fail with that exit code (the bad-input suite's failing step).
set -eu
root="${NODEROLL_ROOT:-/}"
stage="${1:-apply}"
if [ "${BENCH_STAGE_OUTPUT_BYTES:-0}" -gt 0 ]; then
  head -c "$BENCH_STAGE_OUTPUT_BYTES" /dev/zero | tr '\0' 'x'
  echo
fi
# fleetsim's --jitter-percent: this node's time factor (1 without jitter). A factor that cannot be
# applied fails the stage: a silent fallback to the plain time once hid that awk was not found.
factor="${FLEETSIM_TIME_FACTOR:-1}"
seconds="${BENCH_STAGE_SECONDS:-5}"
if [ "$factor" != 1 ]; then
  seconds=$(awk "BEGIN { print $seconds * $factor }") || {
    echo "bench-sleep: cannot apply FLEETSIM_TIME_FACTOR=$factor (awk failed)" >&2
    exit 70
  }
fi
sleep "$seconds"
mkdir -p "$root/var/lib/bench-sleep"
# One line per run: the reliability suite counts them (a stage must never run twice).
date +%s >> "$root/var/lib/bench-sleep/$stage.runs"
date +%s > "$root/var/lib/bench-sleep/$stage.done"
echo "bench-sleep: $stage done after ${seconds}s"
exit "${BENCH_STAGE_EXIT:-0}"

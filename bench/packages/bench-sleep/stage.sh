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
# fleetsim's --jitter-percent: this node's time factor (1 without jitter).
seconds=$(awk "BEGIN { print ${BENCH_STAGE_SECONDS:-5} * ${FLEETSIM_TIME_FACTOR:-1} }" 2>/dev/null) \
  || seconds="${BENCH_STAGE_SECONDS:-5}"
sleep "$seconds"
mkdir -p "$root/var/lib/bench-sleep"
# One line per run: the reliability suite counts them (a stage must never run twice).
date +%s >> "$root/var/lib/bench-sleep/$stage.runs"
date +%s > "$root/var/lib/bench-sleep/$stage.done"
echo "bench-sleep: $stage done after ${seconds}s"
exit "${BENCH_STAGE_EXIT:-0}"

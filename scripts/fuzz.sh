#!/bin/bash
# fuzz.sh SECONDS BIN... - runs each libFuzzer binary on its corpus
# (tests/fuzz/corpus/NAME, copied to a scratch dir so the repo corpus stays
# small) for SECONDS each, or with FUZZ_RUNS=N for N executions (0 seconds =
# no time limit). Prints each target's execution count; fails on a crash.
# A crash input is kept under build-fuzz/crashes/ to become a regression test.
set -u
secs=$1
shift
runs=${FUZZ_RUNS:-}
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    seeds=tests/fuzz/corpus/${name#fuzz_}
    work=build-fuzz/corpus/$name
    mkdir -p "$work" build-fuzz/crashes
    [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null
    args=(-max_len=65536 -artifact_prefix=build-fuzz/crashes/$name- -print_final_stats=1)
    [ "$secs" -gt 0 ] && args+=(-max_total_time="$secs")
    [ -n "$runs" ] && args+=(-runs="$runs")
    echo "=== $name (${secs}s${runs:+, $runs runs})"
    log=build-fuzz/$name.log
    if "$bin" "${args[@]}" "$work" >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done' "$log" | sed "s/^/$name: /"
    else
        echo "--- $name FAILED; tail of $log:"
        tail -40 "$log"
        status=1
    fi
done
exit $status

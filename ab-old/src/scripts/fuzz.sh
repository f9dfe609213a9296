#!/bin/bash
# fuzz.sh SECONDS BIN... - runs each libFuzzer binary on its corpus
# (tests/fuzz/corpus/NAME plus the regression inputs tests/fuzz/regress/NAME,
# copied to a scratch dir so the repo corpus stays small) for SECONDS each,
# or with FUZZ_RUNS=N for N executions (0 seconds = no time limit).
# First replays the regression inputs (every crash found so far) once.
# Prints each target's executions, time, final coverage and corpus; fails on
# a crash. A crash input is kept under build-fuzz/crashes/ to become a
# regression test (tests/fuzz/regress/NAME/, replayed by make test).
set -u
secs=$1
shift
runs=${FUZZ_RUNS:-}
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    seeds=tests/fuzz/corpus/${name#fuzz_}
    regress=tests/fuzz/regress/${name#fuzz_}
    work=build-fuzz/corpus/$name
    mkdir -p "$work" build-fuzz/crashes
    [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null
    log=build-fuzz/$name.log
    if compgen -G "$regress/*" >/dev/null; then
        if ! "$bin" -runs=1 "$regress"/* >"$log" 2>&1; then
            echo "--- $name: a regression input crashes again; tail of $log:"
            tail -40 "$log"
            status=1
            continue
        fi
        echo "$name: $(ls "$regress" | wc -l) regression inputs replayed"
        cp -n "$regress"/* "$work"/
    fi
    # Entropic scheduling keeps every feature seen fewer than THRESHOLD times on its
    # "rare" list and searches that list for each feature of each execution. With
    # clang 14's default (255) the list held every feature of the loaded corpus
    # (~15k for fuzz_auth): 50-70 % of fuzz_auth's time, 1.8x fuzz_server's CPU
    # per execution (docs/fuzzing.md). 0 keeps it at the 100 rarest features.
    args=(-max_len=65536 -artifact_prefix=build-fuzz/crashes/$name- -print_final_stats=1
        -entropic_feature_frequency_threshold=0)
    [ "$secs" -gt 0 ] && args+=(-max_total_time="$secs")
    [ -n "$runs" ] && args+=(-runs="$runs")
    echo "=== $name (${secs}s${runs:+, $runs runs})"
    if "$bin" "${args[@]}" "$work" >"$log" 2>&1; then
        grep -E '^#[0-9]+[[:space:]]+DONE|^Done|^stat::number_of_executed_units' "$log" |
            sed "s/^/$name: /"
    else
        echo "--- $name FAILED; tail of $log:"
        tail -40 "$log"
        status=1
    fi
done
exit $status

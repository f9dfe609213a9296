#!/bin/bash
# sync-bound.sh [--rounds N] [--seconds S] [--threads T] - what bounds the shim's
# gain for synchronous callers on this host.
#
# A synchronous kvs_put/kvs_get under the shim sleeps until its batch's reply
# comes and is then woken: one wake-up per op that no batching removes. Where the
# waker and the caller run on different CPUs, that wake-up crosses CPUs, and on a
# virtual machine whose idle vCPUs halt it costs the hypervisor's wake-up path.
# This script measures, in one run:
#   1. the wake-up round trip (`perf bench sched pipe`: two tasks passing a token)
#      with the tasks free to use every CPU, then both pinned to CPU 0;
#   2. kvbench, T threads (default 16) x 4 KiB single-key puts and gets, without
#      and with the shim (puts also with KVBATCH_PUT_MODE=writeback, whose put
#      returns once copied: no wake-up to wait for), first with the client and
#      kvstored free to use every CPU, then with both pinned to CPU 0; N
#      interleaved rounds (default 3).
# It prints a Markdown table of medians and the ratios to no shim. If pinning
# everything to one CPU raises the shim's ops/s, the host's cross-CPU wake-ups,
# not the batcher, bound the gain (docs/benchmarks.md, "Synchronous callers").
# Raw output goes to $BUILD/bench/sync-bound/. kvstored binds 127.0.0.1.
set -u
BUILD=${BUILD:-build}
ROUNDS=3
SECS=3
THREADS=16
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sync-bound.sh: unknown argument '$1' (accepted: --rounds N, --seconds S, --threads T)" >&2; exit 2 ;;
    esac
done
for v in "$ROUNDS" "$THREADS"; do
    [[ "$v" =~ ^[1-9][0-9]?$ ]] || { echo "sync-bound.sh: '$v' is not a count from 1 to 99" >&2; exit 2; }
done
[[ "$SECS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "sync-bound.sh: --seconds '$SECS' is not a number" >&2; exit 2; }
KVBENCH=$BUILD/bin/kvbench
KVSTORED=$BUILD/bin/kvstored
SHIM=$(realpath "$BUILD/lib/libkvbatch.so" 2>/dev/null || true)
for f in "$KVBENCH" "$KVSTORED" "$SHIM"; do
    [ -n "$f" ] && [ -e "$f" ] || { echo "sync-bound.sh: $BUILD is not built (make BUILD=$BUILD)" >&2; exit 1; }
done
command -v taskset >/dev/null || { echo "sync-bound.sh: taskset (util-linux) is missing" >&2; exit 1; }
OUT=$BUILD/bench/sync-bound
mkdir -p "$OUT"
rm -f "$OUT"/*.log
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
VIRT="bare metal or unknown"
grep -qw hypervisor /proc/cpuinfo && VIRT="a virtual machine (cpuinfo flag: hypervisor)"

SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=; }
trap cleanup EXIT
trap 'exit 130' INT TERM

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# 1. wake-up round trip, us per token pass (median of 3)
pipe_us() { # pipe_us [taskset -c 0]
    for _ in 1 2 3; do
        timeout 60 "$@" perf bench sched pipe -l 20000 2>/dev/null | awk '/usecs\/op/ {printf "%.1f\n", $1}'
    done | median
}
if command -v perf >/dev/null && perf bench sched pipe -l 10 >/dev/null 2>&1; then
    PIPE_FREE=$(pipe_us)
    PIPE_PIN=$(pipe_us taskset -c 0)
else
    echo "sync-bound.sh: perf is missing or not permitted: wake-up round trip skipped" >&2
    PIPE_FREE=- PIPE_PIN=-
fi

# 2. kvbench runs. run PLACE VARIANT OP ROUND -> ops/s on stdout
start_kvstored() { # start_kvstored [taskset -c 0]
    "$@" "$KVSTORED" --listen 127.0.0.1:0 --memory 2G >"$OUT/kvstored.log" 2>&1 &
    SRV=$!
    for _ in $(seq 100); do grep -q "listening on" "$OUT/kvstored.log" && break; sleep 0.1; done
    ADDR=$(sed -n 's/.*listening on \(.*\)/\1/p' "$OUT/kvstored.log" | head -1)
    [ -n "$ADDR" ] || { echo "sync-bound.sh: kvstored did not start" >&2; cat "$OUT/kvstored.log" >&2; exit 1; }
}
run() {
    local place=$1 variant=$2 op=$3 r=$4 pin=() pre=()
    [ "$place" = pinned ] && pin=(taskset -c 0)
    [ "$variant" = shim ] && pre=(env "LD_PRELOAD=$SHIM")
    [ "$variant" = writeback ] && pre=(env "LD_PRELOAD=$SHIM" KVBATCH_PUT_MODE=writeback)
    "${pre[@]}" "${pin[@]}" timeout 120 "$KVBENCH" "$op" --servers "$ADDR" --threads "$THREADS" \
        --size 4K --mode single --ops 1000000 --seconds "$SECS" --quiet \
        >"$OUT/${place}__${variant}__${op}__r$r.log" 2>&1 || echo "    ($place $variant $op: kvbench failed)" >&2
    sed -n 's/^run .*: \([0-9]*\) ops\/s.*/\1/p' "$OUT/${place}__${variant}__${op}__r$r.log" | head -1
}
declare -A OPS
for place in free pinned; do
    if [ "$place" = pinned ]; then start_kvstored taskset -c 0; else start_kvstored; fi
    for r in $(seq "$ROUNDS"); do
        for op in put get; do
            # order alternates per round so that drift does not favour one side
            if [ $((r % 2)) = 1 ]; then order="none shim"; else order="shim none"; fi
            [ "$op" = put ] && order="$order writeback"
            for v in $order; do
                OPS[$place,$v,$op]+="$(run "$place" "$v" "$op" "$r") "
            done
        done
    done
    cleanup
done

med() { printf '%s\n' ${OPS[$1]} | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b}'; }
echo "## Synchronous callers: what bounds the gain on this host"
echo
echo "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $VIRT; load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| wake-up round trip (perf bench sched pipe, median of 3) | us |"
echo "|---|---:|"
echo "| tasks free to use every CPU | $PIPE_FREE |"
echo "| both pinned to CPU 0 | $PIPE_PIN |"
echo
echo "| $THREADS threads x 4 KiB, median of $ROUNDS rounds | no shim ops/s | shim ops/s | shim / no shim | shim writeback ops/s | writeback / no shim |"
echo "|---|---:|---:|---:|---:|---:|"
for place in free pinned; do
    for op in put get; do
        a=$(med "$place,none,$op") b=$(med "$place,shim,$op") w=-
        [ "$op" = put ] && w=$(med "$place,writeback,$op")
        label="client and kvstored free"; [ "$place" = pinned ] && label="client and kvstored on CPU 0"
        echo "| $op, $label | $a | $b | $(ratio "$b" "$a") | $w | $(ratio "$w" "$a") |"
    done
done
echo
echo "(raw runs: $OUT/)"

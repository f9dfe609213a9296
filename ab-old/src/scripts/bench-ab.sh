#!/bin/bash
# bench-ab.sh [--rounds N] [--preload SO] [--client-a DIR] KVSTORED_A KVSTORED_B -- KVBENCH ARGS...
# Two kvstored binaries (e.g. before and after a server change) side by side: both
# run at once on private loopback ports, and the same kvbench command runs against
# A then B, N rounds (default 5), order alternating per round. Per run it prints the
# goodput and the server's CPU time (utime + stime from /proc) per GB moved, then
# the medians and the per-pair ratios B/A. kvbench is $BUILD/bin/kvbench (BUILD
# defaults to build); --preload runs it under LD_PRELOAD=SO (e.g. the shim).
# --client-a DIR runs A's kvbench from the build DIR (DIR/bin/kvbench, and the
# preloaded library of the same name from DIR/lib), so that a whole stack
# (client, shim and server) is compared with another, not just the server.
# Example: scripts/bench-ab.sh /tmp/kvstored.old build/bin/kvstored -- put --size 64K --threads 16 --seconds 2
set -u
BUILD=${BUILD:-build}
ROUNDS=5
PRELOAD=
CLIENT_A=
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --preload) PRELOAD=$(realpath "$2"); shift 2 ;;
    --client-a) CLIENT_A=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
    esac
done
if [ $# -lt 3 ] || [ "$3" != -- ]; then
    echo "usage: bench-ab.sh [--rounds N] [--preload SO] [--client-a DIR] KVSTORED_A KVSTORED_B -- KVBENCH ARGS..." >&2
    exit 2
fi
BIN_A=$1 BIN_B=$2
shift 3
KVBENCH_B=$BUILD/bin/kvbench PRELOAD_B=$PRELOAD
KVBENCH_A=$KVBENCH_B PRELOAD_A=$PRELOAD
if [ -n "$CLIENT_A" ]; then
    KVBENCH_A=$CLIENT_A/bin/kvbench
    [ -n "$PRELOAD" ] && PRELOAD_A=$(realpath "$CLIENT_A/lib/$(basename "$PRELOAD")")
fi
for b in "$BIN_A" "$BIN_B" "$KVBENCH_A" "$KVBENCH_B"; do
    [ -x "$b" ] || { echo "bench-ab.sh: $b is not an executable" >&2; exit 2; }
done
TMP=$(mktemp -d)
PIDS=
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME BIN: a kvstored on 127.0.0.1:0; sets PID_NAME and ADDR_NAME.
start() {
    "$2" --listen 127.0.0.1:0 --memory 2G >"$TMP/$1.log" 2>&1 &
    local pid=$!
    PIDS="$PIDS $pid"
    for _ in $(seq 100); do grep -q "listening on" "$TMP/$1.log" && break; sleep 0.1; done
    local addr
    addr=$(sed -n 's/.*listening on \(.*\)/\1/p' "$TMP/$1.log" | head -1)
    [ -n "$addr" ] || { echo "bench-ab.sh: $2 did not start" >&2; cat "$TMP/$1.log" >&2; exit 1; }
    printf -v "PID_$1" '%s' "$pid"
    printf -v "ADDR_$1" '%s' "$addr"
}
start A "$BIN_A"
start B "$BIN_B"
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run NAME ROUND ARGS...: one kvbench run (one --repeat) against server NAME; appends
# "MB/s cpu_s_per_GB" to $TMP/NAME.
run() {
    local pid_var=PID_$1 addr_var=ADDR_$1 kvbench_var=KVBENCH_$1 preload_var=PRELOAD_$1 t0 t1
    t0=$(ticks "${!pid_var}")
    timeout -k 5 600 env ${!preload_var:+LD_PRELOAD="${!preload_var}"} "${!kvbench_var}" "${@:3}" --servers "${!addr_var}" \
        --quiet --csv "$TMP/$1.r$2.csv" >/dev/null 2>&1 || echo "bench-ab.sh: kvbench failed ($1)" >&2
    t1=$(ticks "${!pid_var}")
    # bytes of the measured run (a get's prefill also costs the server: not subtracted, same for A and B)
    awk -F, -v t=$((t1 - t0)) -v hz="$HZ" 'NR == 2 {
        printf "%.1f %.4f\n", $13 / 1e6, ($10 > 0 ? t / hz / ($10 / 1e9) : 0) }' "$TMP/$1.r$2.csv" >>"$TMP/$1"
}

echo "bench-ab: A=$BIN_A ($ADDR_A) B=$BIN_B ($ADDR_B), $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    order="A B"
    [ $((r % 2)) = 0 ] && order="B A"
    for s in $order; do
        run "$s" "$r" "$@"
    done
    printf 'round %d: A %s MB/s %s s/GB   B %s MB/s %s s/GB\n' "$r" \
        $(tail -1 "$TMP/A") $(tail -1 "$TMP/B")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
paste -d' ' "$TMP/A" "$TMP/B" | python3 -c '
import sys
rows = [[float(x) for x in line.split()] for line in sys.stdin if line.strip()]
def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
a_mb, a_cpu, b_mb, b_cpu = (med([r[i] for r in rows]) for i in range(4))
print("median: A %.1f MB/s %.4f s/GB, B %.1f MB/s %.4f s/GB" % (a_mb, a_cpu, b_mb, b_cpu))
print("B/A per pair, median: goodput %.3f (B higher in %d of %d), server CPU per GB %.3f (B lower in %d of %d)" % (
    med([r[2] / r[0] for r in rows]), sum(r[2] > r[0] for r in rows), len(rows),
    med([r[3] / r[1] for r in rows if r[1] > 0]), sum(r[3] < r[1] for r in rows), len(rows)))
'

#!/bin/bash
# demo.sh - the README's first command (`make demo`): kvbatch's shim batching
# a real workload against a local kvstored.
#
# It starts kvstored on 127.0.0.1 (a free port), runs the same programs
# without and with LD_PRELOAD=libkvbatch.so - kvbench's single-key path with
# 16 threads x 4 KiB, then the engine-shaped layer-wise workload - prints the
# speed-up, and shows kvbatch-stat's view of the shim's stats file.
# Everything is bounded in time; the server is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/bin
SHIM=$BUILD/lib/libkvbatch.so
OUT=$BUILD/demo
SECONDS_PER_RUN=${DEMO_SECONDS:-4}
mkdir -p "$OUT"
rm -f "$OUT"/*.prom "$OUT"/*.json

for f in "$BIN/kvstored" "$BIN/kvbench" "$SHIM"; do
    [ -e "$f" ] || { echo "demo: $f is missing; run make first" >&2; exit 1; }
done

"$BIN/kvstored" --listen 127.0.0.1:0 --memory 2G >"$OUT/kvstored.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q '^listening on' "$OUT/kvstored.log" && break
    sleep 0.05
done
addr=$(sed -n 's/^listening on //p' "$OUT/kvstored.log")
[ -n "$addr" ] || { echo "demo: kvstored did not start:" >&2; cat "$OUT/kvstored.log" >&2; exit 1; }
export KVSTORE_SERVERS=$addr

# ops/s of a kvbench JSON result (the median run's is the last line's field)
ops_of() { sed -n 's/.*"ops_per_s": \([0-9.]*\).*/\1/p' "$1" | tail -1; }
field_of() { sed -n "s/.*\"$2\": \\([0-9.]*\\).*/\\1/p" "$1" | tail -1; }

echo "kvbatch demo: kvstored on $addr; the same binary without and with LD_PRELOAD=$SHIM"
echo
echo "== 1. 16 threads, 4 KiB values, one kvs_put / kvs_get per call (kvbench, single-key path)"
for op in put get; do
    "$BIN/kvbench" $op --threads 16 --size 4K --mode single --ops 400000 \
        --seconds "$SECONDS_PER_RUN" --quiet --json "$OUT/$op-plain.json" | grep '^run'
    LD_PRELOAD=$SHIM KVBATCH_STATS_FILE="$OUT/$op-shim.prom" \
        "$BIN/kvbench" $op --threads 16 --size 4K --mode single --ops 400000 \
        --seconds "$SECONDS_PER_RUN" --quiet --json "$OUT/$op-shim.json" | grep '^run'
done
echo
printf '%-6s %14s %14s %9s\n' op "no shim ops/s" "shim ops/s" speed-up
for op in put get; do
    a=$(ops_of "$OUT/$op-plain.json")
    b=$(ops_of "$OUT/$op-shim.json")
    awk -v op=$op -v a="$a" -v b="$b" 'BEGIN { printf "%-6s %14.0f %14.0f %8.2fx\n", op, a, b, b / a }'
done

echo
echo "== 2. engine-shaped: llama3-8b (32 layers), 16-token blocks, 8 concurrent requests,"
echo "      save each layer's slices after its compute, then load layer by layer"
echo "      (3 runs each; a single run swings with this host's load: the median line counts)"
"$BIN/kvbench" layerwise --model llama3-8b --block 16 --requests 8 --rounds 2 --repeat 3 \
    --seconds 60 --quiet --json "$OUT/lw-plain.json" | grep '^median'
LD_PRELOAD=$SHIM KVBATCH_STATS_FILE="$OUT/lw-shim.prom" \
    "$BIN/kvbench" layerwise --model llama3-8b --block 16 --requests 8 --rounds 2 --repeat 3 \
    --seconds 60 --quiet --json "$OUT/lw-shim.json" | grep '^median'
a=$(sed -n '/layerwise-save/s/.*"exposed_p50_us": \([0-9.]*\).*/\1/p' "$OUT/lw-plain.json" | tail -1)
b=$(sed -n '/layerwise-save/s/.*"exposed_p50_us": \([0-9.]*\).*/\1/p' "$OUT/lw-shim.json" | tail -1)
awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0 && b > 0)
    printf "\nsave time exposed after the last layer, p50 per request (median of 3 runs): %.0f us without, %.0f us with the shim (%.2fx)\n", a, b, a / b }'

if [ -x "$BIN/kvbatch-stat" ]; then
    echo
    echo "== 3. what the shim did in the 16-thread put run (kvbatch-stat $OUT/put-shim.prom)"
    "$BIN/kvbatch-stat" "$OUT/put-shim.prom"
fi
echo
echo "results: $OUT/*.json; stats files: $OUT/*.prom"

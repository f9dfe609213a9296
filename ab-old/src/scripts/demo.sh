#!/bin/bash
# demo.sh - the README's first command (`make demo`): kvbatch's shim batching
# a real workload against a local kvstored.
#
# It starts kvstored on 127.0.0.1 (a free port), runs the same programs
# without and with LD_PRELOAD=libkvbatch.so - kvbench's single-key path with
# 16 threads x 4 KiB, then the engine-shaped layer-wise workload (llama3-70b
# at TP 8, an async connector), then Mooncake-shaped programs on the drop-in
# (an LMCache-shaped Python connector over mooncake.store, and threads on
# Mooncake's C API) - prints the speed-up, and shows kvbatch-stat's view of
# the shim's stats files.
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
SHIM=$(readlink -f "$SHIM") # LD_PRELOAD is resolved in every process the programs start

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
echo "== 2. engine-shaped: llama3-70b (80 layers) at tensor-parallel 8, 16-token blocks (8 KiB"
echo "      slices), 8 concurrent requests; a connector that puts each layer's slices after its"
echo "      compute and keeps them in flight (kvs_put_async), then loads layer by layer"
echo "      (3 runs each; a single run swings with this host's load: the median line counts)"
LW=(layerwise --model llama3-70b --tp 8 --block 16 --requests 8 --rounds 3 --mode async --repeat 3 --seconds 60 --quiet)
"$BIN/kvbench" "${LW[@]}" --json "$OUT/lw-plain.json" | grep '^median'
LD_PRELOAD=$SHIM KVBATCH_STATS_FILE="$OUT/lw-shim.prom" \
    "$BIN/kvbench" "${LW[@]}" --json "$OUT/lw-shim.json" | grep '^median'
lw_field() { sed -n "/$2/s/.*\"$3\": \([0-9.]*\).*/\1/p" "$1" | tail -1; }
awk -v a="$(lw_field "$OUT/lw-plain.json" layerwise-save exposed_p50_us)" \
    -v b="$(lw_field "$OUT/lw-shim.json" layerwise-save exposed_p50_us)" \
    -v c="$(lw_field "$OUT/lw-plain.json" layerwise-load req_wait_p50_us)" \
    -v d="$(lw_field "$OUT/lw-shim.json" layerwise-load req_wait_p50_us)" 'BEGIN {
    print ""
    if (a > 0 && b > 0)
        printf "save time exposed after the last layer, p50 per request: %.1f ms without, %.1f ms with the shim (%.2fx less)\n", a / 1000, b / 1000, a / b
    if (c > 0 && d > 0)
        printf "load: time a request waits for its layers, p50:           %.1f ms without, %.1f ms with the shim (%.2fx less)\n", c / 1000, d / 1000, c / d }'
echo "(where slices are 64 KiB, llama3-8b at TP 1, this host's loopback link bounds both paths:"
echo " scripts/layerwise-ab.sh and docs/benchmarks.md)"

# kvbatch-stat's per-op table alone, indented
op_table() { awk '/^op /{p=1} p && !done {print "   " $0} /^all /{done=1}'; }

echo
echo "== 3. Mooncake-shaped: programs written for Mooncake Store, on kvbatch's drop-in"
if [ -e "$BUILD/python/mooncake/__init__.py" ]; then
    echo "   LMCache's mooncakestore connector shape (tests/python/mooncake_connectors.py lmcache):"
    echo "   1024 x 16 KiB chunks saved with asyncio.to_thread(store.put_from, ...), then one"
    echo "   batch_get_into; mooncake.store's put_from is a kvs_put, which the shim batches"
    for run in plain shim; do
        env=(PYTHONPATH="$BUILD/python")
        [ $run = shim ] && env+=(LD_PRELOAD="$SHIM" KVBATCH_STATS_FILE="$OUT/lmcache-shim.prom")
        t0=$(date +%s.%N)
        env "${env[@]}" python3 tests/python/mooncake_connectors.py lmcache --servers "$addr" \
            --prefix "demo.$run." --chunks 1024 --size 16384 >"$OUT/lmcache-$run.out"
        t1=$(date +%s.%N)
        awk -v r=$run -v a="$t0" -v b="$t1" 'BEGIN { printf "   %-5s %6.0f ms\n", r, (b - a) * 1000 }'
    done
    if cmp -s "$OUT/lmcache-plain.out" "$OUT/lmcache-shim.out"; then
        echo "   every result the same with and without the shim"
    else
        echo "   RESULTS DIFFER: diff $OUT/lmcache-plain.out $OUT/lmcache-shim.out"
    fi
    "$BIN/kvbatch-stat" -s -b kvs "$OUT/lmcache-shim.prom" | op_table
else
    echo "   (no build/python/mooncake: the Python connector run is skipped)"
fi
echo
echo "   Mooncake's C API (kvbench mooncake): 16 threads x 8 KiB, one mooncake_store_put_from /"
echo "   mooncake_store_get_into per call; the shim merges them into mooncake_store_batch_*"
MC=(mooncake --master "$addr" --threads 16 --size 8K --seconds "$SECONDS_PER_RUN" --quiet)
"$BIN/kvbench" "${MC[@]}" --json "$OUT/mc-plain.json" | grep '^run'
LD_PRELOAD=$SHIM KVBATCH_STATS_FILE="$OUT/mc-shim.prom" \
    "$BIN/kvbench" "${MC[@]}" --json "$OUT/mc-shim.json" | grep '^run'
mc_ops() { sed -n "/\"$2\"/s/.*\"ops_per_s\": \([0-9.]*\).*/\1/p" "$1" | tail -1; }
for w in mc-put_from mc-get; do
    awk -v w=$w -v a="$(mc_ops "$OUT/mc-plain.json" $w)" -v b="$(mc_ops "$OUT/mc-shim.json" $w)" \
        'BEGIN { if (a > 0) printf "   %-12s %10.0f ops/s without, %10.0f with the shim (%.2fx)\n", w, a, b, b / a }'
done
"$BIN/kvbatch-stat" -s -b mooncake "$OUT/mc-shim.prom" | op_table

if [ -x "$BIN/kvbatch-stat" ]; then
    echo
    echo "== 4. what the shim did in the 16-thread put run (kvbatch-stat $OUT/put-shim.prom)"
    "$BIN/kvbatch-stat" "$OUT/put-shim.prom"
fi
echo
echo "results: $OUT/*.json; stats files: $OUT/*.prom"

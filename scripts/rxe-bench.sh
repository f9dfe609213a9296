#!/bin/sh
# rxe-bench.sh - RDMA figures, run inside the soft-RoCE VM
# (scripts/rxe-vm.sh run -- scripts/rxe-bench.sh; make bench-rdma).
# Soft-RoCE under emulation is slow, so only ratios measured in this one run
# mean anything:
#   - batched put/get goodput over rdma (kvbench --mode batch, batch 32) at
#     16 KiB and 64 KiB, against ib_write_bw / ib_read_bw at the same size;
#   - ibv_post_send calls per op at batch 32 (the transport's counters,
#     printed by tests/rdma/test_rdma's doorbell case);
#   - single-key vs shim-batched ops/s, 8 threads x 4 KiB.
# Each kvbench figure is the median of REPEAT runs; perftest runs once per
# size with ITERS iterations. Bytes/s are computed as ops/s x size for both.
set -u
BUILD=${BUILD:-build}
REPEAT=${REPEAT:-3}
A=${KVS_RDMA_ADDR_A:?run inside scripts/rxe-vm.sh}
DEV_A=${KVS_RDMA_DEV_A:?}
DEV_B=${KVS_RDMA_DEV_B:?}
cd "$(dirname "$0")/.."
PORT=7471

PT_PORT=18600
# perftest TOOL SIZE ITERS -> median bytes/s over REPEAT runs (a fresh port
# each run: a server still closing on the last one does not refuse this one)
perftest() {
    for i in $(seq "$REPEAT"); do
        PT_PORT=$((PT_PORT + 1))
        timeout 60 "$1" -R -p $PT_PORT -d "$DEV_A" -s "$2" -n "$3" -F >/dev/null 2>&1 &
        sleep 2
        timeout 60 "$1" -R -p $PT_PORT -d "$DEV_B" -s "$2" -n "$3" -F "$A" 2>/dev/null |
            awk -v s="$2" '$1 == s { printf "%.0f\n", $5 * 1e6 * s }'
        wait
    done | sort -n | awk '{ v[n++] = $1 } END { print n ? v[int(n / 2)] : 0 }'
}

# kvbench ARGS... -> median ops/s over its runs
# (KVB_ENV: extra VAR=value words for kvbench's environment)
kvb() {
    env ${KVB_ENV:-} KVSTORE_TIMEOUT_MS=60000 LD_PRELOAD=${KVB_PRELOAD:-} timeout 300 "$BUILD/bin/kvbench" "$@" \
        --repeat "$REPEAT" --quiet 2>&1 |
        tee -a "$BUILD/rxe-bench.log" |
        awk '$1 == "run" { for (i = 1; i <= NF; i++) if ($(i + 1) == "ops/s") v[n++] = $i }
             END { if (!n) { print 0; exit } ; for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } ; print v[int(n / 2)] }'
}

"$BUILD/bin/kvstored" --memory 512M --listen 127.0.0.1:0 --rdma-listen "$A:$PORT" >/tmp/kvstored.log 2>&1 &
SRV=$!
# Registering the pool pins it: slow under emulation.
for i in $(seq 60); do grep -q "rdma listening" /tmp/kvstored.log && break; sleep 1; done
grep -q "rdma listening" /tmp/kvstored.log || { cat /tmp/kvstored.log; kill $SRV; exit 1; }
URL="rdma://$A:$PORT"

# put: the default (values <= 64 KiB as PULL, 1 round trip); put/rsv: the
# same with KVS_RDMA_PULL_MAX=0 (RESERVE, then WRITEs + COMMIT: 2 round
# trips), against the same perftest figure.
echo "size    op       kvbatch_MBps  perftest_MBps  ratio"
for size in 16384 65536; do
    ops=$((size == 16384 ? 3200 : 1280))
    keys=$((size == 16384 ? 512 : 256))
    for op in put put/rsv get; do
        tool=$([ $op = get ] && echo ib_read_bw || echo ib_write_bw)
        [ $op = put/rsv ] || base=$(perftest $tool $size $((ops / 2)))
        env=$([ $op = put/rsv ] && echo KVS_RDMA_PULL_MAX=0)
        kops=$(KVB_ENV=$env kvb ${op%/rsv} --servers "$URL" --mode batch --batch 32 --size $size \
            --keys $keys --ops $ops)
        awk -v s=$size -v op=$op -v k="$kops" -v b="${base:-0}" 'BEGIN {
            kb = k * s; ratio = 0; if (b > 0) ratio = kb / b  # outside printf: some awks read ">" there as a redirection
            printf "%-7d %-8s %12.1f %14.1f  %.2f\n", s, op, kb / 1e6, b / 1e6, ratio }'
    done
done

# Where a batch's time goes: one more run of the 16 KiB put batches each
# way, with the transport's counters (printed at kvs_close with
# KVSTORE_LOG=debug), per batch (100 batches).
echo "16 KiB put batch 32, per batch (us): slot = RESERVE round trip (with the copy-in in its"
echo "shadow), chain = WRITEs + COMMIT, or the PULL round trip; copy = bounce copy-in"
for pm in 65536 0; do
    KVS_RDMA_PULL_MAX=$pm KVSTORE_LOG=debug KVSTORE_TIMEOUT_MS=60000 timeout 300 "$BUILD/bin/kvbench" \
        put --servers "$URL" --mode batch --batch 32 --size 16384 --keys 512 --ops 3200 --quiet 2>&1 |
        awk -v m=$([ $pm = 0 ] && echo put/rsv || echo put) '$3 == "slot_wait_us" { s = $4 }
            $3 == "chain_wait_us" { w = $4 } $3 == "copy_us" { c = $4 }
            END { b = 100; printf "  %-8s slot %6.0f  chain %6.0f  copy %5.0f\n", m, s / b, w / b, c / b }'
done

echo "8 threads x 4 KiB puts over rdma: ops/s"
single=$(kvb put --servers "$URL" --mode single --threads 8 --size 4096 --keys 1024 --ops 4000)
shim=$(KVB_PRELOAD=$PWD/$BUILD/lib/libkvbatch.so kvb put --servers "$URL" --mode single --threads 8 \
    --size 4096 --keys 1024 --ops 4000)
batch=$(kvb put --servers "$URL" --mode batch --batch 32 --threads 8 --size 4096 --keys 1024 --ops 4000)
echo "  single-key $single, shim-batched $shim, explicit batch 32 $batch"
kill $SRV
wait $SRV 2>/dev/null
echo "(kvbench lines: $BUILD/rxe-bench.log)"

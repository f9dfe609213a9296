#!/bin/sh
# rxe-bench.sh - RDMA figures, run inside the soft-RoCE VM
# (scripts/rxe-vm.sh run -- scripts/rxe-bench.sh; make bench-rdma).
# Soft-RoCE under emulation is slow, so only ratios measured in this one run
# mean anything:
#   - batched put/get goodput over rdma (kvbench --mode batch, batch 32) at
#     16 KiB and 64 KiB, against ib_write_bw / ib_read_bw at the same size;
#   - ibv_post_send calls per op at batch 32 (the transport's counters,
#     printed by tests/rdma/test_rdma's doorbell case);
#   - single-key vs shim-batched ops/s, 8 threads x 4 KiB;
#   - the two get paths, PUSH against LEASE (scripts/rxe-get-ab.sh: batch-32
#     goodput over ib_read_bw and ib_write_bw, single-key latency, 8 threads).
# Under a loaded host the speed of the emulated VM drifts from second to
# second, so the goodput rows are taken in interleaved rounds: each round
# runs ib_write_bw, kvbench put (PULL), kvbench put with KVSTORE_RDMA_PULL_MAX=0
# (RESERVE + WRITEs), ib_read_bw and kvbench get once each, back to back
# (at 16 KiB also put and get from 2 threads: 2 batches in flight, and from
# registered memory, kvbench --shared-buffers: no bounce copy, as perftest);
# a ratio is computed per round, and the medians over REPEAT rounds are
# printed (ratios: median of the per-round ratios). Bytes/s are computed as
# ops/s x size for both.
set -u
BUILD=${BUILD:-build}
REPEAT=${REPEAT:-3}
cd "$(dirname "$0")/.."
PORT=7471

PT_PORT=18600
. scripts/rxe-lib.sh

# kvb ARGS... -> median ops/s over its runs (--repeat REPEAT unless KVB_RUNS)
# (KVB_ENV: extra VAR=value words for kvbench's environment)
kvb() {
    env ${KVB_ENV:-} KVSTORE_TIMEOUT_MS=60000 LD_PRELOAD=${KVB_PRELOAD:-} timeout 300 "$BUILD/bin/kvbench" "$@" \
        --repeat "${KVB_RUNS:-$REPEAT}" --quiet 2>&1 |
        tee -a "$BUILD/rxe-bench.log" |
        awk '$1 == "run" { for (i = 1; i <= NF; i++) if ($(i + 1) == "ops/s") v[n++] = $i }
             END { if (!n) { print 0; exit } ; for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } ; print v[int(n / 2)] }'
}

rxe_kvstored $PORT /tmp/kvstored.log

# put/pull: PULL (1 round trip, kvstored READs the values; the default for
# chunks up to 256 KiB); put/rsv: RESERVE, then WRITEs + COMMIT (2 round
# trips; the default above: both sizes here); both against one ib_write_bw run.
echo "size    op       kvbatch_MBps  perftest_MBps  ratio (medians of $REPEAT interleaved rounds)"
for size in 16384 65536; do
    ops=$((size == 16384 ? 3200 : 1280))
    keys=$((size == 16384 ? 512 : 256))
    rounds=$(for r in $(seq "$REPEAT"); do
        w=$(perftest_bps ib_write_bw $size $((ops / 2)))
        # the two put paths in turn, first one then the other (order swapped each round)
        [ $((r % 2)) = 1 ] && p=$(KVB_RUNS=1 KVB_ENV=KVSTORE_RDMA_PULL_MAX=4294967295 kvb put --servers "$URL" \
            --mode batch --batch 32 --size $size --keys $keys --ops $ops)
        q=$(KVB_RUNS=1 KVB_ENV=KVSTORE_RDMA_PULL_MAX=0 kvb put --servers "$URL" --mode batch --batch 32 \
            --size $size --keys $keys --ops $ops)
        [ $((r % 2)) = 0 ] && p=$(KVB_RUNS=1 KVB_ENV=KVSTORE_RDMA_PULL_MAX=4294967295 kvb put --servers "$URL" \
            --mode batch --batch 32 --size $size --keys $keys --ops $ops)
        rd=$(perftest_bps ib_read_bw $size $((ops / 2)))
        g=$(KVB_RUNS=1 kvb get --servers "$URL" --mode batch --batch 32 --size $size --keys $keys --ops $ops)
        # two threads: two batches in flight on the one connection (default paths);
        # and one thread's batches with the values in registered memory
        # (kvs_alloc_buffer: zero-copy, no bounce buffer), as perftest's are
        p2=0 g2=0 pr=0 gr=0
        if [ $size = 16384 ]; then
            p2=$(KVB_RUNS=1 kvb put --servers "$URL" --mode batch --batch 32 --threads 2 --size $size \
                --keys $keys --ops $ops)
            g2=$(KVB_RUNS=1 kvb get --servers "$URL" --mode batch --batch 32 --threads 2 --size $size \
                --keys $keys --ops $ops)
            pr=$(KVB_RUNS=1 kvb put --servers "$URL" --mode batch --batch 32 --size $size --keys $keys \
                --ops $ops --shared-buffers)
            gr=$(KVB_RUNS=1 kvb get --servers "$URL" --mode batch --batch 32 --size $size --keys $keys \
                --ops $ops --shared-buffers)
        fi
        echo "$w $p $q $rd $g $p2 $g2 $pr $gr"
    done)
    echo "$rounds" | sed "s/^/  round (size $size): ib_write_bw B\/s, put\/pull ops\/s, put\/rsv ops\/s, ib_read_bw B\/s, get ops\/s, put and get with 2 threads, put and get from registered memory: /" \
        >>"$BUILD/rxe-bench.log"
    echo "$rounds" | awk -v s=$size '
        function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n ? a[int(n / 2)] : 0 }
        BEGIN { n = 0 }  # numeric: an unset n would key the first round as ""
        NF == 9 { w[n] = $1; p[n] = $2 * s; q[n] = $3 * s; rd[n] = $4; g[n] = $5 * s
                  rp[n] = $1 > 0 ? $2 * s / $1 : 0; rq[n] = $1 > 0 ? $3 * s / $1 : 0; rg[n] = $4 > 0 ? $5 * s / $4 : 0
                  pq[n] = $3 > 0 ? $2 / $3 : 0
                  p2[n] = $6 * s; g2[n] = $7 * s; rp2[n] = $1 > 0 ? $6 * s / $1 : 0; rg2[n] = $4 > 0 ? $7 * s / $4 : 0
                  pr[n] = $8 * s; gr[n] = $9 * s; rpr[n] = $1 > 0 ? $8 * s / $1 : 0; rgr[n] = $4 > 0 ? $9 * s / $4 : 0; n++ }
        END {
            printf "%-7d %-8s %12.1f %14.1f  %.2f\n", s, "put/pull", med(p, n) / 1e6, med(w, n) / 1e6, med(rp, n)
            printf "%-7d %-8s %12.1f %14.1f  %.2f\n", s, "put/rsv", med(q, n) / 1e6, med(w, n) / 1e6, med(rq, n)
            printf "%-7d %-8s %12.1f %14.1f  %.2f\n", s, "get", med(g, n) / 1e6, med(rd, n) / 1e6, med(rg, n)
            if (med(p2, n) > 0) {
                printf "%-7d %-8s %12.1f %14.1f  %.2f  (2 threads: 2 batches in flight)\n", s, "put", med(p2, n) / 1e6, med(w, n) / 1e6, med(rp2, n)
                printf "%-7d %-8s %12.1f %14.1f  %.2f  (2 threads)\n", s, "get", med(g2, n) / 1e6, med(rd, n) / 1e6, med(rg2, n) }
            if (med(pr, n) > 0) {
                printf "%-7d %-8s %12.1f %14.1f  %.2f  (values in registered memory: zero-copy)\n", s, "put", med(pr, n) / 1e6, med(w, n) / 1e6, med(rpr, n)
                printf "%-7d %-8s %12.1f %14.1f  %.2f  (buffers in registered memory)\n", s, "get", med(gr, n) / 1e6, med(rd, n) / 1e6, med(rgr, n) }
            printf "%-7d put/pull over put/rsv per round: median %.2f\n", s, med(pq, n) }'
done
# Where a batch's time goes: more runs of the 16 KiB put batches, each way
# in turn (REPEAT rounds), with the transport's counters (printed at
# kvs_close with KVSTORE_LOG=debug), per batch (100 batches a run); medians.
echo "16 KiB put batch 32, per batch (us, medians): slot = RESERVE round trip (the copy-in in"
echo "its shadow), chain = WRITEs + COMMIT, or the whole PULL round trip; copy = bounce copy-in"
for r in $(seq "$REPEAT"); do
    for pm in 4294967295 0; do
        KVSTORE_RDMA_PULL_MAX=$pm KVSTORE_LOG=debug KVSTORE_TIMEOUT_MS=60000 timeout 300 "$BUILD/bin/kvbench" \
            put --servers "$URL" --mode batch --batch 32 --size 16384 --keys 512 --ops 3200 --quiet 2>&1 |
            awk -v m=$([ $pm = 0 ] && echo put/rsv || echo put/pull) '$3 == "slot_wait_us" { s = $4 }
                $3 == "chain_wait_us" { w = $4 } $3 == "copy_us" { c = $4 }
                END { print m, s / 100, w / 100, c / 100 }'
    done
done | awk 'function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n ? a[int(n / 2)] : 0 }
    { k = $1; i = n[k]++; S[k, i] = $2; W[k, i] = $3; C[k, i] = $4 }
    END { split("put/pull put/rsv", ks, " "); for (x = 1; x <= 2; x++) { k = ks[x]; m = n[k]
            for (i = 0; i < m; i++) { s1[i] = S[k, i]; w1[i] = W[k, i]; c1[i] = C[k, i] }
            printf "  %-8s slot %6.0f  chain %6.0f  copy %5.0f  total %6.0f\n", k, med(s1, m), med(w1, m), med(c1, m), med(s1, m) + med(w1, m) + (k == "put/pull" ? med(c1, m) : 0) } }'

# 8 threads x 4 KiB single-key puts, without and with the shim, and the
# explicit batch API, in interleaved rounds; medians. Eight synchronous
# callers have at most 8 puts outstanding, so the shim's batches hold at
# most 8: one thread's explicit batches of 8 are what those callers could
# form at best, and 8 threads' batches of 32 (256 outstanding, up to 7 in
# flight on the connection) are the API's ceiling. Under write-behind
# (KVBATCH_PUT_MODE=writeback) a put returns once the shim holds its copy,
# so the callers' puts are not bounded by 8 outstanding.
echo "8 threads x 4 KiB puts over rdma: ops/s (medians of $REPEAT interleaved rounds)"
for r in $(seq "$REPEAT"); do
    a1=$(KVB_RUNS=1 kvb put --servers "$URL" --mode single --threads 8 --size 4096 --keys 1024 --ops 4000)
    a2=$(KVB_RUNS=1 KVB_PRELOAD=$PWD/$BUILD/lib/libkvbatch.so kvb put --servers "$URL" --mode single \
        --threads 8 --size 4096 --keys 1024 --ops 4000)
    a3=$(KVB_RUNS=1 kvb put --servers "$URL" --mode batch --batch 32 --threads 8 --size 4096 --keys 1024 \
        --ops 4000)
    a4=$(KVB_RUNS=1 kvb put --servers "$URL" --mode batch --batch 8 --threads 1 --size 4096 --keys 1024 \
        --ops 4000)
    a5=$(KVB_RUNS=1 KVB_PRELOAD=$PWD/$BUILD/lib/libkvbatch.so KVB_ENV=KVBATCH_PUT_MODE=writeback kvb put \
        --servers "$URL" --mode single --threads 8 --size 4096 --keys 1024 --ops 4000)
    echo "$a1 $a2 $a3 $a4 $a5"
done | awk 'function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n ? a[int(n / 2)] : 0 }
    BEGIN { n = 0 }
    { a[n] = $1; b[n] = $2; c[n] = $3; d[n] = $4; e[n] = $5; r[n] = $1 > 0 ? $2 / $1 : 0
      r8[n] = $4 > 0 ? $2 / $4 : 0; r32[n] = $3 > 0 ? $2 / $3 : 0; w32[n] = $3 > 0 ? $5 / $3 : 0; n++ }
    END { printf "  single-key %d, shim-batched %d, explicit 8 threads x batch 32 %d, explicit 1 thread x batch 8 %d, shim write-behind %d\n", med(a, n), med(b, n), med(c, n), med(d, n), med(e, n)
          printf "  per round, medians: shim/single %.2f, shim/(1 x batch 8) %.2f, shim/(8 x batch 32) %.2f, write-behind shim/(8 x batch 32) %.2f\n", med(r, n), med(r8, n), med(r32, n), med(w32, n) }'
kill $SRV
wait $SRV 2>/dev/null
echo "get paths, PUSH against LEASE (medians of $REPEAT interleaved rounds; rounds in $BUILD/rxe-bench.log):"
BUILD=$BUILD REPEAT=$REPEAT scripts/rxe-get-ab.sh | tee -a "$BUILD/rxe-bench.log" | grep -v '^round' | sed 's/^/  /'
echo "(kvbench lines: $BUILD/rxe-bench.log)"

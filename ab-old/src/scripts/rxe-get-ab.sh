#!/bin/sh
# rxe-get-ab.sh - the two RDMA get paths side by side, inside the soft-RoCE
# VM (scripts/rxe-vm.sh run -- scripts/rxe-get-ab.sh): PUSH (one round trip,
# kvstored WRITEs the values: KVSTORE_RDMA_PUSH_MAX=4294967295) against LEASE
# + READs/RELEASE (two: KVSTORE_RDMA_PUSH_MAX=0), in REPEAT interleaved rounds
# (the order swapped each round). Each round runs, back to back:
#   - ib_read_bw and ib_write_bw at 16 KiB and 64 KiB (perftest, -R), and the
#     batch-32 get at the same size both ways (goodput = ops/s x size);
#   - single-key 4 KiB gets, one thread (p50 latency per op) both ways;
#   - 8 threads x 4 KiB single-key gets (ops/s) both ways.
# Prints each round's numbers and, per workload, medians and the median of
# the per-round PUSH/LEASE ratios (docs/rdma.md "A small get chunk").
set -u
BUILD=${BUILD:-build}
REPEAT=${REPEAT:-3}
cd "$(dirname "$0")/.."
PT_PORT=18700
. scripts/rxe-lib.sh
rxe_kvstored 7491 /tmp/kvstored-gab.log
PUSH_ALL=4294967295

# get PUSH_MAX KVBENCH_ARGS... -> "ops/s p50_us" of one kvbench get run
get() {
    pm=$1
    shift
    KVSTORE_RDMA_PUSH_MAX=$pm KVSTORE_TIMEOUT_MS=60000 timeout 300 "$BUILD/bin/kvbench" get --servers "$URL" \
        "$@" --quiet 2>&1 | awk '$1 == "run" {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) == "ops/s") o = $i
                if ($i == "lat/op") { p = $(i + 2); u = (p ~ /ms$/) ? 1000 : 1; sub(/[mu]s$/, "", p); l = p * u }
            }
            print o, l + 0; exit }'
}

# ab NAME KVBENCH_ARGS... -> "NAME push OPS P50 lease OPS P50", order swapped by round
ab() {
    name=$1
    shift
    if [ $((r % 2)) = 1 ]; then
        p=$(get $PUSH_ALL "$@")
        q=$(get 0 "$@")
    else
        q=$(get 0 "$@")
        p=$(get $PUSH_ALL "$@")
    fi
    echo "round $r $name push ${p:-0 0} lease ${q:-0 0}"
}

for r in $(seq "$REPEAT"); do
    for size in 16384 65536; do
        ops=$((size == 16384 ? 1600 : 640))
        keys=$((size == 16384 ? 512 : 256))
        echo "round $r pt$size read $(perftest_bps ib_read_bw $size $((ops / 2))) write $(perftest_bps ib_write_bw $size $((ops / 2)))"
        ab "b$size" --mode batch --batch 32 --size $size --keys $keys --ops $ops
    done
    ab s4k1t --mode single --threads 1 --size 4096 --keys 256 --ops 400
    ab s4k8t --mode single --threads 8 --size 4096 --keys 1024 --ops 3200
done >/tmp/rxe-get-ab.rounds
cat /tmp/rxe-get-ab.rounds
awk '
    function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n ? a[int(n / 2)] : 0 }
    $3 ~ /^pt/ { s = substr($3, 3); rd[s, $2] = $5; wr[s, $2] = $7; next }
    { r = $2; k = $3; i = n[k]++; P[k, i] = $5; PL[k, i] = $6; Q[k, i] = $8; QL[k, i] = $9
      if (k ~ /^b/) { s = substr(k, 2); PR[k, i] = rd[s, r] > 0 ? $5 * s / rd[s, r] : 0; QR[k, i] = rd[s, r] > 0 ? $8 * s / rd[s, r] : 0
                      PW[k, i] = wr[s, r] > 0 ? $5 * s / wr[s, r] : 0; RD[k, i] = rd[s, r]; WR[k, i] = wr[s, r] } }
    END {
        split("b16384 b65536", bs, " ")
        for (x = 1; x <= 2; x++) { k = bs[x]; m = n[k]; s = substr(k, 2)
            for (i = 0; i < m; i++) { a[i] = P[k, i] * s; b[i] = Q[k, i] * s; c[i] = RD[k, i]; d[i] = WR[k, i]; e[i] = PR[k, i]; f[i] = QR[k, i]; g[i] = PW[k, i]; h[i] = Q[k, i] > 0 ? P[k, i] / Q[k, i] : 0 }
            printf "get batch 32 x %d B: PUSH %.1f MB/s, LEASE %.1f MB/s, ib_read_bw %.1f, ib_write_bw %.1f; PUSH/read_bw %.2f, LEASE/read_bw %.2f, PUSH/write_bw %.2f, PUSH/LEASE %.2f (%d rounds)\n",
                s, med(a, m) / 1e6, med(b, m) / 1e6, med(c, m) / 1e6, med(d, m) / 1e6, med(e, m), med(f, m), med(g, m), med(h, m), m }
        k = "s4k1t"; m = n[k]
        for (i = 0; i < m; i++) { a[i] = PL[k, i]; b[i] = QL[k, i]; h[i] = PL[k, i] > 0 ? QL[k, i] / PL[k, i] : 0 }
        printf "single-key 4 KiB get, 1 thread: p50 PUSH %.0f us, LEASE %.0f us; LEASE/PUSH %.2f (%d rounds)\n", med(a, m), med(b, m), med(h, m), m
        k = "s4k8t"; m = n[k]
        for (i = 0; i < m; i++) { a[i] = P[k, i]; b[i] = Q[k, i]; h[i] = Q[k, i] > 0 ? P[k, i] / Q[k, i] : 0 }
        printf "8 threads x 4 KiB gets: PUSH %.0f ops/s, LEASE %.0f ops/s; PUSH/LEASE %.2f (%d rounds)\n", med(a, m), med(b, m), med(h, m), m
    }' /tmp/rxe-get-ab.rounds
kill $SRV
wait $SRV 2>/dev/null

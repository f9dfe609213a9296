#!/bin/sh
# rxe-put-ab.sh - the two RDMA put paths side by side, inside the soft-RoCE
# VM (scripts/rxe-vm.sh run -- scripts/rxe-put-ab.sh): PULL (one round trip,
# kvstored READs the values: KVSTORE_RDMA_PULL_MAX=4294967295) against RESERVE +
# WRITEs/COMMIT (two: KVSTORE_RDMA_PULL_MAX=0), in REPEAT interleaved rounds (the
# order swapped each round), for 32 x 16 KiB and 32 x 4 KiB batches and 8
# threads x 4 KiB single-key puts. Prints each round's ops/s and, per
# workload, the median of the per-round PULL/RESERVE ratios (docs/rdma.md).
set -u
BUILD=${BUILD:-build}
REPEAT=${REPEAT:-5}
cd "$(dirname "$0")/.."
. scripts/rxe-lib.sh
rxe_kvstored 7490 /tmp/kvstored-ab.log

# one PULL_MAX KVBENCH_ARGS... -> ops/s of one run
one() {
    pm=$1
    shift
    KVSTORE_RDMA_PULL_MAX=$pm KVSTORE_TIMEOUT_MS=60000 timeout 120 "$BUILD/bin/kvbench" put --servers "$URL" \
        "$@" --quiet 2>&1 | awk '$1 == "run" { for (i = 1; i <= NF; i++) if ($(i + 1) == "ops/s") print $i }'
}
for r in $(seq "$REPEAT"); do
    for w in "b16k:--mode batch --batch 32 --size 16384 --keys 512 --ops 1600" \
        "b4k:--mode batch --batch 32 --size 4096 --keys 1024 --ops 3200" \
        "s4k8t:--mode single --threads 8 --size 4096 --keys 1024 --ops 1000"; do
        name=${w%%:*}
        args=${w#*:}
        if [ $((r % 2)) = 1 ]; then
            p=$(one 4294967295 $args)
            q=$(one 0 $args)
        else
            q=$(one 0 $args)
            p=$(one 4294967295 $args)
        fi
        echo "round $r $name pull ${p:-0} rsv ${q:-0}"
    done
done >/tmp/rxe-put-ab.rounds
cat /tmp/rxe-put-ab.rounds
awk '
    function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n ? a[int(n / 2)] : 0 }
    $7 > 0 { k = $3; r[k, n[k]++] = $5 / $7 }
    END { split("s4k8t b4k b16k", ks, " "); for (x = 1; x <= 3; x++) { k = ks[x]; m = n[k]
            for (i = 0; i < m; i++) v[i] = r[k, i]
            printf "%-6s PULL/RESERVE per round: median %.2f (%d rounds)\n", k, med(v, m), m } }' \
    /tmp/rxe-put-ab.rounds
kill $SRV
wait $SRV 2>/dev/null

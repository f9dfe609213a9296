#!/bin/sh
# rxe-smoke.sh - verbs smoke check, run inside the soft-RoCE VM
# (scripts/rxe-vm.sh): a device is there, an rdma_cm connection carries
# data (rping), and RDMA WRITE and READ move bytes (ib_write_bw,
# ib_read_bw). Exits non-zero on the first failure.
set -u
A=${KVS_RDMA_ADDR_A:?run inside scripts/rxe-vm.sh}
DEV_A=${KVS_RDMA_DEV_A:?}
DEV_B=${KVS_RDMA_DEV_B:?}

fail() {
    echo "rxe-smoke: FAILED: $*"
    exit 1
}

ibv_devices | grep -q "$DEV_A" || fail "no device $DEV_A"

# On the veth pair a client's traffic to A must leave by device B's netdev
# (so it crosses the wire and rdma_cm binds device B), not short-cut via lo.
if [ "${KVS_RXE_NET:-}" = veth ]; then
    nd_b=$(rdma link show "$DEV_B/1" | awk '{ for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1) }')
    route=$(ip -o route get "$A")
    echo "rxe-smoke: route to $A: $route"
    case "$route" in *" dev $nd_b "*) ;; *) fail "route to $A does not leave by $nd_b ($DEV_B)" ;; esac
fi

timeout 20 rping -s -a "$A" -C 2 >/dev/null 2>&1 &
sleep 1
timeout 15 rping -c -a "$A" -C 2 -V >/dev/null 2>&1 || fail "rping over rdma_cm"
wait

# perftest's client can reach the server before its rdma_cm listener is up
# (a loaded host under TCG: RDMA_CM_EVENT_REJECTED); up to 3 tries, waiting
# longer each time, before calling the stack broken.
for t in ib_write_bw ib_read_bw; do
    ok=0
    for try in 1 2 3; do
        timeout 30 $t -R -d "$DEV_A" -s 4096 -n 200 -F >/dev/null 2>&1 &
        srv=$!
        sleep $((2 * try))
        if out=$(timeout 30 $t -R -d "$DEV_B" -s 4096 -n 200 -F "$A" 2>&1); then
            ok=1
            wait $srv
            break
        fi
        kill $srv 2>/dev/null
        wait $srv 2>/dev/null
        echo "rxe-smoke: $t try $try failed: $(echo "$out" | grep -m1 -i 'error\|fail')"
    done
    [ $ok = 1 ] || fail "$t: $out"
    echo "$out" | awk -v t=$t '$1 == 4096 { print "rxe-smoke: " t " 4 KiB: " $4 " MB/s" }'
done
echo "rxe-smoke: ok (devices $DEV_A $DEV_B, net ${KVS_RXE_NET:-?})"

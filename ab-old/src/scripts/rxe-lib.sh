# rxe-lib.sh - sourced by the measurement scripts that run inside the soft-RoCE
# VM (rxe-bench.sh, rxe-put-ab.sh, rxe-get-ab.sh). Needs BUILD and the VM's
# KVS_RDMA_ADDR_A / KVS_RDMA_DEV_A / KVS_RDMA_DEV_B (scripts/rxe-vm.sh sets them).
A=${KVS_RDMA_ADDR_A:?run inside scripts/rxe-vm.sh}
DEV_A=${KVS_RDMA_DEV_A:?run inside scripts/rxe-vm.sh}
DEV_B=${KVS_RDMA_DEV_B:?run inside scripts/rxe-vm.sh}
PT_PORT=${PT_PORT:-18600}

# rxe_kvstored PORT LOG: starts kvstored serving RDMA on A:PORT (log in LOG)
# and waits for it; sets SRV (its pid) and URL. Exits if it does not come up.
rxe_kvstored() {
    "$BUILD/bin/kvstored" --memory 512M --listen 127.0.0.1:0 --rdma-listen "$A:$1" >"$2" 2>&1 &
    SRV=$!
    # Registering the pool pins it: slow under emulation.
    for _ in $(seq 60); do grep -q "rdma listening" "$2" && break; sleep 1; done
    grep -q "rdma listening" "$2" || { cat "$2"; kill $SRV; exit 1; }
    URL="rdma://$A:$1"
}

# perftest_bps TOOL SIZE ITERS -> bytes/s of one perftest run (-R), server on
# DEV_A, client on DEV_B; a fresh port each run, so that a server still
# closing on the last one does not refuse this one. 0 if it failed.
perftest_bps() {
    PT_PORT=$((PT_PORT + 1))
    timeout 60 "$1" -R -p $PT_PORT -d "$DEV_A" -s "$2" -n "$3" -F >/dev/null 2>&1 &
    sleep 2
    v=$(timeout 60 "$1" -R -p $PT_PORT -d "$DEV_B" -s "$2" -n "$3" -F "$A" 2>/dev/null |
        awk -v s="$2" '$1 == s { printf "%.0f\n", $5 * 1e6 * s }')
    wait
    echo "${v:-0}"
}

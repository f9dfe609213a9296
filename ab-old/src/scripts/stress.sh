#!/bin/bash
# stress.sh - the full fault-injection stress run (make stress; docs/stress.md).
# Bounded phases of tools/kvstress, each printing its figures:
#   1-3  loopback: direct, through the shim, shim write-behind (+ the crash check),
#        each with kvstored SIGKILLed and restarted KILLS times
#   5-   as root, if network namespaces work here: kvstored in one namespace,
#        kvstress in another, joined by a veth pair (scripts/netns.sh), with kills;
#        then, if tc netem works (kernel sch_netem), delay/loss/reorder direct and
#        through the shim with kills, and a slow, lossy link without kills.
#        Phases that cannot run here are named as NOT RUN.
# The namespaces (kvb-stress-PID-s/-c) are deleted on exit, whatever happens.
#   BUILD=build PHASE_SECONDS=20 KILLS=4 THREADS=8 scripts/stress.sh
set -u
BUILD=${BUILD:-build}
PHASE_SECONDS=${PHASE_SECONDS:-20}
KILLS=${KILLS:-4}
THREADS=${THREADS:-8}
here=$(cd "$(dirname "$0")" && pwd)
kvstress=$(realpath "$BUILD/bin/kvstress")
shim=$(realpath "$BUILD/lib/libkvbatch.so")
work=$(mktemp -d /tmp/kvb-stress-XXXXXX)
ns=kvb-stress-$$
ns_up=0
cleanup() {
    [ "$ns_up" = 1 ] && "$here/netns.sh" down "$ns"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export KVSTORE_LOG=${KVSTORE_LOG:-error}

results=()
failed=0
# phase NAME [env ...] -- [kvstress args ...]: runs one phase, keeps its JSON line.
phase() {
    local name=$1
    shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    echo "=== $name"
    local out
    out="$work/$(echo "$name" | tr -c 'a-z0-9\n' '_').out"
    env "${envs[@]}" "$@" > "$out"
    local rc=$?
    grep -v '^{' "$out"
    local json
    json=$(grep '^{' "$out" | tail -1)
    [ "$rc" -ne 0 ] && failed=$((failed + 1))
    results+=("$name|$rc|$json")
}

common=(--threads "$THREADS" --seconds "$PHASE_SECONDS" --ops 100000000)
phase "loopback direct, $KILLS kills" -- \
    "$kvstress" "${common[@]}" --kills "$KILLS"
phase "loopback shim, $KILLS kills" LD_PRELOAD="$shim" KVBATCH_STATS_FILE="$work/s-%p.prom" \
    KVBATCH_STATS_INTERVAL_MS=50 -- "$kvstress" "${common[@]}" --kills "$KILLS"
phase "loopback shim writeback, $KILLS kills" LD_PRELOAD="$shim" KVBATCH_PUT_MODE=writeback \
    KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
    "$kvstress" "${common[@]}" --kills "$KILLS"
phase "loopback shim writeback crash check" LD_PRELOAD="$shim" KVBATCH_PUT_MODE=writeback \
    KVBATCH_POLICY=fixed KVBATCH_WINDOW_US=300ms KVBATCH_BATCH_CALLS=pass \
    KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
    "$kvstress" --threads 2 --seconds 2 --writeback-check

if [ "$(id -u)" -eq 0 ] && "$here/netns.sh" check; then
    subnet=10.199.$(( ($$ % 200) + 10 ))
    "$here/netns.sh" up "$ns" "$subnet" && ns_up=1
fi
if [ "$ns_up" = 1 ]; then
    in_client=(ip netns exec "$ns-c")
    remote=(--netns "$ns-s" --listen "$subnet.1:7070")
    echo "--- netns $ns-s ($subnet.1) <-> $ns-c ($subnet.2) over a veth pair"
    phase "netns veth direct, $KILLS kills" -- "${in_client[@]}" "$kvstress" "${common[@]}" \
        "${remote[@]}" --kills "$KILLS"
    netem="delay 2ms 1ms loss 1% reorder 5% 50%"
    # shellcheck disable=SC2086
    if "$here/netns.sh" netem "$ns" $netem 2>/dev/null; then
        echo "--- netem: $netem"
        phase "netns netem direct, $KILLS kills" -- "${in_client[@]}" "$kvstress" "${common[@]}" \
            "${remote[@]}" --kills "$KILLS"
        phase "netns netem shim, $KILLS kills" LD_PRELOAD="$shim" \
            KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
            "${in_client[@]}" "$kvstress" "${common[@]}" "${remote[@]}" --kills "$KILLS"
        slow="delay 20ms 10ms loss 5% reorder 10% 50%"
        # shellcheck disable=SC2086
        "$here/netns.sh" netem "$ns" $slow
        echo "--- netem: $slow"
        phase "netns slow lossy shim, no kills" LD_PRELOAD="$shim" \
            KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
            "${in_client[@]}" "$kvstress" "${common[@]}" "${remote[@]}"
    else
        echo "--- NOT RUN: netem phases (tc netem unavailable: the kernel has no sch_netem)"
        phase "netns veth shim, $KILLS kills" LD_PRELOAD="$shim" \
            KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
            "${in_client[@]}" "$kvstress" "${common[@]}" "${remote[@]}" --kills "$KILLS"
        # Without netem, a tbf bottleneck still gives queueing delay and overflow drops.
        if "$here/netns.sh" rate "$ns" 20mbit 2>/dev/null; then
            echo "--- tbf: 20mbit, 50 ms queue (delay under load, drops on overflow)"
            phase "netns 20mbit tbf shim, $KILLS kills" LD_PRELOAD="$shim" \
                KVBATCH_STATS_FILE="$work/s-%p.prom" KVBATCH_STATS_INTERVAL_MS=50 -- \
                "${in_client[@]}" "$kvstress" "${common[@]}" "${remote[@]}" --kills "$KILLS"
            phase "netns 20mbit tbf direct, no kills" -- "${in_client[@]}" "$kvstress" \
                "${common[@]}" "${remote[@]}"
        fi
    fi
else
    echo "--- NOT RUN: netns phases (need root and iproute2: scripts/netns.sh check)"
fi

echo
echo "=== summary"
printf '%-42s %4s %9s %9s %6s %5s %5s %6s %9s %9s\n' phase pass "ops" "ok" wrong never twice kills recov_ms srv_MiB
for r in "${results[@]}"; do
    IFS='|' read -r name rc json <<<"$r"
    get() { local v; v=$(echo "$json" | grep -o "\"$1\":-\\?[0-9.]*" | cut -d: -f2); echo "${v:-0}"; }
    ops=$(( $(get put_issued) + $(get get_issued) ))
    ok=$(( $(get put_ok) + $(get get_ok) ))
    printf '%-42s %4s %9s %9s %6s %5s %5s %6s %9s %9.1f\n' "$name" "$([ "$rc" = 0 ] && echo yes || echo NO)" \
        "$ops" "$ok" "$(get wrong_values)" "$(get never_completed)" "$(get completed_twice)" \
        "$(get kills)" "$(get worst_recovery_ms)" "$(awk -v b="$(get server_rss_max)" 'BEGIN { print b / 1048576 }')"
done
echo "stress.sh: ${#results[@]} phases, $failed failed"
[ "$failed" -eq 0 ]

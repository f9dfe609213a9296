#!/bin/bash
# valgrind.sh - kvstored under valgrind --leak-check=full --error-exitcode=1,
# through a real client workload, then SIGTERM; fails on any leak or memory
# error. Workload: kvstress (8 threads of self-verifying puts/gets and async
# batches, without and through the shim), and, left open at the SIGTERM, a
# connection with a half-written PUT (a reserved slot) and one that sent
# GETs and never read the replies (pinned items) - the clean-up paths.
#   BUILD=build scripts/valgrind.sh
set -u -o pipefail # a failing kvstress fails the script, though piped to tail
BUILD=${BUILD:-build}
SECONDS_PER_PHASE=${VALGRIND_PHASE_SECONDS:-4}
work=$(mktemp -d /tmp/kvb-valgrind-XXXXXX)
vpid=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    [ -n "$vpid" ] && kill -KILL "$vpid" 2>/dev/null
    exec 3>&- 4>&- 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --error-exitcode=1 --log-file="$work/valgrind.log" \
    "$BUILD/bin/kvstored" --listen 127.0.0.1:0 --memory 64M > "$work/out" &
vpid=$!
port=
for _ in $(seq 300); do # valgrind starts slowly: up to 30 s
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/out")
    [ -n "$port" ] && break
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "valgrind.sh: kvstored did not start under valgrind"
    cat "$work/valgrind.log"
    exit 1
fi
addr=127.0.0.1:$port
echo "valgrind.sh: kvstored (pid $vpid) under valgrind on $addr"

export KVSTORE_LOG=error
fail=0
"$BUILD/bin/kvstress" --servers "$addr" --threads 8 --seconds "$SECONDS_PER_PHASE" --ops 200000 \
    --client-growth-mb 256 | tail -12 || fail=1
LD_PRELOAD=$(realpath "$BUILD/lib/libkvbatch.so") KVBATCH_STATS_FILE="$work/stats-%p.prom" \
    KVBATCH_STATS_INTERVAL_MS=50 \
    "$BUILD/bin/kvstress" --servers "$addr" --threads 8 --seconds "$SECONDS_PER_PHASE" \
    --ops 200000 --client-growth-mb 256 | tail -12 || fail=1

# Wire frame helpers (transport/wire.h): 24-byte header, then entries. The
# format strings are built on purpose: printf turns "\xNN" into that byte.
# shellcheck disable=SC2059
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
# shellcheck disable=SC2059
hdr() { printf 'KVB1\x01'; printf "\\x$(printf %02x "$1")"; printf '\x00\x00'; le32 "$2"; le32 "$3"; le32 7; le32 0; }
# A PUT of 100000 bytes for key "vg.half" of which only 1000 are sent: a reserved slot.
exec 3<>"/dev/tcp/127.0.0.1/$port"
{ hdr 1 1 $((8 + 7 + 100000)); printf '\x07\x00\x00\x00'; le32 100000; printf 'vg.half'; head -c 1000 /dev/zero; } >&3
# GETs of a stored key, replies never read: pinned items in queued replies.
exec 4<>"/dev/tcp/127.0.0.1/$port"
{ hdr 1 1 $((8 + 6 + 65536)); printf '\x06\x00\x00\x00'; le32 65536; printf 'vg.big'; head -c 65536 /dev/zero; } >&4
for _ in $(seq 256); do hdr 2 1 $((8 + 6)); printf '\x06\x00\x00\x00'; le32 65536; printf 'vg.big'; done >&4
sleep 2
# STATS over a third connection: those two must hold pinned items now, or the
# clean-up paths this script is meant to exercise were not reached.
exec 5<>"/dev/tcp/127.0.0.1/$port"
hdr 5 0 0 >&5
timeout 3 cat <&5 > "$work/stats" 2>/dev/null
exec 5>&-
pinned=$(tr -c '[:print:]\n' '\n' < "$work/stats" | sed -n 's/^pinned_items \([0-9]*\)$/\1/p')
echo "valgrind.sh: pinned_items at SIGTERM: ${pinned:-unknown}"
if [ "${pinned:-0}" -lt 2 ]; then
    echo "valgrind.sh: expected pinned items (half-written put, unsent replies) at SIGTERM"
    fail=1
fi

kill -TERM "$vpid"
wait "$vpid"
rc=$?
vpid=
exec 3>&- 4>&-
grep -E "definitely lost|indirectly lost|possibly lost|ERROR SUMMARY|All heap blocks" "$work/valgrind.log"
if [ "$rc" -ne 0 ]; then
    echo "valgrind.sh: kvstored exited $rc under valgrind:"
    sed -n '/HEAP SUMMARY/,$p' "$work/valgrind.log" | head -80
    fail=1
fi
[ "$fail" -eq 0 ] && echo "valgrind.sh: PASS (no leaks, no errors, exit 0 after SIGTERM)" ||
    echo "valgrind.sh: FAIL"
exit "$fail"

#!/bin/sh
# server-bytes-per-key.sh - kvstored's memory beyond the values, per key:
# starts a kvstored on 127.0.0.1, puts KEYS values of SIZE with kvbench,
# and prints (VmRSS after - VmRSS at start - pool bytes the values use) /
# keys, beside what the store's own structures account for (item, index,
# page tables; docs/server.md "Memory layout").
#
#   scripts/server-bytes-per-key.sh [KEYS [SIZE]]     defaults: 48757 4K
#
# BUILD (default build) names the tree; PORT (default 17399) the port.
# A measurement, not a test: run it on a quiet machine.
set -eu
BUILD=${BUILD:-build}
KEYS=${1:-48757}
SIZE=${2:-4K}
PORT=${PORT:-17399}
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
"$BUILD/bin/kvstored" --listen "127.0.0.1:$PORT" --memory 256M --unix none >"$dir/out" 2>&1 &
pid=$!
i=0
until grep -q '^listening on' "$dir/out"; do
    i=$((i + 1))
    if [ "$i" -gt 100 ]; then
        echo "server-bytes-per-key: kvstored did not start:" >&2
        cat "$dir/out" >&2
        exit 1
    fi
    sleep 0.1
done
rss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status"; }
stat() { awk -v n="$1" '$1 == n { print $2; exit }' "$dir/stats"; }
r0=$(rss)
"$BUILD/bin/kvbench" put --servers "127.0.0.1:$PORT" --size "$SIZE" --keys "$KEYS" \
    --ops "$KEYS" --prefix k >/dev/null
r1=$(rss)
"$BUILD/bin/kvbench" --server-stats --servers "127.0.0.1:$PORT" >"$dir/stats"
items=$(stat items)
used=$(stat memory_used)
pages=$(stat pages_total)
klen=$(printf 'k.%d' $((KEYS - 1)) | wc -c) # kvbench's keys: PREFIX.INDEX
awk -v r0="$r0" -v r1="$r1" -v used="$used" -v items="$items" -v pages="$pages" \
    -v klen="$klen" 'BEGIN {
    if (items == 0) { print "no items stored"; exit 1 }
    # glibc chunk of a 64-byte item header plus its key; index slots of 16 bytes (item pointer and hash) at <= 3/4 load
    item = int((64 + klen + 8 + 15) / 16) * 16; if (item < 32) item = 32
    cap = 16; while (items * 4 > cap * 3) cap *= 2
    idx = cap * 16 / items
    pagetab = pages * 16 / items # per page: its item list head (8) and pin count (4), rounded
    # slab free-list links: 2 bytes per chunk of every page in use
    per_page = int(1048576 / (used / items)); upages = int((items + per_page - 1) / per_page)
    links = upages * per_page * 2 / items
    printf "keys %d, key %d bytes, RSS %.1f -> %.1f MiB, values use %.1f MiB of pool\n",
        items, klen, r0 / 1048576, r1 / 1048576, used / 1048576
    printf "beyond the values: %.1f bytes per key\n", (r1 - r0 - used) / items
    printf "  item header and key (heap chunk)   %6.1f\n", item
    printf "  index (%d slots of 16 bytes)   %6.1f\n", cap, idx
    printf "  page tables                        %6.1f\n", pagetab
    printf "  free-list links                    %6.1f\n", links
    printf "  the rest (heap slack, connection)  %6.1f\n", (r1 - r0 - used) / items - item - idx - pagetab - links
}'

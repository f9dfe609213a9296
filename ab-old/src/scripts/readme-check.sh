#!/bin/bash
# readme-check.sh - runs the README's Quick start commands "by hand" exactly as
# written (the indented block after "Then, by hand"), with two substitutions:
# a free loopback port for 127.0.0.1:7070 and a temporary directory for /tmp.
# Every command must exit 0 (kill %1 stops the kvstored it started), and every
# examples/engine.py run must print the same "checksum" line and "OK" (the
# same --prefix without and with the shim). Run from the source tree's root
# after make.
# Exit status: 0 good, 1 a check failed.
set -u
tmp=$(mktemp -d /tmp/kvb-readme.XXXXXX) || exit 1
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail() {
    echo "readme-check: $*" >&2
    exit 1
}

# The block: indented lines after "Then, by hand", up to the first unindented one.
awk '/^Then, by hand/ { on = 1; next }
     on && /^    / { sub(/^    /, ""); print; seen = 1; next }
     on && seen && /^[^ ]/ { exit }' README.md >"$tmp/block"
[ -s "$tmp/block" ] || fail "no indented block after 'Then, by hand' in README.md"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|127\.0\.0\.1:7070|127.0.0.1:$port|g" -e "s|/tmp/|$tmp/|g" "$tmp/block" >"$tmp/script"
grep -q "127.0.0.1:$port" "$tmp/script" || fail "the block names no 127.0.0.1:7070"

# One command (continuation lines joined) at a time, in one shell, so that & and
# %1 work as at a prompt; after a command put in the background, wait for the port.
{
    echo 'set -u'
    echo 'ran=0'
    cmd=
    while IFS= read -r line; do
        cmd="$cmd$line"
        case "$line" in *\\) cmd="${cmd%\\} "; continue ;; esac
        printf 'echo "$ %s" >&2\n' "$(printf '%s' "$cmd" | sed 's/["$`\\]/\\&/g')"
        case "$cmd" in
        *'&')
            printf '%s\n' "${cmd%&} >>\"$tmp/server\" 2>&1 &"
            printf 'for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/%s) 2>/dev/null && break; sleep 0.1; done\n' "$port"
            ;;
        *)
            printf '%s </dev/null >>"%s/out" 2>&1 || { echo "readme-check: exit $? from the line above" >&2; cat "%s/out" >&2; exit 1; }\n' \
                "$cmd" "$tmp" "$tmp"
            echo 'ran=$((ran + 1))'
            ;;
        esac
        cmd=
    done <"$tmp/script"
    echo 'echo "readme-check: $ran commands ran" >&2'
} >"$tmp/run.sh"
KVSTORE_RUNTIME_DIR=$tmp timeout 600 bash "$tmp/run.sh" || fail "the Quick start failed (above)"
sleep 0.2

sums=$(sed -n 's/^checksum //p' "$tmp/out" | sort -u)
runs=$(grep -c '^checksum ' "$tmp/out")
oks=$(grep -c '^OK$' "$tmp/out")
[ "$runs" -ge 2 ] || fail "fewer than 2 engine.py runs printed a checksum ($runs)"
[ "$oks" -eq "$runs" ] || fail "$runs engine.py runs, $oks said OK"
[ "$(echo "$sums" | wc -l)" -eq 1 ] || fail "the engine.py runs' checksums differ: $(echo $sums)"
echo "readme-check: the Quick start ran as written; $runs engine.py runs, one checksum $sums"

#!/bin/bash
# layerwise-ab.sh [--rounds N] [--modes M,M] [--phase save|load] -- LAYERWISE ARGS...
# Does this engine shape gain from the shim? Runs `kvbench layerwise` with the
# given shape (e.g. --model llama3-70b --tp 8 --block 16 --requests 8
# --compute-us 100) against one local kvstored, for each I/O mode (default
# single,async: a connector calling kvs_put/kvs_get per slice, or keeping a
# layer's slices in flight), without and with LD_PRELOAD=libkvbatch.so, in N
# interleaved rounds (default 3, order alternating). Prints a Markdown table:
# medians of ops/s, GB/s and the exposed time (save: exposed save per request;
# load: wait per request), and each median's ratio to no shim in the same mode
# and to no shim single-key. kvstored binds 127.0.0.1; every run is bounded by
# `timeout`. Raw output goes to $BUILD/bench/layerwise-ab/.
# Example: scripts/layerwise-ab.sh -- --model llama3-70b --tp 8 --block 16 --requests 8
set -u
BUILD=${BUILD:-build}
ROUNDS=3
MODES=single,async
PHASE=save
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --phase) PHASE=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "layerwise-ab.sh: unknown argument '$1' (accepted: --rounds N, --modes M,M, --phase save|load, -- LAYERWISE ARGS)" >&2; exit 2 ;;
    esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "layerwise-ab.sh: --rounds '$ROUNDS' is not a count from 1 to 99" >&2; exit 2; }
[[ "$PHASE" = save || "$PHASE" = load ]] || { echo "layerwise-ab.sh: --phase '$PHASE' is not save or load" >&2; exit 2; }
for m in ${MODES//,/ }; do
    case "$m" in single|batch|async) ;; *)
        echo "layerwise-ab.sh: mode '$m' is not single, batch or async" >&2; exit 2 ;;
    esac
done
KVBENCH=$BUILD/bin/kvbench
KVSTORED=$BUILD/bin/kvstored
SHIM=$(realpath "$BUILD/lib/libkvbatch.so" 2>/dev/null || true)
for f in "$KVBENCH" "$KVSTORED" "$SHIM"; do
    [ -n "$f" ] && [ -e "$f" ] || { echo "layerwise-ab.sh: $BUILD is not built (make BUILD=$BUILD)" >&2; exit 1; }
done
OUT=$BUILD/bench/layerwise-ab
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.log
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$KVSTORED" --listen 127.0.0.1:0 --memory 3G >"$OUT/kvstored.log" 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q "listening on" "$OUT/kvstored.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on \(.*\)/\1/p' "$OUT/kvstored.log" | head -1)
[ -n "$ADDR" ] || { echo "layerwise-ab.sh: kvstored did not start" >&2; cat "$OUT/kvstored.log" >&2; exit 1; }

# The shape must be valid before we spend minutes on it.
"$KVBENCH" layerwise --servers "$ADDR" "$@" --rounds 1 --phase save --seconds 30 --quiet \
    >"$OUT/check.log" 2>&1 || { echo "layerwise-ab.sh: kvbench layerwise $* failed:" >&2; cat "$OUT/check.log" >&2; exit 2; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# field NAME FILE: a number from kvbench's JSON result (phase $PHASE)
field() { sed -n "/layerwise-$PHASE/s/.*\"$1\": \\([0-9.]*\\).*/\\1/p" "$2" | tail -1; }
EXPOSED=exposed_p50_us
[ "$PHASE" = load ] && EXPOSED=req_wait_p50_us
declare -A OPS GBS EXP
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="none shim"; else order="shim none"; fi
    for m in ${MODES//,/ }; do
        for v in $order; do
            pre=()
            [ "$v" = shim ] && pre=(env "LD_PRELOAD=$SHIM")
            f="$OUT/${v}__${m}__r$r"
            "${pre[@]}" timeout 300 "$KVBENCH" layerwise --servers "$ADDR" "$@" --mode "$m" \
                --phase "$([ "$PHASE" = load ] && echo both || echo save)" --seconds 120 --quiet \
                --json "$f.json" >"$f.log" 2>&1 || echo "    ($v $m round $r: kvbench failed, see $f.log)" >&2
            [ -s "$f.json" ] || continue
            OPS[$v,$m]+="$(field ops_per_s "$f.json") "
            GBS[$v,$m]+="$(awk -v b="$(field bytes_per_s "$f.json")" 'BEGIN {printf "%.2f", b / 1e9}') "
            EXP[$v,$m]+="$(field "$EXPOSED" "$f.json") "
        done
    done
done
cleanup

med() { printf '%s\n' $1 | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b}'; }
what="exposed save/request p50 ms"
[ "$PHASE" = load ] && what="wait/request p50 ms"
echo "## kvbench layerwise $*, $PHASE, median of $ROUNDS rounds"
echo
echo "$(nproc) CPUs, loopback TCP; load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| mode | shim | ops/s | GB/s | $what | / no shim, same mode | / no shim, single-key |"
echo "|---|---|---:|---:|---:|---:|---:|"
base_single=$(med "${EXP[none,single]:-}")
for m in ${MODES//,/ }; do
    base=$(med "${EXP[none,$m]:-}")
    for v in none shim; do
        e=$(med "${EXP[$v,$m]:-}")
        ms=$(awk -v e="$e" 'BEGIN {if (e == "-") print "-"; else printf "%.1f", e / 1000}')
        echo "| $m | $([ "$v" = shim ] && echo yes || echo no) | $(med "${OPS[$v,$m]:-}") | $(med "${GBS[$v,$m]:-}") | $ms | $(ratio "$e" "$base") | $(ratio "$e" "$base_single") |"
    done
done
echo
echo "(raw runs: $OUT/)"

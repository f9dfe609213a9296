#!/bin/bash
# sync-bound.sh [--rounds N] [--seconds S] [--threads T[,T...]] [--place free|pinned|both]
#               [--ops put,get] [--variant NAME=VAR=V[,VAR=V...]]... [--no-writeback]
# Synchronous callers with and without the shim, side by side: what the shim
# gains or costs them on this host, and what bounds the gain.
#
# A synchronous kvs_put/kvs_get under the shim sleeps until its batch's reply
# comes and is then woken: one wake-up per op that no batching removes. Where the
# waker and the caller run on different CPUs, that wake-up crosses CPUs, and on a
# virtual machine whose idle vCPUs halt it costs the hypervisor's wake-up path.
# This script measures, in one run:
#   1. the wake-up round trip (`perf bench sched pipe`: two tasks passing a token)
#      with the tasks free to use every CPU, then both pinned to CPU 0;
#   2. kvbench, T threads (default 16; a comma list runs each) x 4 KiB single-key
#      puts and gets (`kvbench put|get --threads T --size 4K --mode single
#      --seconds S`), without the shim ("none"), with it as configured by default
#      ("shim"), puts also with KVBATCH_PUT_MODE=writeback (a put returns once
#      copied: no wake-up to wait for; --no-writeback leaves it out), and each
#      --variant: the shim with those variables (e.g. --variant
#      best=KVBATCH_POLICY=adaptive,KVBATCH_WINDOW_US=20,KVBATCH_MAX_INFLIGHT=2).
#      First with the client and kvstored free to use every CPU, then with both
#      pinned to CPU 0 (--place picks one); N interleaved rounds (default 3): every
#      variant once per round, the order rotated each round.
# It prints Markdown tables: per thread count and op the median ops/s, the
# median of the per-round ratios to "none" with every round's ratio, and the
# median p99 op latency (kvbench's). If pinning everything to one CPU raises the
# shim's ops/s, the host's cross-CPU wake-ups, not the batcher, bound the gain
# (docs/tuning.md, "What bounds synchronous callers").
# Raw output goes to $BUILD/bench/sync-bound/. kvstored binds 127.0.0.1.
set -u
BUILD=${BUILD:-build}
ROUNDS=3
SECS=3
THREADS=16
PLACES="free pinned"
OPS_LIST="put get"
WRITEBACK=1
VARIANTS=()
usage="accepted: --rounds N, --seconds S, --threads T[,T...], --place free|pinned|both, --ops put,get, --variant NAME=VAR=V[,VAR=V...], --no-writeback"
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --threads) THREADS=${2//,/ }; shift 2 ;;
    --place)
        case "$2" in free|pinned) PLACES=$2 ;; both) PLACES="free pinned" ;;
        *) echo "sync-bound.sh: --place '$2' (accepted: free, pinned, both)" >&2; exit 2 ;; esac
        shift 2 ;;
    --ops) OPS_LIST=${2//,/ }; shift 2 ;;
    --variant) VARIANTS+=("$2"); shift 2 ;;
    --no-writeback) WRITEBACK=0; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sync-bound.sh: unknown argument '$1' ($usage)" >&2; exit 2 ;;
    esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "sync-bound.sh: --rounds '$ROUNDS' is not a count from 1 to 99" >&2; exit 2; }
for t in $THREADS; do
    [[ "$t" =~ ^[1-9][0-9]{0,3}$ ]] && [ "$t" -le 1024 ] ||
        { echo "sync-bound.sh: --threads '$t' is not a count from 1 to 1024" >&2; exit 2; }
done
for op in $OPS_LIST; do
    case "$op" in put|get) ;; *) echo "sync-bound.sh: --ops '$op' (accepted: put, get)" >&2; exit 2 ;; esac
done
[[ "$SECS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "sync-bound.sh: --seconds '$SECS' is not a number" >&2; exit 2; }
# Variant names and their environments (VAR=V pairs, comma-separated on the command line).
VNAMES=()
declare -A VENV
for v in "${VARIANTS[@]}"; do
    name=${v%%=*} envs=${v#*=}
    [[ "$name" =~ ^[a-z][a-z0-9_-]*$ ]] && [ "$name" != "$v" ] && [[ "$envs" =~ ^KVBATCH_[A-Z_]+=[^,]+(,KVBATCH_[A-Z_]+=[^,]+)*$ ]] ||
        { echo "sync-bound.sh: --variant '$v' is not NAME=KVBATCH_X=V[,KVBATCH_Y=W...] (NAME: lower case)" >&2; exit 2; }
    case " none shim writeback ${VNAMES[*]} " in *" $name "*)
        echo "sync-bound.sh: --variant name '$name' is taken" >&2; exit 2 ;; esac
    VNAMES+=("$name")
    VENV[$name]=${envs//,/ }
done
KVBENCH=$BUILD/bin/kvbench
KVSTORED=$BUILD/bin/kvstored
SHIM=$(realpath "$BUILD/lib/libkvbatch.so" 2>/dev/null || true)
for f in "$KVBENCH" "$KVSTORED" "$SHIM"; do
    [ -n "$f" ] && [ -e "$f" ] || { echo "sync-bound.sh: $BUILD is not built (make BUILD=$BUILD)" >&2; exit 1; }
done
command -v taskset >/dev/null || { echo "sync-bound.sh: taskset (util-linux) is missing" >&2; exit 1; }
OUT=$BUILD/bench/sync-bound
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.csv
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
VIRT="bare metal or unknown"
grep -qw hypervisor /proc/cpuinfo && VIRT="a virtual machine (cpuinfo flag: hypervisor)"

SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=; }
trap cleanup EXIT
trap 'exit 130' INT TERM

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# 1. wake-up round trip, us per token pass (median of 3)
pipe_us() { # pipe_us [taskset -c 0]
    for _ in 1 2 3; do
        timeout 60 "$@" perf bench sched pipe -l 20000 2>/dev/null | awk '/usecs\/op/ {printf "%.1f\n", $1}'
    done | median
}
PIPE_FREE=- PIPE_PIN=-
if command -v perf >/dev/null && perf bench sched pipe -l 10 >/dev/null 2>&1; then
    PIPE_FREE=$(pipe_us)
    case " $PLACES " in *" pinned "*) PIPE_PIN=$(pipe_us taskset -c 0) ;; esac
else
    echo "sync-bound.sh: perf is missing or not permitted: wake-up round trip skipped" >&2
fi

# 2. kvbench runs. run PLACE T VARIANT OP ROUND -> "ops/s p99_us" on stdout
start_kvstored() { # start_kvstored [taskset -c 0]
    # --prefault: the pool's first touches (page faults) fall before the first run, not in it
    "$@" "$KVSTORED" --listen 127.0.0.1:0 --memory 2G --prefault >"$OUT/kvstored.log" 2>&1 &
    SRV=$!
    for _ in $(seq 300); do grep -q "listening on" "$OUT/kvstored.log" && break; sleep 0.1; done
    ADDR=$(sed -n 's/.*listening on \(.*\)/\1/p' "$OUT/kvstored.log" | head -1)
    [ -n "$ADDR" ] || { echo "sync-bound.sh: kvstored did not start" >&2; cat "$OUT/kvstored.log" >&2; exit 1; }
}
run() {
    local place=$1 t=$2 variant=$3 op=$4 r=$5 pin=() pre=()
    local base=$OUT/${place}__t${t}__${variant}__${op}__r$r
    [ "$place" = pinned ] && pin=(taskset -c 0)
    case "$variant" in
    none) ;;
    shim) pre=(env "LD_PRELOAD=$SHIM") ;;
    writeback) pre=(env "LD_PRELOAD=$SHIM" KVBATCH_PUT_MODE=writeback) ;;
    *) pre=(env "LD_PRELOAD=$SHIM" ${VENV[$variant]}) ;;
    esac
    "${pre[@]}" "${pin[@]}" timeout 120 "$KVBENCH" "$op" --servers "$ADDR" --threads "$t" \
        --size 4K --mode single --ops 100000000 --seconds "$SECS" --quiet --csv "$base.csv" \
        >"$base.log" 2>&1 || echo "    ($place $t threads $variant $op: kvbench failed)" >&2
    awk -F, 'NR == 2 {printf "%.0f %.1f\n", $12, $15}' "$base.csv" 2>/dev/null
}
declare -A OPS P99 RATIOS
for place in $PLACES; do
    if [ "$place" = pinned ]; then start_kvstored taskset -c 0; else start_kvstored; fi
    for t in $THREADS; do
        for r in $(seq "$ROUNDS"); do
            cut -d' ' -f1-3 /proc/loadavg >"$OUT/${place}__t${t}__load__r$r"
            for op in $OPS_LIST; do
                set -- none shim
                [ "$op" = put ] && [ "$WRITEBACK" = 1 ] && set -- "$@" writeback
                set -- "$@" "${VNAMES[@]}"
                # the order rotates per round so that drift favours no variant
                for _ in $(seq $(( (r - 1) % $# ))); do set -- "$@" "$1"; shift; done
                declare -A got=()
                for v in "$@"; do
                    read -r o p <<<"$(run "$place" "$t" "$v" "$op" "$r")"
                    got[$v]=${o:-}
                    OPS[$place,$t,$v,$op]+="${o:--} "
                    P99[$place,$t,$v,$op]+="${p:--} "
                done
                for v in "$@"; do
                    [ "$v" = none ] && continue
                    RATIOS[$place,$t,$v,$op]+="$(awk -v a="${got[$v]}" -v b="${got[none]}" \
                        'BEGIN {if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b}') "
                done
                unset got
            done
        done
    done
    cleanup
done

med() { printf '%s\n' $1 | grep -v '^-$' | median; }
echo "## Synchronous callers: the shim side by side with direct calls on this host"
echo
echo "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $VIRT; load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit $(git -C "$(dirname "$0")/.." rev-parse --short HEAD 2>/dev/null || echo '?'); $ROUNDS interleaved rounds of ${SECS}s runs; variants: shim = the default settings$( [ "$WRITEBACK" = 1 ] && echo ", writeback = KVBATCH_PUT_MODE=writeback")$(for n in "${VNAMES[@]}"; do printf ', %s = %s' "$n" "${VENV[$n]}"; done)"
echo
echo "| wake-up round trip (perf bench sched pipe, median of 3) | us |"
echo "|---|---:|"
echo "| tasks free to use every CPU | $PIPE_FREE |"
echo "| both pinned to CPU 0 | $PIPE_PIN |"
echo
echo "| place | threads | op | variant | ops/s (median) | ÷ none (median of rounds) | ÷ none per round | p99 us (median) |"
echo "|---|---:|---|---|---:|---:|---|---:|"
for place in $PLACES; do
    label="free"; [ "$place" = pinned ] && label="on CPU 0"
    for t in $THREADS; do
        for op in $OPS_LIST; do
            vs="none shim"
            [ "$op" = put ] && [ "$WRITEBACK" = 1 ] && vs="$vs writeback"
            for v in $vs "${VNAMES[@]}"; do
                k=$place,$t,$v,$op
                if [ "$v" = none ]; then rm=- rr=-; else rm=$(med "${RATIOS[$k]}"); rr=${RATIOS[$k]% }; fi
                echo "| $label | $t | $op | $v | $(med "${OPS[$k]}") | $rm | ${rr// /, } | $(med "${P99[$k]}") |"
            done
        done
    done
done
echo
echo "(raw runs: $OUT/)"

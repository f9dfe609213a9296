#!/bin/bash
# bench-compare.sh [--quick] [--out DIR] - kvbatch side by side, in one run, with
# the link's limit (iperf3 on loopback at the same write sizes) and with what a
# user would use instead (redis-server + redis-benchmark -P 1 and -P 32, SET/GET,
# same value sizes and clients): kvbatch single-key, explicit batch, shim
# adaptive, shim fixed over a sweep of windows, shim off; at 4 KiB the same
# request depth as redis -P 32 (32 async ops in flight per client, with and
# without the shim) in interleaved rounds; 64 KiB goodput beside iperf3 in
# interleaved rounds; the layerwise engine workload with and without the shim,
# its save by I/O path (single/batch/async, shim, writeback) in rounds, and
# (lwsmall) llama3-70b at TP 8, whose 8 KiB slices make the per-op cost, not
# the link, bound the save and load, single-key and async, in rounds; through
# shared memory (docs/shm.md): (shmlfl) the shim with 32 async ops in flight
# per client beside redis-benchmark -P 32 over Redis's Unix socket, 4 KiB, and
# (lwshm) the layerwise llama3-8b save with the shim over shm (staging in the
# caller's memory and in kvs_alloc_buffer buffers) beside single-key over TCP
# loopback, in interleaved rounds.
# Writes into $OUT (default $BUILD/bench):
#   results.md   Markdown tables with ratios (to iperf3 and to Redis) and targets
#   *.png        gnuplot plots: ops/s vs value size per path; latency/ops vs window
#   runs/        every raw result (kvbench CSV, redis-benchmark CSV, iperf3 JSON)
# Every server binds 127.0.0.1 on a private port (and kvstored and the second
# redis-server a Unix socket in a private directory) and is stopped on exit;
# every run is bounded by `timeout`. Default run: under ~20 minutes; --quick: under 5.
# --only iperf,redis,sizes,sweep,ab,lfl,goodput,lwmodes,lwsmall,layerwise,shmlfl,lwshm
# runs only those parts (the report then shows what was measured: "-" elsewhere).
set -u
BUILD=${BUILD:-build}
OUT=
QUICK=0
ONLY=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --out) OUT=$2; shift ;;
    --out=*) OUT=${1#--out=} ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-compare.sh: unknown argument '$1' (accepted: --quick, --out DIR, --only PARTS)" >&2; exit 2 ;;
    esac
    shift
done
PARTS="iperf redis sizes sweep ab lfl goodput lwmodes lwsmall layerwise shmlfl lwshm"
for p in ${ONLY//,/ }; do
    case " $PARTS " in *" $p "*) ;; *)
        echo "bench-compare.sh: unknown part '$p' for --only (accepted: ${PARTS// /, })" >&2; exit 2 ;;
    esac
done
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
OUT=$(realpath -m "${OUT:-$BUILD/bench}") # absolute: redis-server changes directory
# Every row is TCP loopback unless it says otherwise: libkvstore would take
# kvstored's local socket by itself (docs/client.md "The local socket").
# The *-local rows unset it (empty: the default, local socket on this host).
export KVSTORE_TRANSPORT=tcp
PY=/usr/bin/python3
KVBENCH=$BUILD/bin/kvbench
KVSTORED=$BUILD/bin/kvstored
SHIM=$(realpath "$BUILD/lib/libkvbatch.so" 2>/dev/null || true)

if [ "$QUICK" = 1 ]; then
    SIZES="4096 65536"
    WINDOWS="0 50 1000"
    SECS=0.7; REPEAT=3; ROUNDS=2 # SECS per kvbench run; the other bounds are whole seconds
else
    SIZES="1024 4096 16384 65536 262144 1048576"
    WINDOWS="0 10 50 200 1000"
    SECS=2; REPEAT=3; ROUNDS=4
fi
CLIENTS=16
WHOLE_SECS=$(printf '%.0f' "$SECS"); [ "$WHOLE_SECS" -lt 1 ] && WHOLE_SECS=1

for bin in "$KVBENCH" "$KVSTORED"; do
    [ -x "$bin" ] || { echo "bench-compare.sh: $bin is not built (make BUILD=$BUILD)" >&2; exit 1; }
done
for tool in iperf3 redis-server redis-benchmark gnuplot; do
    command -v "$tool" >/dev/null || { echo "bench-compare.sh: $tool missing (scripts/deps.sh bench)" >&2; exit 1; }
done
[ -n "$SHIM" ] || echo "bench-compare.sh: $BUILD/lib/libkvbatch.so not built: shim rows skipped" >&2

mkdir -p "$OUT/runs"
rm -f "$OUT"/runs/*
PIDS=
PRIV=
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for p in $PIDS; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    [ -n "$PRIV" ] && rm -rf "$PRIV"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback TCP port (bind to port 0, report what the kernel chose).
free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# kvstored on 127.0.0.1, port read back from its "listening on" line; its local
# socket (and the clients' look-up of it) in a private directory, read back from
# its "local socket" line: the shm rows name it (shm://PATH).
PRIV=$(mktemp -d /tmp/kvs-bench.XXXXXX) || exit 1
export KVSTORE_RUNTIME_DIR=$PRIV
"$KVSTORED" --listen 127.0.0.1:0 --memory 2G --prefault >"$OUT/runs/kvstored.log" 2>&1 &
KV_PID=$!
PIDS="$PIDS $KV_PID"
for _ in $(seq 100); do grep -q "listening on" "$OUT/runs/kvstored.log" && break; sleep 0.1; done
KV_ADDR=$(sed -n 's/.*listening on \(.*\)/\1/p' "$OUT/runs/kvstored.log" | head -1)
[ -n "$KV_ADDR" ] || { echo "bench-compare.sh: kvstored did not start" >&2; cat "$OUT/runs/kvstored.log" >&2; exit 1; }
KV_SOCK=$(sed -n 's/^local socket \(.*\)/\1/p' "$OUT/runs/kvstored.log" | head -1)

REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
    --protected-mode yes --logfile "$OUT/runs/redis.log" --dir "$OUT/runs" &
PIDS="$PIDS $!"
for _ in $(seq 100); do redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 ||
    { echo "bench-compare.sh: redis-server did not start (see $OUT/runs/redis.log)" >&2; exit 1; }

# The shm rows' Redis: a second redis-server on a Unix socket only (no TCP port)
# in the private directory, so that both sides of those rows skip the TCP stack.
REDIS_SOCK=
if want shmlfl; then
    REDIS_SOCK=$PRIV/redis.sock
    redis-server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 --save '' --appendonly no \
        --logfile "$OUT/runs/redis-unix.log" --dir "$PRIV" &
    PIDS="$PIDS $!"
    for _ in $(seq 100); do redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1 ||
        { echo "bench-compare.sh: redis-server on $REDIS_SOCK did not start (see $OUT/runs/redis-unix.log)" >&2; exit 1; }
fi
if { want shmlfl || want lwshm; } && [ -z "$KV_SOCK" ]; then
    echo "bench-compare.sh: kvstored has no local socket (see $OUT/runs/kvstored.log): no shm rows" >&2
    exit 1
fi

echo "bench-compare: kvstored $KV_ADDR, redis 127.0.0.1:$REDIS_PORT, sizes: $SIZES, $CLIENTS clients, output $OUT" >&2
START=$(date +%s)
# The tree as built, for the report (later commits by others must not be credited).
git -C "$(dirname "$0")/.." rev-parse --short HEAD >"$OUT/runs/commit" 2>/dev/null || true
git -C "$(dirname "$0")/.." status --porcelain --untracked-files=no 2>/dev/null | grep -q . &&
    sed -i 's/$/+dirty/' "$OUT/runs/commit"

# Ops per bounded run: enough for ~SECS seconds at a few 100k ops/s, fewer for big values.
ops_for() { local s=$1 n; n=$((2000000000 / s)); [ $n -gt 2000000 ] && n=2000000; [ $n -lt 2000 ] && n=2000; echo $n; }

# Key space per size: at most 128 MiB of values, 64..4096 keys. Every run of a size
# uses the same keys (--prefix), so the store holds one key space per size and no
# run's keys are evicted by the runs before it.
keys_for() { local k=$((134217728 / $1)); [ $k -gt 4096 ] && k=4096; [ $k -lt 64 ] && k=64; echo $k; }

# kvb NAME OP SIZE THREADS [ENV...] -- [KVBENCH ARGS...]: one kvbench measurement (median of REPEAT).
kvb() {
    local name=$1 op=$2 size=$3 threads=$4; shift 4
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    echo "  kvbench $op $name size=$size threads=$threads" >&2
    # bounded: a run that hangs (a shim bug) costs seconds, not the whole comparison
    timeout -k 5 $((REPEAT * (WHOLE_SECS + 3) + 10)) env "${envs[@]}" "$KVBENCH" "$op" --servers "$KV_ADDR" \
        --size "$size" --threads "$threads" --seconds "$SECS" --ops "$(ops_for "$size")" \
        --keys "$(keys_for "$size")" --prefix "b$size" --repeat "$REPEAT" --quiet \
        --csv "$OUT/runs/kv__${name}__${op}__${size}__${threads}.csv" "$@" >>"$OUT/runs/kvbench.log" 2>&1 ||
        echo "    (exit $? - see runs/kvbench.log)" >&2
}

# The SHM_PUT + SHM_GET frames kvstored has served: a part with shm rows checks that they grew.
shm_frames() {
    "$KVBENCH" --server-stats --servers "$KV_ADDR" 2>/dev/null |
        awk '$1 == "requests_shm_put" || $1 == "requests_shm_get" {s += $2} END {print s + 0}'
}

# The link's limit: iperf3 over loopback with the same write size.
if want iperf; then
    for size in $SIZES; do
        port=$(free_port)
        iperf3 -s -B 127.0.0.1 -p "$port" -1 >/dev/null 2>&1 &
        ipid=$!
        sleep 0.3
        echo "  iperf3 -l $size" >&2
        timeout -k 5 $((WHOLE_SECS + 20)) iperf3 -c 127.0.0.1 -p "$port" -l "$size" -t "$WHOLE_SECS" -J \
            >"$OUT/runs/iperf3__$size.json" 2>/dev/null || echo "    (iperf3 failed)" >&2
        kill "$ipid" 2>/dev/null; wait "$ipid" 2>/dev/null
    done
fi

# What a user would use instead: Redis, unpipelined and pipelined, same sizes and clients.
if want redis; then
    for size in $SIZES; do
        for P in 1 32; do
            n=$(( $(ops_for "$size") / (P == 1 ? 4 : 1) ))
            echo "  redis-benchmark -P $P -d $size" >&2
            timeout -k 5 60 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t set,get -d "$size" \
                -c "$CLIENTS" -n "$n" -P "$P" -r 4096 --csv >"$OUT/runs/redis__P${P}__$size.csv" 2>/dev/null ||
                echo "    (redis-benchmark failed)" >&2
        done
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" flushall >/dev/null 2>&1
    done
fi

# kvbatch: per value size, single-key (no shim), explicit batch, shim adaptive.
if want sizes; then
    for size in $SIZES; do
        for op in put get; do
            kvb single "$op" "$size" $CLIENTS -- --mode single
            kvb batch "$op" "$size" $CLIENTS -- --mode batch --batch 64
            [ -n "$SHIM" ] && kvb shim-adaptive "$op" "$size" $CLIENTS LD_PRELOAD="$SHIM" KVBATCH_POLICY=adaptive -- --mode single
        done
    done
fi

# The window sweep (fixed policy) and the policy checks, at 4 KiB.
if want sweep; then
    if [ -n "$SHIM" ]; then
        for w in $WINDOWS; do
            for op in put get; do
                kvb "shim-fixed-w$w" "$op" 4096 $CLIENTS LD_PRELOAD="$SHIM" KVBATCH_POLICY=fixed KVBATCH_WINDOW_US="$w" -- --mode single
            done
        done
    fi
fi
# A/B pairs back to back (the box drifts): no shim then KVBATCH_POLICY=off, 16 threads;
# one thread without then with the shim; one thread single key vs explicit batch of 64
# (issue 2's figure).
if want ab; then
    for op in put get; do
        kvb single-ab "$op" 4096 $CLIENTS -- --mode single
        [ -n "$SHIM" ] && kvb shim-off "$op" 4096 $CLIENTS LD_PRELOAD="$SHIM" KVBATCH_POLICY=off -- --mode single
        kvb single "$op" 4096 1 -- --mode single
        [ -n "$SHIM" ] && kvb shim-adaptive "$op" 4096 1 LD_PRELOAD="$SHIM" KVBATCH_POLICY=adaptive -- --mode single
        kvb batch "$op" 4096 1 -- --mode batch --batch 64
    done
fi

# Like for like at 4 KiB: redis-benchmark -P 32 keeps 32 requests in flight per
# client; kvbench --mode async --batch 32 keeps 32 kvs_put_async/kvs_get_async in
# flight per thread (the shim batches them; without it each is its own frame).
# The synchronous paths (depth 1) and redis -P 1 beside them, and the explicit
# batch of 32 (the same depth as one call). Every variant once per round, rounds
# interleaved and the order rotated, so that each ratio is taken side by side;
# the report takes medians over the rounds. The load average is kept per round.
LFL_SIZE=4096
LFL_DEPTH=32
lfl_variant() { # lfl_variant NAME ROUND: one kvbench run of one variant, put and get
    local name=$1 r=$2 envs=() args=()
    case "$name" in
    single) args=(--mode single) ;;
    shim) envs=(LD_PRELOAD="$SHIM"); args=(--mode single) ;;
    async) args=(--mode async --batch $LFL_DEPTH) ;;
    shim-async) envs=(LD_PRELOAD="$SHIM"); args=(--mode async --batch $LFL_DEPTH) ;;
    batch) args=(--mode batch --batch $LFL_DEPTH) ;;
    esac
    for op in put get; do
        echo "  like-for-like r$r kvbench $op $name" >&2
        timeout -k 5 $((WHOLE_SECS + 30)) env "${envs[@]}" "$KVBENCH" "$op" --servers "$KV_ADDR" \
            --size $LFL_SIZE --threads $CLIENTS --seconds "$SECS" --ops "$(ops_for $LFL_SIZE)" \
            --keys "$(keys_for $LFL_SIZE)" --prefix "b$LFL_SIZE" --quiet \
            --csv "$OUT/runs/lfl__${name}__${op}__r$r.csv" "${args[@]}" >>"$OUT/runs/kvbench.log" 2>&1 ||
            echo "    (exit $? - see runs/kvbench.log)" >&2
    done
}
LFL_VARIANTS="redis single async batch"
[ -n "$SHIM" ] && LFL_VARIANTS="$LFL_VARIANTS shim shim-async"
if want lfl; then
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/lfl__load__r$r"
        set -- $LFL_VARIANTS
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done # rotate the order per round
        for v in "$@"; do
            if [ "$v" = redis ]; then
                for P in 1 $LFL_DEPTH; do
                    echo "  like-for-like r$r redis-benchmark -P $P" >&2
                    timeout -k 5 60 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t set,get -d $LFL_SIZE \
                        -c "$CLIENTS" -n $(( $(ops_for $LFL_SIZE) / (P == 1 ? 8 : 2) )) -P "$P" -r 4096 --csv \
                        >"$OUT/runs/lfl__redisP${P}__r$r.csv" 2>/dev/null || echo "    (redis-benchmark failed)" >&2
                done
            else
                lfl_variant "$v" "$r"
            fi
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/lfl__load__r$r"
    done
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" flushall >/dev/null 2>&1
fi

# 64 KiB goodput side by side: iperf3 with 64 KiB writes (one stream), one thread's
# memcpy of 64 KiB blocks (kvbench memcpy), and kvbatch put/get of 64 KiB values
# (16 clients; explicit batches over TCP loopback, over the local socket with the
# values in the socket, through shared memory, and from and into buffers of
# kvs_alloc_buffer that kvstored maps: docs/shm.md) in interleaved
# rounds, order rotated; for
# each kvbench run also kvstored's CPU time (utime + stime from /proc), so that
# the server's cost per byte is visible beside the goodput.
GP_SIZE=65536
cpu_ticks() { awk '{print $14 + $15}' "/proc/$KV_PID/stat" 2>/dev/null || echo 0; }
gp_variant() { # gp_variant NAME ROUND
    local name=$1 r=$2 envs=() args=(--mode single)
    case "$name" in
    shim) envs=(LD_PRELOAD="$SHIM") ;;
    batch) args=(--mode batch --batch 16) ;;
    batch-local) envs=(KVSTORE_TRANSPORT= KVSTORE_SHM_SIZE=0); args=(--mode batch --batch 16) ;;
    batch-shm) envs=(KVSTORE_TRANSPORT=); args=(--mode batch --batch 16) ;;
    batch-shmbuf) envs=(KVSTORE_TRANSPORT=); args=(--mode batch --batch 16 --shared-buffers) ;;
    shim-async) envs=(LD_PRELOAD="$SHIM"); args=(--mode async --batch 4) ;;
    esac
    for op in put get; do
        echo "  goodput r$r kvbench $op $name" >&2
        local t0 t1 stats=()
        # the shim's own view of each run (flush reasons, batch sizes), to explain outliers
        [ ${#envs[@]} -gt 0 ] && stats=(KVBATCH_STATS_FILE="$OUT/runs/gp__${name}__${op}__r$r.prom")
        t0=$(cpu_ticks)
        timeout -k 5 $((WHOLE_SECS + 30)) env "${envs[@]}" "${stats[@]}" "$KVBENCH" "$op" --servers "$KV_ADDR" \
            --size $GP_SIZE --threads $CLIENTS --seconds "$SECS" --ops "$(ops_for $GP_SIZE)" \
            --keys "$(keys_for $GP_SIZE)" --prefix "b$GP_SIZE" --quiet \
            --csv "$OUT/runs/gp__${name}__${op}__r$r.csv" "${args[@]}" >>"$OUT/runs/kvbench.log" 2>&1 ||
            echo "    (exit $? - see runs/kvbench.log)" >&2
        t1=$(cpu_ticks)
        # ticks, ticks per second, bytes the get run's prefill put (kvbench fills its keys first)
        echo "$((t1 - t0)) $(getconf CLK_TCK) $([ $op = get ] && echo $(( $(keys_for $GP_SIZE) * GP_SIZE )) || echo 0)" \
            >"$OUT/runs/gp__${name}__${op}__r$r.cpu"
    done
}
GP_VARIANTS="iperf3 memcpy single batch batch-local batch-shm batch-shmbuf"
[ -n "$SHIM" ] && GP_VARIANTS="$GP_VARIANTS shim shim-async"
if want goodput; then
    gp_frames0=$(shm_frames)
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/gp__load__r$r"
        set -- $GP_VARIANTS
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done
        for v in "$@"; do
            if [ "$v" = iperf3 ]; then
                port=$(free_port)
                iperf3 -s -B 127.0.0.1 -p "$port" -1 >/dev/null 2>&1 &
                ipid=$!
                sleep 0.3
                echo "  goodput r$r iperf3 -l $GP_SIZE" >&2
                timeout -k 5 $((WHOLE_SECS + 20)) iperf3 -c 127.0.0.1 -p "$port" -l $GP_SIZE -t "$WHOLE_SECS" -J \
                    >"$OUT/runs/gp__iperf3__r$r.json" 2>/dev/null || echo "    (iperf3 failed)" >&2
                kill "$ipid" 2>/dev/null; wait "$ipid" 2>/dev/null
            elif [ "$v" = memcpy ]; then
                echo "  goodput r$r kvbench memcpy --size $GP_SIZE" >&2
                timeout -k 5 $((WHOLE_SECS + 20)) "$KVBENCH" memcpy --size $GP_SIZE --seconds "$SECS" \
                    --out "$OUT/runs/gp__memcpy__put__r$r.txt" >>"$OUT/runs/kvbench.log" 2>&1 ||
                    echo "    (kvbench memcpy failed)" >&2
            else
                gp_variant "$v" "$r"
            fi
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/gp__load__r$r"
    done
    [ "$(shm_frames)" -gt "$gp_frames0" ] ||
        echo "bench-compare.sh: kvstored served no SHM frames: the goodput batch-shm rows went through the socket" >&2
fi

# The layerwise save with each I/O path kvbench offers (single, batch, async), without
# and with the shim, and the shim with KVBATCH_PUT_MODE=writeback (a put returns once
# copied into the shim: the save is then "exposed" only until copied, and pending puts
# are flushed at exit), interleaved rounds. At --compute-us 100 (the default) and at
# 1000: a prefill of 8 x 256 tokens through one llama3-8b layer is ~1 TFLOP (2 x ~0.25 G
# parameters x 2048 tokens), i.e. >= 1 ms on a GPU of ~1 PFLOPS dense bf16: 1000 us per
# layer is a lower bound of what a real engine computes per layer for this batch.
LW_VARIANTS="plain-single plain-batch plain-async shim-single shim-batch shim-async shim-wb-single
             plain-single-c1000 shim-single-c1000"
if want lwmodes; then
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/lwm__load__r$r"
        set -- $LW_VARIANTS
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done
        for v in "$@"; do
            case "$v" in shim*) [ -n "$SHIM" ] || continue ;; esac
            envs=(KVBENCH_VARIANT="$v")
            case "$v" in shim*) envs+=(LD_PRELOAD="$SHIM") ;; esac
            case "$v" in *-wb-*) envs+=(KVBATCH_PUT_MODE=writeback) ;; esac
            mode=${v%-c1000}; mode=${mode##*-}
            compute=100; case "$v" in *-c1000) compute=1000 ;; esac
            echo "  layerwise r$r $v (mode $mode, compute $compute us)" >&2
            timeout -k 5 300 env "${envs[@]}" "$KVBENCH" layerwise --servers "$KV_ADDR" --model llama3-8b \
                --tp 1 --block 16 --requests 8 --prompt 256 --compute-us $compute --rounds "$ROUNDS" \
                --phase save --mode "$mode" --quiet --csv "$OUT/runs/lwm__${v}__r$r.csv" \
                >>"$OUT/runs/kvbench.log" 2>&1 || echo "    (layerwise exit $?)" >&2
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/lwm__load__r$r"
    done
fi

# Small slices: llama3-70b at TP 8 (a 16-token block is 8 KiB per layer), save and
# load, a single-key connector and one that keeps a layer's slices in flight (async),
# without and with the shim, interleaved rounds (order rotated).
LWS_VARIANTS="plain-single plain-async shim-single shim-async"
if want lwsmall; then
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/lws__load__r$r"
        set -- $LWS_VARIANTS
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done
        for v in "$@"; do
            case "$v" in shim*) [ -n "$SHIM" ] || continue ;; esac
            envs=(KVBENCH_VARIANT="$v")
            case "$v" in shim*) envs+=(LD_PRELOAD="$SHIM") ;; esac
            echo "  layerwise small slices r$r $v" >&2
            timeout -k 5 300 env "${envs[@]}" "$KVBENCH" layerwise --servers "$KV_ADDR" --model llama3-70b \
                --tp 8 --block 16 --requests 8 --prompt 256 --compute-us 100 --rounds "$ROUNDS" \
                --phase both --mode "${v##*-}" --quiet --csv "$OUT/runs/lws__${v}__r$r.csv" \
                >>"$OUT/runs/kvbench.log" 2>&1 || echo "    (layerwise exit $?)" >&2
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/lws__load__r$r"
    done
fi

# The engine-shaped workload, without and with the shim.
if want layerwise; then
    for variant in plain shim; do
        [ "$variant" = shim ] && [ -z "$SHIM" ] && continue
        envs=(KVBENCH_VARIANT=$variant)
        [ "$variant" = shim ] && envs+=(LD_PRELOAD="$SHIM")
        echo "  kvbench layerwise ($variant)" >&2
        timeout -k 5 600 env "${envs[@]}" "$KVBENCH" layerwise --servers "$KV_ADDR" --model llama3-8b \
            --tp 1 --block 16 --requests 8 --prompt 256 --rounds "$ROUNDS" --repeat "$REPEAT" --quiet \
            --csv "$OUT/runs/layerwise__$variant.csv" >>"$OUT/runs/kvbench.log" 2>&1 ||
            echo "    (layerwise exit $?)" >&2
    done
fi

# Shared memory, 4 KiB, like for like (issue 16): the shim with LFL_DEPTH async
# ops in flight per client (kvbench --mode async --batch 32 under LD_PRELOAD)
# over kvstored's local socket with the values through shared memory
# (shm://PATH), beside redis-benchmark -P 32 over Redis's Unix socket, the same
# clients and value size; the shim over TCP loopback too, to show what the
# transport gives. Interleaved rounds, order rotated; kvstored's STATS must show
# SHM_PUT and SHM_GET frames, or the shm runs did not use the region.
sfl_variant() { # sfl_variant NAME ROUND: one kvbench run of one variant, put and get
    local name=$1 r=$2 servers=$KV_ADDR envs=(LD_PRELOAD="$SHIM")
    case "$name" in
    shim-async-shm) servers=shm://$KV_SOCK; envs+=(KVSTORE_TRANSPORT=) ;;
    shim-async-tcp) ;;
    esac
    for op in put get; do
        echo "  shm like-for-like r$r kvbench $op $name" >&2
        timeout -k 5 $((WHOLE_SECS + 30)) env "${envs[@]}" "$KVBENCH" "$op" --servers "$servers" \
            --size $LFL_SIZE --threads $CLIENTS --seconds "$SECS" --ops "$(ops_for $LFL_SIZE)" \
            --keys "$(keys_for $LFL_SIZE)" --prefix "s$LFL_SIZE" --quiet --mode async --batch $LFL_DEPTH \
            --csv "$OUT/runs/sfl__${name}__${op}__r$r.csv" >>"$OUT/runs/kvbench.log" 2>&1 ||
            echo "    (exit $? - see runs/kvbench.log)" >&2
    done
}
if want shmlfl && [ -n "$SHIM" ]; then
    frames0=$(shm_frames)
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/sfl__load__r$r"
        set -- redis-unix shim-async-shm shim-async-tcp
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done
        for v in "$@"; do
            if [ "$v" = redis-unix ]; then
                echo "  shm like-for-like r$r redis-benchmark -s (Unix socket) -P $LFL_DEPTH" >&2
                timeout -k 5 60 redis-benchmark -s "$REDIS_SOCK" -t set,get -d $LFL_SIZE -c "$CLIENTS" \
                    -n $(( $(ops_for $LFL_SIZE) / 2 )) -P $LFL_DEPTH -r 4096 --csv \
                    >"$OUT/runs/sfl__redisP${LFL_DEPTH}unix__r$r.csv" 2>/dev/null ||
                    echo "    (redis-benchmark failed)" >&2
            else
                sfl_variant "$v" "$r"
            fi
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/sfl__load__r$r"
    done
    [ "$(shm_frames)" -gt "$frames0" ] ||
        echo "bench-compare.sh: kvstored served no SHM frames: the shmlfl shm rows went through the socket" >&2
    redis-cli -s "$REDIS_SOCK" flushall >/dev/null 2>&1
fi

# The layerwise save of issue 16's figure (llama3-8b, TP 1, 16-token blocks, 8
# requests, 256-token prompts, 100 us/layer), in interleaved rounds: single-key
# without the shim over TCP loopback (the baseline), and over shared memory
# (shm://PATH) single-key without and with the shim and async with the shim.
LWX_VARIANTS="tcp-plain-single shm-plain-single shm-shim-single shm-shim-async shm-shim-single-buf
              shm-shim-async-buf"
if want lwshm; then
    frames0=$(shm_frames)
    for r in $(seq "$REPEAT"); do
        cut -d' ' -f1-3 /proc/loadavg >"$OUT/runs/lwx__load__r$r"
        set -- $LWX_VARIANTS
        for _ in $(seq $((r - 1))); do set -- "$@" "$1"; shift; done
        for v in "$@"; do
            case "$v" in *-shim-*) [ -n "$SHIM" ] || continue ;; esac
            envs=(KVBENCH_VARIANT="$v")
            servers=$KV_ADDR
            case "$v" in shm-*) servers=shm://$KV_SOCK; envs+=(KVSTORE_TRANSPORT=) ;; esac
            case "$v" in *-shim-*) envs+=(LD_PRELOAD="$SHIM") ;; esac
            mode=${v%-buf}; mode=${mode##*-}
            extra=(); case "$v" in *-buf) extra=(--shared-buffers) ;; esac
            echo "  layerwise over shm r$r $v" >&2
            timeout -k 5 300 env "${envs[@]}" "$KVBENCH" layerwise --servers "$servers" --model llama3-8b \
                --tp 1 --block 16 --requests 8 --prompt 256 --compute-us 100 --rounds "$ROUNDS" \
                --phase save --mode "$mode" "${extra[@]}" --quiet --csv "$OUT/runs/lwx__${v}__r$r.csv" \
                >>"$OUT/runs/kvbench.log" 2>&1 || echo "    (layerwise exit $?)" >&2
        done
        cut -d' ' -f1-3 /proc/loadavg >>"$OUT/runs/lwx__load__r$r"
    done
    [ "$(shm_frames)" -gt "$frames0" ] ||
        echo "bench-compare.sh: kvstored served no SHM frames: the lwshm shm rows went through the socket" >&2
fi

echo "bench-compare: measured in $(( $(date +%s) - START )) s; writing $OUT/results.md" >&2
$PY "$(dirname "$0")/bench-report.py" "$OUT" "$CLIENTS" "$WINDOWS" || exit 1
cat "$OUT/results.md"

#!/usr/bin/python3
"""bench-report.py OUT CLIENTS "WINDOWS" - turns the raw results that
bench-compare.sh left in OUT/runs into OUT/results.md (tables with ratios to
the link's limit and to Redis, and the project's targets) and gnuplot PNGs.
"""
import csv
import glob
import json
import os
import platform
import subprocess
import sys


def kvbench_rows(path):
    """The median row of a kvbench CSV (or its only run) per workload."""
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            wl = row["workload"]
            if row["run"] == "0" or wl not in out:
                out[wl] = row
    return out


def load(outdir):
    kv = {}  # (name, op, size, threads) -> row
    for path in glob.glob(os.path.join(outdir, "runs", "kv__*.csv")):
        name, op, size, threads = os.path.basename(path)[4:-4].split("__")
        rows = kvbench_rows(path)
        if op in rows:
            kv[(name, op, int(size), int(threads))] = rows[op]
    redis = {}  # (P, size, "SET"|"GET") -> {rps, p50_ms, p99_ms}
    for path in glob.glob(os.path.join(outdir, "runs", "redis__P*__*.csv")):
        _, p, size = os.path.basename(path)[:-4].split("__")
        with open(path) as f:
            for row in csv.DictReader(f):
                redis[(int(p[1:]), int(size), row["test"])] = row
    iperf = {}  # size -> bytes/s
    for path in glob.glob(os.path.join(outdir, "runs", "iperf3__*.json")):
        size = int(os.path.basename(path)[:-5].split("__")[1])
        try:
            with open(path) as f:
                iperf[size] = json.load(f)["end"]["sum_received"]["bits_per_second"] / 8
        except (ValueError, KeyError):
            pass
    layer = {}  # variant -> {workload: row}
    for path in glob.glob(os.path.join(outdir, "runs", "layerwise__*.csv")):
        layer[os.path.basename(path)[11:-4]] = kvbench_rows(path)
    return (kv, redis, iperf, layer, load_lfl(outdir), load_goodput(outdir), load_lwm(outdir),
            load_lw_rounds(outdir, "lws", ("layerwise-save", "layerwise-load")),
            load_lfl(outdir, "sfl"), load_lwm(outdir, "lwx"))


def load_lw_rounds(outdir, prefix, workloads):
    """Layerwise rounds: {round: {variant: {workload: row}}}, {round: load}, [rows left out].

    A row whose run had errors (e.g. a load that found evicted slices) measures
    something else: it is left out and named in the third list."""
    rounds, loads, bad = {}, {}, []
    for path in glob.glob(os.path.join(outdir, "runs", prefix + "__*__r*")):
        parts = os.path.basename(path).split(".")[0].split("__")
        r = int(parts[-1][1:])
        if parts[1] == "load":
            with open(path) as f:
                loads[r] = " -> ".join(line.strip() for line in f if line.strip())
        else:
            rows = kvbench_rows(path)
            got = {}
            for w in workloads:
                if w not in rows:
                    continue
                if (num(rows[w], "errors") or 0) > 0:
                    bad.append("%s %s round %d (%d errors)" % (parts[1], w, r, num(rows[w], "errors")))
                else:
                    got[w] = rows[w]
            if got:
                rounds.setdefault(r, {})[parts[1]] = got
    return rounds, loads, sorted(bad)


def load_lwm(outdir, prefix="lwm"):
    """Layerwise save rounds (lwm: by path; lwx: through shared memory):
    {round: {variant: save row}}, {round: load}."""
    rounds, loads, _ = load_lw_rounds(outdir, prefix, ("layerwise-save",))
    return {r: {v: w["layerwise-save"] for v, w in rd.items()} for r, rd in rounds.items()}, loads


def load_goodput(outdir):
    """The 64 KiB goodput rounds: {round: {(variant, op): bytes/s}}, {round: {(variant, op):
    kvstored CPU seconds}}, {round: load}. iperf3 is variant "iperf3", op "put"."""
    rates, cpu, loads, moved = {}, {}, {}, {}
    for path in glob.glob(os.path.join(outdir, "runs", "gp__*__r*")):
        base, ext = os.path.splitext(os.path.basename(path))
        parts = base.split("__")
        r = int(parts[-1][1:])
        if parts[1] == "load":
            with open(path) as f:
                loads[r] = " -> ".join(line.strip() for line in f if line.strip())
        elif parts[1] == "iperf3":
            try:
                with open(path) as f:
                    rates.setdefault(r, {})[("iperf3", "put")] = \
                        json.load(f)["end"]["sum_received"]["bits_per_second"] / 8
            except (ValueError, KeyError):
                pass
        elif ext == ".txt":  # kvbench memcpy --out: bytes/s
            with open(path) as f:
                rates.setdefault(r, {})[(parts[1], parts[2])] = float(f.read().strip() or 0)
        elif ext == ".cpu":
            with open(path) as f:
                ticks, hz, prefill = (float(x) for x in f.read().split())
            cpu.setdefault(r, {})[(parts[1], parts[2])] = (ticks / hz, prefill)
        elif ext == ".csv":
            rows = kvbench_rows(path)
            if parts[2] in rows:
                rates.setdefault(r, {})[(parts[1], parts[2])] = num(rows[parts[2]], "bytes_per_s")
                moved.setdefault(r, {})[(parts[1], parts[2])] = num(rows[parts[2]], "bytes")
    # kvstored CPU seconds per GB it received or sent in that run (a get run's prefill included)
    cpu_per_gb = {}
    for r, runs in cpu.items():
        for key, (secs, prefill) in runs.items():
            b = moved.get(r, {}).get(key)
            if b:
                cpu_per_gb.setdefault(r, {})[key] = secs / ((b + prefill) / 1e9)
    return rates, cpu_per_gb, loads


def gp_pair(rates, a, b, op):
    """Median over rounds of a's goodput for op over b's (memcpy: its one figure)."""
    bop = "put" if b == "memcpy" else op
    return median(ratio(rd.get((a, op)), rd.get((b, bop))) for rd in rates.values())


def load_lfl(outdir, prefix="lfl"):
    """The like-for-like rounds: {round: {(variant, op): ops/s}} and {round: "load before -> after"}.

    lfl variants: single, shim, async, shim-async, batch (kvbench) and redisP1, redisP32;
    sfl (shared memory): shim-async-shm, shim-async-tcp and redisP32unix
    (op "put" is redis SET, "get" is GET)."""
    rounds, loads = {}, {}
    for path in glob.glob(os.path.join(outdir, "runs", prefix + "__*__r*")):
        parts = os.path.basename(path).split(".")[0].split("__")
        r = int(parts[-1][1:])
        if parts[1] == "load":
            with open(path) as f:
                loads[r] = " -> ".join(line.strip() for line in f if line.strip())
        elif parts[1].startswith("redisP"):
            with open(path) as f:
                for row in csv.DictReader(f):
                    op = {"SET": "put", "GET": "get"}.get(row["test"])
                    if op:
                        rounds.setdefault(r, {})[(parts[1], op)] = num(row, "rps")
        else:
            rows = kvbench_rows(path)
            if parts[2] in rows:
                rounds.setdefault(r, {})[(parts[1], parts[2])] = num(rows[parts[2]], "ops_per_s")
    return rounds, loads


def median(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def lfl_ops(lfl, variant, op):
    """Median ops/s of one like-for-like variant over the rounds."""
    return median(r.get((variant, op)) for r in lfl[0].values())


def lfl_ratio(lfl, a, b, op):
    """Median over the rounds of the per-round ratio a / b (each pair side by side)."""
    return median(ratio(r.get((a, op)), r.get((b, op))) for r in lfl[0].values())


def num(row, field):
    try:
        return float(row[field])
    except (TypeError, KeyError, ValueError):
        return None


def fmt(v, digits=0):
    if v is None:
        return "-"
    if digits == 0:
        return "{:,.0f}".format(v)
    return "{:.{}f}".format(v, digits)


def ratio(a, b):
    return a / b if a is not None and b else None


def human_size(s):
    return "%d KiB" % (s // 1024) if s < 1 << 20 else "%d MiB" % (s >> 20)


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores, Linux %s" % (cpu, os.cpu_count() or 0, platform.release())


def commit():
    """The source tree's commit (with "+dirty" if it has local changes), or "unknown"."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], timeout=10,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               timeout=10, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


# The layerwise-by-path workload (as bench-compare.sh runs it) and its rows.
LW_REQUESTS, LW_LAYERS, LW_PROMPT, LW_BLOCK = 8, 32, 256, 16
LW_ROWS = (
    ("plain-single", "no shim, single-key (kvs_put)"),
    ("plain-batch", "no shim, kvs_batch_put per layer"),
    ("plain-async", "no shim, kvs_put_async per slice, wait per layer"),
    ("shim-single", "shim, single-key"),
    ("shim-batch", "shim, kvs_batch_put per layer"),
    ("shim-async", "shim, async"),
    ("shim-wb-single", "shim, single-key, KVBATCH_PUT_MODE=writeback"),
    ("plain-single-c1000", "no shim, single-key"),
    ("shim-single-c1000", "shim, single-key"),
)

# Through shared memory (parts shmlfl and lwshm): rows and the baselines of their ratios.
SFL_ROWS = (
    ("redisP32unix", "redis-benchmark -P 32, Redis's Unix socket"),
    ("shim-async-shm", "kvbatch async, shim, values through shared memory"),
    ("shim-async-tcp", "kvbatch async, shim, TCP loopback"),
)
SFL_RATIOS = (
    ("shim-async-shm", "redisP32unix", "shim async 32 over shm / redis -P 32 over its Unix socket"),
    ("shim-async-shm", "shim-async-tcp", "shim async 32 over shm / the same over TCP loopback"),
)
LWX_ROWS = (
    ("tcp-plain-single", "TCP loopback, no shim, single-key (kvs_put)"),
    ("shm-plain-single", "shared memory, no shim, single-key"),
    ("shm-shim-single", "shared memory, shim, single-key"),
    ("shm-shim-async", "shared memory, shim, async"),
    ("shm-shim-single-buf", "shared memory, shim, single-key, staging in kvs_alloc_buffer buffers"),
    ("shm-shim-async-buf", "shared memory, shim, async, staging in kvs_alloc_buffer buffers"),
)

# The 64 KiB goodput rows: (variant, label).
GP_ROWS = (
    ("single", "kvbatch single-key sync, no shim"),
    ("shim", "kvbatch single-key sync, shim"),
    ("shim-async", "kvbatch async (4 in flight per thread), shim"),
    ("batch", "kvbatch explicit batch of 16"),
    ("batch-local", "kvbatch explicit batch of 16, local socket, values in the socket"),
    ("batch-shm", "kvbatch explicit batch of 16, local socket, values through shared memory"),
    ("batch-shmbuf", "kvbatch explicit batch of 16, shared memory, values in kvs_alloc_buffer buffers"),
)

# The like-for-like rows: (variant, requests in flight per client, label).
LFL_ROWS = (
    ("redisP1", 1, "redis-benchmark -P 1"),
    ("redisP32", 32, "redis-benchmark -P 32"),
    ("single", 1, "kvbatch single-key sync (kvs_put/kvs_get), no shim"),
    ("shim", 1, "kvbatch single-key sync, shim"),
    ("async", 32, "kvbatch async (kvs_put_async/kvs_get_async), no shim"),
    ("shim-async", 32, "kvbatch async, shim"),
    ("batch", 32, "kvbatch explicit batch of 32 (kvs_batch_put/get)"),
)
LFL_RATIOS = (
    ("shim", "single", "shim / no shim, sync (1 in flight)"),
    ("shim-async", "async", "shim / no shim, async (32 in flight)"),
    ("shim-async", "single", "shim async 32 / single-key sync no shim"),
    ("shim", "redisP1", "shim sync / redis -P 1 (like for like, 1 in flight)"),
    ("shim", "redisP32", "shim sync / redis -P 32 (unlike: 1 vs 32 in flight)"),
    ("shim-async", "redisP32", "shim async 32 / redis -P 32 (like for like)"),
    ("async", "redisP32", "no-shim async 32 / redis -P 32 (the shim's own part removed)"),
    ("batch", "redisP32", "explicit batch of 32 / redis -P 32"),
)


def main():
    outdir, clients, windows = sys.argv[1], int(sys.argv[2]), [int(w) for w in sys.argv[3].split()]
    kv, redis, iperf, layer, lfl, gp, lwm, lws, sfl, lwx = load(outdir)
    sizes = sorted({k[2] for k in kv if k[3] == clients} | set(iperf))
    md = []
    md.append("# kvbatch side by side (%d clients, medians)\n" % clients)
    try:
        with open(os.path.join(outdir, "runs", "commit")) as f:
            rev = f.read().strip() or commit()
    except OSError:
        rev = commit()
    md.append("Measured on: %s, at commit %s. Loopback TCP, one kvstored, one redis-server.\n"
              % (machine(), rev))

    def kvops(name, op, size, threads=clients):
        return num(kv.get((name, op, size, threads)), "ops_per_s")

    for op, rop in (("put", "SET"), ("get", "GET")) if sizes else ():
        md.append("\n## %s: ops/s by value size\n" % op)
        md.append("| value | iperf3 MB/s | redis %s -P 1 | redis %s -P 32 | kvbatch single | "
                  "explicit batch | shim adaptive | shim / single | shim MB/s / iperf3 | "
                  "shim / redis -P 32 |" % (rop, rop))
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for s in sizes:
            r1 = num(redis.get((1, s, rop)), "rps")
            r32 = num(redis.get((32, s, rop)), "rps")
            single, batch, shim = kvops("single", op, s), kvops("batch", op, s), kvops("shim-adaptive", op, s)
            shim_bps = num(kv.get(("shim-adaptive", op, s, clients)), "bytes_per_s")
            ip = iperf.get(s)
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                human_size(s), fmt(ip / 1e6 if ip else None), fmt(r1), fmt(r32), fmt(single),
                fmt(batch), fmt(shim), fmt(ratio(shim, single), 2), fmt(ratio(shim_bps, ip), 2),
                fmt(ratio(shim, r32), 2)))

    if lfl[0]:
        md.append("\n## 4 KiB, %d clients, like for like: the same requests in flight per client\n"
                  % clients)
        md.append("Every path once per round, %d interleaved rounds (order rotated), medians; "
                  "ratios are medians of the per-round ratios. Load average (1, 5, 15 min) before "
                  "-> after each round: %s.\n" % (len(lfl[0]), "; ".join(
                      "r%d %s" % (r, lfl[1][r]) for r in sorted(lfl[1]))))
        md.append("| path | in flight per client | put (SET) ops/s | get (GET) ops/s |")
        md.append("|---|---|---|---|")
        for variant, depth, label in LFL_ROWS:
            md.append("| %s | %s | %s | %s |" % (label, depth, fmt(lfl_ops(lfl, variant, "put")),
                                                 fmt(lfl_ops(lfl, variant, "get"))))
        md.append("")
        md.append("| ratio (median of per-round ratios) | put | get |")
        md.append("|---|---|---|")
        for a, b, label in LFL_RATIOS:
            md.append("| %s | %s | %s |" % (label, fmt(lfl_ratio(lfl, a, b, "put"), 2),
                                            fmt(lfl_ratio(lfl, a, b, "get"), 2)))

    rates, cpu, gp_loads = gp
    if rates:
        md.append("\n## 64 KiB goodput beside iperf3 (%d clients, interleaved rounds)\n" % clients)
        md.append("iperf3: one stream, 64 KiB writes. Every path once per round, %d rounds (order "
                  "rotated), medians; ratios are medians of the per-round ratios to that round's "
                  "iperf3. kvstored CPU: its user + system time per GB moved (all of the server's "
                  "work, including the kernel's copies for it). Load average before -> after each "
                  "round: %s.\n" % (len(rates), "; ".join(
                      "r%d %s" % (r, gp_loads[r]) for r in sorted(gp_loads))))
        md.append("| path | put MB/s | get MB/s | put / iperf3 | get / iperf3 | "
                  "kvstored CPU s/GB put | get |")
        md.append("|---|---|---|---|---|---|---|")

        def gp_med(v, op):
            return median(rd.get((v, op)) for rd in rates.values())

        def gp_ratio(v, op):
            return median(ratio(rd.get((v, op)), rd.get(("iperf3", "put"))) for rd in rates.values())

        def gp_cpu(v, op):
            return median(c.get((v, op)) for c in cpu.values())

        ip = gp_med("iperf3", "put")
        md.append("| iperf3 (the link's limit) | %s | | 1 | | | |" % fmt(ip / 1e6 if ip else None))
        mc = gp_med("memcpy", "put")
        if mc:
            md.append("| memcpy, one thread, 64 KiB blocks | %s | | | | | |" % fmt(mc / 1e6))
        for v, label in GP_ROWS:
            put, get = gp_med(v, "put"), gp_med(v, "get")
            md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                label, fmt(put / 1e6 if put else None), fmt(get / 1e6 if get else None),
                fmt(gp_ratio(v, "put"), 2), fmt(gp_ratio(v, "get"), 2),
                fmt(gp_cpu(v, "put"), 3), fmt(gp_cpu(v, "get"), 3)))

        if any(("batch-shm", op) in rd for rd in rates.values() for op in ("put", "get")):
            md.append("\n| shared memory (median of per-round ratios) | put | get |")
            md.append("|---|---|---|")
            for a, b, label in (
                    ("batch-shm", "memcpy", "batch over shm / one-thread memcpy"),
                    ("batch-shm", "batch", "batch over shm / batch over TCP loopback"),
                    ("batch-shm", "batch-local", "batch over shm / batch over the local socket"),
                    ("batch-shmbuf", "memcpy", "batch over shm, shared buffers / one-thread memcpy"),
                    ("batch-shmbuf", "batch", "batch over shm, shared buffers / batch over TCP loopback"),
                    ("batch-shmbuf", "batch-shm", "shared buffers / the caller's own buffers, over shm")):
                md.append("| %s | %s | %s |" % (label, fmt(gp_pair(rates, a, b, "put"), 2),
                                                fmt(gp_pair(rates, a, b, "get"), 2)))

    if any(("shim-fixed-w%d" % w, op, 4096, clients) in kv for w in windows for op in ("put", "get")):
        md.append("\n## Window sweep (fixed policy, 4 KiB, %d clients)\n" % clients)
        md.append("| window us | put ops/s | put p50 us | put p99 us | get ops/s | get p50 us | get p99 us |")
        md.append("|---|---|---|---|---|---|---|")
    sweep = []
    for w in windows:
        p = kv.get(("shim-fixed-w%d" % w, "put", 4096, clients))
        g = kv.get(("shim-fixed-w%d" % w, "get", 4096, clients))
        if not p and not g:
            continue
        sweep.append((w, num(p, "ops_per_s"), num(p, "p50_us"), num(p, "p99_us"),
                      num(g, "ops_per_s"), num(g, "p50_us"), num(g, "p99_us")))
        md.append("| %d | %s | %s | %s | %s | %s | %s |" % (
            w, fmt(sweep[-1][1]), fmt(sweep[-1][2], 1), fmt(sweep[-1][3], 1), fmt(sweep[-1][4]),
            fmt(sweep[-1][5], 1), fmt(sweep[-1][6], 1)))

    lw_plain, lw_shim = layer.get("plain", {}), layer.get("shim", {})
    if lw_plain:
        md.append("\n## Layerwise (llama3-8b, TP 1, 16-token blocks, 8 requests, 256-token prompts)\n")
        md.append("| | save ops/s | save GB/s | exposed save/request p50 us | p99 us | load ops/s | "
                  "wait/layer p50 us | p99 us | wait/request p50 us |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for label, rows in (("without shim", lw_plain), ("with shim", lw_shim)):
            s, l = rows.get("layerwise-save"), rows.get("layerwise-load")
            if not s:
                continue
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, fmt(num(s, "ops_per_s")), fmt((num(s, "bytes_per_s") or 0) / 1e9, 2),
                fmt(num(s, "exposed_p50_us"), 1), fmt(num(s, "exposed_p99_us"), 1),
                fmt(num(l, "ops_per_s")), fmt(num(l, "wait_p50_us"), 1),
                fmt(num(l, "wait_p99_us"), 1), fmt(num(l, "req_wait_p50_us"), 1)))

    if lwm[0]:
        md.append("\n## Layerwise save by I/O path (llama3-8b, TP 1, 16-token blocks = 64 KiB "
                  "slices, 8 requests, 256-token prompts)\n")
        link = median(rd.get(("iperf3", "put")) for rd in gp[0].values()) if gp[0] else iperf.get(65536)
        round_bytes = LW_REQUESTS * LW_LAYERS * (LW_PROMPT // LW_BLOCK) * LW_BLOCK * 4096
        md.append("Save only, %d interleaved rounds (order rotated), medians. Every save round "
                  "moves %d MiB (%d requests x %d layers x %d slices of 64 KiB); at the iperf3 "
                  "goodput (%s MB/s) that alone takes %s ms, against %s ms of compute per round "
                  "at 100 us/layer and %s ms at 1000 us/layer: the exposed save is bounded by roughly "
                  "the difference (bytes / a path's goodput - compute). Writeback: a put returns once copied into the shim (bounded by "
                  "KVBATCH_WRITEBACK_BYTES), so its exposure is until copied, not until stored. "
                  "Load average before -> after each round: %s.\n" % (
                      len(lwm[0]), round_bytes >> 20, LW_REQUESTS, LW_LAYERS, LW_PROMPT // LW_BLOCK,
                      fmt(link / 1e6 if link else None), fmt(round_bytes / link * 1e3 if link else None, 1),
                      fmt(LW_LAYERS * 0.1, 1), fmt(LW_LAYERS * 1.0, 1),
                      "; ".join("r%d %s" % (r, lwm[1][r]) for r in sorted(lwm[1]))))
        md.append("| variant | compute/layer | save GB/s | exposed save/request p50 ms | p99 ms | "
                  "exposed / plain single-key (same compute) |")
        md.append("|---|---|---|---|---|---|")

        def lw_med(v, field):
            return median(num(rd.get(v), field) for rd in lwm[0].values())

        for v, label in LW_ROWS:
            base = "plain-single-c1000" if v.endswith("-c1000") else "plain-single"
            rel = median(ratio(num(rd.get(v), "exposed_p50_us"), num(rd.get(base), "exposed_p50_us"))
                         for rd in lwm[0].values())
            bps = lw_med(v, "bytes_per_s")
            e50, e99 = lw_med(v, "exposed_p50_us"), lw_med(v, "exposed_p99_us")
            md.append("| %s | %s us | %s | %s | %s | %s |" % (
                label, 1000 if v.endswith("-c1000") else 100, fmt(bps / 1e9 if bps else None, 2),
                fmt(e50 / 1e3 if e50 else None, 1), fmt(e99 / 1e3 if e99 else None, 1), fmt(rel, 2)))

    if lws[0]:
        md.append("\n## Layerwise, small slices (llama3-70b, TP 8, 16-token blocks = 8 KiB slices, "
                  "8 requests, 256-token prompts, 100 us/layer)\n")
        md.append("Save and load, %d interleaved rounds (order rotated), medians of the values and of "
                  "the per-round ratios. The per-op cost, not the link, bounds these transfers. "
                  "Load average before -> after each round: %s.\n" % (
                      len(lws[0]), "; ".join("r%d %s" % (r, lws[1][r]) for r in sorted(lws[1]))))
        if lws[2]:
            md.append("Left out for errors: %s.\n" % "; ".join(lws[2]))
        md.append("| connector | shim | save GB/s | exposed save/request p50 ms | / no shim, same mode | "
                  "/ no shim, single-key | load GB/s | wait/request p50 ms | / no shim, same mode | "
                  "/ no shim, single-key |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")

        def lws_field(v, wl, field):
            return median(num(rd.get(v, {}).get(wl), field) for rd in lws[0].values())

        def lws_ratio(v, base, wl, field):
            return median(ratio(num(rd.get(v, {}).get(wl), field), num(rd.get(base, {}).get(wl), field))
                          for rd in lws[0].values())

        for v in ("plain-single", "shim-single", "plain-async", "shim-async"):
            mode = v.split("-")[1]
            cells = []
            for wl, field in (("layerwise-save", "exposed_p50_us"), ("layerwise-load", "req_wait_p50_us")):
                bps, t50 = lws_field(v, wl, "bytes_per_s"), lws_field(v, wl, field)
                cells += [fmt(bps / 1e9 if bps else None, 2), fmt(t50 / 1e3 if t50 else None, 1),
                          fmt(lws_ratio(v, "plain-" + mode, wl, field), 2),
                          fmt(lws_ratio(v, "plain-single", wl, field), 2)]
            md.append("| %s | %s | %s |" % (mode, "yes" if v.startswith("shim") else "no", " | ".join(cells)))

    if sfl[0]:
        md.append("\n## 4 KiB through shared memory beside Redis's Unix socket (%d clients, 32 in "
                  "flight per client)\n" % clients)
        md.append("kvstored's local socket with the values through shared memory (shm://PATH), and "
                  "a redis-server on a Unix socket only. Every path once per round, %d interleaved "
                  "rounds (order rotated), medians; ratios are medians of the per-round ratios. Load "
                  "average before -> after each round: %s.\n" % (len(sfl[0]), "; ".join(
                      "r%d %s" % (r, sfl[1][r]) for r in sorted(sfl[1]))))
        md.append("| path | put (SET) ops/s | get (GET) ops/s |")
        md.append("|---|---|---|")
        for variant, label in SFL_ROWS:
            md.append("| %s | %s | %s |" % (label, fmt(lfl_ops(sfl, variant, "put")),
                                            fmt(lfl_ops(sfl, variant, "get"))))
        md.append("")
        md.append("| ratio (median of per-round ratios) | put (SET) | get (GET) |")
        md.append("|---|---|---|")
        for a, b, label in SFL_RATIOS:
            md.append("| %s | %s | %s |" % (label, fmt(lfl_ratio(sfl, a, b, "put"), 2),
                                            fmt(lfl_ratio(sfl, a, b, "get"), 2)))

    def lwx_rel(v):
        return median(ratio(num(rd.get(v), "exposed_p50_us"),
                            num(rd.get("tcp-plain-single"), "exposed_p50_us")) for rd in lwx[0].values())

    if lwx[0]:
        md.append("\n## Layerwise save through shared memory (llama3-8b, TP 1, 16-token blocks = 64 KiB "
                  "slices, 8 requests, 256-token prompts, 100 us/layer)\n")
        md.append("Save only, %d interleaved rounds (order rotated), medians of the values and of the "
                  "per-round ratios to single-key without the shim over TCP loopback. Load average "
                  "before -> after each round: %s.\n" % (
                      len(lwx[0]), "; ".join("r%d %s" % (r, lwx[1][r]) for r in sorted(lwx[1]))))
        md.append("| variant | save GB/s | exposed save/request p50 ms | p99 ms | "
                  "exposed / TCP no shim single-key |")
        md.append("|---|---|---|---|---|")
        for v, label in LWX_ROWS:
            bps = median(num(rd.get(v), "bytes_per_s") for rd in lwx[0].values())
            e50 = median(num(rd.get(v), "exposed_p50_us") for rd in lwx[0].values())
            e99 = median(num(rd.get(v), "exposed_p99_us") for rd in lwx[0].values())
            md.append("| %s | %s | %s | %s | %s |" % (
                label, fmt(bps / 1e9 if bps else None, 2), fmt(e50 / 1e3 if e50 else None, 1),
                fmt(e99 / 1e3 if e99 else None, 1), fmt(lwx_rel(v), 2)))

    # Targets: (what, measured, goal, comparison)
    t = []

    def target(what, value, goal, better="ge"):
        """better: ge (value >= goal), le (value <= goal), within (|value - 1| <= goal)."""
        if value is None:
            ok = None
        elif better == "ge":
            ok = value >= goal
        elif better == "le":
            ok = value <= goal
        else:
            ok = abs(value - 1) <= goal
        shown = {"ge": ">= %s" % goal, "le": "<= %s" % goal, "within": "1 +- %s" % goal}[better]
        t.append("| %s | %s | %s | %s |" % (what, fmt(value, 2), shown,
                                            "-" if ok is None else ("met" if ok else "NOT met")))

    for op in ("put", "get"):
        target("issue 2: 1 thread, batch of 64 / single-key, 4 KiB %s" % op,
               ratio(kvops("batch", op, 4096, 1), kvops("single", op, 4096, 1)), 8)
    for op in ("put", "get"):
        target("issue 3: %d threads, 4 KiB %s, shim / no shim" % (clients, op),
               ratio(kvops("shim-adaptive", op, 4096), kvops("single", op, 4096)), 5)
    for op in ("put", "get"):
        target("issue 3: 1 thread %s, adaptive p50 / no-shim p50" % op,
               ratio(num(kv.get(("shim-adaptive", op, 4096, 1)), "p50_us"),
                     num(kv.get(("single", op, 4096, 1)), "p50_us")), 1.1, "le")
    for op in ("put", "get"):
        target("issue 3: KVBATCH_POLICY=off %s ops/s / no shim, back to back (within 2 %%)" % op,
               ratio(kvops("shim-off", op, 4096), kvops("single-ab", op, 4096)), 0.02, "within")
    for op in ("put", "get"):
        target("issue 5: %d threads x 4 KiB %s, shim / single-key (sync, size table)" % (clients, op),
               ratio(kvops("shim-adaptive", op, 4096), kvops("single", op, 4096)), 10)
    if lfl[0]:
        for op in ("put", "get"):
            for issue, goal in (("3", 5), ("5", 10)):
                target("issue %s: %d threads x 4 KiB %s, shim / no shim, sync (like-for-like rounds)"
                       % (issue, clients, op), lfl_ratio(lfl, "shim", "single", op), goal)
                target("issue %s: %d threads x 4 KiB %s, shim / no shim, both 32 async in flight"
                       % (issue, clients, op), lfl_ratio(lfl, "shim-async", "async", op), goal)
                target("issue %s: %d threads x 4 KiB %s, shim 32 async in flight / single-key sync"
                       % (issue, clients, op), lfl_ratio(lfl, "shim-async", "single", op), goal)
    target("issue 5: 64 KiB put, shim goodput / iperf3 goodput (size table)",
           ratio(num(kv.get(("shim-adaptive", "put", 65536, clients)), "bytes_per_s"), iperf.get(65536)), 0.8)
    if gp[0]:
        for v, what in (("shim", "shim sync"), ("shim-async", "shim async 4 in flight")):
            target("issue 5: 64 KiB put, %s goodput / iperf3 goodput (interleaved rounds)" % what,
                   median(ratio(rd.get((v, "put")), rd.get(("iperf3", "put"))) for rd in gp[0].values()),
                   0.8)
    if gp[0]:
        for op in ("put", "get"):
            target("issue 16: 64 KiB batched %s over shm / one-thread memcpy (interleaved rounds)" % op,
                   gp_pair(gp[0], "batch-shm", "memcpy", op), 0.5)
            target("issue 16: 64 KiB batched %s over shm / the same over TCP loopback" % op,
                   gp_pair(gp[0], "batch-shm", "batch", op), 3)
            target("issue 16: 64 KiB batched %s over shm from/into kvs_alloc_buffer / one-thread memcpy"
                   % op, gp_pair(gp[0], "batch-shmbuf", "memcpy", op), 0.5)
            target("issue 16: 64 KiB batched %s over shm from/into kvs_alloc_buffer / the same over TCP"
                   % op, gp_pair(gp[0], "batch-shmbuf", "batch", op), 3)
    if sfl[0]:
        for op, rop in (("put", "SET"), ("get", "GET")):
            target("issue 16: 4 KiB %s, %d threads, shim 32 async in flight over shm / redis -P 32 %s "
                   "over its Unix socket" % (op, clients, rop),
                   lfl_ratio(sfl, "shim-async-shm", "redisP32unix", op), 2)
    if lwx[0]:
        target("issue 16: layerwise llama3-8b TP 1 exposed save p50, shim over shm / single-key over TCP",
               lwx_rel("shm-shim-single"), 0.33, "le")
        target("issue 16: the same, shim async over shm / single-key over TCP",
               lwx_rel("shm-shim-async"), 0.33, "le")
        target("issue 16: the same, shim async over shm, staging in kvs_alloc_buffer / single-key TCP",
               lwx_rel("shm-shim-async-buf"), 0.33, "le")
    for op, rop in (("put", "SET"), ("get", "GET")):
        target("issue 5: 4 KiB %s, shim sync (1 in flight) / redis -P 32 %s (size table)" % (op, rop),
               ratio(kvops("shim-adaptive", op, 4096), num(redis.get((32, 4096, rop)), "rps")), 1.5)
    if lfl[0]:
        for op, rop in (("put", "SET"), ("get", "GET")):
            target("issue 5: 4 KiB %s, shim sync (1 in flight) / redis -P 32 %s (like-for-like rounds)"
                   % (op, rop), lfl_ratio(lfl, "shim", "redisP32", op), 1.5)
            target("issue 5: 4 KiB %s, shim 32 async in flight / redis -P 32 %s (like for like)"
                   % (op, rop), lfl_ratio(lfl, "shim-async", "redisP32", op), 1.5)
    ls, lp = lw_shim.get("layerwise-save"), lw_plain.get("layerwise-save")
    target("issue 5: layerwise exposed save p50, shim / without",
           ratio(num(ls, "exposed_p50_us"), num(lp, "exposed_p50_us")), 0.33, "le")
    if lwm[0]:
        for v, what in (("shim-single", "shim single-key"), ("shim-async", "shim async"),
                        ("shim-single-c1000", "shim single-key, 1000 us/layer")):
            base = "plain-single-c1000" if v.endswith("-c1000") else "plain-single"
            target("issue 5: layerwise exposed save p50, %s / no shim single-key (by-path rounds)" % what,
                   median(ratio(num(rd.get(v), "exposed_p50_us"), num(rd.get(base), "exposed_p50_us"))
                          for rd in lwm[0].values()), 0.33, "le")
    if lws[0]:
        target("issue 5 (small slices, not its shape): layerwise llama3-70b TP 8 exposed save p50, "
               "shim async / no shim async", median(
                   ratio(num(rd.get("shim-async", {}).get("layerwise-save"), "exposed_p50_us"),
                         num(rd.get("plain-async", {}).get("layerwise-save"), "exposed_p50_us"))
                   for rd in lws[0].values()), 0.33, "le")
    md.append("\n## Targets\n")
    md.append("| figure | measured | target | |")
    md.append("|---|---|---|---|")
    md.extend(t)
    md.append("\nPlots: ops_vs_size_put.png, ops_vs_size_get.png, window_sweep.png. "
              "Raw results: runs/. Command: scripts/bench-compare.sh (make bench).\n")
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    plots(outdir, kv, redis, iperf, sizes, sweep, clients)


def plots(outdir, kv, redis, iperf, sizes, sweep, clients):
    """gnuplot PNGs from .dat files written beside them (only for the parts that were measured)."""
    for op, rop in (("put", "SET"), ("get", "GET")) if sizes else ():
        dat = os.path.join(outdir, "ops_vs_size_%s.dat" % op)
        with open(dat, "w") as f:
            f.write("# size single batch shim redisP1 redisP32 iperf3_ops\n")
            for s in sizes:
                vals = [num(kv.get((n, op, s, clients)), "ops_per_s") for n in ("single", "batch", "shim-adaptive")]
                vals += [num(redis.get((p, s, rop)), "rps") for p in (1, 32)]
                vals.append(iperf[s] / s if s in iperf else None)
                f.write("%d %s\n" % (s, " ".join("NaN" if v is None else "%.1f" % v for v in vals)))
        script = """
set terminal pngcairo size 900,560 noenhanced
set output '{out}'
set title 'kvbatch {op}: ops/s vs value size ({clients} clients, loopback)'
set logscale xy
set xlabel 'value size (bytes)'
set ylabel 'ops/s'
set key outside right
set grid
plot '{dat}' u 1:2 w lp t 'kvbatch single-key', '' u 1:3 w lp t 'explicit batch', \\
     '' u 1:4 w lp t 'shim adaptive', '' u 1:5 w lp t 'redis {rop} -P 1', \\
     '' u 1:6 w lp t 'redis {rop} -P 32', '' u 1:7 w l dt 2 t 'iperf3 limit (writes/s)'
""".format(out=os.path.join(outdir, "ops_vs_size_%s.png" % op), op=op, rop=rop, dat=dat, clients=clients)
        gnuplot(script)
    if sweep:
        dat = os.path.join(outdir, "window_sweep.dat")
        with open(dat, "w") as f:
            f.write("# window put_ops put_p50 put_p99 get_ops get_p50 get_p99\n")
            for row in sweep:
                f.write(" ".join("NaN" if v is None else str(v) for v in row) + "\n")
        script = """
set terminal pngcairo size 900,560 noenhanced
set output '{out}'
set title 'shim, fixed policy, 4 KiB, {clients} clients: ops/s and latency vs window'
set xlabel 'KVBATCH_WINDOW_US'
set ylabel 'ops/s'
set y2label 'latency (us)'
set ytics nomirror
set y2tics
set logscale y2
set key outside right
set grid
plot '{dat}' u 0:2:xtic(1) w lp t 'put ops/s', '' u 0:5 w lp t 'get ops/s', \\
     '' u 0:3 axes x1y2 w lp dt 2 t 'put p50', '' u 0:4 axes x1y2 w lp dt 3 t 'put p99', \\
     '' u 0:6 axes x1y2 w lp dt 2 t 'get p50', '' u 0:7 axes x1y2 w lp dt 3 t 'get p99'
""".format(out=os.path.join(outdir, "window_sweep.png"), dat=dat, clients=clients)
        gnuplot(script)


def gnuplot(script):
    try:
        subprocess.run(["gnuplot"], input=script.encode(), timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        print("bench-report: gnuplot failed: %s" % e, file=sys.stderr)


if __name__ == "__main__":
    main()

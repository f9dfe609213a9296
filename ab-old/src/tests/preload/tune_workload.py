#!/usr/bin/python3
"""tune_workload.py - a stand-in for a workload under kvbatch-tune: it writes
the stats file the shim would ($KVBATCH_STATS_FILE every
$KVBATCH_STATS_INTERVAL_MS, and a last time at exit) with figures that
follow from the settings, so test_scripts knows every answer.

    FAKE_RATES="0:1000,50:3000"  steady ops/s per KVBATCH_WINDOW_US (others: 100)
    FAKE_SECONDS=1.2             how long it runs
    FAKE_FAIL=1                  exit 1 at once, writing nothing

For its first quarter it runs at a tenth of its rate (a warm-up), so a
measure over the whole run is not the steady state. A KVBATCH_MAX_INFLIGHT
other than 4 halves the rate. Every op takes 50 us (the 0.0001 bucket).
"""
import os
import sys
import time


def main():
    if os.environ.get("FAKE_FAIL"):
        return 1
    path = os.environ["KVBATCH_STATS_FILE"]
    interval = int(os.environ.get("KVBATCH_STATS_INTERVAL_MS", "1000")) / 1000
    seconds = float(os.environ.get("FAKE_SECONDS", "1.2"))
    rates = dict(kv.split(":") for kv in os.environ.get("FAKE_RATES", "").split(",") if kv)
    rate = float(rates.get(os.environ.get("KVBATCH_WINDOW_US", ""), 100))
    if os.environ.get("KVBATCH_MAX_INFLIGHT", "4") != "4":
        rate /= 2
    warm = seconds / 4
    start = time.time()
    pid = os.getpid()

    def ops_at(t):
        e = t - start
        return rate / 10 * min(e, warm) + rate * max(0.0, e - warm)

    def write(t, exited):
        ops = int(ops_at(t))
        text = "".join([
            'kvbatch_start_time_seconds{pid="%d"} %.6f\n' % (pid, start),
            'kvbatch_write_time_seconds{pid="%d"} %.6f\n' % (pid, t),
            'kvbatch_exited{pid="%d"} %d\n' % (pid, exited),
            'kvbatch_ops_total{pid="%d",backend="kvs",op="put"} %d\n' % (pid, ops),
            'kvbatch_batches_total{pid="%d",backend="kvs",op="put"} %d\n' % (pid, ops // 8),
            'kvbatch_op_latency_seconds_bucket{pid="%d",backend="kvs",le="0.0001"} %d\n'
            % (pid, ops),
            'kvbatch_op_latency_seconds_bucket{pid="%d",backend="kvs",le="+Inf"} %d\n'
            % (pid, ops),
        ])
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)

    while time.time() - start < seconds:
        time.sleep(interval)
        write(time.time(), 0)
    write(time.time(), 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

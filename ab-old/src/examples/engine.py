#!/usr/bin/python3
"""engine.py - a small engine-shaped kvbatch client: one thread per request,
KV cache saved layer by layer after each layer's (simulated) compute, then
loaded layer by layer, through kvstore.Client's single-key put/get_into.

It is the kind of code an inference engine's connector runs, unmodified by
kvbatch: run it as is, or with the shim preloaded to batch its calls across
threads and requests:

    PYTHONPATH=build/python python3 examples/engine.py --servers 127.0.0.1:7070
    LD_PRELOAD=build/lib/libkvbatch.so KVBATCH_STATS_FILE=/tmp/kvb.prom \\
        PYTHONPATH=build/python python3 examples/engine.py --servers 127.0.0.1:7070

It checks every loaded slice against what was saved and prints one summary
line, then "checksum <hex>" (the same with and without the shim for the same
--prefix; the default prefix holds the pid, so runs without one differ) and "OK";
exit status 1 on any error or mismatch.
"""
import argparse
import hashlib
import os
import sys
import threading
import time

try:
    import kvstore
except ImportError:  # run from a source tree without PYTHONPATH set
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "build", "python"))
    import kvstore


def slice_value(key, size):
    """The bytes a layer's compute 'produced' for key: deterministic, key-specific."""
    seed = hashlib.blake2b(key.encode(), digest_size=32).digest()
    return (seed * (size // len(seed) + 1))[:size]


class Request(threading.Thread):
    """One request: save all layers (compute, then put each block's slice), then load them."""

    def __init__(self, client, args, rid):
        super().__init__(name="request-%d" % rid)
        self.client, self.args, self.rid = client, args, rid
        self.puts = self.gets = self.errors = self.mismatches = 0
        self.digest = hashlib.blake2b(digest_size=16)
        self.save_exposed = 0.0
        self.load_wait = 0.0

    def key(self, rnd, block, layer):
        # model@tp@rank@chunkhash@layer, as an engine connector names layer slices
        chunk = "%s-r%d-q%d-b%d" % (self.args.prefix, rnd, self.rid, block)
        return "example-model@1@0@%s@%d" % (chunk, layer)

    def run(self):
        a = self.args
        compute = a.compute_us / 1e6
        buf = bytearray(a.slice)
        for rnd in range(a.rounds):
            for layer in range(a.layers):  # save phase
                time.sleep(compute)
                t0 = time.monotonic()
                for block in range(a.blocks):
                    k = self.key(rnd, block, layer)
                    try:
                        self.client.put(k, slice_value(k, a.slice))
                        self.puts += 1
                    except kvstore.Error as e:
                        self.errors += 1
                        print("put %s: %s" % (k, e), file=sys.stderr)
                self.save_exposed += time.monotonic() - t0
            for layer in range(a.layers):  # load phase: wait for the layer, then compute
                t0 = time.monotonic()
                for block in range(a.blocks):
                    k = self.key(rnd, block, layer)
                    try:
                        n = self.client.get_into(k, buf)
                        self.gets += 1
                    except kvstore.Error as e:
                        self.errors += 1
                        print("get %s: %s" % (k, e), file=sys.stderr)
                        continue
                    if n != a.slice or bytes(buf) != slice_value(k, a.slice):
                        self.mismatches += 1
                    self.digest.update(buf[:n])
                self.load_wait += time.monotonic() - t0
                time.sleep(compute)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", default=None, help="host:port[,...] (default $KVSTORE_SERVERS)")
    p.add_argument("--requests", type=int, default=8, help="concurrent requests (threads)")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--blocks", type=int, default=4, help="blocks per request")
    p.add_argument("--slice", type=int, default=16384, help="bytes per (block, layer) slice")
    p.add_argument("--rounds", type=int, default=2, help="save+load rounds per request")
    p.add_argument("--compute-us", type=int, default=200, help="simulated compute per layer")
    p.add_argument("--prefix", default="engine%d" % os.getpid(), help="key namespace")
    a = p.parse_args()
    for name in ("requests", "layers", "blocks", "slice", "rounds"):
        if not 1 <= getattr(a, name) <= 1 << 20:
            p.error("--%s must be in 1..1048576" % name)
    if not 0 <= a.compute_us <= 1000000:
        p.error("--compute-us must be in 0..1000000")

    client = kvstore.Client(a.servers)
    reqs = [Request(client, a, i) for i in range(a.requests)]
    t0 = time.monotonic()
    for r in reqs:
        r.start()
    for r in reqs:
        r.join()
    elapsed = time.monotonic() - t0
    client.flush()
    client.close()

    puts = sum(r.puts for r in reqs)
    gets = sum(r.gets for r in reqs)
    errors = sum(r.errors for r in reqs)
    mismatches = sum(r.mismatches for r in reqs)
    total = hashlib.blake2b(digest_size=16)
    for r in reqs:
        total.update(r.digest.digest())
    shim = "libkvbatch" in os.environ.get("LD_PRELOAD", "")
    print("engine: requests=%d layers=%d blocks=%d slice=%d rounds=%d puts=%d gets=%d errors=%d "
          "mismatches=%d elapsed=%.3fs ops/s=%.0f save_exposed/req=%.1fms load_wait/req=%.1fms "
          "shim=%s" % (a.requests, a.layers, a.blocks, a.slice, a.rounds, puts, gets, errors,
                       mismatches, elapsed, (puts + gets) / elapsed if elapsed > 0 else 0,
                       1e3 * sum(r.save_exposed for r in reqs) / len(reqs) / a.rounds,
                       1e3 * sum(r.load_wait for r in reqs) / len(reqs) / a.rounds, shim))
    print("checksum %s" % total.hexdigest())
    if errors or mismatches or puts != gets:
        print("FAILED")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

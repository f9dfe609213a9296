#!/usr/bin/python3
"""mc-layerwise.py - vLLM's MooncakeStoreConnector shape over `mooncake.store`:
one key per KV block whose value is one segment per layer
(batch_put_from_multi_buffers / batch_get_into_multi_buffers), against the
same bytes stored as one key per (block, layer) slice (batch_put_from /
batch_get_into). Prints, per mode, the median save and load time over the
rounds, layer slices per second, MB/s, and what kvstored holds per layer
slice beyond the values (from its STATS: items, and pool bytes beyond the values,
memory_used - value_bytes; the index heap is not in it).

  PYTHONPATH=build/python scripts/mc-layerwise.py --servers 127.0.0.1:7070 \\
      [--blocks 64] [--layers 32] [--slice 32768] [--per-call 16] [--rounds 5] \\
      [--mode multi|perlayer|both]

--per-call is how many blocks one call carries (vLLM: a request's blocks).
Run it with LD_PRELOAD=build/lib/libkvbatch.so to measure the shim. It
stores keys under a prefix of its own and removes them at the end.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

from mooncake.store import MooncakeDistributedStore

import kvstore


def server_totals(client):
    """items and memory_used - value_bytes, summed over the servers."""
    items = over = 0
    for line in client.server_stats().splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            continue
        if parts[0] == "items":
            items += int(parts[1])
        elif parts[0] == "memory_used":
            over += int(parts[1])
        elif parts[0] == "value_bytes":
            over -= int(parts[1])
    return items, over


def run_mode(store, client, mode, args, prefix):
    nslices = args.blocks * args.layers
    area = ctypes.create_string_buffer(nslices * args.slice)
    back = ctypes.create_string_buffer(nslices * args.slice)
    base, bbase = ctypes.addressof(area), ctypes.addressof(back)
    ctypes.memmove(base, os.urandom(len(area)), len(area))
    store.register_buffer(base, len(area))
    store.register_buffer(bbase, len(back))

    def addr(b, l, at):  # layer-major, as a paged KV cache lays out each layer's tensor
        return at + (l * args.blocks + b) * args.slice

    saves, loads, meta = [], [], None
    for r in range(args.rounds):
        before = server_totals(client)
        t0 = time.perf_counter()
        for first in range(0, args.blocks, args.per_call):
            blocks = range(first, min(first + args.per_call, args.blocks))
            if mode == "multi":
                keys = ["%s.r%d.b%d" % (prefix, r, b) for b in blocks]
                res = store.batch_put_from_multi_buffers(
                    keys, [[addr(b, l, base) for l in range(args.layers)] for b in blocks],
                    [[args.slice] * args.layers for _ in blocks])
            else:
                keys = ["%s.r%d.b%d.l%d" % (prefix, r, b, l) for b in blocks
                        for l in range(args.layers)]
                res = store.batch_put_from(
                    keys, [addr(b, l, base) for b in blocks for l in range(args.layers)],
                    [args.slice] * len(keys))
            if any(x != 0 for x in res):
                sys.exit("%s put failed: %s" % (mode, sorted(set(res))))
        saves.append(time.perf_counter() - t0)
        if meta is None:
            after = server_totals(client)
            meta = ((after[0] - before[0]) / nslices, (after[1] - before[1]) / nslices)
        t0 = time.perf_counter()
        for first in range(0, args.blocks, args.per_call):
            blocks = range(first, min(first + args.per_call, args.blocks))
            if mode == "multi":
                keys = ["%s.r%d.b%d" % (prefix, r, b) for b in blocks]
                res = store.batch_get_into_multi_buffers(
                    keys, [[addr(b, l, bbase) for l in range(args.layers)] for b in blocks],
                    [[args.slice] * args.layers for _ in blocks])
                want = args.slice * args.layers
            else:
                keys = ["%s.r%d.b%d.l%d" % (prefix, r, b, l) for b in blocks
                        for l in range(args.layers)]
                res = store.batch_get_into(
                    keys, [addr(b, l, bbase) for b in blocks for l in range(args.layers)],
                    [args.slice] * len(keys))
                want = args.slice
            if any(x != want for x in res):
                sys.exit("%s get failed: %s" % (mode, sorted(set(res))))
        loads.append(time.perf_counter() - t0)
        if ctypes.string_at(base, len(area)) != ctypes.string_at(bbase, len(back)):
            sys.exit("%s: loaded bytes differ from saved ones" % mode)
    store.unregister_buffer(base)
    store.unregister_buffer(bbase)
    mb = nslices * args.slice / 1e6
    for what, times in (("save", saves), ("load", loads)):
        t = statistics.median(times)
        print("%-8s %-4s %d blocks x %d layers x %d B: median %.4f s, %.0f slices/s, %.0f MB/s"
              % (mode, what, args.blocks, args.layers, args.slice, t, nslices / t, mb / t))
    print("%-8s kvstored per layer slice: %.3f items, %.1f pool bytes beyond the value"
          % (mode, meta[0], meta[1]))


def main():
    ap = argparse.ArgumentParser(description="vLLM-shaped multi_buffers against per-layer keys")
    ap.add_argument("--servers", required=True)
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--slice", type=int, default=32768)
    ap.add_argument("--per-call", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=["multi", "perlayer", "both"], default="both")
    args = ap.parse_args()
    if min(args.blocks, args.layers, args.slice, args.per_call, args.rounds) < 1:
        ap.error("every count must be at least 1")
    store = MooncakeDistributedStore()
    rc = store.setup("localhost", "P2PHANDSHAKE", 1 << 30, 1 << 30, "tcp", "", args.servers)
    if rc != 0:
        sys.exit("setup failed: %d" % rc)
    client = kvstore.Client(args.servers)
    prefix = "mclw%d" % os.getpid()
    try:
        for mode in (["multi", "perlayer"] if args.mode == "both" else [args.mode]):
            run_mode(store, client, mode, args, prefix + mode)
    finally:
        store.remove_by_regex("^" + prefix)
        store.close()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""mooncake_connectors.py - two connectors in the shape of real ones, over
`mooncake.store`, printing every result they see (and a digest of the bytes
they loaded) so that a run with LD_PRELOAD=libkvbatch.so can be compared
line for line with one without.

  lmcache  LMCache's mooncakestore connector: every chunk saved with
           asyncio.to_thread(store.put_from, key, ptr, size, config), all at
           once on the default thread pool; is_exist per chunk; loaded with
           one batch_get_into (a few chunks were never saved).
  sglang   SGLang HiCache's mooncake backend: backup threads, each calling
           batch_is_exist then batch_put_from for the missing pages (keys
           "{hash}_{rank}_k" / "_v"), twice (the second round finds them all),
           then batch_get_into to prefetch them.
  vllm     vLLM's MooncakeStoreConnector: one key per block whose value is one
           segment per layer; a sending thread calls batch_is_exist then
           batch_put_from_multi_buffers per request, a pool of receiving
           threads batch_get_into_multi_buffers (one block never saved).

  mooncake_connectors.py lmcache|sglang|vllm --servers HOST:PORT --prefix P [--chunks N]
                         [--size BYTES] [--timing]

--timing writes how long the lmcache shape's save (every put_from) and load
(batch_get_into) took to stderr ("save_s S", "load_s S"), leaving stdout as
it is: the store calls alone, without the set-up and checks around them.
"""
import argparse
import asyncio
import ctypes
import hashlib
import sys
import threading
import time

from mooncake.store import MooncakeDistributedStore, ReplicateConfig


def pattern(key, size):
    """Deterministic bytes for a key (independent of the run's prefix)."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def open_store(servers):
    store = MooncakeDistributedStore()
    rc = store.setup("localhost", "P2PHANDSHAKE", 3355443200, 1073741824, "tcp", "", servers)
    if rc != 0:
        sys.exit("setup failed: %d" % rc)
    return store


def lmcache(store, prefix, chunks, chunk_size, timing=False):
    pool = ctypes.create_string_buffer(chunks * chunk_size)  # the pinned CPU buffer
    base = ctypes.addressof(pool)
    print("register_buffer", store.register_buffer(base, len(pool)))
    names = ["chunk%04d" % i for i in range(chunks)]
    for i, name in enumerate(names):
        ctypes.memmove(base + i * chunk_size, pattern(name, chunk_size), chunk_size)
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    saved = [n for i, n in enumerate(names) if i % 8 != 7]  # every 8th chunk is never saved

    async def save_all():
        return await asyncio.gather(*[
            asyncio.to_thread(store.put_from, prefix + n, base + names.index(n) * chunk_size,
                              chunk_size, cfg) for n in saved])

    t0 = time.perf_counter()
    saved_rc = asyncio.run(save_all())
    t1 = time.perf_counter()
    print("put_from", saved_rc)
    print("is_exist", [store.is_exist(prefix + n) for n in names])

    load = ctypes.create_string_buffer(chunks * chunk_size)
    lbase = ctypes.addressof(load)
    keys = [prefix + n for n in names]
    ptrs = [lbase + i * chunk_size for i in range(chunks)]
    t2 = time.perf_counter()
    got = store.batch_get_into(keys, ptrs, [chunk_size] * chunks)
    t3 = time.perf_counter()
    if timing:
        print("save_s %.6f\nload_s %.6f" % (t1 - t0, t3 - t2), file=sys.stderr)
    print("batch_get_into", got)
    raw = load.raw  # one copy of the buffer, not one per chunk
    ok = [raw[i * chunk_size:(i + 1) * chunk_size] == pattern(n, chunk_size)
          for i, n in enumerate(names) if got[i] > 0]
    print("loaded_correct", all(ok), len(ok))
    print("digest", hashlib.sha256(raw).hexdigest())
    print("unregister_buffer", store.unregister_buffer(base))


def sglang(store, prefix, pages, page_size, threads=4, rank=0):
    out = {}

    def backup(t):
        host = ctypes.create_string_buffer(pages * 2 * page_size)  # K then V per page
        base = ctypes.addressof(host)
        keys, ptrs = [], []
        for p in range(pages):
            h = "t%dp%03d" % (t, p)
            for j, kind in enumerate("kv"):
                key = "%s_%d_%s" % (h, rank, kind)
                at = base + (2 * p + j) * page_size
                ctypes.memmove(at, pattern(key, page_size), page_size)
                keys.append(key)
                ptrs.append(at)
        log = []
        for rnd in range(2):
            exist = store.batch_is_exist([prefix + k for k in keys])
            missing = [i for i, e in enumerate(exist) if e != 1]
            res = store.batch_put_from([prefix + keys[i] for i in missing],
                                       [ptrs[i] for i in missing], [page_size] * len(missing))
            log.append(("round", rnd, "exist", exist, "put", res))
        load = ctypes.create_string_buffer(len(host))
        lbase = ctypes.addressof(load)
        got = store.batch_get_into([prefix + k for k in keys],
                                   [lbase + i * page_size for i in range(len(keys))],
                                   [page_size] * len(keys))
        log.append(("prefetch", got, load.raw == host.raw))
        out[t] = log

    workers = [threading.Thread(target=backup, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for t in sorted(out):
        for line in out[t]:
            print("thread", t, *line)


def vllm(store, prefix, blocks, layers=8, slice_size=4096, per_request=4, receivers=3):
    # The paged KV cache: one region per layer, block b of layer l at l's base + b * slice.
    cache = ctypes.create_string_buffer(layers * blocks * slice_size)
    base = ctypes.addressof(cache)

    def seg(b, l, at=base):
        return at + (l * blocks + b) * slice_size

    names = ["blk%04d" % b for b in range(blocks)]
    for b, n in enumerate(names):
        for l in range(layers):
            ctypes.memmove(seg(b, l), pattern("%s.l%d" % (n, l), slice_size), slice_size)
    sent = [b for b in range(blocks) if b != blocks // 2]  # one block is never saved

    def send():  # the sending thread: a request's blocks per call
        for first in range(0, len(sent), per_request):
            req = sent[first:first + per_request]
            keys = [prefix + names[b] for b in req]
            exist = store.batch_is_exist(keys)
            res = store.batch_put_from_multi_buffers(
                keys, [[seg(b, l) for l in range(layers)] for b in req],
                [[slice_size] * layers for _ in req])
            print("send", req, "exist", exist, "put", res)

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()
    load = ctypes.create_string_buffer(len(cache))
    lbase = ctypes.addressof(load)
    out = {}

    def receive(t):  # receiving threads, each a share of the blocks
        mine = list(range(t, blocks, receivers))
        out[t] = store.batch_get_into_multi_buffers(
            [prefix + names[b] for b in mine],
            [[seg(b, l, lbase) for l in range(layers)] for b in mine],
            [[slice_size] * layers for _ in mine])

    workers = [threading.Thread(target=receive, args=(t,)) for t in range(receivers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for t in sorted(out):
        print("receive", t, out[t])
    ok = [ctypes.string_at(seg(b, l, lbase), slice_size) == pattern("%s.l%d" % (names[b], l),
                                                                   slice_size)
          for b in sent for l in range(layers)]
    print("loaded_correct", all(ok), len(ok))
    print("digest", hashlib.sha256(load.raw).hexdigest())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=["lmcache", "sglang", "vllm"])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--timing", action="store_true")
    a = ap.parse_args()
    store = open_store(a.servers)
    if a.shape == "lmcache":
        lmcache(store, a.prefix, a.chunks, a.size, a.timing)
    elif a.shape == "vllm":
        vllm(store, a.prefix, a.chunks // 8 or 1)
    else:
        sglang(store, a.prefix, a.chunks // 8 or 1, a.size)
    print("close", store.close())


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""test_mooncake_store.py - kvbatch's `mooncake.store` against a real kvstored:
every method with Mooncake's signature and return convention, multi_buffers
round trips, and bad inputs (TypeError where pybind11 raises one, Mooncake's
negative codes otherwise).

Run by tests/integration/test_mooncake_py.c with KVSTORE_SERVERS naming a
kvstored it started on 127.0.0.1 and PYTHONPATH=build/python.
"""
import ctypes
import os
import threading
import unittest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

SERVERS = os.environ["KVSTORE_SERVERS"]
PREFIX = "mcpy%d." % os.getpid()
INVALID_PARAMS, NOT_FOUND, NOT_SUPPORTED, NULL_ARG = -600, -704, -1012, -1


def buffer(data_or_size):
    """A ctypes buffer and its address (what engines pass: tensor.data_ptr())."""
    buf = ctypes.create_string_buffer(data_or_size)
    return buf, ctypes.addressof(buf)


def setup_store():
    s = MooncakeDistributedStore()
    rc = s.setup("node-a", "P2PHANDSHAKE", 1 << 30, 16 << 20, "tcp", "", SERVERS)
    assert rc == 0, rc
    return s


class Lifecycle(unittest.TestCase):
    def test_calls_before_setup_answer_invalid_params(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.health_check(), 1)
        self.assertEqual(s.put(PREFIX + "x", b"v"), INVALID_PARAMS)
        self.assertEqual(s.upsert(PREFIX + "x", b"v"), INVALID_PARAMS)
        self.assertEqual(s.batch_remove([PREFIX + "x"]), [INVALID_PARAMS])
        self.assertEqual(s.get(PREFIX + "x"), b"")
        self.assertEqual(s.is_exist(PREFIX + "x"), INVALID_PARAMS)
        self.assertEqual(s.batch_is_exist([PREFIX + "x", PREFIX + "y"]),
                         [INVALID_PARAMS] * 2)
        self.assertEqual(s.get_hostname(), "")

    def test_setup_positional_keywords_and_dict(self):
        s = MooncakeDistributedStore()
        self.assertEqual(
            s.setup("h1", "http://meta:8080/metadata", 0, 0, "tcp", "", SERVERS, None,
                    enable_client_http_server=True, client_http_port=9301), 0)
        self.assertEqual(s.get_hostname(), "h1")
        self.assertEqual(s.health_check(), 0)
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.health_check(), 1)  # closed: can be set up again
        self.assertEqual(s.setup({"local_hostname": "h2", "metadata_server": "P2PHANDSHAKE",
                                  "global_segment_size": "1024", "protocol": "tcp",
                                  "master_server_addr": SERVERS}), 0)
        self.assertEqual(s.get_hostname(), "h2")
        self.assertEqual(s.setup("h3", "", 0, 0, "tcp", "", SERVERS), INVALID_PARAMS)  # twice
        s.close()

    def test_setup_refusals(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("", "", 0, 0, "tcp", "", SERVERS), INVALID_PARAMS)
        self.assertEqual(s.setup("h", "", 0, 0, "ascend", "", SERVERS), INVALID_PARAMS)
        self.assertEqual(s.setup("h", "", 0, 0, "tcp", "", "127.0.0.1:1"), -900)
        self.assertEqual(s.setup("h", "", 0, 0, "tcp", "", SERVERS, tenant_id="t1"),
                         NOT_SUPPORTED)
        self.assertEqual(s.setup("h", "", 0, 0, "tcp", "", SERVERS, enable_ssd_offload=True),
                         NOT_SUPPORTED)
        with self.assertRaises(TypeError):
            s.setup("h", "", 0, 0, "tcp", "")  # six of the seven
        with self.assertRaises(TypeError):
            s.setup("h", "", "big", 0, "tcp", "", SERVERS)
        self.assertEqual(s.health_check(), 1)


class Calls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = setup_store()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_put_get_is_exist_get_size_remove(self):
        s, k = self.s, PREFIX + "pg"
        self.assertEqual(s.put(k, b"hello"), 0)
        self.assertEqual(s.get(k), b"hello")
        self.assertEqual(s.is_exist(k), 1)
        self.assertEqual(s.get_size(k), 5)
        big = os.urandom(300000)  # larger than get()'s first guess
        self.assertEqual(s.put(k, bytearray(big)), 0)
        self.assertEqual(s.get(k), big)
        self.assertEqual(s.get_buffer(k), big)
        self.assertEqual(s.remove(k), 0)
        self.assertEqual(s.remove(k, force=True), NOT_FOUND)
        self.assertEqual(s.is_exist(k), 0)
        self.assertEqual(s.get(k), b"")
        self.assertIsNone(s.get_buffer(k))
        self.assertEqual(s.get_size(k), NOT_FOUND)

    def test_put_from_get_into_with_pointers(self):
        s, k = self.s, PREFIX + "ptr"
        src, sp = buffer(b"0123456789abcdef")
        dst, dp = buffer(32)
        self.assertEqual(s.register_buffer(sp, 16), 0)
        self.assertEqual(s.put_from(k, sp, 16, ReplicateConfig()), 0)
        self.assertEqual(s.get_into(k, dp, 32), 16)
        self.assertEqual(dst.raw[:16], b"0123456789abcdef")
        self.assertEqual(s.get_into(k, dp, 15), INVALID_PARAMS)  # too small
        self.assertEqual(s.get_into(PREFIX + "nope", dp, 32), NOT_FOUND)
        self.assertEqual(s.unregister_buffer(sp), 0)
        self.assertEqual(s.unregister_buffer(sp), INVALID_PARAMS)

    def test_batches_mixed(self):
        s = self.s
        keys = [PREFIX + "b%d" % i for i in range(6)]
        bufs = [buffer(("value-%d" % i).encode() * (i + 1)) for i in range(6)]
        sizes = [len(b.raw) - 1 for b, _ in bufs]  # without the terminating NUL
        res = s.batch_put_from(keys[:4], [p for _, p in bufs[:4]], sizes[:4])
        self.assertEqual(res, [0, 0, 0, 0])
        self.assertEqual(s.batch_is_exist(keys), [1, 1, 1, 1, 0, 0])
        outs = [buffer(64) for _ in keys]
        caps = [64, 64, 64, 3, 64, 64]  # key 3: too small
        got = s.batch_get_into(keys, [p for _, p in outs], caps)
        self.assertEqual(got, sizes[:3] + [INVALID_PARAMS, NOT_FOUND, NOT_FOUND])
        for i in range(3):
            self.assertEqual(outs[i][0].raw[:sizes[i]], bufs[i][0].raw[:sizes[i]])
        self.assertEqual(s.get_batch(keys[:2] + [PREFIX + "nope"]),
                         [bufs[0][0].raw[:sizes[0]], bufs[1][0].raw[:sizes[1]], b""])
        self.assertEqual(s.batch_get_buffer([keys[0], PREFIX + "nope"]),
                         [bufs[0][0].raw[:sizes[0]], None])
        self.assertEqual(s.put_batch([PREFIX + "pb1", PREFIX + "pb2"], [b"one", b"two"]), 0)
        self.assertEqual(s.get_batch([PREFIX + "pb1", PREFIX + "pb2"]), [b"one", b"two"])
        self.assertEqual(s.put_batch([PREFIX + "pb3", PREFIX + "pb4"], [b"x", b""]),
                         INVALID_PARAMS)  # the first failing key's code
        self.assertEqual(s.batch_put_from([], [], []), [])
        self.assertEqual(s.batch_is_exist([]), [])

    def test_multi_buffers_round_trip(self):
        s = self.s
        keys = [PREFIX + "mb%d" % i for i in range(5)]
        layers = 4
        segs = [[buffer(os.urandom(512 + 64 * j)) for j in range(layers)] for _ in keys]
        ptrs = [[p for _, p in row] for row in segs]
        sizes = [[len(b.raw) - 1 for b, _ in row] for row in segs]
        self.assertEqual(s.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()),
                         [0] * len(keys))
        # One key's value is its segments concatenated.
        whole = b"".join(b.raw[:n] for (b, _), n in zip(segs[0], sizes[0]))
        self.assertEqual(s.get(keys[0]), whole)
        # Scattered back into fresh segments of the same sizes.
        outs = [[buffer(n) for n in row] for row in sizes]
        res = s.batch_get_into_multi_buffers(keys + [PREFIX + "mbnope"],
                                             [[p for _, p in row] for row in outs] + [[ptrs[0][0]]],
                                             sizes + [[10]])
        self.assertEqual(res, [sum(row) for row in sizes] + [NOT_FOUND])
        for i in range(len(keys)):
            for j in range(layers):
                self.assertEqual(outs[i][j][0].raw[:sizes[i][j]], segs[i][j][0].raw[:sizes[i][j]])
        # Capacity short by one byte over all segments: -600 for that key only.
        short = [list(row) for row in sizes]
        short[1][-1] -= 1
        res = s.batch_get_into_multi_buffers(keys[:2], [[p for _, p in row] for row in outs[:2]],
                                             short[:2])
        self.assertEqual(res, [sum(sizes[0]), INVALID_PARAMS])
        # One key, through the single-key calls.
        self.assertEqual(s.batch_put_from_multi_buffers([keys[0]], [ptrs[1]], [sizes[1]]), [0])
        one, op = buffer(sum(sizes[1]))
        self.assertEqual(s.batch_get_into_multi_buffers([keys[0]], [[op]], [[sum(sizes[1])]]),
                         [sum(sizes[1])])
        self.assertEqual(one.raw[:sum(sizes[1])],
                         b"".join(b.raw[:n] for (b, _), n in zip(segs[1], sizes[1])))

    def test_multi_buffers_edges(self):
        """Odd and empty segments, a one-segment key beside them, a total over
        kvstored's maximum value, and a get whose segments are too small:
        -600 for that key, and not one byte written anywhere."""
        s = self.s
        sizes = [1, 0, 4093, 7, 0, 65537, 3]
        area, base = buffer(sum(sizes) + 64 * len(sizes))
        ctypes.memmove(base, os.urandom(len(area.raw)), len(area.raw))
        at, ptrs = 0, []
        for n in sizes:  # 64 bytes between segments
            ptrs.append(base + at)
            at += n + 64
        want = b"".join(area.raw[p - base:p - base + n] for p, n in zip(ptrs, sizes))
        single, sp = buffer(b"only-one-segment")
        big, bp = buffer(33 << 20)
        keys = [PREFIX + "edge-odd", PREFIX + "edge-one", PREFIX + "edge-empty",
                PREFIX + "edge-big"]
        res = s.batch_put_from_multi_buffers(
            keys, [ptrs, [sp], [sp, sp], [bp, bp]], [sizes, [16], [0, 0], [33 << 20, 33 << 20]])
        self.assertEqual(res, [0, 0, INVALID_PARAMS, INVALID_PARAMS])
        self.assertEqual(s.get(keys[0]), want)
        self.assertEqual(s.get(keys[1]), b"only-one-segment")
        self.assertEqual(s.is_exist(keys[2]), 0)
        self.assertEqual(s.is_exist(keys[3]), 0)
        # Back in another odd split, and the single key into three segments.
        out, op = buffer(len(want) + 5)
        cut = [5000, 0, 3, len(want) - 5003 + 5]
        optrs = [op + sum(cut[:j]) for j in range(len(cut))]
        three, tp = buffer(16)
        res = s.batch_get_into_multi_buffers(keys[:2], [optrs, [tp, tp + 4, tp + 4]],
                                             [cut, [4, 0, 12]])
        self.assertEqual(res, [len(want), 16])
        self.assertEqual(out.raw[:len(want)], want)
        self.assertEqual(three.raw[:16], b"only-one-segment")
        # Segments one byte short in all: -600, the buffer untouched.
        guard, gp = buffer(b"\xab" * (len(want) + 64))
        short = [100, len(want) - 101]
        res = s.batch_get_into_multi_buffers(keys[:2], [[gp, gp + 100 + 32], [tp]],
                                             [short, [16]])
        self.assertEqual(res, [INVALID_PARAMS, 16])
        self.assertEqual(guard.raw[:len(want) + 64], b"\xab" * (len(want) + 64))

    def test_put_parts(self):
        s, k = self.s, PREFIX + "parts"
        self.assertEqual(s.put_parts(k, b"meta", bytearray(b"-"), memoryview(b"payload")), 0)
        self.assertEqual(s.get(k), b"meta-payload")
        self.assertEqual(s.put_parts(k, b"x", config=ReplicateConfig()), 0)
        self.assertEqual(s.get(k), b"x")
        self.assertEqual(s.put_parts(k), INVALID_PARAMS)  # no parts: 0 bytes
        with self.assertRaises(RuntimeError):
            s.put_parts(k, memoryview(bytearray(8)).cast("i"))  # not 1-D bytes-like
        with self.assertRaises(TypeError):
            s.put_parts(k, "not bytes")

    def test_upserts_overwrite(self):
        s, k = self.s, PREFIX + "ups"
        self.assertEqual(s.upsert(k, b"first"), 0)
        self.assertEqual(s.upsert(k, b"second, longer", ReplicateConfig()), 0)
        self.assertEqual(s.get(k), b"second, longer")
        src, sp = buffer(b"from a pointer")
        self.assertEqual(s.upsert_from(k, sp, 14, config=ReplicateConfig()), 0)
        self.assertEqual(s.get(k), b"from a pointer")
        self.assertEqual(s.upsert_parts(k, b"a", memoryview(b"b")), 0)
        self.assertEqual(s.get(k), b"ab")
        keys = [PREFIX + "ub%d" % i for i in range(3)]
        self.assertEqual(s.upsert_batch(keys, [b"1", b"22", b"333"]), 0)
        self.assertEqual(s.upsert_batch(keys, [b"x", b"yy", b"zzz"]), 0)
        self.assertEqual(s.get_batch(keys), [b"x", b"yy", b"zzz"])
        bufs = [buffer(("v%d" % i).encode() * 8) for i in range(3)]
        self.assertEqual(s.batch_upsert_from(keys, [p for _, p in bufs], [16] * 3), [0, 0, 0])
        self.assertEqual(s.get_batch(keys), [b.raw[:16] for b, _ in bufs])
        # The same checks as the put methods, under the upsert names.
        self.assertEqual(s.upsert(k, b""), INVALID_PARAMS)
        self.assertEqual(s.upsert_from(k, 0, 16), NULL_ARG)
        self.assertEqual(s.batch_upsert_from(keys, [1], [1, 1]), [INVALID_PARAMS] * 3)
        self.assertEqual(s.upsert_batch(keys, [b"a"]), INVALID_PARAMS)
        with self.assertRaises(TypeError):
            s.upsert(5, b"v")
        with self.assertRaisesRegex(TypeError, "upsert"):
            s.upsert(k)  # the message names the method called
        with self.assertRaisesRegex(TypeError, "upsert_parts"):
            s.upsert_parts()
        with self.assertRaisesRegex(TypeError, "batch_upsert_from"):
            s.batch_upsert_from(keys)
        self.assertEqual(s.get_batch(keys), [b.raw[:16] for b, _ in bufs])  # nothing lost

    def test_batch_remove(self):
        s = self.s
        keys = [PREFIX + "br%d" % i for i in range(4)]
        self.assertEqual(s.put_batch(keys[:3], [b"1", b"2", b"3"]), 0)
        self.assertEqual(s.batch_remove(keys[:2] + [keys[3], PREFIX + "a\0b"]),
                         [0, 0, NOT_FOUND, INVALID_PARAMS])
        self.assertEqual(s.batch_is_exist(keys), [0, 0, 1, 0])
        self.assertEqual(s.batch_remove(keys=[keys[2]], force=True), [0])
        self.assertEqual(s.batch_remove([]), [])
        with self.assertRaises(TypeError):
            s.batch_remove(keys[0])  # a str is not a list of keys
        with self.assertRaises(TypeError):
            s.batch_remove([keys[0], 7])

    def test_replicate_config(self):
        s, k = self.s, PREFIX + "cfg"
        c = ReplicateConfig()
        self.assertEqual(c.replica_num, 1)
        c.replica_num = 2
        c.with_soft_pin = True
        c.preferred_segment = "node-b"
        c.preferred_segments = ["a", "b"]
        c.group_ids = ["g"]  # fields of newer Mooncake versions are accepted too
        self.assertIn("replica_num: 2", str(c))
        self.assertEqual(s.put(k, b"v", c), 0)
        c.replica_num = 0
        self.assertEqual(s.put(k, b"w", c), INVALID_PARAMS)
        self.assertEqual(s.batch_put_from([k], [1], [1], c), [INVALID_PARAMS])
        c.replica_num = 1
        c.prefer_alloc_in_same_node = True
        self.assertEqual(s.put_from(k, 1, 1, config=c), INVALID_PARAMS)
        self.assertEqual(s.get(k), b"v")
        with self.assertRaises(TypeError):
            s.put(k, b"v", {"replica_num": 1})

    def test_remove_by_regex(self):
        s, p = self.s, PREFIX + "rx."
        for i in range(10):
            self.assertEqual(s.put(p + ("a%d" % i if i < 6 else "b%d" % i), b"v"), 0)
        self.assertEqual(s.remove_by_regex("^" + p.replace(".", "[.]") + "a"), 6)
        self.assertEqual(s.remove_by_regex("^" + p.replace(".", "[.]") + "a", force=True), 0)
        self.assertEqual(s.batch_is_exist([p + "a0", p + "b6"]), [0, 1])
        self.assertEqual(s.remove_by_regex(regex_pattern="(unclosed"), INVALID_PARAMS)
        self.assertEqual(s.remove_by_regex("a\0b"), INVALID_PARAMS)
        with self.assertRaises(TypeError):
            s.remove_by_regex(5)

    def test_remove_all(self):
        s = self.s
        self.assertEqual(s.put_batch([PREFIX + "ra1", PREFIX + "ra2"], [b"1", b"2"]), 0)
        self.assertGreaterEqual(s.remove_all(), 2)  # every key of the server
        self.assertEqual(s.batch_is_exist([PREFIX + "ra1", PREFIX + "ra2"]), [0, 0])
        self.assertEqual(s.remove_all(force=True), 0)

    def test_bad_inputs(self):
        s = self.s
        with self.assertRaises(TypeError):
            s.put(5, b"v")
        with self.assertRaises(TypeError):
            s.put(PREFIX + "k", "str is not bytes-like")
        with self.assertRaises(TypeError):
            s.put_from(PREFIX + "k", "0x1000", 4)
        with self.assertRaises(OverflowError):
            s.get_into(PREFIX + "k", 4096, -1)
        with self.assertRaises(TypeError):
            s.batch_put_from(PREFIX + "k", [1], [1])  # keys: a str is not a list
        with self.assertRaises(TypeError):
            s.batch_is_exist([PREFIX + "k", 7])
        self.assertEqual(s.put(PREFIX + "a\0b", b"v"), INVALID_PARAMS)  # NUL inside a key
        self.assertEqual(s.is_exist(PREFIX + "a\0b"), INVALID_PARAMS)
        self.assertEqual(s.put("", b"v"), INVALID_PARAMS)
        self.assertEqual(s.put(PREFIX + "k", b""), INVALID_PARAMS)  # 0 bytes
        self.assertEqual(s.put("k" * 600, b"v"), INVALID_PARAMS)  # key over 512 bytes
        self.assertEqual(s.put_from(PREFIX + "k", 0, 16), NULL_ARG)  # NULL pointer
        # Lists of different lengths: Mooncake's -600 for every key.
        self.assertEqual(s.batch_put_from([PREFIX + "k1", PREFIX + "k2"], [1], [1, 1]),
                         [INVALID_PARAMS] * 2)
        self.assertEqual(s.batch_get_into([PREFIX + "k1"], [1, 2], [1, 1]), [INVALID_PARAMS])
        self.assertEqual(s.batch_put_from_multi_buffers([PREFIX + "k1"], [[1], [2]], [[1]]),
                         [INVALID_PARAMS])
        self.assertEqual(s.batch_put_from_multi_buffers([PREFIX + "k1"], [[1, 2]], [[1]]),
                         [INVALID_PARAMS])  # one key's two lists differ
        self.assertEqual(s.put_batch([PREFIX + "k1"], [b"a", b"b"]), INVALID_PARAMS)
        self.assertEqual(s.is_exist(PREFIX + "k1"), 0)

    def test_threads_share_one_store(self):
        s, errors = self.s, []

        def worker(t):
            buf, p = buffer(4096)
            for i in range(100):
                k = PREFIX + "t%d.%d" % (t, i)
                ctypes.memmove(p, k.encode().ljust(64, b"."), 64)
                if s.put_from(k, p, 64) != 0 or s.get(k) != k.encode().ljust(64, b"."):
                    errors.append(k)
                if s.batch_is_exist([k, k + "nope"]) != [1, 0]:
                    errors.append(k)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertFalse(any(t.is_alive() for t in threads))


if __name__ == "__main__":
    unittest.main(verbosity=2)

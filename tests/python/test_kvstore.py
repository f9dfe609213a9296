#!/usr/bin/python3
"""test_kvstore.py - the kvstore Python binding against a real kvstored.

Run by tests/integration/test_kvbench.c with KVSTORE_SERVERS set to a
kvstored it started on 127.0.0.1 and PYTHONPATH pointing at build/python.
"""
import errno
import os
import socket
import threading
import unittest

import kvstore

SERVERS = os.environ["KVSTORE_SERVERS"]
PREFIX = "pytest%d." % os.getpid()


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.c = kvstore.Client(SERVERS)

    def tearDown(self):
        self.c.close()

    def test_put_get_roundtrip_any_bytes_like(self):
        for i, val in enumerate([b"", b"x", bytes(range(256)) * 40, bytearray(b"ba"),
                                 memoryview(b"mv")]):
            k = PREFIX + "rt%d" % i
            self.c.put(k, val)
            self.assertEqual(self.c.get(k), bytes(val))
        self.c.put(PREFIX + "bin", b"\x00\x01")  # bytes keys too
        self.assertEqual(self.c.get((PREFIX + "bin").encode()), b"\x00\x01")

    def test_get_grows_past_the_length_hint(self):
        self.c.put(PREFIX + "small", b"s")
        self.assertEqual(self.c.get(PREFIX + "small"), b"s")
        big = os.urandom(300000)
        self.c.put(PREFIX + "big", big)
        self.assertEqual(self.c.get(PREFIX + "big"), big)

    def test_missing_key_raises_notfound_with_code(self):
        with self.assertRaises(kvstore.NotFound) as cm:
            self.c.get(PREFIX + "missing")
        e = cm.exception
        self.assertIsInstance(e, KeyError)
        self.assertIsInstance(e, kvstore.Error)
        self.assertEqual(e.code, -2)
        self.assertEqual(e.message, kvstore.strerror(-2))
        self.assertFalse(self.c.exists(PREFIX + "missing"))

    def test_get_into_reports_length_and_refuses_small_buffer(self):
        self.c.put(PREFIX + "gi", b"hello")
        buf = bytearray(16)
        self.assertEqual(self.c.get_into(PREFIX + "gi", buf), 5)
        self.assertEqual(bytes(buf[:5]), b"hello")
        with self.assertRaises(kvstore.Error) as cm:
            self.c.get_into(PREFIX + "gi", bytearray(2))
        self.assertEqual(cm.exception.code, -34)  # -ERANGE: nothing truncated
        with self.assertRaises(TypeError):
            self.c.get_into(PREFIX + "gi", b"read-only bytes")

    def test_exists_remove(self):
        k = PREFIX + "er"
        self.c.put(k, b"v")
        self.assertTrue(self.c.exists(k))
        self.c.remove(k)
        self.assertFalse(self.c.exists(k))

    def test_bad_keys_are_refused_before_the_library(self):
        for bad in ("", "a\0b"):
            with self.assertRaises(ValueError):
                self.c.put(bad, b"v")
        with self.assertRaises(TypeError):
            self.c.put(5, b"v")
        with self.assertRaises(kvstore.Error) as cm:
            self.c.put("k" * (kvstore.MAX_KEY + 1), b"v")
        self.assertLess(cm.exception.code, 0)

    def test_batches_have_one_status_per_key(self):
        keys = [PREFIX + "b%d" % i for i in range(10)]
        vals = [("v%d" % i).encode() * (i + 1) for i in range(10)]
        self.assertEqual(self.c.batch_put(keys, vals), [0] * 10)
        bufs = [bytearray(64) for _ in range(11)]
        res = self.c.batch_get_into(keys + [PREFIX + "nope"], bufs)
        self.assertEqual(res[:10], [len(v) for v in vals])
        self.assertEqual(res[10], -2)
        for v, b in zip(vals, bufs):
            self.assertEqual(bytes(b[:len(v)]), v)
        self.assertEqual(self.c.batch_exists([keys[0], PREFIX + "nope"]), [True, False])
        with self.assertRaises(ValueError):
            self.c.batch_put(keys, vals[:3])
        self.assertEqual(self.c.batch_put([], []), [])

    def test_closed_client_refuses_calls(self):
        c = kvstore.Client(SERVERS)
        c.close()
        c.close()  # idempotent
        with self.assertRaises(ValueError):
            c.put(PREFIX + "x", b"v")
        with kvstore.Client(SERVERS) as d:
            d.put(PREFIX + "ctx", b"v")
            self.assertEqual(d.get(PREFIX + "ctx"), b"v")

    def test_alloc_buffer_moves_values_and_frees_safely(self):
        b = self.c.alloc_buffer(200000)
        self.assertIsInstance(b, kvstore.Buffer)
        self.assertEqual(len(b), 200000)
        m = memoryview(b)
        self.assertEqual(bytes(m[:8]), bytes(8))  # zeroed
        m[:5] = b"hello"
        self.c.put(PREFIX + "ab", m[:5])
        self.assertEqual(self.c.get_into(PREFIX + "ab", m[100000:100016]), 5)
        self.assertEqual(bytes(m[100000:100005]), b"hello")
        keys = [PREFIX + "ab%d" % i for i in range(4)]
        vals = [m[i * 1000:i * 1000 + 700] for i in range(4)]
        for i, v in enumerate(vals):
            v[:] = bytes([i + 1]) * 700
        self.assertEqual(self.c.batch_put(keys, vals), [0] * 4)
        outs = [m[50000 + i * 1000:50000 + i * 1000 + 700] for i in range(4)]
        self.assertEqual(self.c.batch_get_into(keys, outs), [700] * 4)
        for i, o in enumerate(outs):
            self.assertEqual(bytes(o), bytes([i + 1]) * 700)
        stats = dict(l.split(" ", 1) for l in self.c.server_stats().splitlines()
                     if l and not l.startswith("#"))
        if int(stats.get("client_shm_connects", "0")) > 0:  # over shared memory: in place
            self.assertGreaterEqual(int(stats["client_shm_in_place"]), 10)
        with self.assertRaises(BufferError):  # memoryviews of it still exist
            b.free()
        for v in vals + outs:
            v.release()
        m.release()
        b.free()
        b.free()  # idempotent
        self.assertEqual(len(b), 0)
        with self.assertRaises(ValueError):
            memoryview(b)
        with self.assertRaises(ValueError):
            self.c.alloc_buffer(0)
        with self.assertRaises(kvstore.Error):
            self.c.alloc_buffer(1 << 40)  # over 16 GiB: -EINVAL

    def test_buffer_outlives_a_closed_client(self):
        c = kvstore.Client(SERVERS)
        b = c.alloc_buffer(4096)
        c.close()
        memoryview(b)[:3] = b"abc"  # its memory stays until it goes
        with self.assertRaises(ValueError):
            c.put(PREFIX + "closed", memoryview(b)[:3])
        with self.assertRaises(ValueError):
            c.alloc_buffer(10)
        del b  # the last one: the client goes now

    def test_threads_share_one_client(self):
        errors = []

        def worker(t):
            try:
                for i in range(200):
                    k = PREFIX + "t%d.%d" % (t, i)
                    self.c.put(k, k.encode())
                    if self.c.get(k) != k.encode():
                        errors.append(k)
            except kvstore.Error as e:
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertFalse(any(t.is_alive() for t in threads))

    def test_errors_are_oserrors_of_the_matching_kind(self):
        self.assertTrue(issubclass(kvstore.Error, OSError))
        with self.assertRaises(FileNotFoundError) as cm:
            self.c.get(PREFIX + "missing-os")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertEqual(cm.exception.strerror, kvstore.strerror(-errno.ENOENT))
        # A bad server list is a ValueError (still a kvstore.Error, code -EINVAL).
        with self.assertRaises(ValueError) as cm:
            kvstore.Client("no-port-here")
        self.assertIsInstance(cm.exception, kvstore.Error)
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        # Nothing listens on a closed loopback port: ConnectionRefusedError.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with kvstore.Client("127.0.0.1:%d" % port) as d:
            with self.assertRaises(ConnectionError) as cm:
                d.put(PREFIX + "x", b"v")
            self.assertIsInstance(cm.exception, ConnectionRefusedError)
            self.assertEqual(cm.exception.errno, errno.ECONNREFUSED)
        # A silent peer: TimeoutError.
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(4)
        os.environ["KVSTORE_CONNECT_TIMEOUT_MS"] = "200"
        try:
            with kvstore.Client("127.0.0.1:%d" % lst.getsockname()[1]) as d:
                with self.assertRaises(TimeoutError):
                    d.get(PREFIX + "x")
        finally:
            del os.environ["KVSTORE_CONNECT_TIMEOUT_MS"]
            lst.close()

    def test_small_buffer_error_names_the_length(self):
        self.c.put(PREFIX + "len", b"x" * 1000)
        with self.assertRaises(kvstore.BufferTooSmall) as cm:
            self.c.get_into(PREFIX + "len", bytearray(10))
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.code, -errno.ERANGE)
        self.assertEqual(e.needed, 1000)
        self.assertIn("1000", str(e))
        self.assertIn("10 bytes", str(e))

    def test_long_key_is_cut_in_messages(self):
        key = "k" * 600  # longer than MAX_KEY: refused, and the message cuts it
        with self.assertRaises(kvstore.InvalidArgument) as cm:
            self.c.get(key)
        self.assertLess(len(str(cm.exception)), 200)
        self.assertIn("...", str(cm.exception))

    def test_flush_error_names_no_key(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with kvstore.Client("127.0.0.1:%d" % port) as d:
            try:
                d.batch_put([PREFIX + "f"], [b"v"])
            except kvstore.Error:
                pass
            with self.assertRaises(ConnectionRefusedError) as cm:
                d.flush()
            self.assertNotIn("flush", str(cm.exception))
            self.assertEqual(cm.exception.key, "")

    def test_version(self):
        self.assertRegex(kvstore.__version__, r"^[0-9]+\.[0-9]+")
        self.assertEqual(kvstore.__version__, os.environ.get("KVS_EXPECT_VERSION", kvstore.__version__))

    def test_server_stats_and_flush(self):
        self.assertIn("# server", self.c.server_stats())
        clients = self.c.server_clients()
        self.assertIn("# server", clients)
        self.assertIn("\n# listed ", clients)
        self.assertRegex(clients, r"(?m)^id=[0-9]+ addr=\S+ transport=(tcp|local|shm) ")
        self.c.flush()

    def test_server_clients_longer_than_a_first_buffer(self):
        # 60 more connections make the list about 8 KiB: every line arrives, none cut.
        others = [kvstore.Client(SERVERS) for _ in range(60)]
        try:
            for i, o in enumerate(others):
                o.put(PREFIX + "conn%d" % i, b"v")
            text = self.c.server_clients()
        finally:
            for o in others:
                o.close()
        lines = [ln for ln in text.splitlines() if ln.startswith("id=")]
        self.assertGreaterEqual(len(lines), 61)
        self.assertGreater(len(text), 4096)
        self.assertRegex(text, r"\n# listed %d omitted 0\n?$" % len(lines))
        for ln in lines:
            self.assertRegex(ln, r" auth=[01]$")


if __name__ == "__main__":
    unittest.main(verbosity=2)

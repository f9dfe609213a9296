/*
 * test_proto.c - the protocol state machine against a real in-process store,
 * no sockets: frames fed in one go and byte by byte give the same replies;
 * pipelining; per-key statuses; every malformed case; back-pressure; GET
 * replies pinned until sent.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto.h"
#include "rawwire.h"
#include "wire.h"

#define MIB (1u << 20)

/* ---- the connection under test ---- */

struct fixture {
    struct kvsd_server srv;
    struct kvsd_proto_conn *conn;
    struct kvt_reqbuf out; /* every reply byte sent so far */
    size_t read_pos;
};

static int setup_limits(void **state, size_t out_limit, size_t out_heap_limit)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    struct kvsd_server_limits lim = {.max_object = MIB,
                                     .max_frame = 4 * MIB,
                                     .out_limit = out_limit,
                                     .out_heap_limit = out_heap_limit,
                                     .rbuf_size = 4096};
    if (kvsd_server_init(&f->srv, 8 * MIB, &lim) < 0) return -1;
    f->conn = kvsd_proto_conn_new(&f->srv);
    if (!f->conn) return -1;
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_limits(state, 1u << 30, 1u << 30);
}

static int setup_small_out(void **state)
{
    return setup_limits(state, 1024, 1024);
}

static int setup_small_heap(void **state)
{
    return setup_limits(state, MIB, 16 * 1024);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    kvsd_proto_conn_free(f->conn);
    /* Nothing stays pinned once the connection is gone. */
    struct kvsd_store_stats st;
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 0);
    /* And every byte charged to it was refunded. */
    assert_int_equal(f->srv.conn_memory, 0);
    kvsd_server_fini(&f->srv);
    free(f->out.p);
    free(f);
    return 0;
}

/* Takes every queued reply byte, as a socket that always has room would, a few iovecs at a time. */
static void drain(struct fixture *f)
{
    for (int guard = 0; kvsd_proto_out_pending(f->conn) > 0 && guard < 1000000; guard++) {
        struct iovec iov[3];
        int n = kvsd_proto_out_iov(f->conn, iov, 3);
        assert_true(n > 0);
        size_t total = 0;
        for (int i = 0; i < n; i++) {
            kvt_reqbuf_put(&f->out, iov[i].iov_base, iov[i].iov_len);
            total += iov[i].iov_len;
        }
        kvsd_proto_sent(f->conn, total);
        kvsd_proto_process(f->conn);
    }
}

/* Feeds all of data, chunk bytes at a time (0: all at once), draining replies as it goes. */
static void feed(struct fixture *f, const struct kvt_reqbuf *b, size_t chunk)
{
    size_t off = 0;
    for (int guard = 0; off < b->len && guard < 10000000; guard++) {
        size_t n = chunk && b->len - off > chunk ? chunk : b->len - off;
        size_t took = kvsd_proto_feed(f->conn, b->p + off, n);
        off += took;
        if (took < n) {
            if (kvsd_proto_closing(f->conn)) break;
            drain(f);
        }
    }
    drain(f);
}

struct reply {
    struct kvs_wire_hdr hdr;
    int32_t status[16];
    uint32_t len[16];
    const uint8_t *data[16];
    const uint8_t *body;
};

/* Parses the next reply frame from what was sent; fails the test if there is none. */
static void next_reply(struct fixture *f, struct reply *r)
{
    memset(r, 0, sizeof(*r));
    assert_true(f->out.len - f->read_pos >= KVS_WIRE_HDR_LEN);
    const uint8_t *p = f->out.p + f->read_pos;
    assert_int_equal(kvs_wire_hdr_decode(p, &r->hdr, UINT32_MAX), 0);
    assert_true(r->hdr.opcode & KVS_OP_REPLY);
    assert_true(f->out.len - f->read_pos >= KVS_WIRE_HDR_LEN + (size_t)r->hdr.body_len);
    r->body = p + KVS_WIRE_HDR_LEN;
    const uint8_t *q = r->body;
    uint8_t req_op = r->hdr.opcode & (uint8_t)~KVS_OP_REPLY;
    if (req_op == KVS_OP_PUT || req_op == KVS_OP_GET || req_op == KVS_OP_EXISTS ||
        req_op == KVS_OP_REMOVE) {
        assert_true(r->hdr.count <= 16);
        for (uint32_t i = 0; i < r->hdr.count; i++) {
            struct kvs_wire_status st;
            assert_int_equal(kvs_wire_status_decode(q, req_op, &st), 0);
            r->status[i] = st.status;
            r->len[i] = st.len;
            q += KVS_WIRE_STATUS_LEN;
            if (req_op == KVS_OP_GET && st.status == 0) {
                r->data[i] = q;
                q += st.len;
            }
        }
        assert_ptr_equal(q, r->body + r->hdr.body_len);
    }
    f->read_pos += KVS_WIRE_HDR_LEN + r->hdr.body_len;
}

static void no_more_replies(struct fixture *f)
{
    assert_int_equal(f->out.len, f->read_pos);
}

static int32_t error_status(const struct reply *r)
{
    assert_int_equal(r->hdr.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_true(r->hdr.body_len >= 4);
    return (int32_t)kvs_get_u32(r->body);
}

/* ---- tests ---- */

static void test_put_get_roundtrip(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    uint8_t val[5000];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (uint8_t)(i * 7);
    kvt_req_put(&b, 1, "key", val, sizeof(val));
    kvt_req_get(&b, 2, "key", sizeof(val));
    kvt_req_get(&b, 3, "key", sizeof(val) - 1); /* too small: -ERANGE and the length */
    kvt_req_get(&b, 4, "missing", 100);
    feed(f, &b, 0);

    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.hdr.opcode, KVS_OP_PUT | KVS_OP_REPLY);
    assert_int_equal(r.hdr.id, 1);
    assert_int_equal(r.status[0], 0);
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 2);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.len[0], sizeof(val));
    assert_memory_equal(r.data[0], val, sizeof(val));
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 3);
    assert_int_equal(r.status[0], -ERANGE);
    assert_int_equal(r.len[0], sizeof(val));
    next_reply(f, &r);
    assert_int_equal(r.status[0], -ENOENT);
    no_more_replies(f);
    assert_false(kvsd_proto_closing(f->conn));
    assert_int_equal(f->srv.counters.get_hits, 2);
    assert_int_equal(f->srv.counters.get_misses, 1);
    free(b.p);
}

/* One batch frame with mixed outcomes: a status per key, one key's failure is its own. */
static void test_batch_mixed_statuses(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    static uint8_t big[MIB + 1];
    kvt_req_begin(&b, KVS_OP_PUT, 10);
    kvt_req_entry_klen(&b, "a", 1, 3, "AAA");
    kvt_req_entry_klen(&b, "toobig", 6, sizeof(big), big); /* over max_object: skipped, -E2BIG */
    kvt_req_entry_klen(&b, "n\0l", 3, 2, "NN");            /* NUL in key: -EINVAL */
    kvt_req_entry_klen(&b, "empty", 5, 0, "");
    kvt_req_entry_klen(&b, "b", 1, 2, "BB");
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_GET, 11);
    kvt_req_entry_klen(&b, "a", 1, 10, NULL);
    kvt_req_entry_klen(&b, "toobig", 6, 10, NULL);
    kvt_req_entry_klen(&b, "empty", 5, 0, NULL);
    kvt_req_entry_klen(&b, "b", 1, 2, NULL);
    kvt_req_entry_klen(&b, "n\0l", 3, 2, NULL);
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_EXISTS, 12);
    kvt_req_entry_klen(&b, "a", 1, 0, NULL);
    kvt_req_entry_klen(&b, "zz", 2, 0, NULL);
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_REMOVE, 13);
    kvt_req_entry_klen(&b, "a", 1, 0, NULL);
    kvt_req_entry_klen(&b, "a", 1, 0, NULL);
    kvt_req_end(&b);
    feed(f, &b, 0);

    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.hdr.count, 5);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.status[1], -E2BIG);
    assert_int_equal(r.status[2], -EINVAL);
    assert_int_equal(r.status[3], 0);
    assert_int_equal(r.status[4], 0);
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 11);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.len[0], 3);
    assert_memory_equal(r.data[0], "AAA", 3);
    assert_int_equal(r.status[1], -ENOENT);
    assert_int_equal(r.status[2], 0);
    assert_int_equal(r.len[2], 0);
    assert_int_equal(r.status[3], 0);
    assert_memory_equal(r.data[3], "BB", 2);
    assert_int_equal(r.status[4], -EINVAL);
    next_reply(f, &r);
    assert_int_equal(r.status[0], 1);
    assert_int_equal(r.status[1], 0);
    next_reply(f, &r);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.status[1], -ENOENT);
    no_more_replies(f);
    free(b.p);
}

/* A mix of frames fed whole, in 1-byte and in 7-byte pieces gives byte-identical replies. */
static void test_bytewise_same_as_whole(void **state)
{
    (void)state;
    struct kvt_reqbuf b = {0};
    uint8_t val[9000];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (uint8_t)(i ^ (i >> 8));
    kvt_req_put(&b, 1, "x", val, sizeof(val)); /* larger than the 4 KiB read buffer */
    kvt_req_put(&b, 2, "y", "hello", 5);
    kvt_req_get(&b, 3, "x", sizeof(val));
    kvt_req_begin(&b, KVS_OP_GET, 4);
    kvt_req_entry_klen(&b, "y", 1, 5, NULL);
    kvt_req_entry_klen(&b, "x", 1, 10, NULL);
    kvt_req_entry_klen(&b, "q", 1, 10, NULL);
    kvt_req_end(&b);
    kvt_req_begin(&b, 0x33, 5); /* unknown opcode with a body */
    kvt_reqbuf_put(&b, "garbage!", 8);
    kvt_req_end(&b);
    kvt_req_get(&b, 6, "y", 5);
    kvt_req_begin(&b, KVS_OP_HELLO, 7);
    kvt_req_end(&b);

    static const size_t chunks[] = {0, 1, 7, 4095};
    struct kvt_reqbuf first = {0};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        void *st;
        assert_int_equal(setup(&st), 0);
        struct fixture *f = st;
        feed(f, &b, chunks[c]);
        assert_false(kvsd_proto_closing(f->conn));
        if (c == 0) {
            kvt_reqbuf_put(&first, f->out.p, f->out.len);
            struct reply r;
            for (uint64_t id = 1; id <= 7; id++) {
                next_reply(f, &r);
                assert_int_equal(r.hdr.id, id);
            }
            no_more_replies(f);
        } else {
            assert_int_equal(f->out.len, first.len);
            assert_memory_equal(f->out.p, first.p, first.len);
        }
        teardown(&st);
    }
    free(first.p);
    free(b.p);
}

static void test_hello_and_stats(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "k", "v", 1);
    kvt_req_begin(&b, KVS_OP_HELLO, 2);
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_STATS, 3);
    kvt_req_end(&b);
    feed(f, &b, 0);

    struct reply r;
    next_reply(f, &r);
    next_reply(f, &r);
    assert_int_equal(r.hdr.opcode, KVS_OP_HELLO | KVS_OP_REPLY);
    struct kvs_wire_hello h;
    assert_int_equal(kvs_wire_hello_decode(r.body, r.hdr.body_len, &h), 0);
    assert_int_equal(h.version, 1);
    assert_int_equal(h.max_key, 512);
    assert_int_equal(h.max_object, MIB);
    assert_int_equal(h.max_frame, 4 * MIB);
    assert_int_equal(h.max_keys, KVSD_PROTO_MAX_KEYS);
    assert_int_equal(h.features, 0);

    next_reply(f, &r);
    assert_int_equal(r.hdr.opcode, KVS_OP_STATS | KVS_OP_REPLY);
    char *text = strndup((const char *)r.body, r.hdr.body_len);
    assert_non_null(text);
    assert_non_null(strstr(text, "\nrequests_put 1\n"));
    assert_non_null(strstr(text, "\nkeys_put 1\n"));
    assert_non_null(strstr(text, "\nrequests_hello 1\n"));
    assert_non_null(strstr(text, "\nitems 1\n"));
    assert_non_null(strstr(text, "\nmemory_total 8388608\n"));
    assert_non_null(strstr(text, "\nclass_0_items 1\n"));
    /* Every line is "name value". */
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char name[64];
        unsigned long long v;
        assert_int_equal(sscanf(line, "%63s %llu", name, &v), 2);
    }
    free(text);
    free(b.p);
}

/* Sends one malformed frame after a good one: good reply, ERROR with status, then closing. */
static void expect_fatal(struct fixture *f, const struct kvt_reqbuf *bad, int32_t status,
                         uint64_t id)
{
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 100, "good", "1", 1);
    kvt_reqbuf_put(&b, bad->p, bad->len);
    kvt_req_get(&b, 101, "good", 1); /* after the bad frame: never answered */
    feed(f, &b, 0);
    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 100);
    assert_int_equal(r.status[0], 0);
    next_reply(f, &r);
    assert_int_equal(error_status(&r), status);
    assert_int_equal(r.hdr.id, id);
    no_more_replies(f);
    assert_true(kvsd_proto_closing(f->conn));
    assert_int_equal(f->srv.counters.errors_protocol, 1);
    /* No more input is taken. */
    assert_int_equal(kvsd_proto_feed(f->conn, b.p, b.len), 0);
    free(b.p);
}

static void test_bad_magic(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_get(&b, 5, "k", 1);
    b.p[0] ^= 0xff;
    expect_fatal(*state, &b, -EPROTO, 0);
    free(b.p);
}

static void test_bad_version(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_get(&b, 5, "k", 1);
    b.p[4] = 2;
    expect_fatal(*state, &b, -EPROTO, 0);
    free(b.p);
}

static void test_oversize_body(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_get(&b, 6, "k", 1);
    kvs_put_u32(b.p + 12, 4 * MIB + 1);
    expect_fatal(*state, &b, -EMSGSIZE, 6);
    free(b.p);
}

static void test_count_larger_than_entries(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_GET, 7);
    kvt_req_entry_klen(&b, "a-long-enough-key", 17, 1, NULL);
    kvt_req_end(&b);
    kvs_put_u32(b.p + 8, 2); /* claims 2 entries, holds 1 */
    expect_fatal(*state, &b, -EBADMSG, 7);
    free(b.p);
}

static void test_count_smaller_than_entries(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_GET, 8);
    kvt_req_entry_klen(&b, "a", 1, 1, NULL);
    kvt_req_entry_klen(&b, "b", 1, 1, NULL);
    kvt_req_end(&b);
    kvs_put_u32(b.p + 8, 1); /* claims 1 entry, body holds 2 */
    expect_fatal(*state, &b, -EBADMSG, 8);
    free(b.p);
}

static void test_truncated_entry(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_PUT, 9);
    kvt_req_entry_klen(&b, "k", 1, 4, "vvvv");
    kvt_req_end(&b);
    kvs_put_u32(b.p + KVS_WIRE_HDR_LEN + 4, 40); /* value says 40 bytes, body has 4 */
    expect_fatal(*state, &b, -EBADMSG, 9);
    free(b.p);
}

static void test_klen_zero(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_GET, 10);
    kvt_req_entry_klen(&b, "k", 1, 1, NULL);
    kvt_reqbuf_put(&b, "pad", 3);
    kvt_req_end(&b);
    kvs_put_u16(b.p + KVS_WIRE_HDR_LEN, 0);
    expect_fatal(*state, &b, -EBADMSG, 10);
    free(b.p);
}

static void test_klen_over_512(void **state)
{
    struct kvt_reqbuf b = {0};
    char key[513];
    memset(key, 'k', sizeof(key));
    kvt_req_begin(&b, KVS_OP_GET, 11);
    kvt_req_entry_klen(&b, key, sizeof(key), 1, NULL);
    kvt_req_end(&b);
    expect_fatal(*state, &b, -EBADMSG, 11);
    free(b.p);
}

static void test_body_on_hello(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_HELLO, 12);
    kvt_reqbuf_put(&b, "xx", 2);
    kvt_req_end(&b);
    expect_fatal(*state, &b, -EBADMSG, 12);
    free(b.p);
}

static void test_reply_opcode_as_request(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_GET | KVS_OP_REPLY, 13);
    kvt_req_entry_klen(&b, "a", 1, 0, NULL);
    kvt_req_end(&b);
    kvs_put_u32(b.p + 8, 0); /* a plausible reply: count 0 ... */
    kvs_put_u32(b.p + 12, 0);
    b.len = KVS_WIRE_HDR_LEN;
    expect_fatal(*state, &b, -EBADMSG, 13);
    free(b.p);
}

static void test_length_on_exists_entry(void **state)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_EXISTS, 14);
    kvt_req_entry_klen(&b, "a", 1, 5, NULL);
    kvt_req_end(&b);
    expect_fatal(*state, &b, -EBADMSG, 14);
    free(b.p);
}

/* A malformed frame in the middle of a PUT value: the half-written slot is dropped. */
static void test_half_written_put_aborted(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    static uint8_t val[100000];
    kvt_req_put(&b, 1, "k", val, sizeof(val));
    assert_int_equal(kvsd_proto_feed(f->conn, b.p, b.len / 2), b.len / 2);
    struct kvsd_store_stats st;
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 1); /* the reserved slot */
    assert_int_equal(st.items, 0);  /* and not visible */
    kvsd_proto_conn_free(f->conn);
    f->conn = kvsd_proto_conn_new(&f->srv);
    assert_non_null(f->conn);
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.memory_used, 0);
    free(b.p);
}

/* An unknown opcode gets -ENOTSUP, its body is skipped, and the next frame is answered. */
static void test_unknown_opcode_then_good_frame(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, 0x42, 20);
    for (int i = 0; i < 1000; i++)
        kvt_reqbuf_put(&b, "0123456789", 10);
    kvt_req_end(&b);
    kvt_req_put(&b, 21, "k", "v", 1);
    kvt_req_get(&b, 22, "k", 1);
    feed(f, &b, 0);
    struct reply r;
    next_reply(f, &r);
    assert_int_equal(error_status(&r), -ENOTSUP);
    assert_int_equal(r.hdr.id, 20);
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 21);
    assert_int_equal(r.status[0], 0);
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 22);
    assert_memory_equal(r.data[0], "v", 1);
    no_more_replies(f);
    assert_false(kvsd_proto_closing(f->conn));
    assert_int_equal(f->srv.counters.errors_unsupported, 1);
    free(b.p);
}

/* Opcodes the codec knows but TCP does not serve (RDMA control) are skipped like unknown ones. */
static void test_rdma_opcode_not_served_over_tcp(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_RDMA_RESERVE, 30);
    kvt_req_entry_klen(&b, "k", 1, 100, NULL);
    kvt_req_end(&b);
    kvt_req_put(&b, 31, "k", "v", 1);
    feed(f, &b, 0);
    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 30);
    assert_int_equal(error_status(&r), -ENOTSUP);
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 31);
    assert_int_equal(r.status[0], 0);
    assert_false(kvsd_proto_closing(f->conn));
    free(b.p);
}

/*
 * PUT values are read straight into their slots in the pool: once the bytes
 * before a value are parsed, the first iovec handed out is the slot itself
 * (what follows the value goes to the read buffer in the same readv).
 */
static void test_put_value_read_into_slot(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    static uint8_t val[300000];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (uint8_t)(i * 13);
    kvt_req_put(&b, 1, "big", val, sizeof(val));
    kvt_req_put(&b, 2, "small", "xyz", 3);
    uint8_t *pool = kvsd_pool_base(kvsd_store_pool(f->srv.store));
    size_t pool_size = kvsd_pool_size(kvsd_store_pool(f->srv.store));
    size_t direct = 0, off = 0;
    for (int guard = 0; off < b.len && guard < 100000; guard++) {
        struct iovec iov[2];
        int cnt = kvsd_proto_recv_iov(f->conn, iov);
        assert_true(cnt > 0);
        size_t n = 0, chunk = b.len - off < 7000 ? b.len - off : 7000; /* socket-sized reads */
        for (int i = 0; i < cnt && n < chunk; i++) {
            size_t k = chunk - n < iov[i].iov_len ? chunk - n : iov[i].iov_len;
            uint8_t *dst = iov[i].iov_base;
            if (dst >= pool && dst < pool + pool_size) direct += k;
            memcpy(dst, b.p + off + n, k);
            n += k;
        }
        kvsd_proto_received(f->conn, n);
        off += n;
    }
    /* All of the value but the part that came with its header went directly. */
    assert_true(direct > sizeof(val) - 7000);
    assert_true(direct <= sizeof(val));
    drain(f);
    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.status[0], 0);
    struct kvsd_item *it = kvsd_store_lookup(f->srv.store, (const uint8_t *)"big", 3, 0);
    assert_non_null(it);
    assert_memory_equal(kvsd_item_data(f->srv.store, it), val, sizeof(val));
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 2);
    assert_int_equal(r.status[0], 0);
    it = kvsd_store_lookup(f->srv.store, (const uint8_t *)"small", 5, 0);
    assert_non_null(it);
    assert_memory_equal(kvsd_item_data(f->srv.store, it), "xyz", 3);
    free(b.p);
}

/*
 * A GET reply points into pool memory and keeps its item pinned until sent:
 * a PUT of the same key meanwhile writes a new slot, so the queued reply is
 * the whole old value and the next GET the whole new one.
 */
static void test_get_reply_pinned_until_sent(void **state)
{
    struct fixture *f = *state;
    struct kvt_reqbuf b = {0};
    uint8_t v1[3000], v2[3000];
    memset(v1, 1, sizeof(v1));
    memset(v2, 2, sizeof(v2));
    kvt_req_put(&b, 1, "k", v1, sizeof(v1));
    kvt_req_get(&b, 2, "k", sizeof(v1));
    kvt_req_put(&b, 3, "k", v2, sizeof(v2));
    kvt_req_get(&b, 4, "k", sizeof(v2));
    assert_int_equal(kvsd_proto_feed(f->conn, b.p, b.len), b.len);
    struct kvsd_store_stats st;
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 2); /* both values, held by unsent replies */
    assert_int_equal(st.items, 1);
    drain(f);
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 0);
    struct reply r;
    next_reply(f, &r);
    next_reply(f, &r);
    assert_memory_equal(r.data[0], v1, sizeof(v1));
    next_reply(f, &r);
    next_reply(f, &r);
    assert_memory_equal(r.data[0], v2, sizeof(v2));
    free(b.p);
}

/* Above out_limit queued bytes, input stops until replies drain; nothing is lost. */
static void test_back_pressure(void **state)
{
    struct fixture *f = *state; /* out_limit 1 KiB */
    struct kvt_reqbuf b = {0};
    uint8_t val[2000];
    memset(val, 9, sizeof(val));
    kvt_req_put(&b, 0, "k", val, sizeof(val));
    for (uint64_t id = 1; id <= 300; id++)
        kvt_req_get(&b, id, "k", sizeof(val));
    size_t took = kvsd_proto_feed(f->conn, b.p, b.len);
    assert_true(took < b.len);
    assert_false(kvsd_proto_want_input(f->conn));
    /* Queued output is bounded by the limit plus one frame's reply. */
    assert_true(kvsd_proto_out_pending(f->conn) <= 1024 + 2 * (KVS_WIRE_HDR_LEN + 8 + 2000));
    struct iovec iov[2];
    assert_int_equal(kvsd_proto_recv_iov(f->conn, iov), 0);

    struct kvt_reqbuf rest = {0};
    kvt_reqbuf_put(&rest, b.p + took, b.len - took);
    feed(f, &rest, 0);
    struct reply r;
    next_reply(f, &r);
    for (uint64_t id = 1; id <= 300; id++) {
        next_reply(f, &r);
        assert_int_equal(r.hdr.id, id);
        assert_memory_equal(r.data[0], val, sizeof(val));
    }
    no_more_replies(f);
    free(rest.p);
    free(b.p);
}

/*
 * Tiny replies cost more heap than payload (a 24-byte reply: a 32-byte
 * buffer and a 32-byte segment): input stops once their heap would pass
 * out_heap_limit (16 KiB here), long before out_limit (1 MiB) of payload;
 * once they are sent the connection holds what it held before.
 */
static void test_back_pressure_counts_heap(void **state)
{
    struct fixture *f = *state;
    size_t idle = f->srv.conn_memory;
    struct kvt_reqbuf b = {0};
    for (uint64_t id = 0; id < 10000; id++) { /* 240 KB of count-0 PUTs */
        kvt_req_begin(&b, KVS_OP_PUT, id);
        kvt_req_end(&b);
    }
    size_t took = kvsd_proto_feed(f->conn, b.p, b.len);
    assert_true(took < b.len);
    assert_false(kvsd_proto_want_input(f->conn));
    assert_true(kvsd_proto_out_pending(f->conn) < 16 * 1024);
    assert_true(f->srv.conn_memory - idle > 8 * 1024);
    assert_true(f->srv.conn_memory - idle <= 16 * 1024);
    struct kvt_reqbuf rest = {0};
    kvt_reqbuf_put(&rest, b.p + took, b.len - took);
    feed(f, &rest, 0);
    struct reply r;
    for (uint64_t id = 0; id < 10000; id++) {
        next_reply(f, &r);
        assert_int_equal(r.hdr.id, id);
    }
    no_more_replies(f);
    assert_int_equal(f->srv.conn_memory, idle);
    free(rest.p);
    free(b.p);
}

/*
 * Pipelined GET frames whose keys all hit, never drained: the heap their
 * replies hold (statuses, segments) never passes out_heap_limit (16 KiB
 * here), not even by one frame: each frame's worst case is admitted
 * against the budget from its header, before any key is read (it used to
 * be checked only after the frame, so the last one, and its doubled
 * segment array, went over). Then every reply arrives, whole.
 */
static void test_reply_heap_never_passes_budget(void **state)
{
    struct fixture *f = *state;
    enum { FRAMES = 100, KEYS = 16 };
    struct kvt_reqbuf b = {0};
    uint8_t val[8];
    memset(val, 5, sizeof(val));
    kvt_req_put(&b, 0, "k", val, sizeof(val));
    feed(f, &b, 0);
    struct reply r;
    next_reply(f, &r);
    assert_int_equal(r.status[0], 0);
    size_t idle = f->srv.conn_memory;
    b.len = 0;
    for (uint64_t id = 1; id <= FRAMES; id++) {
        kvt_req_begin(&b, KVS_OP_GET, id);
        for (int i = 0; i < KEYS; i++)
            kvt_req_entry(&b, "k", sizeof(val), NULL);
        kvt_req_end(&b);
    }
    size_t took = kvsd_proto_feed(f->conn, b.p, b.len);
    assert_true(took < b.len);
    assert_false(kvsd_proto_want_input(f->conn));
    assert_true(f->srv.conn_memory > idle);
    assert_true(f->srv.conn_memory - idle <= 16 * 1024);
    struct kvt_reqbuf rest = {0};
    kvt_reqbuf_put(&rest, b.p + took, b.len - took);
    feed(f, &rest, 0);
    for (uint64_t id = 1; id <= FRAMES; id++) {
        next_reply(f, &r);
        assert_int_equal(r.hdr.id, id);
        assert_int_equal(r.hdr.count, KEYS);
        for (int i = 0; i < KEYS; i++) {
            assert_int_equal(r.status[i], 0);
            assert_memory_equal(r.data[i], val, sizeof(val));
        }
    }
    no_more_replies(f);
    assert_true(f->srv.conn_memory <= idle); /* a grown segment array is given back */
    free(rest.p);
    free(b.p);
}

/* A GET whose values would outgrow max_frame answers the overflowing key -EMSGSIZE. */
static void test_get_reply_bounded_by_max_frame(void **state)
{
    struct fixture *f = *state; /* max_frame 4 MiB, max_object 1 MiB */
    struct kvt_reqbuf b = {0};
    static uint8_t val[MIB];
    const char *keys[] = {"k0", "k1", "k2", "k3", "k4"};
    for (int i = 0; i < 5; i++)
        kvt_req_put(&b, (uint64_t)i, keys[i], val, sizeof(val));
    kvt_req_begin(&b, KVS_OP_GET, 9);
    for (int i = 0; i < 5; i++)
        kvt_req_entry_klen(&b, keys[i], 2, MIB, NULL);
    kvt_req_end(&b);
    feed(f, &b, 0);
    struct reply r;
    for (int i = 0; i < 5; i++) {
        next_reply(f, &r);
        assert_int_equal(r.status[0], 0);
    }
    next_reply(f, &r);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.status[1], 0);
    assert_int_equal(r.status[2], 0);
    assert_int_equal(r.status[3], -EMSGSIZE);
    assert_int_equal(r.status[4], -EMSGSIZE);
    assert_true(r.hdr.body_len <= 4 * MIB);
    free(b.p);
}

/* When nothing can be evicted (all pinned by unsent replies), a PUT gets -ENOSPC. */
static void test_put_nospace_when_all_pinned(void **state)
{
    struct fixture *f = *state; /* 8 MiB pool */
    struct kvt_reqbuf b = {0};
    static uint8_t val[MIB];
    char key[16];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        kvt_req_put(&b, 0, key, val, sizeof(val)); /* a 1-page run each: the pool is full */
    }
    feed(f, &b, 0);
    b.len = 0;
    /* A GET that does not fit its buffer pins nothing. */
    kvt_req_begin(&b, KVS_OP_GET, 1);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        kvt_req_entry_klen(&b, key, 2, 0, NULL); /* capacity 0: -ERANGE, pins nothing */
    }
    kvt_req_end(&b);
    kvt_req_put(&b, 2, "new", val, 100);
    feed(f, &b, 0);
    struct reply r;
    for (int i = 0; i < 8; i++)
        next_reply(f, &r);
    next_reply(f, &r);
    for (int i = 0; i < 8; i++)
        assert_int_equal(r.status[i], -ERANGE);
    next_reply(f, &r);
    assert_int_equal(r.status[0], 0); /* by evicting the oldest run, k0 */

    /* Now pin everything left with GETs whose replies are not sent, then PUT. */
    struct kvsd_store_stats st;
    b.len = 0;
    for (int i = 1; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        kvt_req_get(&b, 3, key, MIB);
    }
    kvt_req_get(&b, 3, "new", MIB);
    kvt_req_put(&b, 4, "x", val, 200000);
    assert_int_equal(kvsd_proto_feed(f->conn, b.p, b.len), b.len);
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, st.items);
    drain(f);
    for (int i = 0; i < 8; i++) {
        next_reply(f, &r);
        assert_int_equal(r.status[0], 0);
    }
    next_reply(f, &r);
    assert_int_equal(r.hdr.id, 4);
    assert_int_equal(r.status[0], -ENOSPC);
    assert_int_equal(f->srv.counters.put_no_space, 1);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_mixed_statuses, setup, teardown),
        cmocka_unit_test(test_bytewise_same_as_whole),
        cmocka_unit_test_setup_teardown(test_hello_and_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversize_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_larger_than_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_smaller_than_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_klen_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_klen_over_512, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_on_hello, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_opcode_as_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_length_on_exists_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_written_put_aborted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_opcode_then_good_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rdma_opcode_not_served_over_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_value_read_into_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_reply_pinned_until_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_back_pressure, setup_small_out, teardown),
        cmocka_unit_test_setup_teardown(test_back_pressure_counts_heap, setup_small_heap, teardown),
        cmocka_unit_test_setup_teardown(test_reply_heap_never_passes_budget, setup_small_heap,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_get_reply_bounded_by_max_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_nospace_when_all_pinned, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

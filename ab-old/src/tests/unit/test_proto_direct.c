/*
 * test_proto_direct.c - big PUT values are received straight into their
 * slots: a stream of 64 KiB values split across many reads of arbitrary
 * sizes (as recv() splits a socket stream) lands almost entirely in pool
 * memory, not in the read buffer; every value is stored intact; small
 * values, GETs and a refused value after big ones still come out right.
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

#define KIB        1024u
#define MIB        (1024u * KIB)
#define RBUF       (64 * KIB) /* kvstored's default read buffer */
#define BIG        (64 * KIB)
#define NBIG       24
#define PER_VALUE  512u /* bytes of a big value allowed through the read buffer */
#define MAX_CHUNKS 1000000

struct fixture {
    struct kvsd_server srv;
    struct kvsd_proto_conn *conn;
    struct kvt_reqbuf out;
    uint64_t rng;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    struct kvsd_server_limits lim = {.max_object = MIB,
                                     .max_frame = 8 * MIB,
                                     .out_limit = 1u << 30,
                                     .out_heap_limit = 1u << 30,
                                     .rbuf_size = RBUF};
    if (kvsd_server_init(&f->srv, 32 * MIB, &lim) < 0) return -1;
    f->conn = kvsd_proto_conn_new(&f->srv);
    if (!f->conn) return -1;
    f->rng = 0x9e3779b97f4a7c15ull;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    kvsd_proto_conn_free(f->conn);
    struct kvsd_store_stats st;
    kvsd_store_stats(f->srv.store, &st);
    assert_int_equal(st.pinned, 0);
    kvsd_server_fini(&f->srv);
    free(f->out.p);
    free(f);
    return 0;
}

/* A deterministic pseudo-random number in [1, max]. */
static size_t next_size(struct fixture *f, size_t max)
{
    f->rng = f->rng * 6364136223846793005ull + 1442695040888963407ull;
    return 1 + (size_t)((f->rng >> 33) % max);
}

/* Takes every queued reply byte. */
static void drain(struct fixture *f)
{
    for (int guard = 0; kvsd_proto_out_pending(f->conn) > 0 && guard < 100000; guard++) {
        struct iovec iov[8];
        int n = kvsd_proto_out_iov(f->conn, iov, 8);
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

/*
 * Delivers the stream as a socket would to net.c's readv: each "recv" hands
 * over a random 1..max_chunk bytes into the iovecs kvsd_proto_recv_iov gives.
 * Returns how many bytes were written into pool memory (a value's slot).
 */
static size_t deliver(struct fixture *f, const struct kvt_reqbuf *b, size_t max_chunk)
{
    const uint8_t *pool = kvsd_pool_base(kvsd_store_pool(f->srv.store));
    size_t pool_size = kvsd_pool_size(kvsd_store_pool(f->srv.store));
    size_t direct = 0, off = 0;
    for (int guard = 0; off < b->len && guard < MAX_CHUNKS; guard++) {
        struct iovec iov[2];
        int cnt = kvsd_proto_recv_iov(f->conn, iov);
        assert_true(cnt > 0);
        size_t chunk = next_size(f, max_chunk);
        if (chunk > b->len - off) chunk = b->len - off;
        size_t n = 0;
        for (int i = 0; i < cnt && n < chunk; i++) {
            size_t k = chunk - n < iov[i].iov_len ? chunk - n : iov[i].iov_len;
            uint8_t *dst = iov[i].iov_base;
            if (dst >= pool && dst < pool + pool_size) direct += k;
            memcpy(dst, b->p + off + n, k);
            n += k;
        }
        kvsd_proto_received(f->conn, n);
        off += n;
        drain(f);
    }
    assert_int_equal(off, b->len);
    assert_false(kvsd_proto_closing(f->conn));
    return direct;
}

/* Every reply frame in f->out: each key's status, which must all be want. */
static size_t check_replies(struct fixture *f, int32_t want)
{
    size_t pos = 0, keys = 0;
    while (pos < f->out.len) {
        struct kvs_wire_hdr h;
        assert_true(f->out.len - pos >= KVS_WIRE_HDR_LEN);
        assert_int_equal(kvs_wire_hdr_decode(f->out.p + pos, &h, UINT32_MAX), 0);
        const uint8_t *q = f->out.p + pos + KVS_WIRE_HDR_LEN;
        for (uint32_t i = 0; i < h.count; i++) {
            struct kvs_wire_status st;
            assert_int_equal(kvs_wire_status_decode(q, KVS_OP_PUT, &st), 0);
            assert_int_equal(st.status, want);
            q += KVS_WIRE_STATUS_LEN;
            keys++;
        }
        pos += KVS_WIRE_HDR_LEN + h.body_len;
    }
    return keys;
}

static void fill_value(uint8_t *v, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        v[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

static void check_stored(struct fixture *f, const char *key, const uint8_t *v, size_t len)
{
    struct kvsd_item *it = kvsd_store_lookup(f->srv.store, (const uint8_t *)key, strlen(key), 0);
    assert_non_null(it);
    assert_int_equal(kvsd_item_len(it), len);
    assert_memory_equal(kvsd_item_data(f->srv.store, it), v, len);
}

/*
 * NBIG 64 KiB values: half in one multi-key frame, half as pipelined
 * single-key frames, delivered in reads of up to 100,000 bytes. Apart from
 * the first value (read before the connection is known to send big values)
 * at most PER_VALUE bytes of each value pass through the read buffer.
 */
static void test_big_values_land_in_slots(void **state)
{
    struct fixture *f = *state;
    static uint8_t vals[NBIG][BIG];
    struct kvt_reqbuf b = {0};
    char key[32];
    kvt_req_begin(&b, KVS_OP_PUT, 1);
    for (unsigned i = 0; i < NBIG / 2; i++) {
        fill_value(vals[i], BIG, i);
        snprintf(key, sizeof(key), "model@tp1@r0@%08x@%u", i * 2654435761u, i);
        kvt_req_entry(&b, key, BIG, vals[i]);
    }
    kvt_req_end(&b);
    for (unsigned i = NBIG / 2; i < NBIG; i++) {
        fill_value(vals[i], BIG, i);
        snprintf(key, sizeof(key), "model@tp1@r0@%08x@%u", i * 2654435761u, i);
        kvt_req_put(&b, 2 + i, key, vals[i], BIG);
    }
    size_t direct = deliver(f, &b, 100000);
    size_t total = (size_t)NBIG * BIG;
    assert_true(direct <= total);
    assert_true(total - direct <= RBUF + (size_t)NBIG * PER_VALUE);
    assert_int_equal(check_replies(f, 0), NBIG);
    for (unsigned i = 0; i < NBIG; i++) {
        snprintf(key, sizeof(key), "model@tp1@r0@%08x@%u", i * 2654435761u, i);
        check_stored(f, key, vals[i], BIG);
    }
    free(b.p);
}

/* The same with tiny, irregular reads (a congested socket): values still intact. */
static void test_big_values_tiny_reads(void **state)
{
    struct fixture *f = *state;
    static uint8_t vals[3][BIG];
    struct kvt_reqbuf b = {0};
    const char *keys[3] = {"a", "bb", "ccc"};
    for (unsigned i = 0; i < 3; i++) {
        fill_value(vals[i], BIG, 100 + i);
        kvt_req_put(&b, 1 + i, keys[i], vals[i], BIG);
    }
    deliver(f, &b, 300);
    assert_int_equal(check_replies(f, 0), 3);
    for (unsigned i = 0; i < 3; i++)
        check_stored(f, keys[i], vals[i], BIG);
    free(b.p);
}

/*
 * Big values, then small ones, a key longer than one capped read, a GET
 * frame, and big values again, pipelined: every reply right and in order.
 */
static void test_big_then_small_then_get(void **state)
{
    struct fixture *f = *state;
    static uint8_t big[2][BIG];
    uint8_t small[16][1000];
    char longkey[KVS_WIRE_MAX_KEY + 1];
    memset(longkey, 'k', KVS_WIRE_MAX_KEY);
    longkey[KVS_WIRE_MAX_KEY] = '\0';
    struct kvt_reqbuf b = {0};
    fill_value(big[0], BIG, 1);
    fill_value(big[1], BIG, 2);
    kvt_req_put(&b, 1, "big0", big[0], BIG);
    kvt_req_put(&b, 2, longkey, big[1], BIG);
    kvt_req_begin(&b, KVS_OP_PUT, 3);
    char key[16];
    for (unsigned i = 0; i < 16; i++) {
        fill_value(small[i], sizeof(small[i]), 50 + i);
        snprintf(key, sizeof(key), "s%u", i);
        kvt_req_entry(&b, key, sizeof(small[i]), small[i]);
    }
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_GET, 4);
    kvt_req_entry(&b, "big0", BIG, NULL);
    kvt_req_entry(&b, "s3", sizeof(small[3]), NULL);
    kvt_req_end(&b);
    kvt_req_put(&b, 5, "big0", big[1], BIG); /* overwrite after the GET was answered */
    deliver(f, &b, 70000);

    /* Replies: PUT 1, PUT 2, PUT 3 (16 keys), GET 4 (two values), PUT 5. */
    size_t pos = 0;
    uint64_t want_id = 1;
    while (pos < f->out.len) {
        struct kvs_wire_hdr h;
        assert_int_equal(kvs_wire_hdr_decode(f->out.p + pos, &h, UINT32_MAX), 0);
        assert_int_equal(h.id, want_id);
        const uint8_t *q = f->out.p + pos + KVS_WIRE_HDR_LEN;
        uint8_t op = h.opcode & (uint8_t)~KVS_OP_REPLY;
        for (uint32_t i = 0; i < h.count; i++) {
            struct kvs_wire_status st;
            assert_int_equal(kvs_wire_status_decode(q, op, &st), 0);
            assert_int_equal(st.status, 0);
            q += KVS_WIRE_STATUS_LEN;
            if (op == KVS_OP_GET) {
                const uint8_t *v = i == 0 ? big[0] : small[3];
                assert_int_equal(st.len, i == 0 ? BIG : sizeof(small[3]));
                assert_memory_equal(q, v, st.len);
                q += st.len;
            }
        }
        pos += KVS_WIRE_HDR_LEN + h.body_len;
        want_id++;
    }
    assert_int_equal(want_id, 6);
    check_stored(f, longkey, big[1], BIG);
    check_stored(f, "big0", big[1], BIG);
    free(b.p);
}

/*
 * A refused value (over max_object) after big values is skipped with whole
 * read-buffer reads, not capped ones, and the PUT after it is stored.
 */
static void test_refused_value_read_whole(void **state)
{
    struct fixture *f = *state;
    static uint8_t big[BIG], huge[MIB + 1];
    fill_value(big, BIG, 9);
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "first", big, BIG);
    kvt_req_put(&b, 2, "huge", huge, sizeof(huge));
    kvt_req_put(&b, 3, "after", big, BIG);
    /* Up to the end of huge's key: the connection then skips its value. */
    size_t upto = b.len - (KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN + 5 + BIG) - sizeof(huge);
    struct kvt_reqbuf head = {.p = b.p, .len = upto};
    deliver(f, &head, 100000);
    struct iovec iov[2];
    assert_int_equal(kvsd_proto_recv_iov(f->conn, iov), 1);
    assert_true(iov[0].iov_len > 4 * KIB);
    struct kvt_reqbuf rest = {.p = b.p + upto, .len = b.len - upto};
    deliver(f, &rest, 100000);

    size_t pos = 0;
    int32_t want[3] = {0, -E2BIG, 0};
    for (int i = 0; i < 3; i++) {
        struct kvs_wire_hdr h;
        assert_int_equal(kvs_wire_hdr_decode(f->out.p + pos, &h, UINT32_MAX), 0);
        assert_int_equal(h.id, (uint64_t)i + 1);
        struct kvs_wire_status st;
        assert_int_equal(kvs_wire_status_decode(f->out.p + pos + KVS_WIRE_HDR_LEN, KVS_OP_PUT, &st),
                         0);
        assert_int_equal(st.status, want[i]);
        pos += KVS_WIRE_HDR_LEN + h.body_len;
    }
    assert_int_equal(pos, f->out.len);
    check_stored(f, "after", big, BIG);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_big_values_land_in_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_values_tiny_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_then_small_then_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_value_read_whole, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

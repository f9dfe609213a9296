/*
 * test_wire.c - the wire codec: round trips and every malformed case the
 * decoders must refuse.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire.h"

/* A request frame assembled in memory, as a client would send it. */
struct frame {
    uint8_t buf[8192];
    size_t len;
    uint32_t count;
};

static void frame_begin(struct frame *f)
{
    memset(f, 0, sizeof(*f));
    f->len = KVS_WIRE_HDR_LEN;
}

static void frame_add(struct frame *f, const char *key, const void *val, uint32_t len,
                      int with_value)
{
    size_t klen = strlen(key);
    kvs_wire_entry_encode(f->buf + f->len, (uint16_t)klen, len);
    f->len += KVS_WIRE_ENTRY_LEN;
    memcpy(f->buf + f->len, key, klen);
    f->len += klen;
    if (with_value) {
        memcpy(f->buf + f->len, val, len);
        f->len += len;
    }
    f->count++;
}

static void frame_end(struct frame *f, uint8_t opcode, uint64_t id)
{
    struct kvs_wire_hdr h = {
        .opcode = opcode,
        .count = f->count,
        .body_len = (uint32_t)(f->len - KVS_WIRE_HDR_LEN),
        .id = id,
    };
    kvs_wire_hdr_encode(f->buf, &h);
}

static void test_integer_codec_is_little_endian(void **state)
{
    (void)state;
    uint8_t b[8];
    kvs_put_u32(b, 0x11223344u);
    assert_int_equal(b[0], 0x44);
    assert_int_equal(b[3], 0x11);
    assert_int_equal(kvs_get_u32(b), 0x11223344u);
    kvs_put_u64(b, 0x0102030405060708ull);
    assert_int_equal(b[0], 0x08);
    assert_true(kvs_get_u64(b) == 0x0102030405060708ull);
    kvs_put_u16(b, 0xbeef);
    assert_int_equal(kvs_get_u16(b), 0xbeef);
}

static void test_header_round_trip(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr in = {.opcode = KVS_OP_GET, .count = 3, .body_len = 100, .id = 42};
    kvs_wire_hdr_encode(b, &in);
    assert_memory_equal(b, "KVB1", 4);

    struct kvs_wire_hdr out;
    assert_int_equal(kvs_wire_hdr_decode(b, &out, 1000), 0);
    assert_int_equal(out.opcode, KVS_OP_GET);
    assert_int_equal(out.count, 3);
    assert_int_equal(out.body_len, 100);
    assert_true(out.id == 42);
}

static int decode_with(struct kvs_wire_hdr h, uint32_t max_body, size_t poke_at, uint8_t poke)
{
    uint8_t b[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr out;
    kvs_wire_hdr_encode(b, &h);
    if (poke_at < sizeof(b)) b[poke_at] = poke;
    return kvs_wire_hdr_decode(b, &out, max_body);
}

static void test_header_refuses_malformed(void **state)
{
    (void)state;
    struct kvs_wire_hdr put = {.opcode = KVS_OP_PUT, .count = 1, .body_len = 64};
    const size_t none = SIZE_MAX;

    assert_int_equal(decode_with(put, 1024, none, 0), 0);
    assert_int_equal(decode_with(put, 1024, 0, 'X'), -EPROTO);   /* magic */
    assert_int_equal(decode_with(put, 1024, 4, 2), -EPROTO);     /* version */
    assert_int_equal(decode_with(put, 1024, 6, 1), -EBADMSG);    /* flags */
    assert_int_equal(decode_with(put, 63, none, 0), -EMSGSIZE);  /* body over the limit */
    assert_int_equal(decode_with(put, 1024, 5, 0x42), -ENOTSUP); /* unknown opcode */
    assert_int_equal(decode_with(put, 1024, 5, 0), -ENOTSUP);    /* opcode 0 */

    struct kvs_wire_hdr many = {
        .opcode = KVS_OP_GET, .count = KVS_WIRE_MAX_KEYS + 1, .body_len = UINT32_MAX};
    assert_int_equal(decode_with(many, UINT32_MAX, none, 0), -EBADMSG);

    /* count entries cannot fit in body_len */
    struct kvs_wire_hdr lying = {.opcode = KVS_OP_GET, .count = 10, .body_len = 10 * 9 - 1};
    assert_int_equal(decode_with(lying, 1 << 20, none, 0), -EBADMSG);

    /* STATS and HELLO requests carry nothing */
    struct kvs_wire_hdr stats = {.opcode = KVS_OP_STATS};
    assert_int_equal(decode_with(stats, 1024, none, 0), 0);
    stats.count = 1;
    assert_int_equal(decode_with(stats, 1024, none, 0), -EBADMSG);
    struct kvs_wire_hdr hello = {.opcode = KVS_OP_HELLO, .body_len = 4};
    assert_int_equal(decode_with(hello, 1024, none, 0), -EBADMSG);

    /* an ERROR frame is a reply with a status in its body */
    struct kvs_wire_hdr err = {.opcode = KVS_OP_ERROR | KVS_OP_REPLY, .body_len = 4};
    assert_int_equal(decode_with(err, 1024, none, 0), 0);
    err.body_len = 3;
    assert_int_equal(decode_with(err, 1024, none, 0), -EBADMSG);
    struct kvs_wire_hdr err_req = {.opcode = KVS_OP_ERROR, .body_len = 4};
    assert_int_equal(decode_with(err_req, 1024, none, 0), -EBADMSG);
}

static void test_reply_header_needs_status_per_key(void **state)
{
    (void)state;
    struct kvs_wire_hdr r = {.opcode = KVS_OP_PUT | KVS_OP_REPLY, .count = 4, .body_len = 32};
    assert_int_equal(decode_with(r, 1024, SIZE_MAX, 0), 0);
    r.body_len = 31;
    assert_int_equal(decode_with(r, 1024, SIZE_MAX, 0), -EBADMSG);
}

static void test_entry_decode(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_ENTRY_LEN];
    struct kvs_wire_entry e;

    kvs_wire_entry_encode(b, 5, 4096);
    assert_int_equal(kvs_wire_entry_decode(b, &e), 0);
    assert_int_equal(e.klen, 5);
    assert_int_equal(e.len, 4096);
    assert_int_equal(kvs_wire_entry_size(KVS_OP_PUT, &e), 8 + 5 + 4096);
    assert_int_equal(kvs_wire_entry_size(KVS_OP_GET, &e), 8 + 5);

    kvs_wire_entry_encode(b, 0, 1);
    assert_int_equal(kvs_wire_entry_decode(b, &e), -EBADMSG);
    kvs_wire_entry_encode(b, KVS_WIRE_MAX_KEY + 1, 1);
    assert_int_equal(kvs_wire_entry_decode(b, &e), -EBADMSG);
    kvs_wire_entry_encode(b, KVS_WIRE_MAX_KEY, 1);
    assert_int_equal(kvs_wire_entry_decode(b, &e), 0);
    kvs_wire_entry_encode(b, 3, 1);
    b[2] = 1; /* reserved flags */
    assert_int_equal(kvs_wire_entry_decode(b, &e), -EBADMSG);
}

static void test_status_decode(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_STATUS_LEN];
    struct kvs_wire_status s;

    kvs_wire_status_encode(b, 0, 4096);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_GET, &s), 0);
    assert_int_equal(s.len, 4096);
    kvs_wire_status_encode(b, -ERANGE, 9999);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_GET, &s), 0);
    assert_int_equal(s.status, -ERANGE);

    kvs_wire_status_encode(b, 1, 0);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_EXISTS, &s), 0);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_PUT, &s), -EBADMSG);

    kvs_wire_status_encode(b, 0, 10); /* a PUT reply carries no data */
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_PUT, &s), -EBADMSG);
    kvs_wire_status_encode(b, -ENOENT, 10); /* a miss carries no data */
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_GET, &s), -EBADMSG);
    kvs_wire_status_encode(b, -12345, 0);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_GET, &s), -EBADMSG);
    kvs_wire_status_encode(b, 7, 0);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_EXISTS, &s), -EBADMSG);
}

static void test_hello_round_trip(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_HELLO_LEN];
    struct kvs_wire_hello in = {
        .version = 1,
        .max_key = 512,
        .max_object = 64ull << 20,
        .max_frame = 256ull << 20,
        .max_keys = KVS_WIRE_MAX_KEYS,
        .features = KVS_FEAT_RDMA,
    };
    struct kvs_wire_hello out;
    kvs_wire_hello_encode(b, &in);
    assert_int_equal(kvs_wire_hello_decode(b, sizeof(b), &out), 0);
    assert_memory_equal(&in, &out, sizeof(in));
    assert_int_equal(kvs_wire_hello_decode(b, sizeof(b) - 1, &out), -EBADMSG);
    memset(b, 0, sizeof(b));
    assert_int_equal(kvs_wire_hello_decode(b, sizeof(b), &out), -EBADMSG);
}

struct seen {
    int n;
    char keys[4][32];
    uint32_t lens[4];
    int has_val[4];
    int stop_at;
};

static int record(void *arg, uint32_t index, const struct kvs_wire_item *item)
{
    struct seen *s = arg;
    if ((int)index == s->stop_at) return -ECANCELED;
    assert_true(index < 4);
    memcpy(s->keys[index], item->key, item->klen);
    s->keys[index][item->klen] = 0;
    s->lens[index] = item->len;
    s->has_val[index] = item->val != NULL;
    if (item->val) assert_memory_equal(item->val, "0123456789", item->len);
    s->n++;
    return 0;
}

static void test_parse_whole_put_frame(void **state)
{
    (void)state;
    static struct frame f;
    frame_begin(&f);
    frame_add(&f, "model@1@0@abc@0", "0123456789", 10, 1);
    frame_add(&f, "k2", "", 0, 1);
    frame_add(&f, "k3", "0123", 4, 1);
    frame_end(&f, KVS_OP_PUT, 7);

    struct kvs_wire_hdr h;
    struct seen s = {.stop_at = -1};
    long rc = kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, record, &s);
    assert_int_equal(rc, (long)f.len);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.keys[0], "model@1@0@abc@0");
    assert_int_equal(s.lens[0], 10);
    assert_int_equal(s.lens[1], 0);
    assert_true(s.has_val[2]);
    assert_true(h.id == 7);

    /* every prefix is "need more", never an error or a crash */
    for (size_t cut = 0; cut < f.len; cut++)
        assert_int_equal(kvs_wire_parse_request(f.buf, cut, 1 << 20, &h, NULL, NULL), 0);

    /* a callback can stop the walk */
    struct seen stop = {.stop_at = 1};
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, record, &stop), -ECANCELED);
    assert_int_equal(stop.n, 1);
}

static void test_parse_get_carries_capacity(void **state)
{
    (void)state;
    static struct frame f;
    frame_begin(&f);
    frame_add(&f, "a", NULL, 4096, 0);
    frame_end(&f, KVS_OP_GET, 1);
    struct kvs_wire_hdr h;
    struct seen s = {.stop_at = -1};
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, record, &s), (long)f.len);
    assert_int_equal(s.lens[0], 4096);
    assert_false(s.has_val[0]);
}

static void test_parse_refuses_lies(void **state)
{
    (void)state;
    static struct frame f;
    struct kvs_wire_hdr h;

    /* trailing bytes after the last entry: the count lies */
    frame_begin(&f);
    frame_add(&f, "a", "0123", 4, 1);
    frame_add(&f, "b", "0123", 4, 1);
    f.count = 1;
    frame_end(&f, KVS_OP_PUT, 1);
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, NULL, NULL), -EBADMSG);

    /* an entry running past the body */
    frame_begin(&f);
    frame_add(&f, "a", "0123", 4, 1);
    kvs_wire_entry_encode(f.buf + KVS_WIRE_HDR_LEN, 1, 5);
    frame_end(&f, KVS_OP_PUT, 1);
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, NULL, NULL), -EBADMSG);

    /* EXISTS entries carry no length */
    frame_begin(&f);
    frame_add(&f, "a", NULL, 3, 0);
    frame_end(&f, KVS_OP_EXISTS, 1);
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, NULL, NULL), -EBADMSG);

    /* a reply is not a request */
    frame_begin(&f);
    frame_add(&f, "a", NULL, 0, 0);
    frame_end(&f, KVS_OP_GET | KVS_OP_REPLY, 1);
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 1 << 20, &h, NULL, NULL), -EBADMSG);

    /* over the body limit */
    frame_begin(&f);
    frame_add(&f, "a", "0123", 4, 1);
    frame_end(&f, KVS_OP_PUT, 1);
    assert_int_equal(kvs_wire_parse_request(f.buf, f.len, 8, &h, NULL, NULL), -EMSGSIZE);
}

static void test_opcode_names(void **state)
{
    (void)state;
    assert_string_equal(kvs_wire_opcode_name(KVS_OP_PUT), "put");
    assert_string_equal(kvs_wire_opcode_name(KVS_OP_GET | KVS_OP_REPLY), "get");
    assert_string_equal(kvs_wire_opcode_name(0x55), "unknown");
    assert_true(kvs_wire_opcode_known(KVS_OP_HELLO));
    assert_false(kvs_wire_opcode_known(KVS_OP_ERROR));
}

/* AUTH: a request with exactly a nonce and a MAC, count 0; its reply carries the server MAC. */
static void test_auth_header(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN, .id = 5};
    kvs_wire_hdr_encode(b, &h);
    assert_int_equal(kvs_wire_hdr_decode(b, &h, 4096), 0);
    assert_int_equal(h.opcode, KVS_OP_AUTH);
    assert_string_equal(kvs_wire_opcode_name(KVS_OP_AUTH), "auth");
    assert_true(kvs_wire_opcode_known(KVS_OP_AUTH));

    const uint32_t bad_lens[] = {0, KVS_WIRE_AUTH_LEN - 1, KVS_WIRE_AUTH_LEN + 1};
    for (int i = 0; i < 3; i++) {
        h = (struct kvs_wire_hdr){.opcode = KVS_OP_AUTH, .body_len = bad_lens[i]};
        kvs_wire_hdr_encode(b, &h);
        assert_int_equal(kvs_wire_hdr_decode(b, &h, 4096), -EBADMSG);
    }
    h = (struct kvs_wire_hdr){.opcode = KVS_OP_AUTH, .count = 1, .body_len = KVS_WIRE_AUTH_LEN};
    kvs_wire_hdr_encode(b, &h);
    assert_int_equal(kvs_wire_hdr_decode(b, &h, 4096), -EBADMSG);

    h = (struct kvs_wire_hdr){.opcode = KVS_OP_AUTH | KVS_OP_REPLY, .body_len = KVS_WIRE_MAC_LEN};
    kvs_wire_hdr_encode(b, &h);
    assert_int_equal(kvs_wire_hdr_decode(b, &h, 4096), 0);
    /* HELLO still has no request body. */
    h = (struct kvs_wire_hdr){.opcode = KVS_OP_HELLO, .body_len = KVS_WIRE_AUTH_LEN};
    kvs_wire_hdr_encode(b, &h);
    assert_int_equal(kvs_wire_hdr_decode(b, &h, 4096), -EBADMSG);
}

static void test_auth_body_round_trip(void **state)
{
    (void)state;
    uint8_t nonce[KVS_WIRE_NONCE_LEN], mac[KVS_WIRE_MAC_LEN], body[KVS_WIRE_AUTH_LEN + 1];
    for (int i = 0; i < KVS_WIRE_NONCE_LEN; i++)
        nonce[i] = (uint8_t)i;
    for (int i = 0; i < KVS_WIRE_MAC_LEN; i++)
        mac[i] = (uint8_t)(0xff - i);
    kvs_wire_auth_encode(body, nonce, mac);
    assert_memory_equal(body, nonce, KVS_WIRE_NONCE_LEN);
    assert_memory_equal(body + KVS_WIRE_NONCE_LEN, mac, KVS_WIRE_MAC_LEN);
    uint8_t n2[KVS_WIRE_NONCE_LEN], m2[KVS_WIRE_MAC_LEN];
    assert_int_equal(kvs_wire_auth_decode(body, KVS_WIRE_AUTH_LEN, n2, m2), 0);
    assert_memory_equal(n2, nonce, sizeof(n2));
    assert_memory_equal(m2, mac, sizeof(m2));
    assert_int_equal(kvs_wire_auth_decode(body, KVS_WIRE_AUTH_LEN - 1, n2, m2), -EBADMSG);
    assert_int_equal(kvs_wire_auth_decode(body, KVS_WIRE_AUTH_LEN + 1, n2, m2), -EBADMSG);

    /* A whole AUTH frame parses as a request of header + 64 bytes. */
    uint8_t frame[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN};
    kvs_wire_hdr_encode(frame, &h);
    memcpy(frame + KVS_WIRE_HDR_LEN, body, KVS_WIRE_AUTH_LEN);
    assert_int_equal(kvs_wire_parse_request(frame, sizeof(frame), 4096, &h, NULL, NULL),
                     (long)sizeof(frame));
    assert_int_equal(kvs_wire_parse_request(frame, sizeof(frame) - 1, 4096, &h, NULL, NULL), 0);
}

/* The HELLO reply grows by the server nonce only when it announces KVS_FEAT_AUTH. */
static void test_hello_nonce(void **state)
{
    (void)state;
    uint8_t body[KVS_WIRE_HELLO_AUTH_LEN];
    struct kvs_wire_hello h = {.version = 1,
                               .max_key = 512,
                               .max_object = 1 << 20,
                               .max_frame = 1 << 22,
                               .max_keys = 65536,
                               .features = KVS_FEAT_AUTH};
    kvs_wire_hello_encode(body, &h);
    for (int i = 0; i < KVS_WIRE_NONCE_LEN; i++)
        body[KVS_WIRE_HELLO_LEN + i] = (uint8_t)(0x40 + i);
    struct kvs_wire_hello got;
    uint8_t nonce[KVS_WIRE_NONCE_LEN];
    assert_int_equal(kvs_wire_hello_decode(body, sizeof(body), &got), 0);
    assert_int_equal(got.features, KVS_FEAT_AUTH);
    assert_int_equal(kvs_wire_hello_nonce(body, sizeof(body), &got, nonce), 0);
    assert_memory_equal(nonce, body + KVS_WIRE_HELLO_LEN, KVS_WIRE_NONCE_LEN);
    /* Announced but cut short: no nonce. */
    assert_int_equal(kvs_wire_hello_nonce(body, KVS_WIRE_HELLO_LEN, &got, nonce), -EBADMSG);
    /* The 32-byte form of a server without auth still decodes, and has no nonce. */
    h.features = KVS_FEAT_RDMA;
    kvs_wire_hello_encode(body, &h);
    assert_int_equal(kvs_wire_hello_decode(body, KVS_WIRE_HELLO_LEN, &got), 0);
    assert_int_equal(kvs_wire_hello_nonce(body, KVS_WIRE_HELLO_LEN, &got, nonce), -EBADMSG);
}

/* ---- RDMA control messages ---- */

/* A control message: header then body, as one SEND carries it. */
static size_t ctrl_msg(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len, uint64_t id)
{
    struct kvs_wire_hdr h = {.opcode = opcode, .count = count, .body_len = body_len, .id = id};
    kvs_wire_hdr_encode(out, &h);
    return KVS_WIRE_HDR_LEN + body_len;
}

static void test_ctrl_hdr_round_trip(void **state)
{
    (void)state;
    static uint8_t m[KVS_WIRE_CTRL_MAX + 8];
    struct kvs_wire_hdr h;
    size_t len = ctrl_msg(m, KVS_OP_RDMA_COMMIT, 3, 3 * KVS_WIRE_TOKEN_LEN, 0x1122334455667788ull);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), 0);
    assert_int_equal(h.opcode, KVS_OP_RDMA_COMMIT);
    assert_int_equal(h.count, 3);
    assert_int_equal(h.body_len, 3 * KVS_WIRE_TOKEN_LEN);
    assert_true(h.id == 0x1122334455667788ull);
    /* Any opcode: kvstored hands the ones it does not serve itself to proto. */
    len = ctrl_msg(m, 0x55, 0, 0, 1);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), 0);
    /* The largest message, and one byte more. */
    len = ctrl_msg(m, KVS_OP_RDMA_PUSH, 1, KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN, 1);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), 0);
    len = ctrl_msg(m, KVS_OP_RDMA_PUSH, 1, KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN + 1, 1);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), -EBADMSG);
}

static void test_ctrl_hdr_refuses_malformed(void **state)
{
    (void)state;
    uint8_t m[KVS_WIRE_HDR_LEN + 64];
    struct kvs_wire_hdr h;
    size_t len = ctrl_msg(m, KVS_OP_RDMA_LEASE, 1, 16, 7);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, KVS_WIRE_HDR_LEN - 1, &h), -EBADMSG);
    /* body_len must be what the SEND delivered, no more and no less */
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len - 1, &h), -EBADMSG);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len + 1, &h), -EBADMSG);
    m[0] ^= 1;
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), -EPROTO);
    m[0] ^= 1;
    m[4] = 2; /* version */
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), -EPROTO);
    m[4] = KVS_WIRE_VERSION;
    m[6] = 1; /* flags */
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), -EBADMSG);
    len = ctrl_msg(m, KVS_OP_RDMA_LEASE, KVS_WIRE_MAX_KEYS + 1, 16, 7);
    assert_int_equal(kvs_wire_ctrl_hdr_decode(m, len, &h), -EBADMSG);
}

static void test_key_entry_round_trip(void **state)
{
    (void)state;
    uint8_t body[64];
    size_t n = kvs_wire_key_entry_encode(body, (const uint8_t *)"alpha", 5, 4096);
    assert_int_equal(n, KVS_WIRE_ENTRY_LEN + 5);
    n += kvs_wire_key_entry_encode(body + n, (const uint8_t *)"b", 1, 0);
    size_t off = 0;
    struct kvs_wire_item it;
    assert_int_equal(kvs_wire_key_entry_decode(body, (uint32_t)n, &off, &it), 0);
    assert_int_equal(it.klen, 5);
    assert_memory_equal(it.key, "alpha", 5);
    assert_int_equal(it.len, 4096);
    assert_null(it.val);
    assert_int_equal(kvs_wire_key_entry_decode(body, (uint32_t)n, &off, &it), 0);
    assert_int_equal(off, n);
    assert_memory_equal(it.key, "b", 1);
    /* past the end: refused, nothing moves */
    assert_int_equal(kvs_wire_key_entry_decode(body, (uint32_t)n, &off, &it), -EBADMSG);
    assert_int_equal(off, n);
    /* a key running past the body */
    off = 0;
    assert_int_equal(kvs_wire_key_entry_decode(body, KVS_WIRE_ENTRY_LEN + 4, &off, &it), -EBADMSG);
    assert_int_equal(off, 0);
    /* an entry header cut short, a bad entry header */
    assert_int_equal(kvs_wire_key_entry_decode(body, KVS_WIRE_ENTRY_LEN - 1, &off, &it), -EBADMSG);
    kvs_wire_entry_encode(body, 0, 0);
    assert_int_equal(kvs_wire_key_entry_decode(body, (uint32_t)n, &off, &it), -EBADMSG);
    /* an offset beyond the body */
    off = 100;
    assert_int_equal(kvs_wire_key_entry_decode(body, (uint32_t)n, &off, &it), -EBADMSG);
}

static void test_slot_round_trip(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_SLOT_LEN];
    struct kvs_wire_slot in = {
        .status = 0, .token = 0x00020003, .addr = 0x7f0012345678ull, .rkey = 0xabcd, .len = 4096};
    struct kvs_wire_slot out;
    kvs_wire_slot_encode(b, &in);
    assert_int_equal(kvs_get_u32(b + 4), 0x00020003);
    assert_true(kvs_get_u64(b + 8) == 0x7f0012345678ull);
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_RESERVE, &out), 0);
    assert_memory_equal(&in, &out, sizeof(in));
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_LEASE, &out), 0);
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_GET, &out), -EBADMSG); /* not a slot reply */

    /* failed slots: no token, no address; LEASE's -ERANGE names the length */
    struct kvs_wire_slot miss = {.status = -ENOENT, .token = KVS_WIRE_TOKEN_NONE};
    kvs_wire_slot_encode(b, &miss);
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_LEASE, &out), 0);
    assert_int_equal(out.status, -ENOENT);
    struct kvs_wire_slot range = {.status = -ERANGE, .token = KVS_WIRE_TOKEN_NONE, .len = 9000};
    kvs_wire_slot_encode(b, &range);
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_LEASE, &out), 0);
    assert_int_equal(out.len, 9000);
    assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_RESERVE, &out), -EBADMSG);
}

static void test_slot_refuses_malformed(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_SLOT_LEN];
    struct kvs_wire_slot out;
    static const struct kvs_wire_slot bad[] = {
        {.status = 0, .token = KVS_WIRE_TOKEN_NONE, .addr = 64, .rkey = 1, .len = 1},
        {.status = 1, .token = 5},
        {.status = -12345, .token = KVS_WIRE_TOKEN_NONE},
        {.status = -ENOSPC, .token = 5},
        {.status = -ENOSPC, .token = KVS_WIRE_TOKEN_NONE, .addr = 64},
        {.status = -ENOSPC, .token = KVS_WIRE_TOKEN_NONE, .rkey = 9},
        {.status = -ENOENT, .token = KVS_WIRE_TOKEN_NONE, .len = 10},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kvs_wire_slot_encode(b, &bad[i]);
        assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_LEASE, &out), -EBADMSG);
        assert_int_equal(kvs_wire_slot_decode(b, KVS_OP_RDMA_RESERVE, &out), -EBADMSG);
    }
}

static void test_token_round_trip(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_TOKEN_LEN];
    struct kvs_wire_token t;
    kvs_wire_token_encode(b, &(struct kvs_wire_token){.token = 77, .flags = KVS_WIRE_TOKEN_COMMIT});
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_RDMA_COMMIT, &t), 0);
    assert_int_equal(t.token, 77);
    assert_int_equal(t.flags, KVS_WIRE_TOKEN_COMMIT);
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_RDMA_RELEASE, &t), -EBADMSG);
    kvs_wire_token_encode(b, &(struct kvs_wire_token){.token = 78, .flags = 0});
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_RDMA_COMMIT, &t), 0); /* an abort */
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_RDMA_RELEASE, &t), 0);
    assert_int_equal(t.token, 78);
    kvs_wire_token_encode(b, &(struct kvs_wire_token){.token = 79, .flags = 3});
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_RDMA_COMMIT, &t), -EBADMSG);
    assert_int_equal(kvs_wire_token_decode(b, KVS_OP_PUT, &t), -EBADMSG);
}

static void test_push_status_carries_length(void **state)
{
    (void)state;
    uint8_t b[KVS_WIRE_STATUS_LEN];
    struct kvs_wire_status s;
    kvs_wire_status_encode(b, 0, 4096);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_RDMA_PUSH, &s), 0);
    assert_int_equal(s.len, 4096);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_RDMA_PULL, &s), -EBADMSG);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_RDMA_COMMIT, &s), -EBADMSG);
    kvs_wire_status_encode(b, -ERANGE, 99);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_RDMA_PUSH, &s), 0);
    kvs_wire_status_encode(b, -ENOENT, 99);
    assert_int_equal(kvs_wire_status_decode(b, KVS_OP_RDMA_PUSH, &s), -EBADMSG);
}

static void test_error_body_round_trip(void **state)
{
    (void)state;
    uint8_t b[16];
    int32_t st;
    const char *text;
    size_t tlen;
    size_t n = kvs_wire_error_encode(b, sizeof(b), -EBADMSG, "malformed rdma entry");
    assert_int_equal(n, sizeof(b)); /* the text is cut to fit */
    assert_int_equal(kvs_wire_error_decode(b, n, &st, &text, &tlen), 0);
    assert_int_equal(st, -EBADMSG);
    assert_int_equal(tlen, sizeof(b) - 4);
    assert_memory_equal(text, "malformed rdma e", tlen);
    n = kvs_wire_error_encode(b, sizeof(b), -EACCES, "");
    assert_int_equal(n, 4);
    assert_int_equal(kvs_wire_error_decode(b, n, &st, &text, &tlen), 0);
    assert_int_equal(tlen, 0);
    assert_int_equal(kvs_wire_error_decode(b, 3, &st, &text, &tlen), -EBADMSG);
    kvs_wire_error_encode(b, sizeof(b), 0, "ok?");
    assert_int_equal(kvs_wire_error_decode(b, 7, &st, &text, &tlen), -EBADMSG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integer_codec_is_little_endian),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_header_refuses_malformed),
        cmocka_unit_test(test_reply_header_needs_status_per_key),
        cmocka_unit_test(test_entry_decode),
        cmocka_unit_test(test_status_decode),
        cmocka_unit_test(test_hello_round_trip),
        cmocka_unit_test(test_parse_whole_put_frame),
        cmocka_unit_test(test_parse_get_carries_capacity),
        cmocka_unit_test(test_parse_refuses_lies),
        cmocka_unit_test(test_opcode_names),
        cmocka_unit_test(test_auth_header),
        cmocka_unit_test(test_auth_body_round_trip),
        cmocka_unit_test(test_hello_nonce),
        cmocka_unit_test(test_ctrl_hdr_round_trip),
        cmocka_unit_test(test_ctrl_hdr_refuses_malformed),
        cmocka_unit_test(test_key_entry_round_trip),
        cmocka_unit_test(test_slot_round_trip),
        cmocka_unit_test(test_slot_refuses_malformed),
        cmocka_unit_test(test_token_round_trip),
        cmocka_unit_test(test_push_status_carries_length),
        cmocka_unit_test(test_error_body_round_trip),
    };
    return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}

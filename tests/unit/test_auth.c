/*
 * test_auth.c - the AUTH building blocks without sockets: HMAC-SHA256
 * against RFC 4231's vectors, the client/server MAC construction, nonce
 * freshness, secret file checks, and kvstored's protocol state machine with
 * a secret (HELLO nonce, AUTH accepted once, everything else -EACCES).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"
#include "proto.h"
#include "wire.h"

static void from_hex(const char *hex, uint8_t *out)
{
    for (size_t i = 0; hex[2 * i]; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void hmac1(const void *key, size_t klen, const void *data, size_t dlen, uint8_t *mac)
{
    const void *parts[] = {data};
    const size_t lens[] = {dlen};
    kvs_auth_hmac(key, klen, parts, lens, 1, mac);
}

/* RFC 4231 test cases 1, 2 and 6 (a key longer than the block size). */
static void test_hmac_rfc4231(void **state)
{
    (void)state;
    uint8_t key[131], mac[32], want[32];

    memset(key, 0x0b, 20);
    hmac1(key, 20, "Hi There", 8, mac);
    from_hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", want);
    assert_memory_equal(mac, want, 32);

    const char *data2 = "what do ya want for nothing?";
    hmac1("Jefe", 4, data2, strlen(data2), mac);
    from_hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want);
    assert_memory_equal(mac, want, 32);

    memset(key, 0xaa, sizeof(key));
    const char *data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    hmac1(key, sizeof(key), data6, strlen(data6), mac);
    from_hex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", want);
    assert_memory_equal(mac, want, 32);

    /* The same data in several parts gives the same MAC. */
    const void *parts[] = {"what do ya ", "want for ", "nothing?"};
    const size_t lens[] = {11, 9, 8};
    kvs_auth_hmac((const uint8_t *)"Jefe", 4, parts, lens, 3, mac);
    from_hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want);
    assert_memory_equal(mac, want, 32);
}

/* client MAC = HMAC(secret, label | server nonce | client nonce); the server's differs. */
static void test_mac_construction(void **state)
{
    (void)state;
    const uint8_t *secret = (const uint8_t *)"s3cret";
    uint8_t sn[KVS_WIRE_NONCE_LEN], cn[KVS_WIRE_NONCE_LEN], msg[22 + 64];
    uint8_t client[32], server[32], want[32];
    memset(sn, 0x11, sizeof(sn));
    memset(cn, 0x22, sizeof(cn));

    kvs_auth_client_mac(secret, 6, sn, cn, client);
    memcpy(msg, "kvbatch-auth-v1 client", 22);
    memcpy(msg + 22, sn, 32);
    memcpy(msg + 54, cn, 32);
    hmac1(secret, 6, msg, sizeof(msg), want);
    assert_memory_equal(client, want, 32);

    kvs_auth_server_mac(secret, 6, cn, sn, server);
    memcpy(msg, "kvbatch-auth-v1 server", 22);
    memcpy(msg + 22, cn, 32);
    memcpy(msg + 54, sn, 32);
    hmac1(secret, 6, msg, sizeof(msg), want);
    assert_memory_equal(server, want, 32);

    /* The server's proof cannot be replayed as the client's, nor the other secret's. */
    assert_false(kvs_auth_mac_equal(client, server));
    kvs_auth_client_mac((const uint8_t *)"s3creT", 6, sn, cn, want);
    assert_false(kvs_auth_mac_equal(client, want));
    memcpy(want, client, 32);
    assert_true(kvs_auth_mac_equal(client, want));
    want[31] ^= 1;
    assert_false(kvs_auth_mac_equal(client, want));
}

/* 64 nonces: no two alike, none all zero. */
static void test_nonces_fresh(void **state)
{
    (void)state;
    static uint8_t n[64][KVS_WIRE_NONCE_LEN];
    const uint8_t zero[KVS_WIRE_NONCE_LEN] = {0};
    for (int i = 0; i < 64; i++) {
        kvs_auth_nonce(n[i]);
        assert_memory_not_equal(n[i], zero, KVS_WIRE_NONCE_LEN);
        for (int j = 0; j < i; j++)
            assert_memory_not_equal(n[i], n[j], KVS_WIRE_NONCE_LEN);
    }
}

/* Writes text to a new file of mode in a fresh directory; returns its path (static). */
static const char *secret_file(const char *text, size_t len, mode_t mode)
{
    static char path[64];
    static int seq;
    snprintf(path, sizeof(path), "/tmp/kvs-auth-unit-%d-%d", (int)getpid(), seq++);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static long load(const char *text, size_t len, mode_t mode, uint8_t *secret, char *err)
{
    const char *path = secret_file(text, len, mode);
    long rc = kvs_auth_load_secret(path, secret, err, 256);
    unlink(path);
    return rc;
}

/* The client's rule, one for both transports: AUTH when both sides have a secret, else refuse. */
static void test_client_refusal_rule(void **state)
{
    int run = -1;
    (void)state;
    assert_null(kvs_auth_client_refusal(0, 0, &run));
    assert_int_equal(run, 0);
    assert_null(kvs_auth_client_refusal(KVS_FEAT_AUTH | KVS_FEAT_RDMA, 16, &run));
    assert_int_equal(run, 1);
    const char *why = kvs_auth_client_refusal(KVS_FEAT_AUTH, 0, &run);
    assert_non_null(why);
    assert_int_equal(run, 0);
    assert_non_null(strstr(why, "set KVSTORE_AUTH_FILE"));
    why = kvs_auth_client_refusal(KVS_FEAT_RDMA, 16, &run);
    assert_non_null(why);
    assert_int_equal(run, 0);
    assert_non_null(strstr(why, "does not authenticate"));
}

/* The client's verdict on the server's answer, one for both transports. */
static void test_client_verdict(void **state)
{
    (void)state;
    const uint8_t secret[] = "s3cret";
    uint8_t hello_body[KVS_WIRE_HELLO_AUTH_LEN] = {0};
    struct kvs_wire_hello hello = {.features = KVS_FEAT_AUTH};
    struct kvs_auth_client a;
    /* Neither side wants AUTH: nothing runs. Exactly one side: refused. */
    struct kvs_wire_hello plain = {0};
    assert_int_equal(
        kvs_auth_client_open(&a, "tcp", "peer", secret, 0, hello_body, sizeof(hello_body), &plain),
        0);
    assert_int_equal(
        kvs_auth_client_open(&a, "tcp", "peer", secret, 0, hello_body, sizeof(hello_body), &hello),
        -EACCES);
    int rc = kvs_auth_client_open(&a, "tcp", "peer", secret, sizeof(secret) - 1, hello_body,
                                  sizeof(hello_body), &hello);
    assert_int_equal(rc, 1);
    uint8_t proof[KVS_WIRE_MAC_LEN];
    kvs_auth_server_mac(secret, sizeof(secret) - 1, a.client_nonce, a.server_nonce, proof);
    assert_int_equal(kvs_auth_client_verdict(&a, "tcp", "peer", secret, sizeof(secret) - 1, 0,
                                             proof, sizeof(proof)),
                     0);
    assert_int_equal(kvs_auth_client_verdict(&a, "tcp", "peer", secret, sizeof(secret) - 1, 0,
                                             proof, sizeof(proof) - 1),
                     -EPROTO);
    assert_int_equal(
        kvs_auth_client_verdict(&a, "tcp", "peer", secret, sizeof(secret) - 1, -EACCES, NULL, 0),
        -EACCES);
    assert_int_equal(
        kvs_auth_client_verdict(&a, "tcp", "peer", secret, sizeof(secret) - 1, -EIO, NULL, 0),
        -EPROTO);
    proof[0] ^= 1;
    assert_int_equal(kvs_auth_client_verdict(&a, "tcp", "peer", secret, sizeof(secret) - 1, 0,
                                             proof, sizeof(proof)),
                     -EACCES);
}

static void test_load_secret(void **state)
{
    (void)state;
    uint8_t secret[KVS_AUTH_MAX_SECRET];
    char err[256];

    /* One trailing newline is stripped, and only one. */
    assert_int_equal(load("abc\n", 4, 0600, secret, err), 3);
    assert_memory_equal(secret, "abc", 3);
    assert_int_equal(load("abc\n\n", 5, 0600, secret, err), 4);
    assert_memory_equal(secret, "abc\n", 4);
    assert_int_equal(load("a\0b", 3, 0400, secret, err), 3); /* binary secrets are fine */

    assert_int_equal(load("", 0, 0600, secret, err), -EINVAL);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(load("\n", 1, 0600, secret, err), -EINVAL);
    assert_int_equal(load("abc", 3, 0640, secret, err), -EACCES);
    assert_non_null(strstr(err, "group or others"));
    assert_int_equal(load("abc", 3, 0604, secret, err), -EACCES);

    static char big[KVS_AUTH_MAX_SECRET + 1];
    memset(big, 'x', sizeof(big));
    assert_int_equal(load(big, KVS_AUTH_MAX_SECRET, 0600, secret, err), KVS_AUTH_MAX_SECRET);
    assert_int_equal(load(big, sizeof(big), 0600, secret, err), -EFBIG);

    assert_int_equal(kvs_auth_load_secret("/nonexistent/kvs-secret", secret, err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/kvs-secret"));
    assert_int_equal(kvs_auth_load_secret("/tmp", secret, err, sizeof(err)), -EACCES);
}

/* ---- the server's state machine with a secret ---- */

#define SECRET "proto secret"

struct fixture {
    struct kvsd_server srv;
    struct kvsd_proto_conn *conn;
    uint8_t out[8192];
    size_t out_len, read_pos;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    struct kvsd_server_limits lim = {.max_object = 1 << 20,
                                     .max_frame = 1 << 22,
                                     .out_limit = 1 << 30,
                                     .out_heap_limit = 1 << 30,
                                     .rbuf_size = 4096};
    if (kvsd_server_init(&f->srv, 4u << 20, &lim) < 0) return -1;
    f->srv.auth_secret = (const uint8_t *)SECRET;
    f->srv.auth_secret_len = strlen(SECRET);
    f->srv.features |= KVS_FEAT_AUTH;
    f->conn = kvsd_proto_conn_new(&f->srv);
    if (!f->conn) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    kvsd_proto_conn_free(f->conn);
    kvsd_server_fini(&f->srv);
    free(f);
    return 0;
}

/* Feeds bytes one at a time (the AUTH body may arrive piecemeal), collecting replies. */
static void feed(struct fixture *f, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (kvsd_proto_feed(f->conn, p + i, 1) != 1) break;
        struct iovec iov[8];
        int n;
        while ((n = kvsd_proto_out_iov(f->conn, iov, 8)) > 0) {
            size_t sent = 0;
            for (int k = 0; k < n; k++) {
                assert_true(f->out_len + iov[k].iov_len <= sizeof(f->out));
                memcpy(f->out + f->out_len, iov[k].iov_base, iov[k].iov_len);
                f->out_len += iov[k].iov_len;
                sent += iov[k].iov_len;
            }
            kvsd_proto_sent(f->conn, sent);
        }
    }
}

/* The next reply frame: header into *h, body copied to body (returned length). */
static size_t next_reply(struct fixture *f, struct kvs_wire_hdr *h, uint8_t body[8192])
{
    assert_true(f->out_len - f->read_pos >= KVS_WIRE_HDR_LEN);
    assert_int_equal(kvs_wire_hdr_decode(f->out + f->read_pos, h, 1 << 22), 0);
    f->read_pos += KVS_WIRE_HDR_LEN;
    assert_true(f->out_len - f->read_pos >= h->body_len);
    assert_true(h->body_len <= 8192);
    memcpy(body, f->out + f->read_pos, h->body_len);
    f->read_pos += h->body_len;
    return h->body_len;
}

static void send_simple(struct fixture *f, uint8_t opcode, uint64_t id)
{
    uint8_t b[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr h = {.opcode = opcode, .id = id};
    kvs_wire_hdr_encode(b, &h);
    feed(f, b, sizeof(b));
}

static void hello(struct fixture *f, uint8_t nonce[KVS_WIRE_NONCE_LEN])
{
    uint8_t body[8192];
    struct kvs_wire_hdr h;
    send_simple(f, KVS_OP_HELLO, 1);
    assert_int_equal(next_reply(f, &h, body), KVS_WIRE_HELLO_AUTH_LEN);
    struct kvs_wire_hello hi;
    assert_int_equal(kvs_wire_hello_decode(body, KVS_WIRE_HELLO_AUTH_LEN, &hi), 0);
    assert_true(hi.features & KVS_FEAT_AUTH);
    assert_int_equal(kvs_wire_hello_nonce(body, KVS_WIRE_HELLO_AUTH_LEN, &hi, nonce), 0);
}

static void send_auth(struct fixture *f, const uint8_t sn[KVS_WIRE_NONCE_LEN],
                      const uint8_t cn[KVS_WIRE_NONCE_LEN], const char *secret)
{
    uint8_t frame[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN], mac[KVS_WIRE_MAC_LEN];
    kvs_auth_client_mac((const uint8_t *)secret, strlen(secret), sn, cn, mac);
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN, .id = 2};
    kvs_wire_hdr_encode(frame, &h);
    kvs_wire_auth_encode(frame + KVS_WIRE_HDR_LEN, cn, mac);
    feed(f, frame, sizeof(frame));
}

static void expect_eacces(struct fixture *f)
{
    uint8_t body[8192];
    struct kvs_wire_hdr h;
    next_reply(f, &h, body);
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -EACCES);
    assert_true(kvsd_proto_closing(f->conn));
    assert_int_equal(f->srv.counters.auth_failures, 1);
    assert_int_equal(f->srv.counters.errors_protocol, 0);
}

static void test_proto_auth_then_serve(void **state)
{
    struct fixture *f = *state;
    uint8_t sn[KVS_WIRE_NONCE_LEN], cn[KVS_WIRE_NONCE_LEN], body[8192], want[KVS_WIRE_MAC_LEN];
    hello(f, sn);
    kvs_auth_nonce(cn);
    send_auth(f, sn, cn, SECRET);
    struct kvs_wire_hdr h;
    assert_int_equal(next_reply(f, &h, body), KVS_WIRE_MAC_LEN);
    assert_int_equal(h.opcode, KVS_OP_AUTH | KVS_OP_REPLY);
    assert_int_equal(h.id, 2);
    kvs_auth_server_mac((const uint8_t *)SECRET, strlen(SECRET), cn, sn, want);
    assert_memory_equal(body, want, KVS_WIRE_MAC_LEN);
    assert_int_equal(f->srv.counters.auth_ok, 1);
    /* Now served. */
    send_simple(f, KVS_OP_STATS, 3);
    next_reply(f, &h, body);
    assert_int_equal(h.opcode, KVS_OP_STATS | KVS_OP_REPLY);
    assert_false(kvsd_proto_closing(f->conn));
}

static void test_proto_request_before_auth(void **state)
{
    struct fixture *f = *state;
    uint8_t sn[KVS_WIRE_NONCE_LEN];
    hello(f, sn);
    send_simple(f, KVS_OP_STATS, 3);
    expect_eacces(f);
}

static void test_proto_wrong_secret(void **state)
{
    struct fixture *f = *state;
    uint8_t sn[KVS_WIRE_NONCE_LEN], cn[KVS_WIRE_NONCE_LEN];
    hello(f, sn);
    kvs_auth_nonce(cn);
    send_auth(f, sn, cn, "proto secreT");
    expect_eacces(f);
    assert_int_equal(f->srv.counters.auth_ok, 0);
}

/* AUTH before any HELLO: there is no nonce to answer, even with zeros. */
static void test_proto_auth_without_hello(void **state)
{
    struct fixture *f = *state;
    uint8_t zero[KVS_WIRE_NONCE_LEN] = {0}, cn[KVS_WIRE_NONCE_LEN];
    kvs_auth_nonce(cn);
    send_auth(f, zero, cn, SECRET);
    expect_eacces(f);
}

/* CLIENTS (every peer's address and counters) is refused before AUTH like STATS. */
static void test_proto_clients_before_auth(void **state)
{
    struct fixture *f = *state;
    uint8_t sn[KVS_WIRE_NONCE_LEN];
    hello(f, sn);
    send_simple(f, KVS_OP_CLIENTS, 3);
    expect_eacces(f);
    assert_int_equal(f->srv.counters.requests[KVS_OP_CLIENTS], 0);
}

/* Opcodes proto does not know (RDMA control, unknown) are refused too before AUTH. */
static void test_proto_unknown_opcode_before_auth(void **state)
{
    struct fixture *f = *state;
    send_simple(f, KVS_OP_RDMA_RESERVE, 4);
    expect_eacces(f);
}

/* Without a secret the server neither sends a nonce nor serves AUTH. */
static void test_proto_no_secret(void **state)
{
    struct fixture *f = *state;
    f->srv.auth_secret = NULL;
    f->srv.auth_secret_len = 0;
    f->srv.features = 0;
    uint8_t body[8192], sn[KVS_WIRE_NONCE_LEN] = {0}, cn[KVS_WIRE_NONCE_LEN] = {0};
    struct kvs_wire_hdr h;
    send_simple(f, KVS_OP_HELLO, 1);
    assert_int_equal(next_reply(f, &h, body), KVS_WIRE_HELLO_LEN);
    send_auth(f, sn, cn, SECRET);
    next_reply(f, &h, body);
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -ENOTSUP);
    assert_false(kvsd_proto_closing(f->conn));
    send_simple(f, KVS_OP_STATS, 3);
    next_reply(f, &h, body);
    assert_int_equal(h.opcode, KVS_OP_STATS | KVS_OP_REPLY);
}

int main(void)
{
    assert_int_equal(kvs_auth_init(), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_mac_construction),
        cmocka_unit_test(test_nonces_fresh),
        cmocka_unit_test(test_client_refusal_rule),
        cmocka_unit_test(test_client_verdict),
        cmocka_unit_test(test_load_secret),
        cmocka_unit_test_setup_teardown(test_proto_auth_then_serve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_request_before_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_wrong_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_auth_without_hello, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_clients_before_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_unknown_opcode_before_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proto_no_secret, setup, teardown),
    };
    return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}

/*
 * test_server_raw.c - a real kvstored on 127.0.0.1, spoken to over raw TCP
 * with the wire.h encoders (no client library): round trips, pipelining,
 * malformed frames closing only their own connection, STATS counters,
 * connection limits, back-pressure against a slow reader, options, and a
 * clean exit on SIGTERM.
 */
#include <errno.h>
#include <regex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "key_rules.h"
#include "kvtest.h"
#include "rawwire.h"
#include "wire.h"

#define MIB (1u << 20)

/* ---- replies (sockets from kvt_raw_connect: every wait bounded by 10 s) ---- */

struct reply {
    struct kvs_wire_hdr hdr;
    uint8_t *body;
};

/* Reads one reply frame (body malloc'ed); -1 on EOF. */
static int read_reply(int fd, struct reply *r)
{
    uint8_t h[KVS_WIRE_HDR_LEN];
    r->body = NULL;
    if (kvt_raw_recv_all(fd, h, sizeof(h)) < 0) return -1;
    assert_int_equal(kvs_wire_hdr_decode(h, &r->hdr, UINT32_MAX), 0);
    assert_true(r->hdr.opcode & KVS_OP_REPLY);
    r->body = malloc(r->hdr.body_len + 1);
    assert_non_null(r->body);
    assert_int_equal(kvt_raw_recv_all(fd, r->body, r->hdr.body_len), 0);
    r->body[r->hdr.body_len] = 0;
    return 0;
}

/* Status of entry 0 of a single-key reply; *data points at a GET's value. */
static int32_t status0(const struct reply *r, const uint8_t **data, uint32_t *len)
{
    struct kvs_wire_status st;
    uint8_t op = r->hdr.opcode & (uint8_t)~KVS_OP_REPLY;
    assert_int_equal(r->hdr.count, 1);
    assert_int_equal(kvs_wire_status_decode(r->body, op, &st), 0);
    if (data) *data = r->body + KVS_WIRE_STATUS_LEN;
    if (len) *len = st.len;
    return st.status;
}

/* True if the server closed fd: recv sees EOF (or a reset) within the socket timeout. */
static int closed_by_peer(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* A counter from a STATS reply, or -1 if absent. */
static long long stat_value(int fd, const char *name)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_STATS, 999);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    free(b.p);
    struct reply r;
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(r.hdr.opcode, KVS_OP_STATS | KVS_OP_REPLY);
    long long v = -1;
    size_t nlen = strlen(name);
    for (char *line = (char *)r.body; line && *line;) {
        if (strncmp(line, name, nlen) == 0 && line[nlen] == ' ') {
            v = atoll(line + nlen + 1);
            break;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    free(r.body);
    return v;
}

/* ---- fixture: one kvstored per test ---- */

static int start(void **state, const char *args)
{
    struct kvt_server *s = calloc(1, sizeof(*s));
    if (!s || kvt_server_start(s, 0, args) < 0) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int setup(void **state)
{
    return start(state, "--memory 64M --max-object 16M");
}

static int setup_key_rules(void **state)
{
    return start(state, KVT_KEY_RULES_ARGS);
}

static int setup_two_conns(void **state)
{
    return start(state, "--memory 16M --max-conns 2");
}

/* Stops it with SIGTERM: every test also checks a clean exit. */
static int teardown(void **state)
{
    struct kvt_server *s = *state;
    int status = kvt_server_stop(s);
    free(s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
}

/* ---- tests ---- */

static void test_put_get_roundtrip(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    static uint8_t val[8 * MIB]; /* bigger than any socket buffer: partial reads and writes */
    kvval_fill(val, sizeof(val), "big", 1);
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "big", val, sizeof(val));
    kvt_req_put(&b, 2, "small", "abc", 3);
    kvt_req_get(&b, 3, "big", sizeof(val));
    kvt_req_get(&b, 4, "small", 2);
    kvt_req_get(&b, 5, "none", 10);
    kvt_raw_send_all(fd, b.p, b.len);

    struct reply r;
    const uint8_t *data;
    uint32_t len;
    for (uint64_t id = 1; id <= 2; id++) {
        assert_int_equal(read_reply(fd, &r), 0);
        assert_int_equal(r.hdr.id, id);
        assert_int_equal(status0(&r, NULL, NULL), 0);
        free(r.body);
    }
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(status0(&r, &data, &len), 0);
    assert_int_equal(len, sizeof(val));
    assert_true(kvval_check(data, len, "big", NULL));
    free(r.body);
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(status0(&r, NULL, &len), -ERANGE);
    assert_int_equal(len, 3);
    free(r.body);
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(status0(&r, NULL, NULL), -ENOENT);
    free(r.body);
    close(fd);
    free(b.p);
}

/* GET one key on fd and check it is a whole value of key; returns its version. */
static unsigned get_version(int fd, const char *key, uint32_t cap)
{
    struct kvt_reqbuf b = {0};
    kvt_req_get(&b, 7, key, cap);
    kvt_raw_send_all(fd, b.p, b.len);
    free(b.p);
    struct reply r;
    const uint8_t *data;
    uint32_t len;
    unsigned version = 0;
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(status0(&r, &data, &len), 0);
    assert_true(kvval_check(data, len, key, &version));
    free(r.body);
    return version;
}

/*
 * A PUT becomes visible only once its whole value has arrived: while a new
 * value is still streaming in on one connection, GETs on another return the
 * old value, whole; once the last byte is in, the new one, whole.
 */
static void test_put_visible_only_when_complete(void **state)
{
    struct kvt_server *s = *state;
    int writer = kvt_raw_connect(s->port, 10);
    int reader = kvt_raw_connect(s->port, 10);
    static uint8_t v1[2 * MIB], v2[2 * MIB];
    kvval_fill(v1, sizeof(v1), "torn", 1);
    kvval_fill(v2, sizeof(v2), "torn", 2);
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "torn", v1, sizeof(v1));
    kvt_raw_send_all(writer, b.p, b.len);
    struct reply r;
    assert_int_equal(read_reply(writer, &r), 0);
    free(r.body);
    assert_int_equal(get_version(reader, "torn", sizeof(v1)), 1);

    b.len = 0;
    kvt_req_put(&b, 2, "torn", v2, sizeof(v2));
    size_t cuts[] = {b.len / 4, b.len / 2, b.len - 1};
    size_t sent = 0;
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        kvt_raw_send_all(writer, b.p + sent, cuts[i] - sent);
        sent = cuts[i];
        usleep(20000); /* let the server take those bytes into the new slot */
        assert_int_equal(get_version(reader, "torn", sizeof(v1)), 1);
    }
    kvt_raw_send_all(writer, b.p + sent, b.len - sent);
    assert_int_equal(read_reply(writer, &r), 0);
    assert_int_equal(status0(&r, NULL, NULL), 0);
    free(r.body);
    assert_int_equal(get_version(reader, "torn", sizeof(v2)), 2);
    close(writer);
    close(reader);
    free(b.p);
}

/* Many frames in one write; replies come back in order with their ids. */
static void test_pipelined(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    struct kvt_reqbuf b = {0};
    char key[32], val[64];
    const int n = 200;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        snprintf(val, sizeof(val), "value-%d", i);
        kvt_req_put(&b, (uint64_t)(2 * i), key, val, (uint32_t)strlen(val));
        kvt_req_get(&b, (uint64_t)(2 * i + 1), key, sizeof(val));
    }
    kvt_raw_send_all(fd, b.p, b.len);
    for (int i = 0; i < 2 * n; i++) {
        struct reply r;
        const uint8_t *data;
        uint32_t len;
        assert_int_equal(read_reply(fd, &r), 0);
        assert_int_equal(r.hdr.id, (uint64_t)i);
        assert_int_equal(status0(&r, &data, &len), 0);
        if (i % 2) {
            snprintf(val, sizeof(val), "value-%d", i / 2);
            assert_int_equal(len, strlen(val));
            assert_memory_equal(data, val, len);
        }
        free(r.body);
    }
    close(fd);
    free(b.p);
}

/* A malformed frame: ERROR reply, that connection closed, another one unaffected. */
static void test_malformed_closes_only_its_connection(void **state)
{
    struct kvt_server *s = *state;
    int good = kvt_raw_connect(s->port, 10);
    int bad = kvt_raw_connect(s->port, 10);
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "k", "v", 1);
    kvt_raw_send_all(good, b.p, b.len);
    struct reply r;
    assert_int_equal(read_reply(good, &r), 0);
    free(r.body);

    /* Half a good frame on the good connection: the bad one must not disturb it. */
    b.len = 0;
    kvt_req_get(&b, 2, "k", 1);
    kvt_raw_send_all(good, b.p, 10);

    static const char *const kinds[] = {"magic", "version", "oversize", "klen0", "count"};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct kvt_reqbuf m = {0};
        kvt_req_get(&m, 77, "key", 1);
        if (k == 0) m.p[0] = 'X';
        if (k == 1) m.p[4] = 9;
        if (k == 2) kvs_put_u32(m.p + 12, 1u << 30);
        if (k == 3) kvs_put_u16(m.p + KVS_WIRE_HDR_LEN, 0);
        if (k == 4) kvs_put_u32(m.p + 8, 0);
        if (k > 0) {
            close(bad);
            bad = kvt_raw_connect(s->port, 10);
        }
        kvt_raw_send_all(bad, m.p, m.len);
        kvt_raw_send_all(bad, m.p, m.len); /* trailing input must not reset away the ERROR reply */
        assert_int_equal(read_reply(bad, &r), 0);
        assert_int_equal(r.hdr.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
        int32_t status = (int32_t)kvs_get_u32(r.body);
        assert_true(status == -EPROTO || status == -EBADMSG || status == -EMSGSIZE);
        free(r.body);
        assert_true(closed_by_peer(bad));
        free(m.p);
    }
    close(bad);

    kvt_raw_send_all(good, b.p + 10, b.len - 10);
    assert_int_equal(read_reply(good, &r), 0);
    const uint8_t *data;
    uint32_t len;
    assert_int_equal(status0(&r, &data, &len), 0);
    assert_memory_equal(data, "v", 1);
    free(r.body);
    assert_int_equal(stat_value(good, "errors_protocol"), 5);
    close(good);
    free(b.p);
}

static void test_unknown_opcode_keeps_connection(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, 0x55, 5);
    kvt_reqbuf_put(&b, "ignored body", 12);
    kvt_req_end(&b);
    kvt_req_put(&b, 6, "k", "v", 1);
    kvt_raw_send_all(fd, b.p, b.len);
    struct reply r;
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(r.hdr.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal(r.hdr.id, 5);
    assert_int_equal((int32_t)kvs_get_u32(r.body), -ENOTSUP);
    free(r.body);
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(r.hdr.id, 6);
    assert_int_equal(status0(&r, NULL, NULL), 0);
    free(r.body);
    close(fd);
    free(b.p);
}

static void test_stats_counters_move(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    long long puts = stat_value(fd, "keys_put");
    long long in = stat_value(fd, "bytes_in");
    long long hits = stat_value(fd, "get_hits");
    long long misses = stat_value(fd, "get_misses");
    assert_int_equal(puts, 0);
    assert_true(in > 0);
    assert_int_equal(stat_value(fd, "connections_current"), 1);
    assert_int_equal(stat_value(fd, "memory_total"), 64ll * MIB);

    struct kvt_reqbuf b = {0};
    static uint8_t val[4096];
    kvt_req_begin(&b, KVS_OP_PUT, 1);
    kvt_req_entry(&b, "a", sizeof(val), val);
    kvt_req_entry(&b, "b", sizeof(val), val);
    kvt_req_entry(&b, "c", sizeof(val), val);
    kvt_req_end(&b);
    kvt_req_get(&b, 2, "a", sizeof(val));
    kvt_req_get(&b, 3, "zz", sizeof(val));
    kvt_raw_send_all(fd, b.p, b.len);
    struct reply r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(read_reply(fd, &r), 0);
        free(r.body);
    }
    assert_int_equal(stat_value(fd, "keys_put"), puts + 3);
    assert_int_equal(stat_value(fd, "requests_put"), 1);
    assert_int_equal(stat_value(fd, "get_hits"), hits + 1);
    assert_int_equal(stat_value(fd, "get_misses"), misses + 1);
    assert_int_equal(stat_value(fd, "items"), 3);
    assert_true(stat_value(fd, "bytes_in") > in + 3 * 4096);
    assert_true(stat_value(fd, "bytes_out") > 4096);
    assert_true(stat_value(fd, "memory_used") >= 3 * 4096);
    close(fd);
    free(b.p);
}

/* Many clients at once, each with its own keys. */
static void test_many_connections(void **state)
{
    struct kvt_server *s = *state;
    enum { N = 64 };
    int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = kvt_raw_connect(s->port, 10);
    char key[32];
    for (int i = 0; i < N; i++) {
        struct kvt_reqbuf b = {0};
        snprintf(key, sizeof(key), "c%d", i);
        kvt_req_put(&b, 1, key, key, (uint32_t)strlen(key));
        kvt_raw_send_all(fds[i], b.p, b.len);
        free(b.p);
    }
    for (int i = N - 1; i >= 0; i--) {
        struct reply r;
        assert_int_equal(read_reply(fds[i], &r), 0);
        free(r.body);
        struct kvt_reqbuf b = {0};
        snprintf(key, sizeof(key), "c%d", i);
        kvt_req_get(&b, 2, key, 32);
        kvt_raw_send_all(fds[i], b.p, b.len);
        free(b.p);
        const uint8_t *data;
        uint32_t len;
        assert_int_equal(read_reply(fds[i], &r), 0);
        assert_int_equal(status0(&r, &data, &len), 0);
        assert_memory_equal(data, key, len);
        free(r.body);
    }
    assert_int_equal(stat_value(fds[0], "connections_current"), N);
    for (int i = 0; i < N; i++)
        close(fds[i]);
}

/* Over --max-conns, a connection is closed at once and counted. */
static void test_max_conns(void **state)
{
    struct kvt_server *s = *state;
    int a = kvt_raw_connect(s->port, 10);
    int b = kvt_raw_connect(s->port, 10);
    assert_int_equal(stat_value(a, "connections_current"), 2);
    int c = kvt_raw_connect(s->port, 10);
    assert_true(closed_by_peer(c));
    close(c);
    assert_int_equal(stat_value(b, "connections_refused"), 1);
    close(a);
    /* A slot is free again once a client leaves (bounded retry: the close is asynchronous). */
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        c = kvt_raw_connect(s->port, 10);
        struct kvt_reqbuf q = {0};
        kvt_req_begin(&q, KVS_OP_HELLO, 1);
        kvt_req_end(&q);
        kvt_raw_send_all(c, q.p, q.len);
        free(q.p);
        struct reply r;
        if (read_reply(c, &r) == 0) {
            ok = 1;
            free(r.body);
        } else {
            usleep(10000);
        }
        close(c);
    }
    assert_true(ok);
    close(b);
}

/*
 * Out of file descriptors (RLIMIT_NOFILE lowered under the running server):
 * connections it cannot serve are accepted and closed at once rather than
 * left hanging in the backlog (which would also spin the event loop), and
 * it serves again once descriptors are free.
 */
static void test_out_of_descriptors(void **state)
{
    struct kvt_server *s = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "prlimit --pid %d --nofile=24:", (int)s->pid);
    if (system(cmd) != 0) skip();
    enum { N = 40 };
    int fds[N], served = 0, refused = 0;
    struct kvt_reqbuf q = {0};
    kvt_req_begin(&q, KVS_OP_HELLO, 1);
    kvt_req_end(&q);
    for (int i = 0; i < N; i++) {
        fds[i] = kvt_raw_connect(s->port, 10);
        send(fds[i], q.p, q.len, MSG_NOSIGNAL);
    }
    for (int i = 0; i < N; i++) {
        uint8_t h[KVS_WIRE_HDR_LEN];
        ssize_t n = recv(fds[i], h, sizeof(h), MSG_WAITALL);
        if (n == (ssize_t)sizeof(h))
            served++;
        else if (n == 0 || (n < 0 && errno == ECONNRESET))
            refused++;
        else
            fail_msg("connection %d: neither served nor refused (recv %zd, %s)", i, n,
                     strerror(errno));
    }
    assert_true(served > 0);
    assert_true(refused > 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    snprintf(cmd, sizeof(cmd), "prlimit --pid %d --nofile=1024:", (int)s->pid);
    assert_int_equal(system(cmd), 0);
    int fd = kvt_raw_connect(s->port, 10);
    assert_true(stat_value(fd, "connections_refused") >= refused);
    close(fd);
    free(q.p);
}

/*
 * A peer that stops in the middle of a PUT (its slot reserved) is cut after
 * --stall-timeout, and the slot is freed; an idle peer between requests is not.
 */
static void test_stalled_peer_cut(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 16M --stall-timeout 1"), 0);
    int idle = kvt_raw_connect(s.port, 10);
    int stuck = kvt_raw_connect(s.port, 10);
    static uint8_t val[MIB];
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "k", val, sizeof(val));
    kvt_raw_send_all(stuck, b.p, b.len / 2);
    assert_true(closed_by_peer(stuck)); /* bounded by the 10 s socket timeout */
    close(stuck);
    assert_int_equal(stat_value(idle, "pinned_items"), 0);
    assert_int_equal(stat_value(idle, "connections_stalled"), 1);
    assert_int_equal(stat_value(idle, "items"), 0);
    usleep(1500000); /* idle between requests for longer than the timeout: kept */
    assert_int_equal(stat_value(idle, "connections_current"), 1);
    close(idle);
    free(b.p);
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/*
 * A client that sends many GETs and half-closes before reading anything: the
 * server stops reading when its queued replies pass its limit, then resumes;
 * every reply arrives, in order, intact, then the server closes.
 */
static void test_slow_reader_back_pressure(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    static uint8_t val[64 * 1024];
    kvval_fill(val, sizeof(val), "bp", 3);
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 0, "bp", val, sizeof(val));
    const int n = 400; /* 25 MiB of replies, about 13 KB of requests */
    for (int i = 1; i <= n; i++)
        kvt_req_get(&b, (uint64_t)i, "bp", sizeof(val));
    kvt_raw_send_all(fd, b.p, b.len);
    /* Half-close: requests still held back by back-pressure must be answered all the same. */
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    usleep(200000); /* let the server hit its output limit */
    struct reply r;
    assert_int_equal(read_reply(fd, &r), 0);
    free(r.body);
    for (int i = 1; i <= n; i++) {
        const uint8_t *data;
        uint32_t len;
        assert_int_equal(read_reply(fd, &r), 0);
        assert_int_equal(r.hdr.id, (uint64_t)i);
        assert_int_equal(status0(&r, &data, &len), 0);
        assert_int_equal(len, sizeof(val));
        assert_true(kvval_check(data, len, "bp", NULL));
        free(r.body);
    }
    assert_true(closed_by_peer(fd));
    close(fd);
    free(b.p);
}

/* A frame of n keys "<prefix><i>", each with len (a GET's capacity; a PUT's value val). */
static void req_many(struct kvt_reqbuf *b, uint8_t op, uint64_t id, const char *prefix, int n,
                     uint32_t len, const uint8_t *val)
{
    kvt_req_begin(b, op, id);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        kvt_req_entry(b, key, len, val);
    }
    kvt_req_end(b);
}

enum { FRAME_KEYS = 8192 }; /* HELLO's max_keys */

/*
 * A GET frame of 65536 keys (the wire's limit, over HELLO's max_keys of
 * 8192) could not be answered within the reply budget: its whole reply
 * (8 bytes of status and two segments per key, about 8.5 MiB of heap) is
 * built before the first byte goes. It is refused with -EMSGSIZE and its
 * connection closed; a frame of max_keys is served; others are unaffected.
 */
static void test_frame_over_max_keys_refused(void **state)
{
    struct kvt_server *s = *state;
    int a = kvt_raw_connect(s->port, 10);
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_HELLO, 1);
    kvt_req_end(&b);
    kvt_raw_send_all(a, b.p, b.len);
    struct reply r = {0};
    assert_int_equal(read_reply(a, &r), 0);
    assert_non_null(r.body);
    struct kvs_wire_hello h = {0};
    assert_int_equal(kvs_wire_hello_decode(r.body, r.hdr.body_len, &h), 0);
    assert_int_equal(h.max_keys, FRAME_KEYS);
    free(r.body);

    int big = kvt_raw_connect(s->port, 10);
    b.len = 0;
    req_many(&b, KVS_OP_GET, 7, "mk", (int)KVS_WIRE_MAX_KEYS, 16, NULL);
    kvt_raw_send_all(big, b.p, b.len);
    assert_int_equal(read_reply(big, &r), 0);
    assert_int_equal(r.hdr.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal(r.hdr.id, 7);
    assert_true(r.body && r.hdr.body_len >= 4);
    if (r.body) assert_int_equal((int32_t)kvs_get_u32(r.body), -EMSGSIZE);
    free(r.body);
    assert_true(closed_by_peer(big));
    close(big);

    b.len = 0;
    req_many(&b, KVS_OP_GET, 8, "mk", FRAME_KEYS, 16, NULL);
    kvt_raw_send_all(a, b.p, b.len);
    assert_int_equal(read_reply(a, &r), 0);
    assert_int_equal(r.hdr.opcode, KVS_OP_GET | KVS_OP_REPLY);
    assert_int_equal(r.hdr.count, FRAME_KEYS);
    free(r.body);
    free(b.p);
    close(a);
}

/* SIGTERM while clients are connected and replies are in flight: exit 0. */
static void test_sigterm_with_clients(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 16M"), 0);
    int fd = kvt_raw_connect(s.port, 10);
    int idle = kvt_raw_connect(s.port, 10);
    static uint8_t val[MIB];
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 1, "k", val, sizeof(val));
    for (int i = 0; i < 20; i++)
        kvt_req_get(&b, 2, "k", sizeof(val));
    kvt_raw_send_all(fd, b.p, b.len);
    kvt_req_put(&b, 3, "half", val, sizeof(val));
    kvt_raw_send_all(idle, b.p + b.len - 1000, 500); /* garbage mid-stream, never finished */
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(fd);
    close(idle);
    free(b.p);
}

/* Runs kvstored with args, returns its exit code. */
static int run_kvstored(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "timeout 10 %s %s >/dev/null 2>&1", kvt_build_path("bin/kvstored"),
             args);
    int st = system(cmd);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_bad_options_exit_2(void **state)
{
    (void)state;
    assert_int_equal(run_kvstored("--help"), 0);
    assert_int_equal(run_kvstored("--memory lots"), 2);
    assert_int_equal(run_kvstored("--memory 512K"), 2);
    assert_int_equal(run_kvstored("--memory 1Q"), 2);
    assert_int_equal(run_kvstored("--listen 127.0.0.1"), 2);
    assert_int_equal(run_kvstored("--listen 127.0.0.1:99999"), 2);
    assert_int_equal(run_kvstored("--memory 4M --max-object 8M"), 2);
    /* more than this machine's RAM + swap (16 TiB, the largest --memory): refused at start */
    struct sysinfo si;
    assert_int_equal(sysinfo(&si), 0);
    if ((double)(si.totalram + si.totalswap) * si.mem_unit < 16.0 * (1ull << 40))
        assert_int_equal(run_kvstored("--memory 16T"), 2);
    assert_int_equal(run_kvstored("--max-frame 5G"), 2);
    assert_int_equal(run_kvstored("--max-conns 0"), 2);
    assert_int_equal(run_kvstored("--stall-timeout -1"), 2);
    assert_int_equal(run_kvstored("--put-timeout -1"), 2);
    assert_int_equal(run_kvstored("--put-timeout 1500us"), 2); /* whole milliseconds */
    assert_int_equal(run_kvstored("--put-timeout 2d"), 2);
    assert_int_equal(run_kvstored("--bogus"), 2);
    assert_int_equal(run_kvstored("extra"), 2);
    assert_int_equal(run_kvstored("--memory"), 2);
}

/* Size suffixes and the listening line: a running server reports what it was given. */
static void test_options_accepted(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(
        kvt_server_start(&s, 0,
                         "--memory 3MiB --max-object 1K --max-frame 64KiB --max-conns 5 "
                         "--put-timeout 250ms"),
        0);
    assert_true(s.port > 0);
    int fd = kvt_raw_connect(s.port, 10);
    assert_int_equal(stat_value(fd, "memory_total"), 3ll * MIB);
    assert_int_equal(stat_value(fd, "max_object"), 1024);
    assert_int_equal(stat_value(fd, "max_frame"), 65536);
    close(fd);
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The start of a kvstored log line: its pid (a %d to fill), the UTC time to the millisecond. */
#define LOG_STAMP                                                                                  \
    "^kvstored\\[%d\\] [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "

/* True if some line of text matches the extended regular expression re. */
static int has_line(const char *text, const char *re)
{
    regex_t rx;
    assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0);
    int found = regexec(&rx, text, 0, NULL, 0) == 0;
    regfree(&rx);
    return found;
}

/*
 * --verbose: each connection event is one line with kvstored's pid, the UTC
 * time to the millisecond and the peer's address, as servers' logs are
 * read beside others'.
 */
static void test_verbose_lines_name_time_and_peer(void **state)
{
    (void)state;
    char dir[] = "/tmp/kvb-vlog-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct kvt_capture cap;
    assert_int_equal(kvt_capture_begin(&cap, dir), 0); /* kvstored inherits this stderr */
    struct kvt_server s;
    int started = kvt_server_start(&s, 0, "--memory 4M --verbose --unix none");
    int fd = started == 0 ? kvt_raw_connect(s.port, 10) : -1;
    struct sockaddr_in me = {0};
    socklen_t len = sizeof(me);
    int named = fd >= 0 ? getsockname(fd, (struct sockaddr *)&me, &len) : -1;
    if (fd >= 0) close(fd);
    int pid = (int)s.pid; /* kvt_server_stop clears it */
    if (started == 0) kvt_server_stop(&s);
    char *said = kvt_capture_end(&cap);
    rmdir(dir);
    assert_int_equal(started, 0);
    assert_true(fd >= 0 && named == 0);
    assert_non_null(said);
    char re[256];
    snprintf(re, sizeof(re), LOG_STAMP "connection [0-9]+ from 127\\.0\\.0\\.1:%u accepted$",
             pid, (unsigned)ntohs(me.sin_port));
    if (!has_line(said, re)) fail_msg("no line /%s/ in:\n%s", re, said);
    snprintf(re, sizeof(re), LOG_STAMP "connection [0-9]+ from 127\\.0\\.0\\.1:%u closed$",
             pid, (unsigned)ntohs(me.sin_port));
    if (!has_line(said, re)) fail_msg("no line /%s/ in:\n%s", re, said);
    snprintf(re, sizeof(re), LOG_STAMP "stopping$", pid);
    if (!has_line(said, re)) fail_msg("no line /%s/ in:\n%s", re, said);
    free(said);
}

/*
 * The per-key rules over TCP: every case of key_rules.h, sent alone, gets
 * its status and moves exactly its counters (the same table serves RDMA).
 */
static void test_key_rules(void **state)
{
    struct kvt_server *s = *state;
    int fd = kvt_raw_connect(s->port, 10);
    static uint8_t val[KVT_KEY_RULES_MAX_OBJECT + 1];
    struct kvt_reqbuf b = {0};
    struct reply r;
    kvt_req_put(&b, 1, KVT_KEY_RULES_PRESENT, val, KVT_KEY_RULES_PRESENT_LEN);
    kvt_raw_send_all(fd, b.p, b.len);
    assert_int_equal(read_reply(fd, &r), 0);
    assert_int_equal(status0(&r, NULL, NULL), 0);
    free(r.body);
    enum { NC = sizeof(kvt_key_rule_counters) / sizeof(kvt_key_rule_counters[0]) };
    for (size_t i = 0; i < sizeof(kvt_key_rules) / sizeof(kvt_key_rules[0]); i++) {
        const struct kvt_key_rule *k = &kvt_key_rules[i];
        const char *keys = k->op == KVS_OP_PUT ? "keys_put" : "keys_get";
        long long before[NC], keys_before = stat_value(fd, keys);
        for (size_t j = 0; j < NC; j++)
            before[j] = stat_value(fd, kvt_key_rule_counters[j]);
        b.len = 0;
        kvt_req_begin(&b, k->op, 100 + i);
        kvt_req_entry_klen(&b, k->key, k->klen, k->len, k->op == KVS_OP_PUT ? val : NULL);
        kvt_req_end(&b);
        kvt_raw_send_all(fd, b.p, b.len);
        assert_int_equal(read_reply(fd, &r), 0);
        uint32_t len;
        print_message("%s\n", k->what);
        assert_int_equal(status0(&r, NULL, &len), k->status);
        assert_int_equal(len, k->reply_len);
        free(r.body);
        assert_int_equal(stat_value(fd, keys), keys_before + 1);
        for (size_t j = 0; j < NC; j++) {
            const char *name = kvt_key_rule_counters[j];
            int moved = (k->counters[0] && !strcmp(k->counters[0], name)) ||
                        (k->counters[1] && !strcmp(k->counters[1], name));
            long long now = stat_value(fd, name);
            if (now != before[j] + moved)
                print_message("  %s moved by %lld\n", name, now - before[j]);
            assert_int_equal(now, before[j] + moved);
        }
    }
    close(fd);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_visible_only_when_complete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_closes_only_its_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_opcode_keeps_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_counters_move, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_rules, setup_key_rules, teardown),
        cmocka_unit_test_setup_teardown(test_many_connections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_conns, setup_two_conns, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_descriptors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_reader_back_pressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frame_over_max_keys_refused, setup, teardown),
        cmocka_unit_test(test_sigterm_with_clients),
        cmocka_unit_test(test_stalled_peer_cut),
        cmocka_unit_test(test_bad_options_exit_2),
        cmocka_unit_test(test_options_accepted),
        cmocka_unit_test(test_verbose_lines_name_time_and_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

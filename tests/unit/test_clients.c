/*
 * test_clients.c - kvstored's CLIENTS reply against the protocol state
 * machine, no sockets: every connection is listed, newest first, with its
 * peer and exactly the frames, keys and bytes it moved; one freed is gone;
 * the list stops at KVS_WIRE_CLIENTS_MAX, and earlier within a small reply
 * heap or one RDMA control message, counting the rest as omitted; a CLIENTS
 * frame waits behind queued replies that leave no room for its reply.
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

#include "clients_reply.h"
#include "proto.h"
#include "rawwire.h"
#include "wire.h"

#define MIB (1u << 20)

/* One connection under test and every reply byte it sent. */
struct tconn {
    struct kvsd_proto_conn *pc;
    struct kvt_reqbuf out;
    size_t in; /* request bytes fed */
};

static struct kvsd_server srv;

static void server_up(size_t out_heap_limit)
{
    struct kvsd_server_limits lim = {.max_object = MIB,
                                     .max_frame = 4 * MIB,
                                     .out_limit = 1u << 30,
                                     .out_heap_limit = out_heap_limit,
                                     .rbuf_size = 4096};
    assert_int_equal(kvsd_server_init(&srv, 8 * MIB, &lim), 0);
}

static void conn_up(struct tconn *t, enum kvsd_peer_kind kind, const char *addr, int pid,
                    uint32_t uid)
{
    memset(t, 0, sizeof(*t));
    t->pc = kvsd_proto_conn_new(&srv);
    assert_non_null(t->pc);
    struct kvsd_peer p = {.kind = kind, .pid = pid, .uid = uid};
    snprintf(p.addr, sizeof(p.addr), "%s", addr);
    kvsd_proto_set_peer(t->pc, &p);
}

static void conn_down(struct tconn *t)
{
    kvsd_proto_conn_free(t->pc);
    free(t->out.p);
    t->pc = NULL;
    t->out.p = NULL;
}

/* Takes every queued reply byte, a few iovecs at a time. */
static void drain(struct tconn *t)
{
    for (int guard = 0; kvsd_proto_out_pending(t->pc) > 0 && guard < 100000; guard++) {
        struct iovec iov[4];
        int n = kvsd_proto_out_iov(t->pc, iov, 4);
        assert_true(n > 0);
        size_t total = 0;
        for (int i = 0; i < n; i++) {
            kvt_reqbuf_put(&t->out, iov[i].iov_base, iov[i].iov_len);
            total += iov[i].iov_len;
        }
        kvsd_proto_sent(t->pc, total);
        kvsd_proto_process(t->pc);
    }
}

/* Feeds b whole and sends every reply. */
static void feed(struct tconn *t, struct kvt_reqbuf *b)
{
    assert_int_equal(kvsd_proto_feed(t->pc, b->p, b->len), b->len);
    t->in += b->len;
    drain(t);
    free(b->p);
    *b = (struct kvt_reqbuf){0};
}

/* Asks t for CLIENTS; returns the reply's text (malloc'ed, NUL-terminated), its body length in
 * *len. */
static char *clients(struct tconn *t, size_t *len)
{
    size_t at = t->out.len;
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_CLIENTS, 77);
    kvt_req_end(&b);
    feed(t, &b);
    assert_true(t->out.len - at >= KVS_WIRE_HDR_LEN);
    struct kvs_wire_hdr h;
    assert_int_equal(kvs_wire_hdr_decode(t->out.p + at, &h, UINT32_MAX), 0);
    assert_int_equal(h.opcode, KVS_OP_CLIENTS | KVS_OP_REPLY);
    assert_int_equal(h.id, 77);
    assert_int_equal(h.count, 0);
    assert_int_equal(t->out.len - at, KVS_WIRE_HDR_LEN + (size_t)h.body_len);
    if (len) *len = h.body_len;
    char *text = strndup((const char *)t->out.p + at + KVS_WIRE_HDR_LEN, h.body_len);
    assert_non_null(text);
    return text;
}

/* The line of text whose id is id (a static copy), or NULL. */
static const char *line_of(const char *text, uint64_t id)
{
    static char line[512];
    char want[32];
    int wl = snprintf(want, sizeof(want), "id=%llu ", (unsigned long long)id);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, want, (size_t)wl) == 0) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            assert_true(n < sizeof(line));
            memcpy(line, p, n);
            line[n] = '\0';
            return line;
        }
    return NULL;
}

/* The number value of field in line (fails the test if absent). */
static unsigned long long field(const char *line, const char *name)
{
    char want[40];
    snprintf(want, sizeof(want), " %s=", name);
    const char *p = strstr(line, want);
    assert_non_null(p);
    return strtoull(p + strlen(want), NULL, 10);
}

static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        n += strncmp(p, prefix, pl) == 0;
    return n;
}

static void test_lists_every_connection_with_its_counters(void **state)
{
    (void)state;
    server_up(MIB);
    struct tconn a, b;
    conn_up(&a, KVSD_PEER_TCP, "127.0.0.1:40001", -1, 0);
    conn_up(&b, KVSD_PEER_LOCAL, "unix", 4242, 1001);

    /* a: HELLO, a PUT of two keys, a PUT of one, a GET of two (one hit); a STATS. */
    struct kvt_reqbuf r = {0};
    kvt_req_begin(&r, KVS_OP_HELLO, 1);
    kvt_req_end(&r);
    kvt_req_begin(&r, KVS_OP_PUT, 2);
    kvt_req_entry(&r, "k1", 3, "abc");
    kvt_req_entry(&r, "k2", 5, "hello");
    kvt_req_end(&r);
    kvt_req_put(&r, 3, "k3", "xy", 2);
    kvt_req_begin(&r, KVS_OP_GET, 4);
    kvt_req_entry(&r, "k1", 64, NULL);
    kvt_req_entry(&r, "nope", 64, NULL);
    kvt_req_end(&r);
    feed(&a, &r);
    /* b: one GET of one key. */
    kvt_req_get(&r, 5, "k2", 64);
    feed(&b, &r);

    size_t len;
    char *text = clients(&b, &len);
    /* Newest first, then the trailer. */
    char head[32];
    snprintf(head, sizeof(head), "id=%llu ", (unsigned long long)srv.conns_made);
    assert_int_equal(strncmp(text, head, strlen(head)), 0);
    assert_int_equal(count_lines(text, "id="), 2);
    assert_non_null(strstr(text, "\n# listed 2 omitted 0\n"));
    assert_int_equal(text[len - 1], '\n');

    const char *la = line_of(text, srv.conns_made - 1);
    assert_non_null(la);
    assert_non_null(strstr(la, " addr=127.0.0.1:40001 transport=tcp age="));
    assert_null(strstr(la, " pid="));
    assert_int_equal(field(la, "requests"), 4);
    assert_int_equal(field(la, "keys_put"), 3);
    assert_int_equal(field(la, "keys_get"), 2);
    assert_int_equal(field(la, "bytes_in"), a.in);
    assert_int_equal(field(la, "bytes_out"), a.out.len);
    assert_int_equal(field(la, "reply_queue"), 0);
    assert_int_equal(field(la, "age"), 0);
    assert_int_equal(field(la, "idle"), 0);
    assert_non_null(strstr(la, " auth=1"));

    const char *lb = line_of(text, srv.conns_made);
    assert_non_null(lb);
    assert_non_null(strstr(lb, " addr=unix transport=local pid=4242 uid=1001 age="));
    /* Its own CLIENTS frame is counted; its reply is not sent yet when the line is made. */
    assert_int_equal(field(lb, "requests"), 2);
    assert_int_equal(field(lb, "keys_put"), 0);
    assert_int_equal(field(lb, "keys_get"), 1);
    assert_int_equal(field(lb, "bytes_in"), b.in);
    assert_int_equal(field(lb, "bytes_out"), b.out.len - KVS_WIRE_HDR_LEN - len);
    free(text);

    /* Every line is key=value fields, separated by one space, within KVSD_CLIENTS_LINE_MAX. */
    text = clients(&a, NULL);
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '#') continue;
        assert_true(strlen(l) < KVSD_CLIENTS_LINE_MAX);
        for (char *s2 = NULL, *kv = strtok_r(l, " ", &s2); kv; kv = strtok_r(NULL, " ", &s2))
            assert_non_null(strchr(kv, '='));
    }
    free(text);
    /* The server-wide count of CLIENTS frames. */
    assert_int_equal(srv.counters.requests[KVS_OP_CLIENTS], 2);

    /* a goes: only b is left, and ids are not given again. */
    conn_down(&a);
    text = clients(&b, NULL);
    assert_int_equal(count_lines(text, "id="), 1);
    assert_null(line_of(text, srv.conns_made - 1));
    assert_non_null(line_of(text, srv.conns_made));
    assert_non_null(strstr(text, "# listed 1 omitted 0\n"));
    free(text);
    struct tconn c;
    conn_up(&c, KVSD_PEER_RDMA, "10.0.0.2:7000", -1, 0);
    text = clients(&c, NULL);
    const char *lc = line_of(text, 3);
    assert_non_null(lc);
    assert_non_null(strstr(lc, " addr=10.0.0.2:7000 transport=rdma "));
    free(text);
    conn_down(&c);
    conn_down(&b);
    assert_null(kvsd_proto_next(&srv, NULL));
    kvsd_server_fini(&srv);
}

/* More connections than a reply lists: KVS_WIRE_CLIENTS_MAX of them, the newest, and the count
 * left. */
static void test_list_bounded(void **state)
{
    (void)state;
    server_up(MIB);
    enum { EXTRA = 9 };
    unsigned n = KVS_WIRE_CLIENTS_MAX + EXTRA;
    static struct kvsd_proto_conn *pcs[KVS_WIRE_CLIENTS_MAX + EXTRA];
    for (unsigned i = 0; i < n; i++) {
        pcs[i] = kvsd_proto_conn_new(&srv);
        assert_non_null(pcs[i]);
    }
    struct tconn t;
    conn_up(&t, KVSD_PEER_TCP, "[::1]:5000", -1, 0);
    size_t len;
    char *text = clients(&t, &len);
    assert_int_equal(count_lines(text, "id="), KVS_WIRE_CLIENTS_MAX);
    char trailer[64];
    snprintf(trailer, sizeof(trailer), "\n# listed %u omitted %u\n", KVS_WIRE_CLIENTS_MAX,
             (unsigned)EXTRA + 1);
    assert_non_null(strstr(text, trailer));
    assert_int_equal(strlen(text) - strlen(strstr(text, trailer)) + strlen(trailer), len);
    /* the newest: the asking connection first, the first ones made left out */
    assert_non_null(line_of(text, srv.conns_made));
    assert_null(line_of(text, EXTRA + 1));
    assert_non_null(line_of(text, EXTRA + 2));
    const char *l = line_of(text, srv.conns_made);
    assert_non_null(strstr(l, " addr=[::1]:5000 transport=tcp "));
    l = line_of(text, srv.conns_made - 1); /* never told its peer */
    assert_non_null(l);
    assert_non_null(strstr(l, " addr=unknown transport=unknown "));
    free(text);
    conn_down(&t);
    for (unsigned i = 0; i < n; i++)
        kvsd_proto_conn_free(pcs[i]);
    assert_int_equal(srv.conn_memory, 0);
    kvsd_server_fini(&srv);
}

/*
 * A small reply heap lists fewer, in a body that leaves the connection
 * within it; an RDMA connection's reply fits one control message.
 */
static void test_list_fits_reply_budget(void **state)
{
    (void)state;
    size_t heap = 8192;
    server_up(heap);
    enum { N = 200 };
    struct kvsd_proto_conn *pcs[N];
    for (unsigned i = 0; i < N; i++) {
        pcs[i] = kvsd_proto_conn_new(&srv);
        assert_non_null(pcs[i]);
    }
    struct tconn t;
    conn_up(&t, KVSD_PEER_TCP, "127.0.0.1:1", -1, 0);
    size_t len;
    char *text = clients(&t, &len);
    int listed = count_lines(text, "id=");
    assert_true(listed > 10 && listed < N);
    assert_true(KVS_WIRE_HDR_LEN + len <= heap);
    char trailer[64];
    snprintf(trailer, sizeof(trailer), "# listed %d omitted %d\n", listed, N + 1 - listed);
    assert_non_null(strstr(text, trailer));
    free(text);
    conn_down(&t);
    for (unsigned i = 0; i < N; i++)
        kvsd_proto_conn_free(pcs[i]);
    kvsd_server_fini(&srv);

    /* RDMA: one control message, whatever the heap allows. */
    server_up(64 * MIB);
    static struct kvsd_proto_conn *many[KVS_WIRE_CLIENTS_MAX];
    for (unsigned i = 0; i < KVS_WIRE_CLIENTS_MAX; i++) {
        many[i] = kvsd_proto_conn_new(&srv);
        assert_non_null(many[i]);
        struct kvsd_peer p = {
            .kind = KVSD_PEER_RDMA, .addr = "[fe80::1234:5678:9abc:def0]:65535", .pid = -1};
        kvsd_proto_set_peer(many[i], &p);
    }
    conn_up(&t, KVSD_PEER_RDMA, "10.0.0.1:9", -1, 0);
    text = clients(&t, &len);
    assert_true(KVS_WIRE_HDR_LEN + len <= KVS_WIRE_CTRL_MAX);
    listed = count_lines(text, "id=");
    assert_true(listed < (int)KVS_WIRE_CLIENTS_MAX);
    snprintf(trailer, sizeof(trailer), "# listed %d omitted %d\n", listed,
             (int)KVS_WIRE_CLIENTS_MAX + 1 - listed);
    assert_non_null(strstr(text, trailer));
    free(text);
    conn_down(&t);
    for (unsigned i = 0; i < KVS_WIRE_CLIENTS_MAX; i++)
        kvsd_proto_conn_free(many[i]);
    kvsd_server_fini(&srv);
}

/* A CLIENTS frame behind queued replies waits until its reply fits the reply heap. */
static void test_waits_for_reply_heap(void **state)
{
    (void)state;
    size_t heap = 8192;
    server_up(heap);
    struct tconn t;
    conn_up(&t, KVSD_PEER_TCP, "127.0.0.1:2", -1, 0);
    /* A STATS reply queued and not taken: within the heap, but no room beside it for CLIENTS'. */
    struct kvt_reqbuf r = {0};
    kvt_req_begin(&r, KVS_OP_STATS, 1);
    kvt_req_end(&r);
    kvt_req_begin(&r, KVS_OP_CLIENTS, 99);
    kvt_req_end(&r);
    size_t took = kvsd_proto_feed(t.pc, r.p, r.len);
    assert_int_equal(took, r.len);
    /* The STATS reply is queued, the CLIENTS one not yet (its frame waits for room). */
    size_t queued = kvsd_proto_out_pending(t.pc);
    assert_true(queued > 0);
    assert_int_equal(srv.counters.requests[KVS_OP_CLIENTS], 0);
    assert_false(kvsd_proto_want_input(t.pc));
    drain(&t);
    assert_int_equal(srv.counters.requests[KVS_OP_CLIENTS], 1);
    assert_true(t.out.len > queued);
    free(r.p);
    conn_down(&t);
    kvsd_server_fini(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_every_connection_with_its_counters),
        cmocka_unit_test(test_list_bounded),
        cmocka_unit_test(test_list_fits_reply_budget),
        cmocka_unit_test(test_waits_for_reply_heap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_rdma_ops.c - one set of per-key rules over TCP and over RDMA
 * (server/ops.c). Runs only inside the soft-RoCE VM (make test-rdma):
 * KVS_RDMA_ADDR_A names the address kvstored's RDMA side binds.
 *
 * The same bad keys and values (a key holding a NUL byte, a value over
 * --max-object) and the same GET outcomes (miss, too small a buffer, hit)
 * go to kvstored as a raw TCP frame, as RESERVE/LEASE and as PULL/PUSH from
 * a raw RDMA peer (the client library would refuse the NUL key before
 * sending it). Every path must answer each key with the same status (and
 * length) and move the server's per-key counters by the same amounts: a
 * raw RDMA peer cannot store a key TCP refuses.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "rawrdma.h"
#include "rawwire.h"
#include "wire.h"

#define MAX_OBJECT (64u << 10)
#define STORED_LEN 100u

static struct kvt_server srv;
static const char *rdma_host;
static char rdma_port[8];
static kvs_client *stats_client; /* over TCP: STATS and the stored value */

static int setup(void **state)
{
    (void)state;
    rdma_host = getenv("KVS_RDMA_ADDR_A");
    if (!rdma_host) {
        fprintf(stderr, "test_rdma_ops: KVS_RDMA_ADDR_A not set: run inside scripts/rxe-vm.sh\n");
        return -1;
    }
    snprintf(rdma_port, sizeof(rdma_port), "%d", 20000 + (int)((getpid() + 11) % 20000));
    char args[256];
    snprintf(args, sizeof(args), "--memory 16M --max-object 64K --rdma-listen %s:%s", rdma_host,
             rdma_port);
    if (kvt_server_start(&srv, 0, args) < 0) return -1;
    stats_client = kvs_open(srv.url); /* tcp:// whatever KVSTORE_TRANSPORT says */
    if (!stats_client) return -1;
    static uint8_t v[STORED_LEN];
    kvt_fill_value(v, sizeof(v), "stored", 1);
    return kvs_put(stats_client, "stored", v, sizeof(v)) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kvs_close(stats_client);
    kvt_server_stop(&srv);
    return 0;
}

/* ---- the cases ---- */

struct key_case {
    const char *key;
    uint16_t klen;
    uint32_t len;      /* put: the value's length; get: the capacity */
    int32_t want;      /* the status every path must answer */
    uint32_t want_len; /* get: the length every path must answer */
};

static const struct key_case put_cases[] = {
    {"nul\0key", 7, 16, -EINVAL, 0},       /* a key TCP refuses */
    {"big", 3, MAX_OBJECT + 1, -E2BIG, 0}, /* a value over --max-object */
    {"\0", 1, 8, -EINVAL, 0},              /* a key that is one NUL */
};
#define NPUTS (sizeof(put_cases) / sizeof(put_cases[0]))

static const struct key_case get_cases[] = {
    {"nul\0key", 7, 16, -EINVAL, 0},
    {"absent", 6, 16, -ENOENT, 0},
    {"stored", 6, 10, -ERANGE, STORED_LEN}, /* too small a buffer: the length, no data */
    {"stored", 6, 200, 0, STORED_LEN},
};
#define NGETS (sizeof(get_cases) / sizeof(get_cases[0]))

/* The per-key counters of STATS (docs/server.md), read before and after each path. */
static const char *const counter_names[] = {
    "keys_put",   "keys_get",  "key_invalid",  "put_too_big",  "put_no_space", "get_hits",
    "get_misses", "get_range", "errors_nomem", "requests_put", "requests_get", "items",
};
#define NCOUNTERS (sizeof(counter_names) / sizeof(counter_names[0]))

struct outcome {
    int32_t put_status[NPUTS];
    int32_t get_status[NGETS];
    uint32_t get_len[NGETS];
    long long delta[NCOUNTERS];
};

static void read_counters(long long *v)
{
    for (size_t i = 0; i < NCOUNTERS; i++) {
        v[i] = kvt_server_counter(stats_client, counter_names[i]);
        assert_true(v[i] >= 0);
    }
}

/* ---- over TCP: one PUT frame, one GET frame ---- */

/* Reads one reply frame of n entries to opcode op into status/len; data is skipped. */
static void tcp_read_reply(int fd, uint8_t op, uint32_t n, int32_t *status, uint32_t *len)
{
    uint8_t h[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr hdr;
    assert_int_equal(kvt_raw_recv_all(fd, h, sizeof(h)), 0);
    assert_int_equal(kvs_wire_hdr_decode(h, &hdr, UINT32_MAX), 0);
    assert_int_equal(hdr.opcode, op | KVS_OP_REPLY);
    assert_int_equal(hdr.count, n);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t e[KVS_WIRE_STATUS_LEN];
        struct kvs_wire_status st;
        assert_int_equal(kvt_raw_recv_all(fd, e, sizeof(e)), 0);
        assert_int_equal(kvs_wire_status_decode(e, op, &st), 0);
        status[i] = st.status;
        if (len) len[i] = st.len;
        if (st.status == 0 && st.len > 0) { /* a hit's data follows */
            uint8_t *data = malloc(st.len);
            assert_non_null(data);
            assert_int_equal(kvt_raw_recv_all(fd, data, st.len), 0);
            free(data);
        }
    }
}

static void run_tcp(struct outcome *o)
{
    int fd = kvt_raw_connect(srv.port, 10);
    struct kvt_reqbuf b = {0};
    static uint8_t value[MAX_OBJECT + 1];
    kvt_req_begin(&b, KVS_OP_PUT, 1);
    for (size_t i = 0; i < NPUTS; i++)
        kvt_req_entry_klen(&b, put_cases[i].key, put_cases[i].klen, put_cases[i].len, value);
    kvt_req_end(&b);
    kvt_req_begin(&b, KVS_OP_GET, 2);
    for (size_t i = 0; i < NGETS; i++)
        kvt_req_entry_klen(&b, get_cases[i].key, get_cases[i].klen, get_cases[i].len, NULL);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    tcp_read_reply(fd, KVS_OP_PUT, NPUTS, o->put_status, NULL);
    tcp_read_reply(fd, KVS_OP_GET, NGETS, o->get_status, o->get_len);
    free(b.p);
    close(fd);
}

/* ---- over RDMA ---- */

/* RESERVE and LEASE (a reservation is aborted, a lease released: only the rules count). */
static void run_slots(struct outcome *o)
{
    struct raw *r = raw_connect(rdma_host, rdma_port);
    const char *keys[NGETS];
    uint16_t klens[NGETS];
    uint32_t lens[NGETS];
    struct kvs_wire_slot slots[NGETS];
    for (size_t i = 0; i < NPUTS; i++) {
        keys[i] = put_cases[i].key;
        klens[i] = put_cases[i].klen;
        lens[i] = put_cases[i].len;
    }
    assert_int_equal(raw_slots(r, KVS_OP_RDMA_RESERVE, NPUTS, keys, klens, lens, slots),
                     KVS_OP_RDMA_RESERVE | KVS_OP_REPLY);
    for (size_t i = 0; i < NPUTS; i++) {
        o->put_status[i] = slots[i].status;
        if (slots[i].status == 0) { /* a slot TCP would not give: abort it */
            uint8_t body[KVS_WIRE_TOKEN_LEN];
            struct kvs_wire_token t = {.token = slots[i].token, .flags = 0};
            kvs_wire_token_encode(body, &t);
            uint32_t rlen;
            raw_call(r, KVS_OP_RDMA_COMMIT, 1, body, sizeof(body), &rlen);
        }
    }
    for (size_t i = 0; i < NGETS; i++) {
        keys[i] = get_cases[i].key;
        klens[i] = get_cases[i].klen;
        lens[i] = get_cases[i].len;
    }
    assert_int_equal(raw_slots(r, KVS_OP_RDMA_LEASE, NGETS, keys, klens, lens, slots),
                     KVS_OP_RDMA_LEASE | KVS_OP_REPLY);
    for (size_t i = 0; i < NGETS; i++) {
        o->get_status[i] = slots[i].status;
        o->get_len[i] = slots[i].len;
        if (slots[i].status == 0)
            assert_int_equal(raw_token(r, KVS_OP_RDMA_RELEASE, slots[i].token), 0);
    }
    raw_close(r);
}

/* A PULL or PUSH message of the cases, each naming the peer's own registered memory. */
static int remote_call(struct raw *r, uint8_t op, const struct key_case *cases, size_t n,
                       uint32_t *reply_len)
{
    uint8_t body[RAW_CTRL - KVS_WIRE_HDR_LEN];
    size_t blen = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvs_wire_remote_entry e = {.key = (const uint8_t *)cases[i].key,
                                          .klen = cases[i].klen,
                                          .len = cases[i].len,
                                          .addr = (uintptr_t)raw_data(r),
                                          .rkey = r->mr->rkey};
        blen += kvs_wire_remote_entry_encode(body + blen, &e);
    }
    return raw_call(r, op, (uint32_t)n, body, (uint32_t)blen, reply_len);
}

/* Decodes the n status entries of the reply in the peer's receive buffer. */
static void take_statuses(struct raw *r, uint8_t op, size_t n, uint32_t reply_len, int32_t *status,
                          uint32_t *len)
{
    assert_int_equal(reply_len, n * KVS_WIRE_STATUS_LEN);
    for (size_t i = 0; i < n; i++) {
        struct kvs_wire_status st;
        assert_int_equal(kvs_wire_status_decode(
                             raw_recv_buf(r) + KVS_WIRE_HDR_LEN + i * KVS_WIRE_STATUS_LEN, op, &st),
                         0);
        status[i] = st.status;
        if (len) len[i] = st.len;
    }
}

/*
 * PULL and PUSH. The peer's memory is not remotely readable, so a PULL
 * whose key were accepted would fail its READ and cut the peer: no such
 * key is sent unless a rule breaks (and then the test fails anyway).
 */
static void run_remote(struct outcome *o)
{
    struct raw *r = raw_connect(rdma_host, rdma_port);
    uint32_t rlen = 0;
    int op = remote_call(r, KVS_OP_RDMA_PULL, put_cases, NPUTS, &rlen);
    if (op < 0) fail_msg("PULL: the connection was cut (%d): a key was accepted", op);
    assert_int_equal(op, KVS_OP_RDMA_PULL | KVS_OP_REPLY);
    take_statuses(r, KVS_OP_RDMA_PULL, NPUTS, rlen, o->put_status, NULL);
    assert_int_equal(remote_call(r, KVS_OP_RDMA_PUSH, get_cases, NGETS, &rlen),
                     KVS_OP_RDMA_PUSH | KVS_OP_REPLY);
    take_statuses(r, KVS_OP_RDMA_PUSH, NGETS, rlen, o->get_status, o->get_len);
    raw_close(r);
}

/* ---- the test ---- */

static void run_path(const char *name, void (*run)(struct outcome *), struct outcome *o)
{
    long long before[NCOUNTERS], after[NCOUNTERS];
    memset(o, 0, sizeof(*o));
    read_counters(before);
    run(o);
    read_counters(after);
    for (size_t i = 0; i < NCOUNTERS; i++) {
        o->delta[i] = after[i] - before[i];
        printf("# %-8s %-14s %+lld\n", name, counter_names[i], o->delta[i]);
    }
}

static void expect_cases(const char *name, const struct outcome *o)
{
    for (size_t i = 0; i < NPUTS; i++)
        if (o->put_status[i] != put_cases[i].want)
            fail_msg("%s: put %zu answered %d, want %d", name, i, o->put_status[i],
                     put_cases[i].want);
    for (size_t i = 0; i < NGETS; i++) {
        if (o->get_status[i] != get_cases[i].want)
            fail_msg("%s: get %zu answered %d, want %d", name, i, o->get_status[i],
                     get_cases[i].want);
        if (o->get_len[i] != get_cases[i].want_len)
            fail_msg("%s: get %zu length %u, want %u", name, i, o->get_len[i],
                     get_cases[i].want_len);
    }
}

static void expect_same_counters(const char *name, const struct outcome *o,
                                 const struct outcome *tcp)
{
    for (size_t i = 0; i < NCOUNTERS; i++)
        if (o->delta[i] != tcp->delta[i])
            fail_msg("%s moved %s by %lld, TCP by %lld", name, counter_names[i], o->delta[i],
                     tcp->delta[i]);
}

static void test_same_rules_over_tcp_and_rdma(void **state)
{
    (void)state;
    struct outcome tcp, slots, remote;
    run_path("tcp", run_tcp, &tcp);
    run_path("slots", run_slots, &slots);
    run_path("pullpush", run_remote, &remote);
    expect_cases("tcp", &tcp);
    expect_cases("reserve/lease", &slots);
    expect_cases("pull/push", &remote);
    /* What TCP's rules move, for these cases (server/ops.h). */
    static const long long want[NCOUNTERS] = {NPUTS, NGETS, 3, 1, 0, 2, 1, 1, 0, 1, 1, 0};
    for (size_t i = 0; i < NCOUNTERS; i++)
        if (tcp.delta[i] != want[i])
            fail_msg("tcp moved %s by %lld, want %lld", counter_names[i], tcp.delta[i], want[i]);
    expect_same_counters("reserve/lease", &slots, &tcp);
    expect_same_counters("pull/push", &remote, &tcp);
    /* Nothing was stored, nothing stays pinned (a cut peer is cleaned up asynchronously). */
    long long pinned = -1;
    for (int i = 0; i < 50 && pinned != 0; i++) {
        pinned = kvt_server_counter(stats_client, "pinned_items");
        if (pinned != 0) usleep(100 * 1000);
    }
    assert_int_equal(pinned, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_rules_over_tcp_and_rdma),
    };
    return cmocka_run_group_tests_name("rdma_ops", tests, setup, teardown);
}

/*
 * test_rdma_ops.c - one set of per-key rules over TCP and over RDMA
 * (server/ops.c). Runs only inside the soft-RoCE VM (make test-rdma):
 * KVS_RDMA_ADDR_A names the address kvstored's RDMA side binds.
 *
 * Every single-key case of tests/lib/key_rules.h (keys holding a NUL byte,
 * a value over --max-object, GET misses, -ERANGE, hits ...) goes to
 * kvstored as a raw TCP frame, as RESERVE/LEASE and as PULL/PUSH from a raw
 * RDMA peer (the client library would refuse the NUL keys before sending
 * them). On every path each case must get the table's status and length and
 * move exactly the table's STATS counters: a raw RDMA peer cannot store a
 * key TCP refuses, and RDMA traffic is counted as TCP's is.
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

#include "key_rules.h"
#include "kvstore.h"
#include "kvtest.h"
#include "rawrdma.h"
#include "rawwire.h"
#include "wire.h"

#define NRULES    (sizeof(kvt_key_rules) / sizeof(kvt_key_rules[0]))
#define NCOUNTERS (2 + sizeof(kvt_key_rule_counters) / sizeof(kvt_key_rule_counters[0]))

static struct kvt_server srv;
static const char *rdma_host;
static char rdma_port[8];
static kvs_client *stats_client; /* over TCP: STATS, and the value the GET cases find */

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
    snprintf(args, sizeof(args), "%s --rdma-listen %s:%s", KVT_KEY_RULES_ARGS, rdma_host,
             rdma_port);
    if (kvt_server_start(&srv, 0, args) < 0) return -1;
    stats_client = kvs_open(srv.url); /* tcp://, whatever KVSTORE_TRANSPORT says */
    if (!stats_client) return -1;
    static uint8_t v[KVT_KEY_RULES_PRESENT_LEN];
    kvval_fill(v, sizeof(v), KVT_KEY_RULES_PRESENT, 1);
    return kvs_put(stats_client, KVT_KEY_RULES_PRESENT, v, sizeof(v)) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kvs_close(stats_client);
    kvt_server_stop(&srv);
    return 0;
}

/* Counter i of the ones a rule may move: keys_put, keys_get, then kvt_key_rule_counters. */
static const char *counter_name(size_t i)
{
    return i == 0 ? "keys_put" : i == 1 ? "keys_get" : kvt_key_rule_counters[i - 2];
}

static void read_counters(long long *v)
{
    for (size_t i = 0; i < NCOUNTERS; i++) {
        v[i] = kvt_server_counter(stats_client, counter_name(i));
        assert_true(v[i] >= 0);
    }
}

/* One case's answer on one path. */
struct answer {
    int32_t status;
    uint32_t len;
};

/* ---- over TCP: one frame per case ---- */

static struct answer run_tcp(const struct kvt_key_rule *k)
{
    static uint8_t value[KVT_KEY_RULES_MAX_OBJECT + 1];
    assert_true(k->op != KVS_OP_PUT || k->len <= sizeof(value));
    int fd = kvt_raw_connect(srv.port, 10);
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, k->op, 1);
    kvt_req_entry_klen(&b, k->key, k->klen, k->len, k->op == KVS_OP_PUT ? value : NULL);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    free(b.p);
    uint8_t h[KVS_WIRE_HDR_LEN], e[KVS_WIRE_STATUS_LEN];
    struct kvs_wire_hdr hdr;
    struct kvs_wire_status st;
    assert_int_equal(kvt_raw_recv_all(fd, h, sizeof(h)), 0);
    assert_int_equal(kvs_wire_hdr_decode(h, &hdr, UINT32_MAX), 0);
    assert_int_equal(hdr.opcode, k->op | KVS_OP_REPLY);
    assert_int_equal(hdr.count, 1);
    assert_int_equal(kvt_raw_recv_all(fd, e, sizeof(e)), 0);
    assert_int_equal(kvs_wire_status_decode(e, k->op, &st), 0);
    close(fd); /* a hit's data, if any, is not read */
    return (struct answer){st.status, st.len};
}

/* ---- over RDMA ---- */

/*
 * RESERVE or LEASE of the case. A slot handed out is settled as the library
 * would: a reservation filled with WRITE and committed, a lease released.
 */
static struct answer run_slots(const struct kvt_key_rule *k)
{
    struct raw *r = raw_connect(rdma_host, rdma_port);
    uint8_t op = k->op == KVS_OP_PUT ? KVS_OP_RDMA_RESERVE : KVS_OP_RDMA_LEASE;
    struct kvs_wire_slot slot;
    assert_int_equal(raw_slots(r, op, 1, &k->key, &k->klen, &k->len, &slot), op | KVS_OP_REPLY);
    if (slot.status == 0 && op == KVS_OP_RDMA_RESERVE) {
        assert_true(slot.len <= RAW_DATA);
        if (slot.len)
            assert_int_equal(raw_rdma(r, IBV_WR_RDMA_WRITE, slot.addr, slot.rkey, slot.len),
                             IBV_WC_SUCCESS);
        assert_int_equal(raw_token(r, KVS_OP_RDMA_COMMIT, slot.token), 0);
    } else if (slot.status == 0) {
        assert_int_equal(raw_token(r, KVS_OP_RDMA_RELEASE, slot.token), 0);
    }
    raw_close(r);
    return (struct answer){slot.status, op == KVS_OP_RDMA_RESERVE ? 0 : slot.len};
}

/* PULL (the value read from the peer's memory) or PUSH (written into it) of the case. */
static struct answer run_remote(const struct kvt_key_rule *k)
{
    struct raw *r = raw_connect(rdma_host, rdma_port);
    uint8_t op = k->op == KVS_OP_PUT ? KVS_OP_RDMA_PULL : KVS_OP_RDMA_PUSH;
    assert_true(k->op != KVS_OP_PUT || k->len <= RAW_DATA || k->status < 0);
    struct kvs_wire_remote_entry e = {.key = (const uint8_t *)k->key,
                                      .klen = k->klen,
                                      .len = k->len,
                                      .addr = (uintptr_t)raw_data(r),
                                      .rkey = r->mr->rkey};
    uint8_t body[KVS_WIRE_ENTRY_LEN + KVS_WIRE_MAX_KEY + KVS_WIRE_PUSH_DST_LEN];
    uint32_t blen = (uint32_t)kvs_wire_remote_entry_encode(body, &e), rlen = 0;
    int rc = raw_call(r, op, 1, body, blen, &rlen);
    if (rc < 0) fail_msg("%s: the connection was cut (%d)", k->what, rc);
    assert_int_equal(rc, op | KVS_OP_REPLY);
    assert_int_equal(rlen, KVS_WIRE_STATUS_LEN);
    struct kvs_wire_status st;
    assert_int_equal(kvs_wire_status_decode(raw_recv_buf(r) + KVS_WIRE_HDR_LEN, op, &st), 0);
    raw_close(r);
    return (struct answer){st.status, st.len};
}

/* ---- the test ---- */

/* Runs every case on one path; each must get the table's answer and move exactly its counters. */
static void check_path(const char *path, struct answer (*run)(const struct kvt_key_rule *))
{
    for (size_t c = 0; c < NRULES; c++) {
        const struct kvt_key_rule *k = &kvt_key_rules[c];
        long long before[NCOUNTERS], after[NCOUNTERS];
        read_counters(before);
        struct answer a = run(k);
        read_counters(after);
        if (a.status != k->status || a.len != k->reply_len)
            fail_msg("%s, %s: status %d len %u, want %d len %u", path, k->what, a.status, a.len,
                     k->status, k->reply_len);
        for (size_t i = 0; i < NCOUNTERS; i++) {
            long long want = (i == 0 && k->op == KVS_OP_PUT) || (i == 1 && k->op == KVS_OP_GET);
            for (size_t j = 0; j < 2; j++)
                if (k->counters[j] && strcmp(k->counters[j], counter_name(i)) == 0) want = 1;
            if (after[i] - before[i] != want)
                fail_msg("%s, %s: %s moved by %lld, want %lld", path, k->what, counter_name(i),
                         after[i] - before[i], want);
        }
    }
    printf("# %s: %zu cases, statuses and counters as over TCP\n", path, NRULES);
}

static void assert_nothing_pinned(void)
{
    long long pinned = -1;
    for (int i = 0; i < 50 && pinned != 0; i++) { /* a closed peer is cleaned up asynchronously */
        pinned = kvt_server_counter(stats_client, "pinned_items");
        if (pinned != 0) usleep(100 * 1000);
    }
    assert_int_equal(pinned, 0);
}

static void test_rules_over_tcp(void **state)
{
    (void)state;
    check_path("tcp", run_tcp);
}

static void test_rules_over_reserve_and_lease(void **state)
{
    (void)state;
    check_path("reserve/lease", run_slots);
    assert_nothing_pinned();
}

static void test_rules_over_pull_and_push(void **state)
{
    (void)state;
    check_path("pull/push", run_remote);
    assert_nothing_pinned();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_over_tcp),
        cmocka_unit_test(test_rules_over_reserve_and_lease),
        cmocka_unit_test(test_rules_over_pull_and_push),
    };
    return cmocka_run_group_tests_name("rdma_ops", tests, setup, teardown);
}

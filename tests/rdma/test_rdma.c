/*
 * test_rdma.c - the rdma transport against a real kvstored over real verbs.
 * Runs only inside the soft-RoCE VM (scripts/rxe-vm.sh, make test-rdma):
 * KVS_RDMA_ADDR_A names the address kvstored's RDMA side binds.
 *
 * Through the public API (rdma://): round trips, mixed per-key statuses,
 * exists/remove/stats, the connection in kvstored's CLIENTS list, a server
 * killed mid-batch. Through the transport
 * directly (its counters): one doorbell per chain, chain splitting at the
 * send queue depth, bounce vs registered buffers, lease expiry, a client
 * that dies between RESERVE and COMMIT. PUSH (gets in one round trip):
 * mixed statuses, bounce vs registered destinations, gets racing puts of
 * the same key, the LEASE path when it is off or the server lacks it, a
 * PUSH naming memory the client did not register. Pipelining: 8 threads on
 * one connection overlap their requests (both paths), and a server killed
 * under them fails every request in flight.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "transport.h"

static struct kvt_server srv;
static char rdma_url[128]; /* rdma://A:PORT */
static char rdma_port[8];
static const char *rdma_host;

/*
 * kvstored with RDMA on $KVS_RDMA_ADDR_A, with leases of lease_ms, or
 * kvstored's default (10 s) for NULL. Only test_lease_expiry shortens them:
 * under TCG, soft-RoCE drops packets in bursts and each loss stalls its QP
 * for an ACK timeout (about 0.5 s), so a chunk's reservation held behind the
 * other lanes' traffic outlived 1.5 s leases and cut the connection.
 */
static int start_server(const char *lease_ms)
{
    rdma_host = getenv("KVS_RDMA_ADDR_A");
    if (!rdma_host) {
        fprintf(stderr, "test_rdma: KVS_RDMA_ADDR_A not set: run inside scripts/rxe-vm.sh\n");
        return -1;
    }
    snprintf(rdma_port, sizeof(rdma_port), "%d", 20000 + (int)(getpid() % 20000));
    char args[256];
    int n = snprintf(args, sizeof(args), "--memory 64M --rdma-listen %s:%s", rdma_host, rdma_port);
    if (lease_ms) snprintf(args + n, sizeof(args) - (size_t)n, " --rdma-lease-ms %s", lease_ms);
    if (kvt_server_start(&srv, 0, args) < 0) return -1;
    snprintf(rdma_url, sizeof(rdma_url), "rdma://%s:%s", rdma_host, rdma_port);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return start_server(NULL);
}

static int teardown(void **state)
{
    (void)state;
    kvt_server_stop(&srv);
    return 0;
}

/* ---- through the public API ---- */

static void test_round_trip_sizes(void **state)
{
    (void)state;
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    static const size_t sizes[] = {0, 1, 100, 4096, 16384, 65536, 1 << 20, 3 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "rt-%zu", sizes[i]);
        uint8_t *v = malloc(sizes[i] + 1), *back = malloc(sizes[i] + 1);
        assert_non_null(v);
        assert_non_null(back);
        kvval_fill(v, sizes[i], key, 1);
        assert_int_equal(kvs_put(c, key, v, sizes[i]), 0);
        assert_int_equal(kvs_get(c, key, back, sizes[i]), (ssize_t)sizes[i]);
        assert_memory_equal(v, back, sizes[i]);
        free(v);
        free(back);
    }
    char small[8];
    assert_int_equal(kvs_get(c, "rt-4096", small, sizeof(small)), -ERANGE);
    assert_int_equal(kvs_get(c, "rt-4096", NULL, 0), 4096); /* a length probe */
    assert_int_equal(kvs_get(c, "never-put", small, sizeof(small)), -ENOENT);
    assert_int_equal(kvs_exists(c, "rt-100"), 1);
    assert_int_equal(kvs_remove(c, "rt-100"), 0);
    assert_int_equal(kvs_exists(c, "rt-100"), 0);
    assert_int_equal(kvs_remove(c, "rt-100"), -ENOENT);
    char text[8192];
    ssize_t n = kvs_server_stats(c, text, sizeof(text));
    assert_true(n > 0);
    assert_non_null(strstr(text, "items "));
    assert_non_null(strstr(text, "\nrdma_commits "));
    kvs_close(c);
}

/*
 * kvs_server_clients over RDMA: CLIENTS goes as a plain control message and
 * the connection is listed as rdma with its peer address and its frames
 * through the common state machine (HELLO, CLIENTS).
 */
static void test_clients_lists_rdma_connection(void **state)
{
    (void)state;
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "cl-1", "v", 1), 0);
    static char text[64 * 1024];
    ssize_t n = kvs_server_clients(c, text, sizeof(text));
    kvs_close(c);
    assert_true(n > 0 && (size_t)n < sizeof(text));
    fprintf(stderr, "%s", text);
    const char *l = strstr(text, " transport=rdma ");
    assert_non_null(l);
    while (l > text && l[-1] != '\n')
        l--;
    /* the client's address and port as the connection manager gives it (not "unknown") */
    unsigned a, b, cc, d, port;
    assert_int_equal(sscanf(strstr(l, " addr=") + 6, "%u.%u.%u.%u:%u", &a, &b, &cc, &d, &port), 5);
    assert_true(port > 0);
    assert_true(strtoull(strstr(l, " requests=") + 10, NULL, 10) >= 2); /* HELLO, CLIENTS */
    assert_non_null(strstr(text, "\n# listed "));
}

/* One batch, every outcome at once; no key's failure leaks into another. */
static void test_mixed_batch(void **state)
{
    (void)state;
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    enum { N = 40 };
    const char *keys[N];
    const void *vals[N];
    size_t lens[N];
    int st[N];
    char names[N][32];
    static uint8_t data[N][5000];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "mixed-%d", i);
        keys[i] = names[i];
        lens[i] = (size_t)(i * 120);
        kvval_fill(data[i], lens[i], names[i], 7);
        vals[i] = data[i];
    }
    keys[5] = ""; /* invalid key */
    assert_int_equal(kvs_batch_put(c, N, keys, vals, lens, st), N - 1);
    assert_int_equal(st[5], -EINVAL);
    for (int i = 0; i < N; i++)
        if (i != 5) assert_int_equal(st[i], 0);

    void *bufs[N];
    size_t caps[N];
    ssize_t res[N];
    static uint8_t out[N][5000];
    for (int i = 0; i < N; i++) {
        bufs[i] = out[i];
        caps[i] = sizeof(out[i]);
    }
    keys[5] = "mixed-missing";
    caps[7] = 10; /* too small */
    assert_int_equal(kvs_batch_get(c, N, keys, bufs, caps, res), N - 2);
    assert_int_equal(res[5], -ENOENT);
    assert_int_equal(res[7], -ERANGE);
    for (int i = 0; i < N; i++) {
        if (i == 5 || i == 7) continue;
        assert_int_equal(res[i], (ssize_t)lens[i]);
        unsigned ver = 7; /* values under 4 bytes carry no version */
        assert_true(kvval_check(out[i], lens[i], names[i], &ver));
        assert_int_equal(ver, 7);
    }
    kvs_close(c);
}

/* SIGKILL the server between batches: per-key connection errors, then recovery. */
static void test_server_killed(void **state)
{
    (void)state;
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    uint8_t v[2048];
    kvval_fill(v, sizeof(v), "killed", 1);
    assert_int_equal(kvs_put(c, "killed", v, sizeof(v)), 0);
    kvt_server_kill(&srv);
    const char *keys[4] = {"k0", "k1", "k2", "k3"};
    const void *vals[4] = {v, v, v, v};
    size_t lens[4] = {sizeof(v), sizeof(v), sizeof(v), sizeof(v)};
    int st[4];
    assert_true(kvs_batch_put(c, 4, keys, vals, lens, st) <= 0);
    for (int i = 0; i < 4; i++)
        assert_true(st[i] < 0);
    assert_int_equal(kvt_server_restart(&srv), 0);
    int ok = -1;
    for (int tries = 0; tries < 50 && ok != 0; tries++) {
        ok = kvs_put(c, "after-restart", v, sizeof(v));
        if (ok != 0) usleep(100 * 1000);
    }
    assert_int_equal(ok, 0);
    uint8_t back[2048];
    assert_int_equal(kvs_get(c, "after-restart", back, sizeof(back)), (ssize_t)sizeof(back));
    assert_memory_equal(v, back, sizeof(v));
    kvs_close(c);
}

/* ---- through the transport, with its counters ---- */

struct counters {
    uint64_t doorbells, wrs, round_trips, bounce, zero_copy, split, completions, reconnects,
        inflight_max;
};

static void take_counter(void *arg, const char *name, uint64_t v)
{
    struct counters *k = arg;
    if (!strcmp(name, "doorbells")) k->doorbells = v;
    if (!strcmp(name, "work_requests")) k->wrs = v;
    if (!strcmp(name, "round_trips")) k->round_trips = v;
    if (!strcmp(name, "bounce_bytes")) k->bounce = v;
    if (!strcmp(name, "zero_copy_bytes")) k->zero_copy = v;
    if (!strcmp(name, "split_chains")) k->split = v;
    if (!strcmp(name, "completions")) k->completions = v;
    if (!strcmp(name, "reconnects")) k->reconnects = v;
    if (!strcmp(name, "inflight_max")) k->inflight_max = v;
}

static struct counters read_counters(struct kvs_conn *conn)
{
    struct counters k = {0};
    kvs_rdma_transport.counters(conn, take_counter, &k);
    return k;
}

static struct kvs_conn *open_conn(void)
{
    struct kvs_endpoint ep = {0};
    snprintf(ep.scheme, sizeof(ep.scheme), "rdma");
    snprintf(ep.host, sizeof(ep.host), "%s", rdma_host);
    snprintf(ep.port, sizeof(ep.port), "%s", rdma_port);
    snprintf(ep.name, sizeof(ep.name), "%s:%s", rdma_host, rdma_port);
    struct kvs_transport_config cfg = {.timeout_ms = 30000, .connect_timeout_ms = 10000};
    struct kvs_conn *conn = NULL;
    assert_int_equal(kvs_rdma_transport.create(&ep, &cfg, &conn), 0);
    struct kvs_limits lim;
    assert_int_equal(kvs_rdma_transport.connect(conn, &lim), 0);
    return conn;
}

static void req_done(struct kvs_req *req)
{
    *(int *)req->arg = 1;
}

/* A synchronous batch of n keys "prefix-i" through the transport. */
static void run_batch(struct kvs_conn *conn, uint8_t opcode, const char *prefix, uint32_t n,
                      uint8_t *const bufs[], size_t len, int32_t status[])
{
    struct kvs_key_io *k = calloc(n, sizeof(*k));
    char(*names)[40] = calloc(n, sizeof(*names));
    assert_non_null(k);
    assert_non_null(names);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s-%u", prefix, i);
        k[i] = (struct kvs_key_io){.key = names[i],
                                   .klen = (uint32_t)strlen(names[i]),
                                   .index = i,
                                   .val = opcode == KVS_OP_PUT ? bufs[i] : NULL,
                                   .buf = opcode == KVS_OP_GET ? bufs[i] : NULL,
                                   .len = len};
    }
    int done = 0;
    struct kvs_req req = {.opcode = opcode, .n = n, .keys = k, .done = req_done, .arg = &done};
    kvs_rdma_transport.submit(conn, &req);
    assert_int_equal(done, 1);
    for (uint32_t i = 0; i < n; i++)
        status[i] = k[i].status;
    free(k);
    free(names);
}

/* Fills n buffers of len bytes, carved stride bytes apart from one region. */
static uint8_t *carve(uint8_t *bufs[], uint32_t n, size_t len, size_t stride, const char *prefix,
                      unsigned ver)
{
    uint8_t *region = calloc(n, stride);
    assert_non_null(region);
    for (uint32_t i = 0; i < n; i++) {
        char key[40];
        snprintf(key, sizeof(key), "%s-%u", prefix, i);
        bufs[i] = region + (size_t)i * stride;
        kvval_fill(bufs[i], len, key, ver);
    }
    return region;
}

static void check_values(uint8_t *const bufs[], uint32_t n, size_t len, const char *prefix,
                         unsigned ver)
{
    for (uint32_t i = 0; i < n; i++) {
        char key[40];
        unsigned got = 0;
        snprintf(key, sizeof(key), "%s-%u", prefix, i);
        assert_true(kvval_check(bufs[i], len, key, &got));
        assert_int_equal(got, ver);
    }
}

/* A connection whose puts take the two-round-trip path (RESERVE, then WRITEs + COMMIT). */
static struct kvs_conn *open_conn_reserve(void)
{
    setenv("KVSTORE_RDMA_PULL_MAX", "0", 1);
    struct kvs_conn *conn = open_conn();
    unsetenv("KVSTORE_RDMA_PULL_MAX");
    return conn;
}

/* A connection whose gets take the two-round-trip path (LEASE, then READs + RELEASE). */
static struct kvs_conn *open_conn_lease(void)
{
    setenv("KVSTORE_RDMA_PUSH_MAX", "0", 1);
    struct kvs_conn *conn = open_conn();
    unsetenv("KVSTORE_RDMA_PUSH_MAX");
    return conn;
}

/* Both: every chunk is built by the client's own chain builder. */
static struct kvs_conn *open_conn_two_sided(void)
{
    setenv("KVSTORE_RDMA_PUSH_MAX", "0", 1);
    struct kvs_conn *conn = open_conn_reserve();
    unsetenv("KVSTORE_RDMA_PUSH_MAX");
    return conn;
}

/*
 * Batch 32: a put is one PULL (1 doorbell, 1 WR, 1 round trip), or with
 * KVSTORE_RDMA_PULL_MAX=0 RESERVE + one chain (WRITEs + COMMIT) = 2 doorbells;
 * a get is one PUSH (1 doorbell, 1 WR, 1 round trip), or with
 * KVSTORE_RDMA_PUSH_MAX=0 LEASE + one chain (READs + RELEASE) = 2 doorbells.
 */
static void test_doorbells_per_batch(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    struct kvs_conn *rconn = open_conn_two_sided();
    enum { N = 32 };
    const size_t len = 4096;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "bell", 3);
    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_PUT, "bell", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    struct counters b = read_counters(conn);
    memset(region, 0, (size_t)N * len);
    run_batch(conn, KVS_OP_GET, "bell", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "bell", 3);
    struct counters d = read_counters(conn);
    assert_int_equal(b.doorbells - a.doorbells, 1);
    assert_int_equal(b.wrs - a.wrs, 1);
    assert_int_equal(b.round_trips - a.round_trips, 1);
    assert_int_equal(d.doorbells - b.doorbells, 1);
    assert_int_equal(d.wrs - b.wrs, 1);
    assert_int_equal(d.round_trips - b.round_trips, 1);

    kvval_fill(bufs[0], len, "bell-0", 4); /* the reserve path writes what a get then sees */
    struct counters ra = read_counters(rconn);
    run_batch(rconn, KVS_OP_PUT, "bell", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    struct counters rb = read_counters(rconn);
    assert_int_equal(rb.doorbells - ra.doorbells, 2);
    assert_int_equal(rb.round_trips - ra.round_trips, 2);
    memset(region, 0, (size_t)N * len);
    run_batch(rconn, KVS_OP_GET, "bell", N, bufs, len, st);
    struct counters rd = read_counters(rconn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(rd.doorbells - rb.doorbells, 2);
    assert_int_equal(rd.round_trips - rb.round_trips, 2);
    check_values(bufs, 1, len, "bell", 4);
    printf("# batch %d x %zu B: put (pull) %llu doorbells %llu WRs, put (reserve) %llu doorbells "
           "%llu WRs, get (push) %llu doorbells %llu WRs, get (lease) %llu doorbells %llu WRs "
           "(post_send per op %.4f pull+push, %.4f reserve+lease)\n",
           N, len, (unsigned long long)(b.doorbells - a.doorbells),
           (unsigned long long)(b.wrs - a.wrs), (unsigned long long)(rb.doorbells - ra.doorbells),
           (unsigned long long)(rb.wrs - ra.wrs), (unsigned long long)(d.doorbells - b.doorbells),
           (unsigned long long)(d.wrs - b.wrs), (unsigned long long)(rd.doorbells - rb.doorbells),
           (unsigned long long)(rd.wrs - rb.wrs), (double)(d.doorbells - a.doorbells) / (2.0 * N),
           (double)(rd.doorbells - ra.doorbells) / (2.0 * N));
    free(region);
    kvs_rdma_transport.destroy(conn);
    kvs_rdma_transport.destroy(rconn);
}

/*
 * A send queue of 8 and one SGE per WR: 64 gets into scattered buffers need
 * 64 READs, so the chain is posted in pieces, and every value still arrives.
 */
static void test_chain_split(void **state)
{
    (void)state;
    setenv("KVS_RDMA_TEST_MAX_WR", "8", 1);
    setenv("KVS_RDMA_TEST_MAX_SGE", "1", 1);
    struct kvs_conn *conn = open_conn_lease(); /* a PUSH posts no chain of its own */
    unsetenv("KVS_RDMA_TEST_MAX_WR");
    unsetenv("KVS_RDMA_TEST_MAX_SGE");
    enum { N = 64 };
    const size_t len = 1000;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, 4096, "split", 5);
    run_batch(conn, KVS_OP_PUT, "split", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(kvs_rdma_transport.reg_mem(conn, region, (size_t)N * 4096), 0);
    memset(region, 0, (size_t)N * 4096);
    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_GET, "split", N, bufs, len, st);
    struct counters b = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "split", 5);
    assert_true(b.split > a.split);
    assert_true(b.doorbells - a.doorbells >= 1 + N / 7);
    assert_true(b.wrs - a.wrs >= N + 2);
    assert_int_equal(kvs_rdma_transport.unreg_mem(conn, region), 0);
    free(region);
    kvs_rdma_transport.destroy(conn);
}

/* Registered buffers move zero-copy; others go through the bounce buffer. */
static void test_bounce_vs_registered(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    enum { N = 16 };
    const size_t len = 16384;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "reg", 9);

    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_PUT, "reg", N, bufs, len, st);
    struct counters b = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(b.bounce - a.bounce, (uint64_t)N * len);
    assert_int_equal(b.zero_copy - a.zero_copy, 0);

    assert_int_equal(kvs_rdma_transport.reg_mem(conn, region, (size_t)N * len), 0);
    memset(region, 0, (size_t)N * len);
    run_batch(conn, KVS_OP_GET, "reg", N, bufs, len, st);
    struct counters d = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "reg", 9);
    assert_int_equal(d.zero_copy - b.zero_copy, (uint64_t)N * len);
    assert_int_equal(d.bounce - b.bounce, 0);
    assert_true(d.wrs - b.wrs <= N + 2);

    /* A put from registered memory: the server READs the values straight from it. */
    for (int i = 0; i < N; i++) {
        char key[40];
        snprintf(key, sizeof(key), "reg-%d", i);
        kvval_fill(bufs[i], len, key, 10);
    }
    run_batch(conn, KVS_OP_PUT, "reg", N, bufs, len, st);
    struct counters e = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(e.zero_copy - d.zero_copy, (uint64_t)N * len);
    assert_int_equal(e.bounce - d.bounce, 0);
    memset(region, 0, (size_t)N * len);
    run_batch(conn, KVS_OP_GET, "reg", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "reg", 10);

    assert_int_equal(kvs_rdma_transport.unreg_mem(conn, region), 0);
    assert_int_equal(kvs_rdma_transport.unreg_mem(conn, region), -ENOENT);
    free(region);
    kvs_rdma_transport.destroy(conn);
}

/*
 * 64-byte values fill 64-byte chunks: slots reserved together are adjacent,
 * and so are their bounce copies, so the WRITEs and READs merge (RESERVE
 * and LEASE: the client's own chains).
 */
static void test_adjacent_slices_merge(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn_two_sided();
    enum { N = 32 };
    const size_t len = 64;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "merge", 2);
    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_PUT, "merge", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    memset(region, 0, (size_t)N * len);
    run_batch(conn, KVS_OP_GET, "merge", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "merge", 2);
    struct counters b = read_counters(conn);
    /* 4 control messages; far fewer than N data WRs each way. */
    printf("# %d x %zu B put+get: %llu WRs\n", N, len, (unsigned long long)(b.wrs - a.wrs));
    assert_true(b.wrs - a.wrs < 4 + N / 2);
    free(region);
    kvs_rdma_transport.destroy(conn);
}

/* One scatter-gather key through the transport: its status (and a get's length in *vlen). */
static int32_t run_iov(struct kvs_conn *conn, uint8_t opcode, const char *key,
                       const struct iovec *iov, uint32_t cnt, uint64_t *vlen)
{
    uint64_t len = 0;
    for (uint32_t j = 0; j < cnt; j++)
        len += iov[j].iov_len;
    struct kvs_key_io k = {
        .key = key, .klen = (uint32_t)strlen(key), .iov = iov, .iovcnt = cnt, .len = len};
    int done = 0;
    struct kvs_req req = {.opcode = opcode, .n = 1, .keys = &k, .done = req_done, .arg = &done};
    kvs_rdma_transport.submit(conn, &req);
    assert_int_equal(done, 1);
    if (vlen) *vlen = k.vlen;
    return k.status;
}

/*
 * A value of 10 segments that are not adjacent, in registered memory: on
 * the two-sided paths each segment is one SGE of the key's WRITE / READ,
 * max_sge (4 here) to a WR, so 3 data WRs each way, all zero-copy; out of
 * registered memory, and on PULL / PUSH, the value is staged in the bounce
 * buffer. Every way, the bytes come back in segment order.
 */
static void test_segments_as_sge_lists(void **state)
{
    (void)state;
    setenv("KVS_RDMA_TEST_MAX_SGE", "4", 1);
    struct kvs_conn *conn = open_conn_two_sided();
    unsetenv("KVS_RDMA_TEST_MAX_SGE");
    enum { SEGS = 10, SEG = 1000, STRIDE = 4096 };
    uint8_t *region = calloc(SEGS, STRIDE), *want = malloc(SEGS * SEG);
    assert_non_null(region);
    assert_non_null(want);
    kvval_fill(want, SEGS * SEG, "sge", 1);
    struct iovec iov[SEGS];
    for (int j = 0; j < SEGS; j++) { /* reverse memory order: no two segments merge */
        iov[j] = (struct iovec){region + (size_t)(SEGS - 1 - j) * STRIDE, SEG};
        memcpy(iov[j].iov_base, want + (size_t)j * SEG, SEG);
    }
    assert_int_equal(kvs_rdma_transport.reg_mem(conn, region, (size_t)SEGS * STRIDE), 0);
    struct counters a = read_counters(conn);
    assert_int_equal(run_iov(conn, KVS_OP_PUT, "sge", iov, SEGS, NULL), 0);
    struct counters b = read_counters(conn);
    assert_int_equal(b.wrs - a.wrs, 1 + 3 + 1); /* RESERVE, 3 WRITEs, COMMIT */
    assert_int_equal(b.zero_copy - a.zero_copy, SEGS * SEG);
    assert_int_equal(b.bounce - a.bounce, 0);

    memset(region, 0, (size_t)SEGS * STRIDE);
    uint64_t vlen = 0;
    assert_int_equal(run_iov(conn, KVS_OP_GET, "sge", iov, SEGS, &vlen), 0);
    struct counters c = read_counters(conn);
    assert_int_equal(vlen, SEGS * SEG);
    assert_int_equal(c.wrs - b.wrs, 1 + 3 + 1); /* LEASE, 3 READs, RELEASE */
    assert_int_equal(c.zero_copy - b.zero_copy, SEGS * SEG);
    for (int j = 0; j < SEGS; j++)
        assert_memory_equal(iov[j].iov_base, want + (size_t)j * SEG, SEG);

    /* Not registered: bounced whole, the same bytes. */
    assert_int_equal(kvs_rdma_transport.unreg_mem(conn, region), 0);
    memset(region, 0, (size_t)SEGS * STRIDE);
    assert_int_equal(run_iov(conn, KVS_OP_GET, "sge", iov, SEGS, &vlen), 0);
    struct counters d = read_counters(conn);
    assert_int_equal(d.bounce - c.bounce, SEGS * SEG);
    for (int j = 0; j < SEGS; j++)
        assert_memory_equal(iov[j].iov_base, want + (size_t)j * SEG, SEG);
    kvs_rdma_transport.destroy(conn);

    /* PULL and PUSH (one address per key): staged, the same bytes. */
    conn = open_conn();
    kvval_fill(want, SEGS * SEG, "sge-pp", 2);
    for (int j = 0; j < SEGS; j++)
        memcpy(iov[j].iov_base, want + (size_t)j * SEG, SEG);
    assert_int_equal(run_iov(conn, KVS_OP_PUT, "sge-pp", iov, SEGS, NULL), 0);
    memset(region, 0, (size_t)SEGS * STRIDE);
    iov[SEGS - 1].iov_len = SEG + 7; /* 7 bytes of capacity to spare: left untouched */
    memset(region, 0x5A, SEG + 7);
    assert_int_equal(run_iov(conn, KVS_OP_GET, "sge-pp", iov, SEGS, &vlen), 0);
    assert_int_equal(vlen, SEGS * SEG);
    for (int j = 0; j < SEGS; j++)
        assert_memory_equal(iov[j].iov_base, want + (size_t)j * SEG, SEG);
    for (int i = 0; i < 7; i++)
        assert_int_equal(region[SEG + i], 0x5A);
    kvs_rdma_transport.destroy(conn);
    free(region);
    free(want);
}

/* The value of STATS line name, or -1. */
static long long server_stat(const char *name)
{
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    long long value = kvt_server_counter(c, name);
    kvs_close(c);
    return value;
}

/* Waits (bounded) until kvstored holds no pinned item; fails if it still does. */
static void assert_nothing_pinned(void)
{
    long long pinned = -1;
    for (int i = 0; i < 50 && pinned != 0; i++) {
        pinned = server_stat("pinned_items");
        if (pinned != 0) usleep(100 * 1000);
    }
    assert_int_equal(pinned, 0);
}

/*
 * A client that holds its reservations past --rdma-lease-ms (1500 here, on
 * a kvstored of its own) is cut off: its keys fail, each reservation is
 * counted in put_expired (the one per-key rule of server/ops.c, as TCP's
 * --put-timeout), nothing it reserved stays pinned, the key never appears,
 * and a well-behaved connection works at once.
 */
static void test_lease_expiry(void **state)
{
    (void)state;
    kvt_server_stop(&srv);
    assert_int_equal(start_server("1500"), 0);
    long long expired_before = server_stat("put_expired");
    setenv("KVS_RDMA_TEST_STALL_MS", "3000", 1);
    struct kvs_conn *slow = open_conn_reserve();
    unsetenv("KVS_RDMA_TEST_STALL_MS");
    uint8_t *bufs[4];
    int32_t st[4];
    uint8_t *region = carve(bufs, 4, 512, 512, "lease", 1);
    run_batch(slow, KVS_OP_PUT, "lease", 4, bufs, 512, st);
    for (int i = 0; i < 4; i++)
        assert_true(st[i] < 0);
    kvs_rdma_transport.destroy(slow);

    assert_int_equal(server_stat("pinned_items"), 0);
    assert_int_equal(server_stat("put_expired"), expired_before + 4);
    struct kvs_conn *conn = open_conn();
    uint8_t *out[4];
    uint8_t *oregion = carve(out, 4, 512, 512, "other", 1);
    run_batch(conn, KVS_OP_GET, "lease", 4, out, 512, st);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], -ENOENT);
    run_batch(conn, KVS_OP_PUT, "lease", 4, bufs, 512, st);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], 0);
    kvs_rdma_transport.destroy(conn);
    free(region);
    free(oregion);
    kvt_server_stop(&srv);
    assert_int_equal(start_server(NULL), 0);
}

/*
 * A client naming tokens it was not given (another index, another
 * generation, a read lease as a reservation): the server refuses each key
 * with -EINVAL and counts it; nothing is committed; the connection, once
 * its own leases have expired, is cut and nothing stays pinned.
 */
static void test_bad_tokens(void **state)
{
    (void)state;
    static const char *const xors[] = {"32768", "65536", "4294967295"};
    for (size_t x = 0; x < sizeof(xors) / sizeof(xors[0]); x++) {
        long long bad_before = server_stat("rdma_bad_tokens");
        setenv("KVS_RDMA_TEST_TOKEN_XOR", xors[x], 1);
        struct kvs_conn *conn = open_conn_reserve();
        unsetenv("KVS_RDMA_TEST_TOKEN_XOR");
        uint8_t *bufs[4];
        int32_t st[4];
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "badtok%zu", x);
        uint8_t *region = carve(bufs, 4, 256, 256, prefix, 1);
        run_batch(conn, KVS_OP_PUT, prefix, 4, bufs, 256, st);
        for (int i = 0; i < 4; i++)
            assert_int_equal(st[i], -EINVAL);
        assert_true(server_stat("rdma_bad_tokens") >= bad_before + 4);
        kvs_rdma_transport.destroy(conn); /* drops its real reservations */
        struct kvs_conn *good = open_conn();
        run_batch(good, KVS_OP_GET, prefix, 4, bufs, 256, st);
        for (int i = 0; i < 4; i++)
            assert_int_equal(st[i], -ENOENT);
        kvs_rdma_transport.destroy(good);
        free(region);
    }
    assert_nothing_pinned();
}

/*
 * A PULL naming memory the server cannot READ (a wrong rkey): its READ
 * fails, which cuts only that connection; the keys fail with a connection
 * error, nothing stays reserved, the keys never appear, and a
 * well-behaved connection works at once.
 */
static void test_pull_bad_source(void **state)
{
    (void)state;
    setenv("KVS_RDMA_TEST_TOKEN_XOR", "4660", 1); /* PULL: xors the rkeys it names */
    struct kvs_conn *conn = open_conn();
    unsetenv("KVS_RDMA_TEST_TOKEN_XOR");
    uint8_t *bufs[4];
    int32_t st[4];
    uint8_t *region = carve(bufs, 4, 2048, 2048, "badsrc", 1);
    run_batch(conn, KVS_OP_PUT, "badsrc", 4, bufs, 2048, st);
    for (int i = 0; i < 4; i++)
        if (st[i] != -ECONNRESET && st[i] != -EIO) fail_msg("key %d: %d", i, st[i]);
    kvs_rdma_transport.destroy(conn);
    assert_nothing_pinned();
    struct kvs_conn *good = open_conn();
    run_batch(good, KVS_OP_GET, "badsrc", 4, bufs, 2048, st);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], -ENOENT);
    run_batch(good, KVS_OP_PUT, "badsrc", 4, bufs, 2048, st);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], 0);
    kvs_rdma_transport.destroy(good);
    free(region);
}

/* ---- PUSH: gets in one round trip ---- */

/* A synchronous get of names[0..n) into bufs[i] (capacity caps[i]); statuses and lengths out. */
static void get_keys(struct kvs_conn *conn, uint32_t n, const char *const names[],
                     uint8_t *const bufs[], const size_t caps[], int32_t status[], size_t vlen[])
{
    struct kvs_key_io *k = calloc(n, sizeof(*k));
    assert_non_null(k);
    for (uint32_t i = 0; i < n; i++)
        k[i] = (struct kvs_key_io){.key = names[i],
                                   .klen = (uint32_t)strlen(names[i]),
                                   .index = i,
                                   .buf = bufs[i],
                                   .len = caps[i],
                                   .vlen = SIZE_MAX};
    int done = 0;
    struct kvs_req req = {.opcode = KVS_OP_GET, .n = n, .keys = k, .done = req_done, .arg = &done};
    kvs_rdma_transport.submit(conn, &req);
    assert_int_equal(done, 1);
    for (uint32_t i = 0; i < n; i++) {
        status[i] = k[i].status;
        vlen[i] = k[i].vlen;
    }
    free(k);
}

/*
 * One PUSH, every outcome: found, missing, a capacity too small (-ERANGE
 * with the length, the buffer untouched), a zero-length value, a length
 * probe (capacity 0). One doorbell, one WR, one round trip; no pin left.
 */
static void test_push_mixed_statuses(void **state)
{
    (void)state;
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    static uint8_t v4k[4096], v5k[5000];
    kvval_fill(v4k, sizeof(v4k), "pm-found", 6);
    kvval_fill(v5k, sizeof(v5k), "pm-big", 6);
    assert_int_equal(kvs_put(c, "pm-found", v4k, sizeof(v4k)), 0);
    assert_int_equal(kvs_put(c, "pm-big", v5k, sizeof(v5k)), 0);
    assert_int_equal(kvs_put(c, "pm-empty", "", 0), 0);
    kvs_close(c);

    struct kvs_conn *conn = open_conn();
    enum { N = 6 };
    const char *names[N] = {"pm-found", "pm-missing", "pm-big", "pm-empty", "pm-big", "pm-found"};
    static uint8_t out[N][8192];
    uint8_t *bufs[N];
    size_t caps[N] = {8192, 8192, 100, 8192, 0, 4096}, vlen[N];
    int32_t st[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = out[i];
        memset(out[i], 0xab, sizeof(out[i]));
    }
    long long pushes = server_stat("rdma_pushes");
    struct counters a = read_counters(conn);
    get_keys(conn, N, names, bufs, caps, st, vlen);
    struct counters b = read_counters(conn);
    assert_int_equal(st[0], 0);
    assert_int_equal(vlen[0], sizeof(v4k));
    assert_memory_equal(out[0], v4k, sizeof(v4k));
    assert_int_equal(out[0][sizeof(v4k)], 0xab); /* nothing past the value */
    assert_int_equal(st[1], -ENOENT);
    assert_int_equal(st[2], -ERANGE);
    assert_int_equal(vlen[2], sizeof(v5k));
    for (size_t j = 0; j < sizeof(out[2]); j++)
        assert_int_equal(out[2][j], 0xab); /* too small: not written at all */
    assert_int_equal(st[3], 0);
    assert_int_equal(vlen[3], 0);
    assert_int_equal(out[3][0], 0xab);
    assert_int_equal(st[4], -ERANGE); /* a length probe */
    assert_int_equal(vlen[4], sizeof(v5k));
    assert_int_equal(st[5], 0); /* capacity exactly the length */
    assert_memory_equal(out[5], v4k, sizeof(v4k));
    assert_int_equal(b.doorbells - a.doorbells, 1);
    assert_int_equal(b.wrs - a.wrs, 1);
    assert_int_equal(b.round_trips - a.round_trips, 1);
    assert_int_equal(server_stat("rdma_pushes"), pushes + 1);
    kvs_rdma_transport.destroy(conn);
    assert_nothing_pinned();
}

/*
 * Destinations: values land in the bounce buffer and are copied out when the
 * caller's buffers are not registered, straight in them when they are; a
 * chunk mixing both does each key its own way.
 */
static void test_push_bounce_vs_registered(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    enum { N = 16 };
    const size_t len = 4096;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "pbr", 2);
    run_batch(conn, KVS_OP_PUT, "pbr", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);

    memset(region, 0, (size_t)N * len);
    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_GET, "pbr", N, bufs, len, st);
    struct counters b = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "pbr", 2);
    assert_int_equal(b.bounce - a.bounce, (uint64_t)N * len);
    assert_int_equal(b.zero_copy - a.zero_copy, 0);
    assert_int_equal(b.round_trips - a.round_trips, 1);

    /* The first half registered, the second not. */
    assert_int_equal(kvs_rdma_transport.reg_mem(conn, region, (size_t)N / 2 * len), 0);
    memset(region, 0, (size_t)N * len);
    run_batch(conn, KVS_OP_GET, "pbr", N, bufs, len, st);
    struct counters d = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "pbr", 2);
    assert_int_equal(d.zero_copy - b.zero_copy, (uint64_t)N / 2 * len);
    assert_int_equal(d.bounce - b.bounce, (uint64_t)N / 2 * len);
    assert_int_equal(d.round_trips - b.round_trips, 1);
    assert_int_equal(kvs_rdma_transport.unreg_mem(conn, region), 0);
    free(region);
    kvs_rdma_transport.destroy(conn);
}

/*
 * PUSH off (KVSTORE_RDMA_PUSH_MAX=0), or a chunk over the limit: the get
 * takes LEASE + READs, 2 round trips, and kvstored serves no PUSH.
 */
static void test_push_off_uses_lease(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    struct kvs_conn *off = open_conn_lease();
    enum { N = 32 };
    const size_t len = 32768; /* 1 MiB a batch: over the default limit */
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "poff", 3);
    run_batch(conn, KVS_OP_PUT, "poff", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    long long pushes = server_stat("rdma_pushes"), leases = server_stat("rdma_leases");

    memset(region, 0, (size_t)N * len);
    struct counters a = read_counters(off);
    run_batch(off, KVS_OP_GET, "poff", 8, bufs, len, st); /* 256 KiB: PUSH size, but off */
    struct counters b = read_counters(off);
    for (int i = 0; i < 8; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, 8, len, "poff", 3);
    assert_int_equal(b.round_trips - a.round_trips, 2);

    memset(region, 0, (size_t)N * len);
    a = read_counters(conn);
    run_batch(conn, KVS_OP_GET, "poff", N, bufs, len, st); /* on, but 1 MiB */
    b = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "poff", 3);
    assert_int_equal(b.round_trips - a.round_trips, 2);
    assert_int_equal(server_stat("rdma_pushes"), pushes);
    assert_int_equal(server_stat("rdma_leases"), leases + 8 + N);
    free(region);
    kvs_rdma_transport.destroy(conn);
    kvs_rdma_transport.destroy(off);
    assert_nothing_pinned();
}

/*
 * A kvstored whose HELLO lacks KVS_FEAT_PUSH (the test hook
 * KVS_RDMA_TEST_NO_PUSH makes it answer opcode 13 as unknown, like a
 * kvstored from before PUSH): the client never sends it one, its gets take
 * LEASE and succeed.
 */
static void test_push_server_without_the_bit(void **state)
{
    (void)state;
    struct kvt_server old;
    char port[8], args[256], url[128];
    snprintf(port, sizeof(port), "%d", 20000 + (int)((getpid() + 11) % 20000));
    snprintf(args, sizeof(args), "--memory 16M --rdma-listen %s:%s", rdma_host, port);
    setenv("KVS_RDMA_TEST_NO_PUSH", "1", 1);
    int rc = kvt_server_start(&old, 0, args);
    unsetenv("KVS_RDMA_TEST_NO_PUSH");
    assert_int_equal(rc, 0);
    snprintf(url, sizeof(url), "rdma://%s:%s", rdma_host, port);

    struct kvs_endpoint ep = {0};
    snprintf(ep.scheme, sizeof(ep.scheme), "rdma");
    snprintf(ep.host, sizeof(ep.host), "%s", rdma_host);
    snprintf(ep.port, sizeof(ep.port), "%s", port);
    snprintf(ep.name, sizeof(ep.name), "%s:%s", rdma_host, port);
    struct kvs_transport_config cfg = {.timeout_ms = 30000, .connect_timeout_ms = 10000};
    struct kvs_conn *conn = NULL;
    struct kvs_limits lim;
    assert_int_equal(kvs_rdma_transport.create(&ep, &cfg, &conn), 0);
    assert_int_equal(kvs_rdma_transport.connect(conn, &lim), 0);
    assert_true(lim.features & KVS_FEAT_PULL);
    assert_false(lim.features & KVS_FEAT_PUSH);
    enum { N = 8 };
    const size_t len = 2048;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "nopush", 4);
    run_batch(conn, KVS_OP_PUT, "nopush", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    memset(region, 0, (size_t)N * len);
    struct counters a = read_counters(conn);
    run_batch(conn, KVS_OP_GET, "nopush", N, bufs, len, st);
    struct counters b = read_counters(conn);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "nopush", 4);
    assert_int_equal(b.round_trips - a.round_trips, 2);
    assert_int_equal(b.reconnects, 0);
    kvs_rdma_transport.destroy(conn);

    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    char text[8192];
    ssize_t n = kvs_server_stats(c, text, sizeof(text) - 1);
    kvs_close(c);
    assert_true(n > 0);
    text[n] = 0;
    assert_non_null(strstr(text, "\nrdma_pushes 0\n"));
    assert_non_null(strstr(text, "\nrdma_leases 8\n"));
    assert_non_null(strstr(text, "\nerrors_protocol 0\n"));
    free(region);
    kvt_server_stop(&old);
}

/*
 * A PUSH naming memory the client did not register (a wrong rkey): the
 * server's WRITE fails, which cuts only that connection; its keys fail with
 * a connection error, nothing stays pinned, and another connection opened
 * before keeps working.
 */
static void test_push_bad_destination(void **state)
{
    (void)state;
    struct kvs_conn *good = open_conn();
    enum { N = 4 };
    const size_t len = 2048;
    uint8_t *bufs[N];
    int32_t st[N];
    uint8_t *region = carve(bufs, N, len, len, "baddst", 1);
    run_batch(good, KVS_OP_PUT, "baddst", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);

    setenv("KVS_RDMA_TEST_TOKEN_XOR", "4660", 1); /* PUSH: xors the rkeys it names */
    struct kvs_conn *bad = open_conn();
    unsetenv("KVS_RDMA_TEST_TOKEN_XOR");
    memset(region, 0, (size_t)N * len);
    run_batch(bad, KVS_OP_GET, "baddst", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        if (st[i] != -ECONNRESET && st[i] != -EIO) fail_msg("key %d: %d", i, st[i]);
    kvs_rdma_transport.destroy(bad);
    assert_nothing_pinned();

    memset(region, 0, (size_t)N * len);
    run_batch(good, KVS_OP_GET, "baddst", N, bufs, len, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], 0);
    check_values(bufs, N, len, "baddst", 1);
    struct counters k = read_counters(good);
    assert_int_equal(k.reconnects, 0);
    free(region);
    kvs_rdma_transport.destroy(good);
}

/*
 * Gets (PUSH) racing puts of the same key from another process: every value
 * a get returns is whole, one version throughout (the WRITEs come from the
 * pinned item; a put makes a new one).
 */
static void test_push_never_torn(void **state)
{
    (void)state;
    enum { LEN = 65536, ROUNDS = 150 };
    kvs_client *c = kvs_open(rdma_url);
    assert_non_null(c);
    static uint8_t v[LEN], back[LEN];
    kvval_fill(v, LEN, "torn", 1);
    assert_int_equal(kvs_put(c, "torn", v, LEN), 0);
    const char *const argv[] = {"test_rdma", "--writer", rdma_host, rdma_port, NULL};
    pid_t pid = kvt_spawn_self(argv, NULL);
    assert_true(pid > 0);
    unsigned seen_min = UINT32_MAX, seen_max = 0;
    for (int i = 0; i < ROUNDS; i++) {
        ssize_t n = kvs_get(c, "torn", back, LEN);
        assert_int_equal(n, LEN);
        unsigned ver = 0;
        if (!kvval_check(back, LEN, "torn", &ver)) fail_msg("round %d: a torn value", i);
        if (ver < seen_min) seen_min = ver;
        if (ver > seen_max) seen_max = ver;
    }
    int status = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    printf("# %d gets racing puts: versions %u..%u\n", ROUNDS, seen_min, seen_max);
    assert_true(seen_max > seen_min); /* the puts really raced the gets */
    kvs_close(c);
    assert_nothing_pinned();
}

/* test_rdma --writer HOST PORT: puts new versions of "torn" until killed (at most 100000). */
static int writer(const char *host, const char *port)
{
    char url[128];
    snprintf(url, sizeof(url), "rdma://%s:%s", host, port);
    kvs_client *c = kvs_open(url);
    if (!c) return 1;
    static uint8_t v[65536];
    for (unsigned ver = 2; ver < 100000; ver++) {
        kvval_fill(v, sizeof(v), "torn", ver);
        if (kvs_put(c, "torn", v, sizeof(v)) != 0) break;
    }
    kvs_close(c);
    return 0;
}

/* A client killed between RESERVE and COMMIT: the server drops what it held. */
static void test_client_dies_mid_transfer(void **state)
{
    (void)state;
    long long pinned_before = server_stat("pinned_items");
    const char *const argv[] = {"test_rdma", "--dying-client", rdma_host, rdma_port, NULL};
    const char *const env[] = {"KVS_RDMA_TEST_STALL_MS=20000", "KVSTORE_RDMA_PULL_MAX=0", NULL};
    pid_t pid = kvt_spawn_self(argv, env);
    assert_true(pid > 0);
    /* Wait (bounded) until the child's 8 reservations are pinned on the server. */
    long long pinned = 0;
    for (int i = 0; i < 100 && pinned < pinned_before + 8; i++) {
        usleep(100 * 1000);
        pinned = server_stat("pinned_items");
    }
    if (pinned < pinned_before + 8)
        fprintf(stderr, "pinned before %lld, now %lld\n", pinned_before, pinned);
    assert_true(pinned >= pinned_before + 8);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < 100 && pinned > pinned_before; i++) {
        usleep(100 * 1000);
        pinned = server_stat("pinned_items");
    }
    assert_int_equal(pinned, pinned_before);
    kvs_client *c = kvs_open(rdma_url);
    char tmp[16];
    assert_int_equal(kvs_get(c, "dying-0", tmp, sizeof(tmp)), -ENOENT);
    kvs_close(c);
}

/* ---- pipelining: many threads, one connection ---- */

enum { PIPE_THREADS = 8, PIPE_KEYS = 32, PIPE_ROUNDS = 6 };

struct pipe_arg {
    struct kvs_conn *conn;
    const char *path; /* key prefix: which connection */
    int thread;
    size_t len;
    int failures; /* keys with a wrong status or value */
};

/* PIPE_ROUNDS rounds of a put batch and a get batch of PIPE_KEYS keys, values checked. */
static void *pipe_worker(void *p)
{
    struct pipe_arg *a = p;
    uint8_t *bufs[PIPE_KEYS];
    int32_t st[PIPE_KEYS];
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "pipe-%s-%d", a->path, a->thread);
    uint8_t *region = calloc(PIPE_KEYS, a->len);
    if (!region) {
        a->failures++;
        return NULL;
    }
    for (int r = 0; r < PIPE_ROUNDS; r++) {
        for (uint32_t i = 0; i < PIPE_KEYS; i++) {
            char key[64];
            snprintf(key, sizeof(key), "%s-%u", prefix, i);
            bufs[i] = region + (size_t)i * a->len;
            kvval_fill(bufs[i], a->len, key, (unsigned)r + 1);
        }
        run_batch(a->conn, KVS_OP_PUT, prefix, PIPE_KEYS, bufs, a->len, st);
        for (int i = 0; i < PIPE_KEYS; i++)
            a->failures += st[i] != 0;
        memset(region, 0, (size_t)PIPE_KEYS * a->len);
        run_batch(a->conn, KVS_OP_GET, prefix, PIPE_KEYS, bufs, a->len, st);
        for (uint32_t i = 0; i < PIPE_KEYS; i++) {
            char key[64];
            unsigned got = 0;
            snprintf(key, sizeof(key), "%s-%u", prefix, i);
            a->failures +=
                st[i] != 0 || !kvval_check(bufs[i], a->len, key, &got) || got != (unsigned)r + 1;
        }
    }
    free(region);
    return NULL;
}

/* PIPE_THREADS threads of pipe_worker on conn; returns the keys that went wrong. */
static int run_pipe_threads(struct kvs_conn *conn, const char *path, size_t len)
{
    pthread_t t[PIPE_THREADS];
    struct pipe_arg a[PIPE_THREADS];
    for (int i = 0; i < PIPE_THREADS; i++) {
        a[i] = (struct pipe_arg){.conn = conn, .path = path, .thread = i, .len = len};
        assert_int_equal(pthread_create(&t[i], NULL, pipe_worker, &a[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < PIPE_THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += a[i].failures;
    }
    return failures;
}

/*
 * 8 threads on ONE connection, batches of 32 x 4 KiB put and got back, on
 * the one-round-trip paths (PULL/PUSH) and the two-round-trip ones
 * (RESERVE/LEASE; 7 chunks in flight share the link while each holds its
 * slots): every value comes back, and the
 * requests overlapped: the client had more than one control message
 * unanswered at once (inflight_max) and kvstored received a message of the
 * connection before it had answered the last (rdma_inflight_max). A
 * transport that runs one request at a time per connection has 1 for both.
 */
static void test_threads_overlap_on_one_connection(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    struct kvs_conn *rconn = open_conn_two_sided();
    long long expiries = server_stat("rdma_lease_expiries");
    int pp_bad = run_pipe_threads(conn, "pp", 4096);
    long long server_after_pp = server_stat("rdma_inflight_max");
    int rl_bad = run_pipe_threads(rconn, "rl", 4096);
    struct counters k = read_counters(conn), rk = read_counters(rconn);
    long long server_max = server_stat("rdma_inflight_max");
    printf("# %d threads x %d rounds of batch %d on one connection: client inflight_max %llu "
           "(pull/push) %llu (reserve/lease), kvstored rdma_inflight_max %lld after pull/push, "
           "%lld in all; keys wrong %d, %d; lease expiries %lld\n",
           PIPE_THREADS, PIPE_ROUNDS, PIPE_KEYS, (unsigned long long)k.inflight_max,
           (unsigned long long)rk.inflight_max, server_after_pp, server_max, pp_bad, rl_bad,
           server_stat("rdma_lease_expiries") - expiries);
    assert_int_equal(pp_bad, 0);
    assert_int_equal(rl_bad, 0);
    assert_true(k.inflight_max > 1);
    assert_true(rk.inflight_max > 1);
    assert_true(k.inflight_max <= 7 && rk.inflight_max <= 7); /* kvstored's receives minus one */
    assert_true(server_after_pp > 1);
    assert_int_equal(k.reconnects, 0);
    assert_int_equal(rk.reconnects, 0);
    kvs_rdma_transport.destroy(conn);
    kvs_rdma_transport.destroy(rconn);
}

struct cut_state {
    struct kvs_conn *conn;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int requests_done; /* requests answered before the cut */
    int finished;      /* threads that saw their failure */
};

struct cut_arg {
    struct cut_state *s;
    int thread;
    int bad;         /* a request that failed in part, or a key not -ECONNRESET */
    int first_error; /* the status of the first request that failed */
    uint64_t took_ms;
};

/* Put batches until one fails; notes its status and how long that request took. */
static void *cut_worker(void *p)
{
    struct cut_arg *a = p;
    enum { N = 16 };
    static uint8_t value[4096];
    uint8_t *bufs[N];
    int32_t st[N];
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "cut-%d", a->thread);
    for (int i = 0; i < N; i++)
        bufs[i] = value;
    for (int r = 0; r < 100000; r++) {
        struct timespec ts0, ts1;
        clock_gettime(CLOCK_MONOTONIC, &ts0);
        run_batch(a->s->conn, KVS_OP_PUT, prefix, N, bufs, sizeof(value), st);
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        int failed = 0;
        for (int i = 0; i < N; i++)
            failed += st[i] < 0;
        if (failed == 0) {
            pthread_mutex_lock(&a->s->mu);
            a->s->requests_done++;
            pthread_cond_broadcast(&a->s->cv);
            pthread_mutex_unlock(&a->s->mu);
            continue;
        }
        a->first_error = st[0];
        a->bad = failed != N;
        int64_t ns = (int64_t)(ts1.tv_sec - ts0.tv_sec) * 1000000000 + (ts1.tv_nsec - ts0.tv_nsec);
        a->took_ms = (uint64_t)ns / 1000000u; /* tv_nsec alone goes back at each second */
        break;
    }
    pthread_mutex_lock(&a->s->mu);
    a->s->finished++;
    pthread_cond_broadcast(&a->s->cv);
    pthread_mutex_unlock(&a->s->mu);
    return NULL;
}

/*
 * 8 threads putting batches on ONE connection when kvstored is killed:
 * every thread's request in flight fails whole, with -ECONNRESET (a request
 * begun after the cut cannot reconnect: -ECONNREFUSED), each within a few
 * seconds, and every thread ends (bounded wait, no hang). More than one
 * request was in flight, so more than one sees -ECONNRESET.
 */
static void test_cut_fails_every_request_in_flight(void **state)
{
    (void)state;
    struct cut_state s = {.conn = open_conn()};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_t t[PIPE_THREADS];
    struct cut_arg a[PIPE_THREADS];
    for (int i = 0; i < PIPE_THREADS; i++) {
        a[i] = (struct cut_arg){.s = &s, .thread = i};
        assert_int_equal(pthread_create(&t[i], NULL, cut_worker, &a[i]), 0);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&s.mu);
    while (s.requests_done < 4 * PIPE_THREADS && s.finished == 0 &&
           pthread_cond_timedwait(&s.cv, &s.mu, &until) == 0)
        ;
    int before = s.requests_done;
    pthread_mutex_unlock(&s.mu);
    assert_true(before >= 4 * PIPE_THREADS);
    kvt_server_kill(&srv);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 40;
    pthread_mutex_lock(&s.mu);
    while (s.finished < PIPE_THREADS && pthread_cond_timedwait(&s.cv, &s.mu, &until) == 0)
        ;
    int finished = s.finished;
    pthread_mutex_unlock(&s.mu);
    if (finished < PIPE_THREADS)
        fail_msg("%d of %d threads hang after the cut", PIPE_THREADS - finished, PIPE_THREADS);
    int resets = 0;
    for (int i = 0; i < PIPE_THREADS; i++) {
        pthread_join(t[i], NULL);
        printf("# cut: thread %d: %s after %llu ms\n", i, kvs_strerror(a[i].first_error),
               (unsigned long long)a[i].took_ms);
        assert_false(a[i].bad);
        assert_true(a[i].first_error == -ECONNRESET || a[i].first_error == -ECONNREFUSED);
        assert_true(a[i].took_ms < 15000);
        resets += a[i].first_error == -ECONNRESET;
    }
    /* Several were in flight at once (one at a time: only one sees the reset). */
    assert_true(resets >= 2);
    kvs_rdma_transport.destroy(s.conn);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    assert_int_equal(kvt_server_restart(&srv), 0);
}

/* test_rdma --dying-client HOST PORT: reserves 8 slots, then stalls until killed. */
static int dying_client(const char *host, const char *port)
{
    rdma_host = host;
    snprintf(rdma_port, sizeof(rdma_port), "%s", port);
    struct kvs_endpoint ep = {0};
    snprintf(ep.scheme, sizeof(ep.scheme), "rdma");
    snprintf(ep.host, sizeof(ep.host), "%s", host);
    snprintf(ep.port, sizeof(ep.port), "%s", port);
    snprintf(ep.name, sizeof(ep.name), "%s:%s", host, port);
    struct kvs_transport_config cfg = {.timeout_ms = 30000, .connect_timeout_ms = 10000};
    struct kvs_conn *conn = NULL;
    struct kvs_limits lim;
    if (kvs_rdma_transport.create(&ep, &cfg, &conn) < 0 ||
        kvs_rdma_transport.connect(conn, &lim) < 0)
        return 1;
    static uint8_t region[8][4096];
    struct kvs_key_io k[8];
    char names[8][16];
    for (int i = 0; i < 8; i++) {
        snprintf(names[i], sizeof(names[i]), "dying-%d", i);
        k[i] = (struct kvs_key_io){.key = names[i],
                                   .klen = (uint32_t)strlen(names[i]),
                                   .val = region[i],
                                   .len = sizeof(region[i])};
    }
    int done = 0;
    struct kvs_req req = {.opcode = KVS_OP_PUT, .n = 8, .keys = k, .done = req_done, .arg = &done};
    kvs_rdma_transport.submit(conn, &req); /* stalls between RESERVE and COMMIT */
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--dying-client") == 0) return dying_client(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "--writer") == 0) return writer(argv[2], argv[3]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_sizes),
        cmocka_unit_test(test_clients_lists_rdma_connection),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_doorbells_per_batch),
        cmocka_unit_test(test_chain_split),
        cmocka_unit_test(test_bounce_vs_registered),
        cmocka_unit_test(test_adjacent_slices_merge),
        cmocka_unit_test(test_segments_as_sge_lists),
        cmocka_unit_test(test_lease_expiry),
        cmocka_unit_test(test_bad_tokens),
        cmocka_unit_test(test_pull_bad_source),
        cmocka_unit_test(test_client_dies_mid_transfer),
        cmocka_unit_test(test_push_mixed_statuses),
        cmocka_unit_test(test_push_bounce_vs_registered),
        cmocka_unit_test(test_push_off_uses_lease),
        cmocka_unit_test(test_push_server_without_the_bit),
        cmocka_unit_test(test_push_bad_destination),
        cmocka_unit_test(test_push_never_torn),
        cmocka_unit_test(test_threads_overlap_on_one_connection),
        cmocka_unit_test(test_cut_fails_every_request_in_flight),
        cmocka_unit_test(test_server_killed),
    };
    return cmocka_run_group_tests_name("rdma", tests, setup, teardown);
}

/*
 * rdma.c - the RDMA transport (librdmacm + libibverbs): one RC queue pair
 * per (client, server); values move one-sided (docs/rdma.md). This file is
 * its ops table; rdma_int.h says which file does which job.
 *
 *   put batch: a chunk of at most KVSTORE_RDMA_PULL_MAX value bytes (default
 *              256 KiB, e.g. 32 x 4 KiB) as PULL: ONE SEND naming, per key,
 *              where its value lies in the client's registered memory
 *              (bounce buffer or a kvs_register_buffer region); the server
 *              reserves the slots, RDMA READs the values into them, commits
 *              and answers a status per key. 1 round trip per batch.
 *              Larger chunks (where the round trip matters less than
 *              the data, and soft-RoCE moves READs slower than WRITEs under
 *              load and lost a 3 MiB READ's connection), or all with
 *              KVSTORE_RDMA_PULL_MAX=0: RESERVE (control round trip: the
 *              server reserves a slot per key and answers addr/rkey/token),
 *              then ONE ibv_post_send of the chain  WRITE ... WRITE,
 *              SEND(COMMIT). RC delivers the SEND after the WRITEs before
 *              it, so when the server sees COMMIT every value has landed; it
 *              links the items and answers a status per key. 2 round trips.
 *   get batch: a chunk of at most KVSTORE_RDMA_PUSH_MAX bytes of capacity
 *              (default 512 KiB, e.g. 32 x 16 KiB) as PUSH: ONE SEND naming, per key, where its
 *              value must land (the caller's buffer when it lies in a
 *              kvs_register_buffer region, else the bounce buffer); the
 *              server pins the items, RDMA WRITEs the values there and then
 *              sends the reply (RC: after every WRITE has landed): a status
 *              and length per key, as GET. 1 round trip. Larger chunks, or
 *              all with KVSTORE_RDMA_PUSH_MAX=0: LEASE (the server pins each
 *              key's item, answers addr/rkey/len/token), then ONE
 *              ibv_post_send of  READ ... READ, SEND(RELEASE) with
 *              IBV_SEND_FENCE on the SEND so that the server unpins only
 *              after every READ has executed. 2 round trips.
 *
 * Explicit COMMIT, not WRITE_WITH_IMM: one message commits the whole
 * batch (an immediate carries 32 bits, one per key would cost one receive
 * and one completion per key on the server), and it carries the tokens the
 * server checks.
 *
 * Values in memory registered with kvs_register_buffer (cached per
 * connection, registered again after a reconnect) move zero-copy; others go
 * through one registered bounce buffer per connection (grown, and
 * registered again, only when a larger batch needs it).
 *
 * Threads: several requests at once per connection, one per lane (at most
 * KVS_RDMA_LANES, when the server announces KVS_FEAT_PIPELINE; else one):
 * a submitter holds conn->mu to claim a lane and to post, and lets go of it
 * while it waits for its reply; the waiters take turns polling for all
 * (rdma_chain.c). req->done runs on the submitting thread before submit
 * returns. No transport thread. A failed completion, a DISCONNECTED event
 * or a timeout cuts the connection: every request in flight fails
 * (-ECONNRESET; the one that timed out -ETIMEDOUT), and the last lane out
 * tears it down; the next request reconnects.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PULL_MAX_DEFAULT (256u << 10) /* largest put chunk (value bytes) sent as PULL */
#define PUSH_MAX_DEFAULT (512u << 10) /* largest get chunk (capacity bytes) sent as PUSH */

/*
 * A count (kvs_parse_uint) or a size (kvs_parse_size) from the environment,
 * in [min, max]; else dflt (with a warning).
 */
static uint32_t env_u32(const char *name, int (*parse)(const char *, uint64_t *), uint32_t dflt,
                        uint32_t min, uint32_t max)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    uint64_t v;
    if (parse(s, &v) < 0 || v < min || v > max) {
        kvs_log(KVS_LOG_WARN, "%s='%s' ignored: expected %u..%u", name, s, min, max);
        return dflt;
    }
    return (uint32_t)v;
}

/*
 * Test hooks (tests/rdma/), compiled only into KVS_TEST_HOOKS builds: the
 * library that ships never reads these variables.
 */
static void load_hooks(struct kvs_rdma_hooks *h)
{
#ifdef KVS_TEST_HOOKS
    h->stall_ms = env_u32("KVS_RDMA_TEST_STALL_MS", kvs_parse_uint, 0, 0, 600000);
    h->token_xor = env_u32("KVS_RDMA_TEST_TOKEN_XOR", kvs_parse_uint, 0, 0, UINT32_MAX);
    h->max_wr = env_u32("KVS_RDMA_TEST_MAX_WR", kvs_parse_uint, 0, 4, 1u << 20);
    h->max_sge = env_u32("KVS_RDMA_TEST_MAX_SGE", kvs_parse_uint, 0, 1, KVS_RDMA_MAX_SGE);
#else
    *h = (struct kvs_rdma_hooks){0};
#endif
}

/* c->cv, on CLOCK_MONOTONIC (kvs_rdma_cond_wait's deadlines). 0 or an error number. */
static int init_cond(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc != 0) return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

static int rdma_create(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                       struct kvs_conn **out)
{
    struct kvs_rdma_conn *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->ep = *ep;
    c->cfg = *cfg;
    c->nlanes = 1;
    for (uint32_t i = 0; i < KVS_RDMA_LANES; i++)
        c->lanes[i].reply_idx = -1;
    c->pull_max = env_u32("KVSTORE_RDMA_PULL_MAX", kvs_parse_size, PULL_MAX_DEFAULT, 0, UINT32_MAX);
    c->push_max = env_u32("KVSTORE_RDMA_PUSH_MAX", kvs_parse_size, PUSH_MAX_DEFAULT, 0, UINT32_MAX);
    load_hooks(&c->hooks);
    pthread_mutex_init(&c->mu, NULL);
    if (init_cond(&c->cv) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return -ENOMEM;
    }
    *out = (struct kvs_conn *)(void *)c;
    return 0;
}

/*
 * Waits until no cut connection is left to tear down (its last lane tears
 * it down), then connects if needed. 0 or a negative code.
 */
static int settle_up(struct kvs_rdma_conn *c, uint64_t deadline)
{
    while (c->broken) {
        if (kvs_now_ms() >= deadline) return -ETIMEDOUT;
        kvs_rdma_cond_wait(c, deadline);
    }
    return kvs_rdma_ensure_up(c);
}

static int rdma_connect_op(struct kvs_conn *conn, struct kvs_limits *lim)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    pthread_mutex_lock(&c->mu);
    int rc = settle_up(c, kvs_now_ms() + (uint64_t)c->cfg.connect_timeout_ms);
    if (rc == 0) *lim = c->lim;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void fail_keys(struct kvs_key_io *k, uint32_t n, int status)
{
    for (uint32_t i = 0; i < n; i++)
        k[i].status = status;
}

/*
 * A failed request: the keys not yet done get the error as the transport
 * contract names it (transport.h: a lost connection is -ECONNRESET). When
 * it used the connection (cut: a lane was claimed), the connection is cut:
 * every other request in flight fails too, and it goes down once the last
 * of them has left its lane (the next request reconnects).
 */
static void fail_request(struct kvs_rdma_conn *c, struct kvs_req *req, uint32_t done, int rc,
                         int cut)
{
    int st = rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -EPROTO || rc == -EACCES ||
                     rc == -ENODEV || rc == -EHOSTUNREACH
                 ? rc
                 : -ECONNRESET;
    if (cut && c->up && !c->broken) {
        kvs_log(KVS_LOG_WARN, "rdma %s: connection lost: %s", c->ep.name, strerror(-rc));
        c->broken = 1;
        c->last_err = st;
        c->retry_at_ms = 0;
        pthread_cond_broadcast(&c->cv);
    }
    if (!kvs_wire_opcode_text(req->opcode)) fail_keys(req->keys + done, req->n - done, st);
    req->status = st;
}

/*
 * Claims a free lane, waiting (mu released) while all are busy; connects
 * first if needed. The lane, or NULL with *rc set.
 */
static struct kvs_rdma_lane *claim_lane(struct kvs_rdma_conn *c, uint64_t deadline, int *rc)
{
    for (;;) {
        if ((*rc = settle_up(c, deadline)) < 0) return NULL;
        struct kvs_rdma_lane *l = kvs_rdma_lane_claim(c->lanes, c->nlanes);
        if (l) {
            c->busy++;
            return l;
        }
        if (kvs_now_ms() >= deadline) {
            *rc = -ETIMEDOUT;
            return NULL;
        }
        kvs_rdma_cond_wait(c, deadline);
    }
}

/*
 * Gives l back: its reply's receive buffer is posted again; the last lane
 * out of a cut connection tears it down.
 */
static void release_lane(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l)
{
    if (!c->broken && kvs_rdma_reply_free(c, l) < 0) c->broken = 1;
    if (l->want_id) c->broken = 1; /* a reply still due would answer no request */
    l->busy = 0;
    c->busy--;
    if (c->broken && c->busy == 0) kvs_rdma_conn_down(c);
    pthread_cond_broadcast(&c->cv);
}

static void rdma_submit(struct kvs_conn *conn, struct kvs_req *req)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    pthread_mutex_lock(&c->mu);
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms;
    uint32_t done = 0;
    req->status = 0;
    int rc;
    struct kvs_rdma_lane *l = claim_lane(c, deadline, &rc);
    if (l)
        rc = kvs_wire_opcode_text(req->opcode) ? kvs_rdma_run_stats(c, l, req, deadline)
                                               : kvs_rdma_run_keys(c, l, req, &done, deadline);
    if (rc < 0) fail_request(c, req, done, rc, l != NULL);
    if (l) release_lane(c, l);
    /*
     * Until a cut connection is down, kvstored may still WRITE into this
     * request's buffers (a PUSH whose reply never came): its caller hears of
     * the failure only once the last lane out has torn it down (registrations
     * and QP gone), at most one poller's sleep (100 ms) after the cut.
     */
    while (l && rc < 0 && c->broken)
        kvs_rdma_cond_wait(c, UINT64_MAX);
    pthread_mutex_unlock(&c->mu);
    req->done(req);
}

/* Cuts the connection (requests in flight fail) and waits until it is down. */
static void rdma_disconnect_op(struct kvs_conn *conn)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    pthread_mutex_lock(&c->mu);
    if (c->busy) {
        c->broken = 1;
        pthread_cond_broadcast(&c->cv);
        while (c->busy)
            kvs_rdma_cond_wait(c, UINT64_MAX);
    }
    kvs_rdma_conn_down(c);
    pthread_mutex_unlock(&c->mu);
}

static void rdma_destroy(struct kvs_conn *conn)
{
    if (!conn) return;
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    rdma_disconnect_op(conn);
    while (c->regs) {
        struct kvs_rdma_ureg *u = c->regs;
        c->regs = u->next;
        free(u);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int rdma_reg_mem(struct kvs_conn *conn, void *ptr, size_t len)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    struct kvs_rdma_ureg *u = calloc(1, sizeof(*u));
    if (!u) return -ENOMEM;
    u->ptr = ptr;
    u->len = len;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->up) {
        u->mr = ibv_reg_mr(c->pd, ptr, len, kvs_rdma_mr_access(c));
        if (!u->mr) rc = errno ? -errno : -ENOMEM;
    }
    if (rc == 0) {
        u->next = c->regs;
        c->regs = u;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc < 0) free(u);
    return rc;
}

static int rdma_unreg_mem(struct kvs_conn *conn, void *ptr)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    pthread_mutex_lock(&c->mu);
    int rc = -ENOENT;
    for (struct kvs_rdma_ureg **pp = &c->regs; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr != ptr) continue;
        struct kvs_rdma_ureg *u = *pp;
        *pp = u->next;
        if (u->mr) ibv_dereg_mr(u->mr);
        free(u);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/*
 * doorbells (ibv_post_send calls), work_requests, completions, round_trips,
 * bounce_bytes, zero_copy_bytes, split_chains, reconnects, and where a chunk's
 * time goes: slot_wait_us, chain_wait_us, copy_us; inflight_max, the most
 * control messages awaiting replies at once (docs/rdma.md "Counters").
 */
static void rdma_counters(struct kvs_conn *conn, kvs_counter_fn emit, void *arg)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    emit(arg, "doorbells", atomic_load(&c->doorbells));
    emit(arg, "work_requests", atomic_load(&c->wrs));
    emit(arg, "completions", atomic_load(&c->cqes));
    emit(arg, "round_trips", atomic_load(&c->round_trips));
    emit(arg, "bounce_bytes", atomic_load(&c->bounce_bytes));
    emit(arg, "zero_copy_bytes", atomic_load(&c->zero_copy_bytes));
    emit(arg, "split_chains", atomic_load(&c->split_chains));
    emit(arg, "reconnects", atomic_load(&c->reconnects));
    emit(arg, "slot_wait_us", atomic_load(&c->slot_wait_us));
    emit(arg, "chain_wait_us", atomic_load(&c->chain_wait_us));
    emit(arg, "copy_us", atomic_load(&c->copy_us));
    emit(arg, "inflight_max", atomic_load(&c->inflight_max));
}

static void rdma_fork_prepare(struct kvs_conn *conn)
{
    pthread_mutex_lock(&kvs_rdma_of(conn)->mu);
}

static void rdma_fork_parent(struct kvs_conn *conn)
{
    pthread_mutex_unlock(&kvs_rdma_of(conn)->mu);
}

/*
 * The child cannot use the parent's verbs objects: forget them (without
 * destroying anything the parent still uses) and reconnect on first use.
 * Its only thread is the forking one: no lane is busy in it, and the
 * condition variable (whose waiters stayed in the parent) starts afresh.
 */
static void rdma_fork_child(struct kvs_conn *conn)
{
    struct kvs_rdma_conn *c = kvs_rdma_of(conn);
    c->ec = NULL;
    c->id = NULL;
    c->pd = NULL;
    c->comp = NULL;
    c->cq = NULL;
    c->ctrl = NULL;
    c->ctrl_mr = NULL;
    for (uint32_t i = 0; i < KVS_RDMA_LANES; i++)
        c->lanes[i] = (struct kvs_rdma_lane){.reply_idx = -1};
    for (struct kvs_rdma_ureg *u = c->regs; u; u = u->next)
        u->mr = NULL;
    c->up = c->broken = c->polling = c->opening = 0;
    c->busy = c->inflight = 0;
    c->nlanes = 1;
    c->sq_posted = c->sq_done = 0;
    c->last_err = 0;
    if (init_cond(&c->cv) != 0) abort(); /* nothing else to do in a child without it */
    pthread_mutex_unlock(&c->mu);
}

const struct kvs_transport_ops kvs_rdma_transport = {
    .name = "rdma",
    .create = rdma_create,
    .connect = rdma_connect_op,
    .submit = rdma_submit,
    .disconnect = rdma_disconnect_op,
    .destroy = rdma_destroy,
    .reg_mem = rdma_reg_mem,
    .unreg_mem = rdma_unreg_mem,
    .counters = rdma_counters,
    .fork_prepare = rdma_fork_prepare,
    .fork_parent = rdma_fork_parent,
    .fork_child = rdma_fork_child,
};

/*
 * client.c - libkvstore's public API (include/kvstore.h) over the transports.
 *
 * Every call, single-key or batch, sync or async, goes through one path:
 * an op is built for n keys; each key is validated locally (a bad key gets
 * its own status, nothing is sent for it) and routed to its server by
 * rendezvous hash (route.c); the valid keys of each server become one
 * struct kvs_req handed to that server's transport (transport.h), all parts
 * in flight at once; the op completes when its last part does. Sync calls
 * wait for the op on the caller's stack (no allocation for single keys).
 *
 * Internals never call the exported kvs_* functions: a shim interposing on
 * them sees only the application's calls.
 */
/* The API is the only thing libkvstore exports (-fvisibility=hidden hides the rest). */
#pragma GCC visibility push(default)
#include "kvstore.h"
#pragma GCC visibility pop

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "futex.h"
#include "route.h"
#include "transport.h"

#define DEFAULT_TIMEOUT_MS 10000
#define MAX_CONNECT_MS     5000
#define STATS_TEXT_MAX     (64 * 1024)
#define CLOSE_GRACE_MS     1000 /* kvs_close waits timeout + this for ops in flight */

struct kvs_server {
    struct kvs_endpoint ep;
    const struct kvs_transport_ops *ops;
    struct kvs_conn *conn;
};

struct kvs_client {
    size_t nservers;
    struct kvs_server *servers;
    uint64_t *server_hashes; /* route.c's, one per server */
    struct kvs_transport_config cfg;

    /*
     * Ops in flight, for kvs_flush/kvs_close, counted per epoch: kvs_flush
     * flips the epoch and waits for the old one to drain, so ops started
     * after it (a steady stream from other threads, a callback chaining the
     * next batch) cannot starve it.
     */
    atomic_long outstanding[2];
    atomic_int epoch;
    pthread_mutex_t flush_mu; /* one flusher at a time */
    atomic_int flush_waiters;
    atomic_int first_error; /* first transport error since the last kvs_flush */
    pthread_mutex_t mu;
    pthread_cond_t idle;

    /* Callbacks of async batches that completed inside the submitting call run here. */
    pthread_mutex_t defer_mu;
    pthread_cond_t defer_cv;
    struct kvs_op *defer_head, *defer_tail;
    bool defer_started, defer_stop;
    pthread_t defer_thread;

    struct kvs_client *next_client; /* all live clients, for fork */
};

struct kvs_op {
    kvs_client *c;
    uint8_t opcode;
    bool heap; /* allocated: freed by kvs_wait or after the callback */
    size_t n;
    int *out_int;     /* PUT, EXISTS (and REMOVE): per-key results */
    ssize_t *out_ssz; /* GET: per-key results */
    struct kvs_key_io *keys;
    struct kvs_req *reqs;
    atomic_uint parts; /* reqs in flight + 1 while submitting */
    atomic_long nok;
    kvs_done_fn done;
    void *arg;
    atomic_int state; /* OP_PENDING, OP_SLEEPING (a waiter sleeps on it), OP_DONE */
    int epoch;        /* the client's epoch when the op started */
    struct kvs_op *defer_next;
    /* A single key needs no allocation: */
    ssize_t single_result;
    struct kvs_key_io key1;
    struct kvs_req req1;
};

enum { OP_PENDING, OP_SLEEPING, OP_DONE };

/* ---- small helpers ---- */

/* kvs_strerror's body; internals call this, never the exported symbol. */
static const char *kvs_strerror_internal(int status)
{
    static __thread char unknown[48];
    if (status >= 0) return status == 1 ? "present" : "success";
    switch (-status) {
    case ENOENT:
        return "key not found";
    case ERANGE:
        return "buffer smaller than the value";
    case E2BIG:
        return "key or value too large";
    case ENOSPC:
        return "store full, nothing evictable";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory";
    case ECONNREFUSED:
        return "connection refused";
    case ECONNRESET:
        return "connection lost";
    case ETIMEDOUT:
        return "timed out";
    case EIO:
        return "transport I/O error";
    case EPROTO:
        return "protocol error";
    case EBADMSG:
        return "malformed message";
    case ENOTSUP:
        return "not supported";
    case EMSGSIZE:
        return "message too large";
    case EBUSY:
        return "busy";
    case EACCES:
        return "access denied";
    default:
        snprintf(unknown, sizeof(unknown), "unknown error %d", status);
        return unknown;
    }
}

static bool is_transport_error(int status)
{
    return status == -ECONNREFUSED || status == -ECONNRESET || status == -ETIMEDOUT ||
           status == -EIO || status == -EPROTO;
}

static void note_error(kvs_client *c, int status)
{
    if (!is_transport_error(status)) return;
    int expected = 0;
    atomic_compare_exchange_strong(&c->first_error, &expected, status);
}

/* Counts an op in; returns the epoch it belongs to. */
static int outstanding_inc(kvs_client *c)
{
    int e = atomic_load(&c->epoch);
    atomic_fetch_add(&c->outstanding[e], 1);
    return e;
}

/* Wakes kvs_flush/kvs_close waiters when an epoch's last op ends (lock only if someone waits). */
static void outstanding_dec(kvs_client *c, int e)
{
    if (atomic_fetch_sub(&c->outstanding[e], 1) != 1) return;
    if (atomic_load(&c->flush_waiters) == 0) return;
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
}

static long in_flight(kvs_client *c, int e)
{
    if (e >= 0) return atomic_load(&c->outstanding[e]);
    return atomic_load(&c->outstanding[0]) + atomic_load(&c->outstanding[1]);
}

/*
 * Waits until epoch e has no op in flight (e < 0: both epochs), at most until
 * deadline_ms (0: no limit). 0 or -ETIMEDOUT.
 */
static int wait_drained(kvs_client *c, int e, uint64_t deadline_ms)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->flush_waiters, 1);
    while (in_flight(c, e) > 0) {
        if (deadline_ms == 0) {
            pthread_cond_wait(&c->idle, &c->mu);
            continue;
        }
        uint64_t now = kvs_now_ms();
        if (now >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t wait_ms = deadline_ms - now < 100 ? deadline_ms - now : 100;
        ts.tv_nsec += (long)(wait_ms * 1000000ull);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->idle, &c->mu, &ts);
    }
    atomic_fetch_sub(&c->flush_waiters, 1);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- completion ---- */

static void op_free(struct kvs_op *op)
{
    if (op->heap) free(op);
}

/* Runs a finished op's callback (or wakes its waiter) and retires it. */
static void op_complete(struct kvs_op *op)
{
    kvs_client *c = op->c;
    int epoch = op->epoch;
    if (op->done) {
        op->done(op->arg, atomic_load(&op->nok));
        op_free(op);
        outstanding_dec(c, epoch);
        return;
    }
    outstanding_dec(c, epoch);
    /* After this store the waiter may free op: touch nothing but the futex word. */
    if (atomic_exchange_explicit(&op->state, OP_DONE, memory_order_acq_rel) == OP_SLEEPING)
        kvs_futex_wake_all(&op->state);
}

static void *defer_main(void *arg)
{
    kvs_client *c = arg;
    pthread_mutex_lock(&c->defer_mu);
    for (;;) {
        while (!c->defer_head && !c->defer_stop)
            pthread_cond_wait(&c->defer_cv, &c->defer_mu);
        struct kvs_op *op = c->defer_head;
        if (!op) break;
        c->defer_head = op->defer_next;
        if (!c->defer_head) c->defer_tail = NULL;
        pthread_mutex_unlock(&c->defer_mu);
        op_complete(op);
        pthread_mutex_lock(&c->defer_mu);
    }
    pthread_mutex_unlock(&c->defer_mu);
    return NULL;
}

/*
 * A callback must run on a library thread, never inside the call that
 * submitted the batch (the caller may hold a lock its callback takes).
 */
static void op_defer(struct kvs_op *op)
{
    kvs_client *c = op->c;
    pthread_mutex_lock(&c->defer_mu);
    if (!c->defer_started) {
        if (pthread_create(&c->defer_thread, NULL, defer_main, c) != 0) {
            pthread_mutex_unlock(&c->defer_mu);
            kvs_log(KVS_LOG_ERROR, "cannot start the completion thread; running a callback inline");
            op_complete(op);
            return;
        }
        c->defer_started = true;
    }
    op->defer_next = NULL;
    if (c->defer_tail)
        c->defer_tail->defer_next = op;
    else
        c->defer_head = op;
    c->defer_tail = op;
    pthread_cond_signal(&c->defer_cv);
    pthread_mutex_unlock(&c->defer_mu);
}

/* Drops one part of op; the last one completes it. */
static void op_put(struct kvs_op *op, bool from_submitter)
{
    if (atomic_fetch_sub_explicit(&op->parts, 1, memory_order_acq_rel) != 1) return;
    if (from_submitter && op->done)
        op_defer(op);
    else
        op_complete(op);
}

/* The caller-visible result of key k. */
static ssize_t key_result(const struct kvs_op *op, const struct kvs_key_io *k)
{
    int32_t st = k->status;
    switch (op->opcode) {
    case KVS_OP_GET:
        if (st == 0) return (ssize_t)k->vlen;
        /* The size probe, kvs_get(c, key, NULL, 0): the value's length is the answer. */
        if (st == -ERANGE && k->buf == NULL && k->len == 0) return (ssize_t)k->vlen;
        return st;
    case KVS_OP_EXISTS:
        if (st == 1) return 1;
        if (st == 0 || st == -ENOENT) return 0;
        return st;
    default:
        return st;
    }
}

static void set_result(struct kvs_op *op, uint32_t index, ssize_t result)
{
    if (op->out_ssz)
        op->out_ssz[index] = result;
    else
        op->out_int[index] = (int)result;
    if (result >= 0)
        atomic_fetch_add_explicit(&op->nok, 1, memory_order_relaxed);
    else
        note_error(op->c, (int)result);
}

/* Transport completion of one per-server part. */
static void req_done(struct kvs_req *req)
{
    struct kvs_op *op = req->arg;
    for (uint32_t i = 0; i < req->n; i++)
        set_result(op, req->keys[i].index, key_result(op, &req->keys[i]));
    op_put(op, false);
}

/* ---- submission ---- */

/* What a call asks for: n keys and, per opcode, their values or buffers. */
struct op_args {
    uint8_t opcode;
    size_t n;
    const char *const *keys;
    const void *const *vals; /* PUT */
    void *const *bufs;       /* GET */
    const size_t *lens;      /* PUT: lengths; GET: capacities */
};

/* Local checks that need no server: 0 or the key's status. */
static int check_key(const struct op_args *a, size_t i, size_t *klen)
{
    const char *key = a->keys[i];
    if (!key) return -EINVAL;
    size_t len = strnlen(key, KVS_MAX_KEY + 1);
    if (len == 0) return -EINVAL;
    if (len > KVS_MAX_KEY) return -E2BIG;
    if (a->opcode == KVS_OP_PUT && a->lens[i] > 0 && !a->vals[i]) return -EINVAL;
    if (a->opcode == KVS_OP_GET && a->lens[i] > 0 && !a->bufs[i]) return -EINVAL;
    *klen = len;
    return 0;
}

/* Checks against the server's limits: 0 or the key's status. */
static int check_limits(const struct op_args *a, size_t i, size_t klen,
                        const struct kvs_limits *lim)
{
    if (klen > lim->max_key) return -E2BIG;
    if (a->opcode == KVS_OP_PUT && a->lens[i] > lim->max_object) return -E2BIG;
    return 0;
}

static void fill_key(struct kvs_key_io *k, const struct op_args *a, size_t i, size_t klen)
{
    memset(k, 0, sizeof(*k));
    k->key = a->keys[i];
    k->klen = (uint32_t)klen;
    k->index = (uint32_t)i;
    if (a->opcode == KVS_OP_PUT) {
        k->val = a->vals[i];
        k->len = a->lens[i];
    } else if (a->opcode == KVS_OP_GET) {
        k->buf = a->bufs[i];
        k->len = a->lens[i];
    }
}

static void init_req(struct kvs_req *req, struct kvs_op *op, struct kvs_key_io *keys, uint32_t n)
{
    memset(req, 0, sizeof(*req));
    req->opcode = op->opcode;
    req->n = n;
    req->keys = keys;
    req->done = req_done;
    req->arg = op;
}

/* One key: no routing tables, no allocation. */
static void launch_single(struct kvs_op *op, const struct op_args *a)
{
    kvs_client *c = op->c;
    size_t klen = 0;
    int st = check_key(a, 0, &klen);
    struct kvs_server *s = &c->servers[0];
    if (st == 0 && c->nservers > 1)
        s = &c->servers[kvs_route_pick(c->server_hashes, c->nservers,
                                       kvs_route_key_hash(a->keys[0], klen))];
    struct kvs_limits lim;
    if (st == 0) st = s->ops->connect(s->conn, &lim);
    if (st == 0) st = check_limits(a, 0, klen, &lim);
    if (st < 0) {
        set_result(op, 0, st);
        return;
    }
    fill_key(&op->key1, a, 0, klen);
    init_req(&op->req1, op, &op->key1, 1);
    atomic_fetch_add(&op->parts, 1);
    s->ops->submit(s->conn, &op->req1);
}

/*
 * Several keys: validate, route, connect the servers involved, group the
 * valid keys per server (in call order) and submit one req per server.
 * Returns 0, or -ENOMEM before anything was started.
 */
static int launch_batch(struct kvs_op *op, const struct op_args *a)
{
    kvs_client *c = op->c;
    size_t ns = c->nservers, n = a->n;
    const uint32_t NONE = UINT32_MAX;
    /* Per key: its server (or NONE: already answered) and key length; per server: the rest. */
    size_t size = n * 2 * sizeof(uint32_t) + ns * (3 * sizeof(uint32_t) + sizeof(int)) +
                  ns * sizeof(struct kvs_limits);
    struct kvs_limits *lims = malloc(size);
    if (!lims) return -ENOMEM;
    uint32_t *where = (uint32_t *)(lims + ns), *klens = where + n;
    uint32_t *count = klens + n, *begin = count + ns, *fill = begin + ns;
    int *conn_err = (int *)(fill + ns);

    memset(count, 0, ns * sizeof(*count));
    for (size_t i = 0; i < n; i++) {
        size_t klen = 0;
        int st = check_key(a, i, &klen);
        where[i] = NONE;
        if (st < 0) {
            set_result(op, (uint32_t)i, st);
            continue;
        }
        klens[i] = (uint32_t)klen;
        where[i] = ns == 1 ? 0
                           : (uint32_t)kvs_route_pick(c->server_hashes, ns,
                                                      kvs_route_key_hash(a->keys[i], klen));
        count[where[i]]++;
    }
    for (size_t s = 0; s < ns; s++)
        conn_err[s] = count[s] ? c->servers[s].ops->connect(c->servers[s].conn, &lims[s]) : 0;

    /* Server-dependent checks; count what will be sent. */
    memset(count, 0, ns * sizeof(*count));
    for (size_t i = 0; i < n; i++) {
        if (where[i] == NONE) continue;
        uint32_t s = where[i];
        int st = conn_err[s] ? conn_err[s] : check_limits(a, i, klens[i], &lims[s]);
        if (st < 0) {
            set_result(op, (uint32_t)i, st);
            where[i] = NONE;
            continue;
        }
        count[s]++;
    }
    uint32_t at = 0, nreqs = 0;
    for (size_t s = 0; s < ns; s++) {
        begin[s] = fill[s] = at;
        at += count[s];
        if (count[s]) nreqs++;
    }
    for (size_t i = 0; i < n; i++)
        if (where[i] != NONE) fill_key(&op->keys[fill[where[i]]++], a, i, klens[i]);

    /* Count every part before submitting any: a part may complete at once. */
    atomic_fetch_add(&op->parts, nreqs);
    uint32_t r = 0;
    for (size_t s = 0; s < ns; s++) {
        if (!count[s]) continue;
        init_req(&op->reqs[r], op, &op->keys[begin[s]], count[s]);
        c->servers[s].ops->submit(c->servers[s].conn, &op->reqs[r]);
        r++;
    }
    free(lims);
    return 0;
}

/* Sets up op (stack or heap) for a call on c. */
static void op_init(struct kvs_op *op, kvs_client *c, uint8_t opcode, size_t n, bool heap)
{
    memset(op, 0, sizeof(*op));
    op->c = c;
    op->opcode = opcode;
    op->n = n;
    op->heap = heap;
    atomic_init(&op->parts, 1); /* the submitter's part */
    atomic_init(&op->nok, 0);
    atomic_init(&op->state, OP_PENDING);
}

/* A heap op with room for n keys and one req per server. */
static struct kvs_op *op_alloc(kvs_client *c, uint8_t opcode, size_t n)
{
    size_t size = sizeof(struct kvs_op) + n * sizeof(struct kvs_key_io) +
                  c->nservers * sizeof(struct kvs_req);
    struct kvs_op *op = malloc(size);
    if (!op) return NULL;
    op_init(op, c, opcode, n, true);
    op->keys = (struct kvs_key_io *)(op + 1);
    op->reqs = (struct kvs_req *)(op->keys + n);
    return op;
}

/* Starts op; afterwards it completes on its own (callback, or op_wait). */
static int op_launch(struct kvs_op *op, const struct op_args *a)
{
    op->epoch = outstanding_inc(op->c);
    int rc = 0;
    if (a->n == 1 && !op->keys) /* stack or single-key op */
        launch_single(op, a);
    else if (a->n > 0)
        rc = launch_batch(op, a);
    if (rc < 0) {
        outstanding_dec(op->c, op->epoch);
        return rc;
    }
    op_put(op, true);
    return 0;
}

/* Blocks until op completes; returns nok for batches, the key's result for single ops. */
static ssize_t op_wait(struct kvs_op *op)
{
    int state = atomic_load_explicit(&op->state, memory_order_acquire);
    while (state != OP_DONE) {
        if (state == OP_PENDING && !atomic_compare_exchange_weak(&op->state, &state, OP_SLEEPING))
            continue;
        kvs_futex_wait(&op->state, OP_SLEEPING);
        state = atomic_load_explicit(&op->state, memory_order_acquire);
    }
    return op->out_ssz == &op->single_result ? op->single_result : atomic_load(&op->nok);
}

/* ---- single-key calls ---- */

/* A sync single-key call on the caller's stack. */
static ssize_t single_sync(kvs_client *c, uint8_t opcode, const char *key, const void *val,
                           void *buf, size_t len)
{
    if (!c) return -EINVAL;
    struct kvs_op op;
    op_init(&op, c, opcode, 1, false);
    op.out_ssz = &op.single_result;
    struct op_args a = {
        .opcode = opcode, .n = 1, .keys = &key, .vals = &val, .bufs = &buf, .lens = &len};
    op_launch(&op, &a);
    return op_wait(&op);
}

int kvs_put(kvs_client *c, const char *key, const void *val, size_t len)
{
    return (int)single_sync(c, KVS_OP_PUT, key, val, NULL, len);
}

ssize_t kvs_get(kvs_client *c, const char *key, void *buf, size_t cap)
{
    return single_sync(c, KVS_OP_GET, key, NULL, buf, cap);
}

int kvs_exists(kvs_client *c, const char *key)
{
    return (int)single_sync(c, KVS_OP_EXISTS, key, NULL, NULL, 0);
}

int kvs_remove(kvs_client *c, const char *key)
{
    return (int)single_sync(c, KVS_OP_REMOVE, key, NULL, NULL, 0);
}

/* An async single-key call: a heap op holding its own copies of the argument pointers. */
static int single_async(kvs_client *c, uint8_t opcode, const char *key, const void *val, void *buf,
                        size_t len, kvs_op **out)
{
    if (out) *out = NULL;
    if (!c || !out) return -EINVAL;
    struct kvs_op *op = malloc(sizeof(*op));
    if (!op) return -ENOMEM;
    op_init(op, c, opcode, 1, true);
    op->out_ssz = &op->single_result;
    struct op_args a = {
        .opcode = opcode, .n = 1, .keys = &key, .vals = &val, .bufs = &buf, .lens = &len};
    op_launch(op, &a); /* the single path copies what it needs out of a */
    *out = op;
    return 0;
}

int kvs_put_async(kvs_client *c, const char *key, const void *val, size_t len, kvs_op **op)
{
    return single_async(c, KVS_OP_PUT, key, val, NULL, len, op);
}

int kvs_get_async(kvs_client *c, const char *key, void *buf, size_t cap, kvs_op **op)
{
    return single_async(c, KVS_OP_GET, key, NULL, buf, cap, op);
}

ssize_t kvs_wait(kvs_op *op)
{
    if (!op) return -EINVAL;
    ssize_t rc = op_wait(op);
    op_free(op);
    return rc;
}

/* ---- batch calls ---- */

/* Checks a batch call's arrays; 0 or -EINVAL. */
static int check_batch(kvs_client *c, const struct op_args *a, const void *out)
{
    if (!c) return -EINVAL;
    if (a->n == 0) return 0;
    if (!a->keys || !out || !a->lens) return -EINVAL;
    if (a->opcode == KVS_OP_PUT && !a->vals) return -EINVAL;
    if (a->opcode == KVS_OP_GET && !a->bufs) return -EINVAL;
    if (a->n > UINT32_MAX) return -EINVAL;
    return 0;
}

/* Starts a batch; with done == NULL and wait, waits and returns nok. */
static int batch_start(kvs_client *c, const struct op_args *a, int *out_int, ssize_t *out_ssz,
                       kvs_done_fn done, void *arg, kvs_op **out)
{
    if (out) *out = NULL;
    int rc = check_batch(c, a, out_int ? (const void *)out_int : (const void *)out_ssz);
    if (rc < 0) return rc;
    struct kvs_op *op = op_alloc(c, a->opcode, a->n);
    if (!op) return -ENOMEM;
    op->out_int = out_int;
    op->out_ssz = out_ssz;
    op->done = done;
    op->arg = arg;
    if (!done && out) *out = op; /* before launch: with done set, op may be gone at once */
    rc = op_launch(op, a);
    if (rc < 0) {
        if (out) *out = NULL;
        free(op);
    }
    return rc;
}

/* A sync batch: an async one waited on. */
static int batch_sync(kvs_client *c, const struct op_args *a, int *out_int, ssize_t *out_ssz)
{
    kvs_op *op = NULL;
    int rc = batch_start(c, a, out_int, out_ssz, NULL, NULL, &op);
    if (rc < 0) return rc;
    rc = (int)op_wait(op);
    op_free(op);
    return rc;
}

static const size_t zero_lens_marker = 0;

int kvs_batch_put(kvs_client *c, size_t n, const char *const keys[], const void *const vals[],
                  const size_t lens[], int status[])
{
    struct op_args a = {.opcode = KVS_OP_PUT, .n = n, .keys = keys, .vals = vals, .lens = lens};
    return batch_sync(c, &a, status, NULL);
}

int kvs_batch_get(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                  const size_t caps[], ssize_t results[])
{
    struct op_args a = {.opcode = KVS_OP_GET, .n = n, .keys = keys, .bufs = bufs, .lens = caps};
    return batch_sync(c, &a, NULL, results);
}

/* EXISTS carries no lengths; check_key never reads them for it. */
static struct op_args exists_args(size_t n, const char *const keys[])
{
    return (struct op_args){
        .opcode = KVS_OP_EXISTS, .n = n, .keys = keys, .lens = &zero_lens_marker};
}

int kvs_batch_exists(kvs_client *c, size_t n, const char *const keys[], int results[])
{
    struct op_args a = exists_args(n, keys);
    return batch_sync(c, &a, results, NULL);
}

int kvs_batch_put_async(kvs_client *c, size_t n, const char *const keys[], const void *const vals[],
                        const size_t lens[], int status[], kvs_done_fn done, void *arg, kvs_op **op)
{
    struct op_args a = {.opcode = KVS_OP_PUT, .n = n, .keys = keys, .vals = vals, .lens = lens};
    if (!done && !op) return -EINVAL; /* nobody could ever learn it completed */
    return batch_start(c, &a, status, NULL, done, arg, op);
}

int kvs_batch_get_async(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                        const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg,
                        kvs_op **op)
{
    struct op_args a = {.opcode = KVS_OP_GET, .n = n, .keys = keys, .bufs = bufs, .lens = caps};
    if (!done && !op) return -EINVAL;
    return batch_start(c, &a, NULL, results, done, arg, op);
}

int kvs_batch_exists_async(kvs_client *c, size_t n, const char *const keys[], int results[],
                           kvs_done_fn done, void *arg, kvs_op **op)
{
    struct op_args a = exists_args(n, keys);
    if (!done && !op) return -EINVAL;
    return batch_start(c, &a, results, NULL, done, arg, op);
}

int kvs_flush(kvs_client *c)
{
    if (!c) return -EINVAL;
    /* Ops started from now on count in the other epoch; wait for this one's. */
    pthread_mutex_lock(&c->flush_mu);
    int e = atomic_load(&c->epoch);
    atomic_store(&c->epoch, !e);
    wait_drained(c, e, 0);
    pthread_mutex_unlock(&c->flush_mu);
    return atomic_exchange(&c->first_error, 0);
}

/* ---- memory registration (RDMA; no-ops on TCP) ---- */

int kvs_register_buffer(kvs_client *c, void *ptr, size_t len)
{
    if (!c || !ptr || len == 0) return -EINVAL;
    for (size_t s = 0; s < c->nservers; s++) {
        struct kvs_server *sv = &c->servers[s];
        if (!sv->ops->reg_mem) continue;
        int rc = sv->ops->reg_mem(sv->conn, ptr, len);
        if (rc < 0) return rc;
    }
    return 0;
}

int kvs_unregister_buffer(kvs_client *c, void *ptr)
{
    if (!c || !ptr) return -EINVAL;
    int first = 0;
    for (size_t s = 0; s < c->nservers; s++) {
        struct kvs_server *sv = &c->servers[s];
        if (!sv->ops->unreg_mem) continue;
        int rc = sv->ops->unreg_mem(sv->conn, ptr);
        if (rc < 0 && first == 0) first = rc;
    }
    return first;
}

/* ---- server stats ---- */

/* Appends text to buf (never past cap-1); returns the length it would have had. */
static size_t append(char *buf, size_t cap, size_t at, const char *text, size_t len)
{
    if (buf && cap > 0 && at < cap - 1) {
        size_t room = cap - 1 - at;
        memcpy(buf + at, text, len < room ? len : room);
    }
    return at + len;
}

/* Where a transport's counters are appended, as "client_NAME VALUE" lines. */
struct counter_sink {
    char *buf;
    size_t cap, at;
};

static void emit_counter(void *arg, const char *name, uint64_t value)
{
    struct counter_sink *k = arg;
    char line[160];
    int len = snprintf(line, sizeof(line), "client_%s %llu\n", name, (unsigned long long)value);
    if (len > 0 && (size_t)len < sizeof(line))
        k->at = append(k->buf, k->cap, k->at, line, (size_t)len);
}

/* Counts the STATS parts of a stats call (no per-key results). */
static void stats_done(struct kvs_req *req)
{
    struct kvs_op *op = req->arg;
    note_error(op->c, req->status);
    op_put(op, false);
}

ssize_t kvs_server_stats(kvs_client *c, char *buf, size_t cap)
{
    if (!c || (!buf && cap > 0)) return -EINVAL;
    size_t ns = c->nservers;
    struct kvs_op *op = op_alloc(c, KVS_OP_STATS, 0);
    char *texts = malloc(ns * STATS_TEXT_MAX);
    if (!op || !texts) {
        free(op);
        free(texts);
        return -ENOMEM;
    }
    op->epoch = outstanding_inc(c);
    atomic_fetch_add(&op->parts, ns);
    for (size_t s = 0; s < ns; s++) {
        struct kvs_req *req = &op->reqs[s];
        memset(req, 0, sizeof(*req));
        req->opcode = KVS_OP_STATS;
        req->text = texts + s * STATS_TEXT_MAX;
        req->text_cap = STATS_TEXT_MAX;
        req->done = stats_done;
        req->arg = op;
        c->servers[s].ops->submit(c->servers[s].conn, req);
    }
    op_put(op, true);
    op_wait(op);

    size_t at = 0;
    int failed = 0, first_err = 0;
    for (size_t s = 0; s < ns; s++) {
        struct kvs_req *req = &op->reqs[s];
        char line[400];
        int len = snprintf(line, sizeof(line), "# server %s\n", c->servers[s].ep.name);
        at = append(buf, cap, at, line, (size_t)len);
        if (req->status < 0) {
            len = snprintf(line, sizeof(line), "# error %s\n", kvs_strerror_internal(req->status));
            at = append(buf, cap, at, line, (size_t)len);
            failed++;
            if (!first_err) first_err = req->status;
        } else {
            size_t tlen = req->text_len < req->text_cap ? req->text_len : req->text_cap;
            at = append(buf, cap, at, req->text, tlen);
            if (tlen > 0 && req->text[tlen - 1] != '\n') at = append(buf, cap, at, "\n", 1);
        }
        /* This client's side of the link to that server: frames, syscalls, reconnects... */
        struct kvs_server *sv = &c->servers[s];
        if (sv->ops->counters) {
            struct counter_sink sink = {buf, cap, at};
            sv->ops->counters(sv->conn, emit_counter, &sink);
            at = sink.at;
        }
    }
    if (buf && cap > 0) buf[at < cap - 1 ? at : cap - 1] = '\0';
    free(texts);
    free(op);
    if ((size_t)failed == ns) return first_err;
    return (ssize_t)at;
}

/* Passes a transport's counters on to the caller's callback, with the server's name. */
struct named_sink {
    kvs_counter_cb emit;
    void *arg;
    const char *server;
};

static void emit_named(void *arg, const char *name, uint64_t value)
{
    struct named_sink *k = arg;
    k->emit(k->arg, k->server, name, value);
}

int kvs_client_counters(kvs_client *c, kvs_counter_cb emit, void *arg)
{
    if (!c || !emit) return -EINVAL;
    for (size_t s = 0; s < c->nservers; s++) {
        struct kvs_server *sv = &c->servers[s];
        struct named_sink k = {emit, arg, sv->ep.name};
        if (sv->ops->counters) sv->ops->counters(sv->conn, emit_named, &k);
    }
    return 0;
}

/* ---- error names ---- */

const char *kvs_strerror(int status)
{
    return kvs_strerror_internal(status);
}

/* ---- fork ---- */

/* Every live client, so that the fork handlers can reach their connections. */
static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static kvs_client *clients;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&clients_mu);
    for (kvs_client *c = clients; c; c = c->next_client) {
        pthread_mutex_lock(&c->defer_mu);
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_prepare)
                c->servers[s].ops->fork_prepare(c->servers[s].conn);
    }
}

static void fork_parent(void)
{
    for (kvs_client *c = clients; c; c = c->next_client) {
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_parent) c->servers[s].ops->fork_parent(c->servers[s].conn);
        pthread_mutex_unlock(&c->defer_mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

/*
 * The child has one thread. Connections become "reconnect on first use", the
 * parent's ops in flight are forgotten (their waiters and callbacks live in
 * the parent), and the completion thread is started again when needed.
 */
static void fork_child(void)
{
    for (kvs_client *c = clients; c; c = c->next_client) {
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_child) c->servers[s].ops->fork_child(c->servers[s].conn);
        atomic_store(&c->outstanding[0], 0);
        atomic_store(&c->outstanding[1], 0);
        atomic_store(&c->epoch, 0);
        pthread_mutex_init(&c->flush_mu, NULL);
        atomic_store(&c->flush_waiters, 0);
        atomic_store(&c->first_error, 0);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->idle, NULL);
        c->defer_head = c->defer_tail = NULL;
        c->defer_started = false;
        c->defer_stop = false;
        pthread_cond_init(&c->defer_cv, NULL);
        pthread_mutex_unlock(&c->defer_mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

static void atfork_register(void)
{
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        kvs_log(KVS_LOG_WARN, "pthread_atfork failed: a forked child must open its own client");
}

/* ---- open / close ---- */

/* An environment variable holding milliseconds in [1, max], else def (with a warning). */
static int env_ms(const char *name, int def, int max)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    long ms = strtol(v, &end, 10);
    if (errno || *end || ms < 1 || ms > max) {
        kvs_log(KVS_LOG_WARN, "%s=%s is not a number of milliseconds in 1..%d; using %d", name, v,
                max, def);
        return def;
    }
    return (int)ms;
}

/*
 * Parses one "[scheme://]host:port" into ep. host may be a name, an IPv4
 * address or a bracketed IPv6 address. 0, -EINVAL or -ENOTSUP (no such transport).
 */
static int parse_endpoint(const char *s, size_t len, struct kvs_endpoint *ep,
                          const struct kvs_transport_ops **ops)
{
    memset(ep, 0, sizeof(*ep));
    *ops = &kvs_tcp_transport;
    snprintf(ep->scheme, sizeof(ep->scheme), "tcp");
    const char *sep = memmem(s, len, "://", 3);
    if (sep) {
        size_t slen = (size_t)(sep - s);
        if (slen == 3 && strncmp(s, "tcp", 3) == 0) {
            *ops = &kvs_tcp_transport;
        } else if (slen == 4 && strncmp(s, "rdma", 4) == 0) {
            if (&kvs_rdma_transport == NULL) return -ENOTSUP;
            *ops = &kvs_rdma_transport;
            snprintf(ep->scheme, sizeof(ep->scheme), "rdma");
        } else {
            return -EINVAL;
        }
        len -= slen + 3;
        s = sep + 3;
    } else if (&kvs_rdma_transport != NULL) {
        /* A bare host:port follows KVSTORE_TRANSPORT=tcp|rdma|auto (default tcp). */
        const char *t = getenv("KVSTORE_TRANSPORT");
        if (t && (strcmp(t, "rdma") == 0 || strcmp(t, "auto") == 0)) {
            *ops = &kvs_rdma_transport;
            snprintf(ep->scheme, sizeof(ep->scheme), "%s", t);
        }
    }
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ':') colon = s + i;
    if (!colon) return -EINVAL;
    size_t hlen = (size_t)(colon - s), plen = len - hlen - 1;
    const char *host = s;
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    } else if (memchr(host, ':', hlen) || memchr(host, '[', hlen)) {
        return -EINVAL;
    }
    if (hlen == 0 || hlen >= sizeof(ep->host) || plen == 0 || plen > 5) return -EINVAL;
    long port = 0;
    for (size_t i = 0; i < plen; i++) {
        if (colon[1 + i] < '0' || colon[1 + i] > '9') return -EINVAL;
        port = port * 10 + (colon[1 + i] - '0');
    }
    if (port < 1 || port > 65535) return -EINVAL;
    for (size_t i = 0; i < hlen; i++)
        if (host[i] == ' ' || host[i] == '/' || host[i] == ',') return -EINVAL;
    memcpy(ep->host, host, hlen);
    snprintf(ep->port, sizeof(ep->port), "%ld", port);
    snprintf(ep->name, sizeof(ep->name), "%.*s:%ld", (int)(colon - s), s, port);
    return 0;
}

static void client_free(kvs_client *c)
{
    kvs_auth_wipe(c->cfg.auth_secret, sizeof(c->cfg.auth_secret));
    for (size_t s = 0; s < c->nservers; s++)
        if (c->servers[s].conn) c->servers[s].ops->destroy(c->servers[s].conn);
    pthread_mutex_lock(&c->defer_mu);
    c->defer_stop = true;
    bool started = c->defer_started;
    pthread_cond_signal(&c->defer_cv);
    pthread_mutex_unlock(&c->defer_mu);
    if (started) pthread_join(c->defer_thread, NULL);
    pthread_cond_destroy(&c->defer_cv);
    pthread_mutex_destroy(&c->defer_mu);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->flush_mu);
    pthread_mutex_destroy(&c->mu);
    free(c->server_hashes);
    free(c->servers);
    free(c);
}

/* Parses the server list into c->servers; 0, -EINVAL, -ENOTSUP or -ENOMEM. */
static int parse_servers(kvs_client *c, const char *list)
{
    size_t max = 1;
    for (const char *p = list; *p; p++)
        if (*p == ',') max++;
    c->servers = calloc(max, sizeof(*c->servers));
    c->server_hashes = calloc(max, sizeof(*c->server_hashes));
    if (!c->servers || !c->server_hashes) return -ENOMEM;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *e = end;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        struct kvs_server *sv = &c->servers[c->nservers];
        int rc = parse_endpoint(p, (size_t)(e - p), &sv->ep, &sv->ops);
        if (rc < 0) return rc;
        for (size_t i = 0; i < c->nservers; i++)
            if (strcmp(c->servers[i].ep.name, sv->ep.name) == 0) return -EINVAL; /* listed twice */
        c->server_hashes[c->nservers] = kvs_route_server_hash(sv->ep.name);
        c->nservers++;
        if (!*end) break;
        p = end + 1;
    }
    return 0;
}

kvs_client *kvs_open(const char *servers)
{
    if (!servers) {
        servers = getenv("KVSTORE_SERVERS");
        if (!servers || !*servers) servers = KVS_DEFAULT_SERVERS;
    }
    pthread_once(&atfork_once, atfork_register);

    kvs_client *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->flush_mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    pthread_mutex_init(&c->defer_mu, NULL);
    pthread_cond_init(&c->defer_cv, NULL);
    c->cfg.timeout_ms = env_ms("KVSTORE_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 3600 * 1000);
    int conn_def = c->cfg.timeout_ms < MAX_CONNECT_MS ? c->cfg.timeout_ms : MAX_CONNECT_MS;
    c->cfg.connect_timeout_ms = env_ms("KVSTORE_CONNECT_TIMEOUT_MS", conn_def, 3600 * 1000);

    int rc = parse_servers(c, servers);
    if (rc < 0) {
        kvs_log(KVS_LOG_ERROR, "bad server list \"%s\": %s", servers,
                rc == -ENOTSUP ? "this build has no such transport"
                               : "expected [tcp://]host:port[,host:port...]");
        goto fail;
    }
    const char *auth_file = getenv("KVSTORE_AUTH_FILE");
    if (auth_file && *auth_file) {
        char why[512] = "cannot initialise libsodium";
        long len = kvs_auth_init();
        if (len == 0) len = kvs_auth_load_secret(auth_file, c->cfg.auth_secret, why, sizeof(why));
        if (len < 0) {
            kvs_log(KVS_LOG_ERROR, "KVSTORE_AUTH_FILE: %s", why);
            rc = (int)len;
            goto fail;
        }
        c->cfg.auth_secret_len = (size_t)len;
    }
    for (size_t s = 0; s < c->nservers; s++) {
        rc = c->servers[s].ops->create(&c->servers[s].ep, &c->cfg, &c->servers[s].conn);
        if (rc < 0) goto fail;
    }
    pthread_mutex_lock(&clients_mu);
    c->next_client = clients;
    clients = c;
    pthread_mutex_unlock(&clients_mu);
    return c;
fail:
    client_free(c);
    errno = -rc;
    return NULL;
}

/* Logs a connection's transport counters (debug level). */
static void log_counter(void *arg, const char *name, uint64_t value)
{
    kvs_log(KVS_LOG_DEBUG, "  %s %s %llu", (const char *)arg, name, (unsigned long long)value);
}

void kvs_close(kvs_client *c)
{
    if (!c) return;
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms + CLOSE_GRACE_MS;
    if (wait_drained(c, -1, deadline) < 0)
        kvs_log(KVS_LOG_WARN, "kvs_close: %ld ops still in flight; failing them", in_flight(c, -1));
    pthread_mutex_lock(&clients_mu);
    for (kvs_client **pp = &clients; *pp; pp = &(*pp)->next_client) {
        if (*pp == c) {
            *pp = c->next_client;
            break;
        }
    }
    pthread_mutex_unlock(&clients_mu);
    if (kvs_log_enabled(KVS_LOG_DEBUG)) {
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->counters)
                c->servers[s].ops->counters(c->servers[s].conn, log_counter, c->servers[s].ep.name);
    }
    client_free(c);
}

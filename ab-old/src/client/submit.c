/*
 * submit.c - an op's way out: each key is checked locally (a bad key gets
 * its own status, nothing is sent for it) and routed to its server by
 * rendezvous hash (route.c); the valid keys of each server, in call order,
 * become one struct kvs_req handed to that server's transport, all parts in
 * flight at once. A single key takes a path with no routing tables and no
 * allocation.
 */
#include "client_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"

/*
 * Key i's segments, checked: 0 with their total in *total, or -EINVAL (a
 * NULL list with segments, a NULL segment with a length, over KVS_MAX_IOV
 * segments) or -E2BIG (a total that overflows).
 */
static int check_iov(const struct op_args *a, size_t i, uint64_t *total)
{
    size_t cnt = a->iovcnt[i];
    const struct iovec *iov = a->iovs[i];
    uint64_t sum = 0;
    if (cnt > KVS_MAX_IOV || (cnt > 0 && !iov)) return -EINVAL;
    for (size_t j = 0; j < cnt; j++) {
        if (iov[j].iov_len > 0 && !iov[j].iov_base) return -EINVAL;
        if (iov[j].iov_len > UINT64_MAX - sum) return -E2BIG;
        sum += iov[j].iov_len;
    }
    *total = sum;
    return 0;
}

/* Key i's value length (PUT) or capacity (GET); 0 for other opcodes. */
static uint64_t arg_len(const struct op_args *a, size_t i)
{
    if (a->opcode != KVS_OP_PUT && a->opcode != KVS_OP_GET) return 0;
    if (!a->iovs) return a->lens[i];
    uint64_t total = 0;
    (void)check_iov(a, i, &total); /* checked by check_key before */
    return total;
}

/* Local checks that need no server: 0 or the key's status. */
static int check_key(const struct op_args *a, size_t i, size_t *klen)
{
    const char *key = a->keys[i];
    if (!key) return -EINVAL;
    size_t len = strnlen(key, KVS_MAX_KEY + 1);
    if (len == 0) return -EINVAL;
    if (len > KVS_MAX_KEY) return -E2BIG;
    if (a->iovs) {
        uint64_t total;
        int st = check_iov(a, i, &total);
        if (st < 0) return st;
    } else if (a->opcode == KVS_OP_PUT || a->opcode == KVS_OP_GET) {
        const void *p = a->opcode == KVS_OP_PUT ? a->vals[i] : (const void *)a->bufs[i];
        if (a->lens[i] > 0 && !p) return -EINVAL;
    }
    *klen = len;
    return 0;
}

/* Checks against the server's limits: 0 or the key's status. */
static int check_limits(const struct op_args *a, size_t i, size_t klen,
                        const struct kvs_limits *lim)
{
    if (klen > lim->max_key) return -E2BIG;
    if (a->opcode == KVS_OP_PUT && arg_len(a, i) > lim->max_object) return -E2BIG;
    return 0;
}

/* Key i's value or buffer: its one buffer, or its segments (a one-segment key as a buffer). */
static void fill_value(struct kvs_key_io *k, const struct op_args *a, size_t i)
{
    k->len = arg_len(a, i);
    const void *one = NULL;
    if (!a->iovs) {
        one = a->opcode == KVS_OP_PUT ? a->vals[i] : (const void *)a->bufs[i];
    } else if (a->iovcnt[i] == 1) {
        one = a->iovs[i][0].iov_base;
    } else if (a->iovcnt[i] > 1) {
        k->iov = a->iovs[i];
        k->iovcnt = (uint32_t)a->iovcnt[i];
    }
    if (a->opcode == KVS_OP_PUT)
        k->val = one;
    else
        k->buf = (void *)one;
}

static void fill_key(struct kvs_key_io *k, const struct op_args *a, size_t i, size_t klen)
{
    memset(k, 0, sizeof(*k));
    k->key = a->keys[i];
    k->klen = (uint32_t)klen;
    k->index = (uint32_t)i;
    if (a->opcode == KVS_OP_PUT || a->opcode == KVS_OP_GET) fill_value(k, a, i);
}

static void init_req(struct kvs_req *req, struct kvs_op *op, struct kvs_key_io *keys, uint32_t n)
{
    memset(req, 0, sizeof(*req));
    req->opcode = op->opcode;
    req->n = n;
    req->keys = keys;
    req->done = kvc_req_done;
    req->arg = op;
}

/* The index of the server that owns the key (no hashing with one server). */
static size_t server_of(const kvs_client *c, const char *key, size_t klen)
{
    if (c->nservers == 1) return 0;
    return kvs_route_pick(c->server_hashes, c->nservers, kvs_route_key_hash(key, klen));
}

/* One key: no routing tables, no allocation. */
static void launch_single(struct kvs_op *op, const struct op_args *a)
{
    kvs_client *c = op->c;
    size_t klen = 0;
    int st = check_key(a, 0, &klen);
    struct server_link *s = &c->servers[st == 0 ? server_of(c, a->keys[0], klen) : 0];
    struct kvs_limits lim;
    if (st == 0) st = s->ops->connect(s->conn, &lim);
    if (st == 0) st = check_limits(a, 0, klen, &lim);
    if (st < 0) {
        kvc_op_set_result(op, 0, st);
        return;
    }
    fill_key(&op->key1, a, 0, klen);
    init_req(&op->req1, op, &op->key1, 1);
    atomic_fetch_add(&op->parts, 1);
    s->ops->submit(s->conn, &op->req1);
}

#define NO_SERVER UINT32_MAX /* the key is answered already: nothing to send */

/* A batch on its way out, in one allocation (lims first). */
struct batch_plan {
    struct kvs_limits *lims; /* per server: its limits, once connected */
    int *conn_err;           /* per server: its connection error, or 0 */
    uint32_t *count;         /* per server: keys to send */
    uint32_t *begin, *fill;  /* per server: where its keys start in op->keys, and the next one */
    uint32_t *where;         /* per key: its server, or NO_SERVER */
    uint32_t *klens;         /* per key: its length */
};

/* Carves p's arrays out of one allocation, which it returns (NULL: out of memory). */
static void *plan_alloc(struct batch_plan *p, size_t ns, size_t n)
{
    size_t size = ns * (sizeof(struct kvs_limits) + sizeof(int) + 3 * sizeof(uint32_t)) +
                  n * 2 * sizeof(uint32_t);
    struct kvs_limits *lims = malloc(size);
    if (!lims) return NULL;
    p->lims = lims;
    p->where = (uint32_t *)(lims + ns);
    p->klens = p->where + n;
    p->count = p->klens + n;
    p->begin = p->count + ns;
    p->fill = p->begin + ns;
    p->conn_err = (int *)(p->fill + ns);
    return lims;
}

/* Local checks and routing: each key gets its server, or its status and NO_SERVER. */
static void route_keys(struct kvs_op *op, const struct op_args *a, struct batch_plan *p)
{
    kvs_client *c = op->c;
    memset(p->count, 0, c->nservers * sizeof(*p->count));
    for (size_t i = 0; i < a->n; i++) {
        size_t klen = 0;
        int st = check_key(a, i, &klen);
        p->where[i] = NO_SERVER;
        if (st < 0) {
            kvc_op_set_result(op, (uint32_t)i, st);
            continue;
        }
        p->klens[i] = (uint32_t)klen;
        p->where[i] = (uint32_t)server_of(c, a->keys[i], klen);
        p->count[p->where[i]]++;
    }
}

/*
 * Connects the servers that have keys, then checks each key against its
 * server: a key whose server is down or whose limits it exceeds gets that
 * status here. Counts what will be sent.
 */
static void check_servers(struct kvs_op *op, const struct op_args *a, struct batch_plan *p)
{
    kvs_client *c = op->c;
    for (size_t s = 0; s < c->nservers; s++)
        p->conn_err[s] =
            p->count[s] ? c->servers[s].ops->connect(c->servers[s].conn, &p->lims[s]) : 0;
    memset(p->count, 0, c->nservers * sizeof(*p->count));
    for (size_t i = 0; i < a->n; i++) {
        uint32_t s = p->where[i];
        if (s == NO_SERVER) continue;
        int st = p->conn_err[s] ? p->conn_err[s] : check_limits(a, i, p->klens[i], &p->lims[s]);
        if (st < 0) {
            kvc_op_set_result(op, (uint32_t)i, st);
            p->where[i] = NO_SERVER;
            continue;
        }
        p->count[s]++;
    }
}

/* Groups the keys to send per server, in call order, and submits one req per server. */
static void submit_parts(struct kvs_op *op, const struct op_args *a, struct batch_plan *p)
{
    kvs_client *c = op->c;
    uint32_t at = 0, nreqs = 0;
    for (size_t s = 0; s < c->nservers; s++) {
        p->begin[s] = p->fill[s] = at;
        at += p->count[s];
        if (p->count[s]) nreqs++;
    }
    for (size_t i = 0; i < a->n; i++)
        if (p->where[i] != NO_SERVER)
            fill_key(&op->keys[p->fill[p->where[i]]++], a, i, p->klens[i]);

    /* Count every part before submitting any: a part may complete at once. */
    atomic_fetch_add(&op->parts, nreqs);
    uint32_t r = 0;
    for (size_t s = 0; s < c->nservers; s++) {
        if (!p->count[s]) continue;
        init_req(&op->reqs[r], op, &op->keys[p->begin[s]], p->count[s]);
        c->servers[s].ops->submit(c->servers[s].conn, &op->reqs[r]);
        r++;
    }
}

/*
 * Several keys: validate, route, connect the servers involved, group the
 * valid keys per server (in call order) and submit one req per server.
 * Returns 0, or -ENOMEM before anything was started.
 */
static int launch_batch(struct kvs_op *op, const struct op_args *a)
{
    struct batch_plan p;
    void *mem = plan_alloc(&p, op->c->nservers, a->n);
    if (!mem) return -ENOMEM;
    route_keys(op, a, &p);
    check_servers(op, a, &p);
    submit_parts(op, a, &p);
    free(mem);
    return 0;
}

int kvc_op_launch(struct kvs_op *op, const struct op_args *a)
{
    op->epoch = kvc_outstanding_inc(op->c);
    int rc = 0;
    if (a->n == 1 && !op->keys) /* stack or single-key op */
        launch_single(op, a);
    else if (a->n > 0)
        rc = launch_batch(op, a);
    if (rc < 0) {
        kvc_outstanding_dec(op->c, op->epoch);
        return rc;
    }
    kvc_op_put(op, true);
    return 0;
}

void kvc_op_run_per_server(struct kvs_op *op)
{
    kvs_client *c = op->c;
    op->epoch = kvc_outstanding_inc(c);
    /* Count every part before submitting any: a part may complete at once. */
    atomic_fetch_add(&op->parts, c->nservers);
    for (size_t s = 0; s < c->nservers; s++)
        c->servers[s].ops->submit(c->servers[s].conn, &op->reqs[s]);
    kvc_op_put(op, true);
    kvc_op_wait(op);
}

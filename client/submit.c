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
    req->done = kvc_req_done;
    req->arg = op;
}

/* One key: no routing tables, no allocation. */
static void launch_single(struct kvs_op *op, const struct op_args *a)
{
    kvs_client *c = op->c;
    size_t klen = 0;
    int st = check_key(a, 0, &klen);
    struct server_link *s = &c->servers[0];
    if (st == 0 && c->nservers > 1)
        s = &c->servers[kvs_route_pick(c->server_hashes, c->nservers,
                                       kvs_route_key_hash(a->keys[0], klen))];
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
            kvc_op_set_result(op, (uint32_t)i, st);
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
            kvc_op_set_result(op, (uint32_t)i, st);
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

/*
 * client.c - libkvstore's public API (include/kvstore.h): kvs_open and
 * kvs_close, and the calls that start work - single-key, async, batch.
 *
 * Every call, single-key or batch, sync or async, goes through one path:
 * an op is built for n keys (op.c) and launched (submit.c: local checks,
 * routing, one struct kvs_req per server, all in flight at once); the op
 * completes when its last part does. Sync calls wait for the op on the
 * caller's stack (no allocation for single keys). client_int.h lists the
 * other rooms: flush, stats, config, fork, remove.
 */
#include "client_int.h"

#include "status.h"

#include <errno.h>
#include <stdlib.h>

#define CLOSE_GRACE_MS 1000 /* kvs_close waits timeout + this for ops in flight */

/* ---- open / close ---- */

static void client_free(kvs_client *c)
{
    kvs_auth_wipe(c->cfg.auth_secret, sizeof(c->cfg.auth_secret));
    for (size_t s = 0; s < c->nservers; s++)
        if (c->servers[s].conn) c->servers[s].ops->destroy(c->servers[s].conn);
    kvc_buffers_fini(c); /* after the connections: kvstored unmapped them as they closed */
    kvc_defer_fini(c);
    kvc_flush_fini(c);
    free(c->server_hashes);
    free(c->servers);
    free(c);
}

kvs_client *kvs_open(const char *servers)
{
    kvs_client *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    kvc_flush_init(c);
    kvc_buffers_init(c);
    pthread_mutex_init(&c->defer_mu, NULL);
    kvc_defer_init(c);
    int rc = kvc_config_load(c, servers);
    if (rc < 0) goto fail;
    for (size_t s = 0; s < c->nservers; s++) {
        rc = c->servers[s].ops->create(&c->servers[s].ep, &c->cfg, &c->servers[s].conn);
        if (rc < 0) goto fail;
    }
    kvc_fork_track(c);
    return c;
fail:
    client_free(c);
    errno = -rc;
    return NULL;
}

void kvs_close(kvs_client *c)
{
    if (!c) return;
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms + CLOSE_GRACE_MS;
    if (kvc_wait_drained(c, -1, deadline) < 0)
        kvs_log(KVS_LOG_WARN, "kvs_close: %ld ops still in flight; failing them",
                kvc_in_flight(c, -1));
    kvc_fork_untrack(c);
    kvc_log_counters(c);
    client_free(c);
}

/* ---- single-key calls ---- */

/* A sync single-key call on the caller's stack. */
static ssize_t single_sync(kvs_client *c, uint8_t opcode, const char *key, const void *val,
                           void *buf, size_t len)
{
    if (!c) return -EINVAL;
    struct kvs_op op;
    kvc_op_init(&op, c, opcode, 1, false);
    op.out_ssz = &op.single_result;
    struct op_args a = {
        .opcode = opcode, .n = 1, .keys = &key, .vals = &val, .bufs = &buf, .lens = &len};
    kvc_op_launch(&op, &a);
    return kvc_op_wait(&op);
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
    kvc_op_init(op, c, opcode, 1, true);
    op->out_ssz = &op->single_result;
    struct op_args a = {
        .opcode = opcode, .n = 1, .keys = &key, .vals = &val, .bufs = &buf, .lens = &len};
    kvc_op_launch(op, &a); /* the single path copies what it needs out of a */
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
    ssize_t rc = kvc_op_wait(op);
    kvc_op_free(op);
    return rc;
}

/* ---- batch calls ---- */

/* Checks a batch call's arrays; 0 or -EINVAL. */
static int check_batch(kvs_client *c, const struct op_args *a, const void *out)
{
    if (!c) return -EINVAL;
    if (a->n == 0) return 0;
    if (!a->keys || !out) return -EINVAL;
    if (a->iovs || a->iovcnt) return a->iovs && a->iovcnt && a->n <= UINT32_MAX ? 0 : -EINVAL;
    if (!a->lens) return -EINVAL;
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
    struct kvs_op *op = kvc_op_alloc(c, a->opcode, a->n);
    if (!op) return -ENOMEM;
    op->out_int = out_int;
    op->out_ssz = out_ssz;
    op->done = done;
    op->arg = arg;
    if (!done && out) *out = op; /* before launch: with done set, op may be gone at once */
    rc = kvc_op_launch(op, a);
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
    rc = (int)kvc_op_wait(op);
    kvc_op_free(op);
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

/* ---- scatter-gather batches ---- */

static struct op_args iov_args(uint8_t opcode, size_t n, const char *const keys[],
                               const struct iovec *const iovs[], const size_t iovcnt[])
{
    return (struct op_args){.opcode = opcode, .n = n, .keys = keys, .iovs = iovs, .iovcnt = iovcnt};
}

int kvs_batch_putv(kvs_client *c, size_t n, const char *const keys[],
                   const struct iovec *const iovs[], const size_t iovcnt[], int status[])
{
    struct op_args a = iov_args(KVS_OP_PUT, n, keys, iovs, iovcnt);
    return batch_sync(c, &a, status, NULL);
}

int kvs_batch_getv(kvs_client *c, size_t n, const char *const keys[],
                   const struct iovec *const iovs[], const size_t iovcnt[], ssize_t results[])
{
    struct op_args a = iov_args(KVS_OP_GET, n, keys, iovs, iovcnt);
    return batch_sync(c, &a, NULL, results);
}

int kvs_batch_putv_async(kvs_client *c, size_t n, const char *const keys[],
                         const struct iovec *const iovs[], const size_t iovcnt[], int status[],
                         kvs_done_fn done, void *arg, kvs_op **op)
{
    struct op_args a = iov_args(KVS_OP_PUT, n, keys, iovs, iovcnt);
    if (!done && !op) return -EINVAL;
    return batch_start(c, &a, status, NULL, done, arg, op);
}

int kvs_batch_getv_async(kvs_client *c, size_t n, const char *const keys[],
                         const struct iovec *const iovs[], const size_t iovcnt[], ssize_t results[],
                         kvs_done_fn done, void *arg, kvs_op **op)
{
    struct op_args a = iov_args(KVS_OP_GET, n, keys, iovs, iovcnt);
    if (!done && !op) return -EINVAL;
    return batch_start(c, &a, NULL, results, done, arg, op);
}

/* ---- memory registration (RDMA; no-ops on TCP) ---- */

int kvs_register_buffer(kvs_client *c, void *ptr, size_t len)
{
    if (!c || !ptr || len == 0) return -EINVAL;
    for (size_t s = 0; s < c->nservers; s++) {
        struct server_link *sv = &c->servers[s];
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
        struct server_link *sv = &c->servers[s];
        if (!sv->ops->unreg_mem) continue;
        int rc = sv->ops->unreg_mem(sv->conn, ptr);
        if (rc < 0 && first == 0) first = rc;
    }
    return first;
}

/* ---- error names ---- */

const char *kvs_strerror(int status)
{
    return kvs_status_text(status);
}

const char *kvs_version(void)
{
    return KVS_VERSION_STRING;
}

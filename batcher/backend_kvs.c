/*
 * backend_kvs.c - struct kvb_backend_ops over one libkvstore client (see
 * backend_kvs.h). Every call into libkvstore is a backend call (backend.h).
 */
#include "backend_kvs.h"

#include <errno.h>
#include <stdlib.h>

struct kvs_backend {
    const struct kvb_kvs_calls *calls;
    kvs_client *client;
};

/*
 * A batch call: a backend call (backend.h) in which libkvstore may run the
 * batch's done callback inline, on this thread, when the batch completes
 * inside the call (every RDMA batch does): done_cb never nests a send in
 * there (batcher.c, submit_depth) and the batcher holds no lock while it
 * submits, so the hand-off to libkvstore's completion thread would only add
 * a wake-up to each batch. The thread is the program's: batch_call_end puts
 * back the setting batch_call_begin found (returned), whatever the program
 * chose for its own calls.
 */
static int batch_call_begin(const struct kvs_backend *k)
{
    kvb_backend_call_begin();
    return k->calls->inline_callbacks ? k->calls->inline_callbacks(1) : 0;
}

static void batch_call_end(const struct kvs_backend *k, int was)
{
    if (k->calls->inline_callbacks) k->calls->inline_callbacks(was);
    kvb_backend_call_end();
}

static int kvs_be_put(void *ctx, unsigned group, size_t n, const char *const keys[],
                      const void *const vals[], const size_t lens[], int status[], kvs_done_fn done,
                      void *arg)
{
    struct kvs_backend *k = ctx;
    (void)group; /* libkvstore's puts have one kind */
    kvs_op *op = NULL;
    int was = batch_call_begin(k);
    int rc = k->calls->batch_put_async(k->client, n, keys, vals, lens, status, done, arg, &op);
    batch_call_end(k, was);
    return rc;
}

static int kvs_be_get(void *ctx, size_t n, const char *const keys[], void *const bufs[],
                      const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg)
{
    struct kvs_backend *k = ctx;
    kvs_op *op = NULL;
    int was = batch_call_begin(k);
    int rc = k->calls->batch_get_async(k->client, n, keys, bufs, caps, results, done, arg, &op);
    batch_call_end(k, was);
    return rc;
}

static int kvs_be_exists(void *ctx, size_t n, const char *const keys[], int results[],
                         kvs_done_fn done, void *arg)
{
    struct kvs_backend *k = ctx;
    kvs_op *op = NULL;
    int was = batch_call_begin(k);
    int rc = k->calls->batch_exists_async(k->client, n, keys, results, done, arg, &op);
    batch_call_end(k, was);
    return rc;
}

static int kvs_be_put_one(void *ctx, unsigned group, const char *key, const void *val, size_t len)
{
    struct kvs_backend *k = ctx;
    (void)group;
    kvb_backend_call_begin();
    int rc = k->calls->put(k->client, key, val, len);
    kvb_backend_call_end();
    return rc;
}

static ssize_t kvs_be_get_one(void *ctx, const char *key, void *buf, size_t cap)
{
    struct kvs_backend *k = ctx;
    kvb_backend_call_begin();
    ssize_t r = k->calls->get(k->client, key, buf, cap);
    kvb_backend_call_end();
    return r;
}

static int kvs_be_exists_one(void *ctx, const char *key)
{
    struct kvs_backend *k = ctx;
    kvb_backend_call_begin();
    int rc = k->calls->exists(k->client, key);
    kvb_backend_call_end();
    return rc;
}

static const struct kvb_backend_ops kvs_ops = {
    .put = kvs_be_put,
    .get = kvs_be_get,
    .exists = kvs_be_exists,
    .put_one = kvs_be_put_one,
    .get_one = kvs_be_get_one,
    .exists_one = kvs_be_exists_one,
    .release = free,
};

int kvb_backend_kvs(const struct kvb_kvs_calls *calls, kvs_client *c, struct kvb_backend *be)
{
    struct kvs_backend *k = malloc(sizeof(*k));
    if (!k) return -ENOMEM;
    k->calls = calls;
    k->client = c;
    be->ops = &kvs_ops;
    be->ctx = k;
    return 0;
}

/*
 * backend.h - what the batcher sends its batches to: a library's batch API
 * as a vtable (struct kvb_backend_ops) and the context it runs on.
 *
 * Implementations: backend_kvs.c (libkvstore's asynchronous batch calls, one
 * client), tests/unit/fake_backend.h (an in-memory store for the batcher's
 * tests). A backend over a library whose batch calls block (Mooncake's) runs
 * them on threads of its own and reports each batch through `done`, as an
 * asynchronous library does.
 */
#ifndef KVB_BACKEND_H
#define KVB_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "kvstore.h"

/*
 * The batch calls take the arguments of kvs_batch_*_async without the client
 * and the op: they return 0 and call done(arg, keys that succeeded) exactly
 * once, later or before they return, after filling one result per key; or
 * they refuse the batch as a whole with a negative code (done not called),
 * and the batcher then makes the single-key calls. The single-key calls are
 * synchronous and return what kvs_put / kvs_get / kvs_exists return; the
 * batcher also uses them when it must not batch (the size probe, an op sent
 * alone to an idle store). put and put_one also get the group of their puts
 * (kvb_put_group; every put of a batch has the same one): 0 for kvs_put, a
 * replicate config and a copy mode for Mooncake's puts. release, if not NULL, is called once, when
 * the batcher that owns the backend is freed and calls it no more.
 */
struct kvb_backend_ops {
    int (*put)(void *ctx, unsigned group, size_t n, const char *const keys[],
               const void *const vals[], const size_t lens[], int status[], kvs_done_fn done,
               void *arg);
    int (*get)(void *ctx, size_t n, const char *const keys[], void *const bufs[],
               const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg);
    int (*exists)(void *ctx, size_t n, const char *const keys[], int results[], kvs_done_fn done,
                  void *arg);
    int (*put_one)(void *ctx, unsigned group, const char *key, const void *val, size_t len);
    ssize_t (*get_one)(void *ctx, const char *key, void *buf, size_t cap);
    int (*exists_one)(void *ctx, const char *key);
    void (*release)(void *ctx);
};

struct kvb_backend {
    const struct kvb_backend_ops *ops;
    void *ctx;
};

/* Releases be (ops->release), for a backend no batcher took over or one it left. */
void kvb_backend_release(struct kvb_backend *be);

/*
 * The re-entry guard of a backend's library calls. A backend brackets every
 * call it makes into its library with kvb_backend_call_begin / _end; while
 * the calling thread is inside one, kvb_in_backend_call() is true. The shim
 * passes an interposed call made there straight to the real function: it is
 * work done on behalf of a call the shim already batched (the path: the
 * Mooncake drop-in's batch call, made by the Mooncake backend, reaches
 * libkvstore's kvs_* calls, which the shim also interposes), so it is never
 * batched a second time and never waits on the batch it serves.
 */
void kvb_backend_call_begin(void);
void kvb_backend_call_end(void);
bool kvb_in_backend_call(void);

#endif

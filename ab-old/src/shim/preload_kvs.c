/*
 * preload_kvs.c - the interposed kvs_* calls (shim/libkvbatch.map).
 *
 * Each starts with kvb_shim_init and then goes to its client's batcher, or
 * straight to the real function - counted as a direct call - when the shim
 * cannot do its job: not batching (policy off, a bad variable, no
 * libkvstore), a client not opened through the shim (or past the table),
 * arguments the batch path must not see (the real function returns its own
 * status for those), or after the exit flush. A call made inside a backend's
 * library call (kvb_in_backend_call, batcher/backend.h) is work done for a
 * call the shim already batched and counted: it goes straight through,
 * uncounted.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "shim.h"

static void order_after_puts(kvs_client *c, size_t n, const char *const keys[], bool changes);

/* Counts a call that went straight to the real function, with its result r. */
static void count_direct(enum kvb_opkind k, ssize_t r, size_t put_len)
{
    kvb_count_direct(&shim.stats, k, r, put_len);
}

EXPORT kvs_client *kvs_open(const char *servers)
{
    kvb_shim_init();
    if (!shim.real.kvs_open) {
        errno = ENOSYS;
        return NULL;
    }
    kvs_client *c = shim.real.kvs_open(servers);
    if (c) kvb_shim_client_opened(c);
    return c;
}

EXPORT void kvs_close(kvs_client *c)
{
    kvb_shim_init();
    if (shim.real.kvs_close) kvb_shim_client_close(c);
}

EXPORT int kvs_put(kvs_client *c, const char *key, const void *val, size_t len)
{
    kvb_shim_init();
    if (!shim.real.kvs_put) return -ENOSYS;
    if (kvb_in_backend_call()) return shim.real.kvs_put(c, key, val, len);
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    if (b && kvb_args_batchable(key, val, len)) return kvb_put(b, key, val, len);
    int r = shim.real.kvs_put(c, key, val, len);
    count_direct(KVB_OP_PUT, r, len);
    return r;
}

EXPORT ssize_t kvs_get(kvs_client *c, const char *key, void *buf, size_t cap)
{
    kvb_shim_init();
    if (!shim.real.kvs_get) return -ENOSYS;
    if (kvb_in_backend_call()) return shim.real.kvs_get(c, key, buf, cap);
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    if (b && kvb_args_batchable(key, buf, cap)) return kvb_get(b, key, buf, cap);
    ssize_t r = shim.real.kvs_get(c, key, buf, cap);
    count_direct(KVB_OP_GET, r, 0);
    return r;
}

EXPORT int kvs_exists(kvs_client *c, const char *key)
{
    kvb_shim_init();
    if (!shim.real.kvs_exists) return -ENOSYS;
    if (kvb_in_backend_call()) return shim.real.kvs_exists(c, key);
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    if (b && kvb_args_batchable(key, NULL, 0)) return kvb_exists(b, key);
    int r = shim.real.kvs_exists(c, key);
    count_direct(KVB_OP_EXISTS, r, 0);
    return r;
}

/*
 * An async op handed to the caller is one of three things, told apart by the
 * low two bits of the pointer (all three are malloc'ed, so 16-byte aligned):
 * a batcher op (SHIM_TAG), a pass-through op wrapped so that kvs_wait can
 * count its result like a synchronous call's (DIRECT_TAG), or the library's
 * own op, untouched (a call made inside a backend call, or no memory for a
 * wrapper).
 */
#define SHIM_TAG   ((uintptr_t)1)
#define DIRECT_TAG ((uintptr_t)2)
#define TAG_MASK   ((uintptr_t)3)

struct direct_op {
    kvs_op *op;
    enum kvb_opkind kind;
    size_t len; /* a put's value length: its bytes count once it succeeds */
};

/* A wrapper for a pass-through async op, or NULL: then the op goes unwrapped. */
static struct direct_op *direct_new(kvs_op **caller)
{
    return caller ? malloc(sizeof(struct direct_op)) : NULL;
}

/*
 * Finishes a pass-through async call issued into d (or, when d is NULL,
 * straight into *caller): counts a call that failed at once like a
 * synchronous one, and hands out the wrapped op so that kvs_wait counts its
 * result. Without a wrapper (no memory) the op is counted as issued only.
 */
static int direct_async(enum kvb_opkind kind, size_t len, kvs_op **caller, struct direct_op *d,
                        int rc)
{
    if (rc < 0 || !d) {
        if (rc < 0) {
            count_direct(kind, rc, 0);
        } else {
            kvb_count(&shim.stats.direct_ops[kind], 1);
            kvb_count(&shim.stats.ops[kind], 1);
        }
        free(d);
        if (rc < 0 && caller) *caller = NULL;
        return rc;
    }
    d->kind = kind;
    d->len = len;
    *caller = (kvs_op *)((uintptr_t)d | DIRECT_TAG);
    return rc;
}

/* Hands out the batcher op of a call that returned rc (NULL when it failed). */
static int shim_async(int rc, struct kvb_op *kop, kvs_op **op)
{
    *op = rc == 0 ? (kvs_op *)((uintptr_t)kop | SHIM_TAG) : NULL;
    return rc;
}

EXPORT int kvs_put_async(kvs_client *c, const char *key, const void *val, size_t len, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_put_async) return -ENOSYS;
    if (kvb_in_backend_call()) return shim.real.kvs_put_async(c, key, val, len, op);
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    if (b && op && kvb_args_batchable(key, val, len)) {
        struct kvb_op *kop = NULL;
        int rc = kvb_put_async(b, key, val, len, &kop);
        return shim_async(rc, kop, op);
    }
    struct direct_op *d = direct_new(op);
    return direct_async(KVB_OP_PUT, len, op, d,
                        shim.real.kvs_put_async(c, key, val, len, d ? &d->op : op));
}

EXPORT int kvs_get_async(kvs_client *c, const char *key, void *buf, size_t cap, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_get_async) return -ENOSYS;
    if (kvb_in_backend_call()) return shim.real.kvs_get_async(c, key, buf, cap, op);
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    /* A size probe (NULL, 0) has no batch form: the real call answers it, after key's puts. */
    if (b && op && buf && kvb_args_batchable(key, buf, cap)) {
        struct kvb_op *kop = NULL;
        int rc = kvb_get_async(b, key, buf, cap, &kop);
        return shim_async(rc, kop, op);
    }
    if (b && key) order_after_puts(c, 1, &key, false);
    struct direct_op *d = direct_new(op);
    return direct_async(KVB_OP_GET, 0, op, d,
                        shim.real.kvs_get_async(c, key, buf, cap, d ? &d->op : op));
}

EXPORT ssize_t kvs_wait(kvs_op *op)
{
    kvb_shim_init();
    uintptr_t tag = (uintptr_t)op & TAG_MASK;
    if (tag == SHIM_TAG) return kvb_wait((struct kvb_op *)((uintptr_t)op & ~TAG_MASK));
    if (!shim.real.kvs_wait) return -ENOSYS;
    if (tag != DIRECT_TAG) return shim.real.kvs_wait(op);
    struct direct_op *d = (struct direct_op *)((uintptr_t)op & ~TAG_MASK);
    ssize_t r = shim.real.kvs_wait(d->op);
    count_direct(d->kind, r, d->len);
    free(d);
    return r;
}

/*
 * Inside a backend call, flushing the batcher would wait for the very batch
 * being sent: only the real flush runs there. A write-behind failure of a
 * client closed meanwhile (shim.lost_error) is returned by the first flush
 * that has none of its own.
 */
EXPORT int kvs_flush(kvs_client *c)
{
    kvb_shim_init();
    if (!shim.real.kvs_flush) return -ENOSYS;
    struct kvb_batcher *b = kvb_in_backend_call() ? NULL : kvb_shim_batcher_for(c);
    int mine = b ? kvb_flush(b, KVB_FLUSH_EXPLICIT, UINT64_MAX) : 0;
    int theirs = shim.real.kvs_flush(c);
    if (mine < 0) return mine;
    int lost = atomic_exchange(&shim.lost_error, 0);
    return lost < 0 ? lost : theirs;
}

/*
 * The calls the shim does not batch but that touch keys: each is ordered
 * after this process's pending puts of its keys (write-behind puts, async
 * puts not yet sent or acknowledged) - and one that changes them (a remove,
 * a batch put) after their pending async gets too - and then passed to the
 * real function, uncounted: it sees those puts and overtakes none of those
 * ops, as without the shim. keys NULL: every pending put (kvs_remove_matching); an
 * invalid call (NULL arrays) is refused by the real function. Inside a
 * backend call nothing waits (the batch being sent holds the slot).
 */
/*
 * Depth of the program's done callbacks of batch calls this thread is
 * running (done_trampoline). A call made there is passed through at once,
 * not ordered: the callback runs on the library's thread (TCP's reader), and
 * waiting for a pending put's batch would wait for that very thread to read
 * the batch's reply - forever.
 */
static __thread int in_done_callback;

/* changes: the call changes keys (a remove, a batch put): it also waits for their async gets. */
static void order_after_puts(kvs_client *c, size_t n, const char *const keys[], bool changes)
{
    if (kvb_in_backend_call() || in_done_callback) return;
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    if (b && changes)
        kvb_order_after_ops(b, n, keys);
    else if (b)
        kvb_order_after_puts(b, n, keys);
}

/* The program's done callback of a batch call, run through done_trampoline. */
struct done_wrap {
    kvs_done_fn done;
    void *arg;
};

static void done_trampoline(void *arg, ssize_t nok)
{
    struct done_wrap w = *(struct done_wrap *)arg;
    free(arg);
    in_done_callback++;
    w.done(w.arg, nok);
    in_done_callback--;
}

/*
 * A wrapper that marks the program's done callback while it runs, or NULL:
 * no callback, or no memory (then the callback runs unmarked, and a batch
 * call it makes on a key with a pending put waits as any other).
 */
static struct done_wrap *wrap_done(kvs_done_fn done, void *arg)
{
    struct done_wrap *w = done ? malloc(sizeof(*w)) : NULL;
    if (w) *w = (struct done_wrap){done, arg};
    return w;
}

/* The result of a batch call made with w: w is the library's unless the call was refused. */
static int wrapped_call(struct done_wrap *w, int rc)
{
    if (rc != 0) free(w); /* refused: done is not called */
    return rc;
}

EXPORT int kvs_remove(kvs_client *c, const char *key)
{
    kvb_shim_init();
    if (!shim.real.kvs_remove) return -ENOSYS;
    if (key) order_after_puts(c, 1, &key, true);
    return shim.real.kvs_remove(c, key);
}

EXPORT ssize_t kvs_remove_matching(kvs_client *c, const char *pattern)
{
    kvb_shim_init();
    if (!shim.real.kvs_remove_matching) return -ENOSYS;
    order_after_puts(c, 0, NULL, true);
    return shim.real.kvs_remove_matching(c, pattern);
}

/*
 * A small synchronous batch call joins the forming batch of c's batcher
 * (kvb_batch_call: each key's result as the call's own, its return the
 * number that succeeded): true when it did, *nok set. Not in a backend call
 * or a done callback (it waits for the batch), and never for a call the
 * batcher does not merge (large, or with a key it does not carry).
 */
static bool merged_call(kvs_client *c, int kind, size_t n, const char *const keys[],
                        void *const ptrs[], const size_t lens[], int ist[], ssize_t sres[],
                        int *nok)
{
    if (kvb_in_backend_call() || in_done_callback) return false;
    if (shim.cfg.batch_calls != KVB_CALLS_MERGE) return false;
    struct kvb_batcher *b = kvb_shim_batcher_for(c);
    size_t ok = 0;
    if (!b || !kvb_batch_call(b, kind, 0, n, keys, ptrs, lens, ist, sres, &ok)) return false;
    *nok = (int)ok;
    return true;
}

EXPORT int kvs_batch_put(kvs_client *c, size_t n, const char *const keys[],
                         const void *const vals[], const size_t lens[], int status[])
{
    int nok;
    kvb_shim_init();
    if (!shim.real.kvs_batch_put) return -ENOSYS;
    if (merged_call(c, KVB_OP_PUT, n, keys, (void *const *)vals, lens, status, NULL, &nok))
        return nok;
    if (keys) order_after_puts(c, n, keys, true);
    return shim.real.kvs_batch_put(c, n, keys, vals, lens, status);
}

EXPORT int kvs_batch_get(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                         const size_t caps[], ssize_t results[])
{
    int nok;
    kvb_shim_init();
    if (!shim.real.kvs_batch_get) return -ENOSYS;
    if (merged_call(c, KVB_OP_GET, n, keys, bufs, caps, NULL, results, &nok)) return nok;
    if (keys) order_after_puts(c, n, keys, false);
    return shim.real.kvs_batch_get(c, n, keys, bufs, caps, results);
}

EXPORT int kvs_batch_exists(kvs_client *c, size_t n, const char *const keys[], int results[])
{
    int nok;
    kvb_shim_init();
    if (!shim.real.kvs_batch_exists) return -ENOSYS;
    if (merged_call(c, KVB_OP_EXISTS, n, keys, NULL, NULL, results, NULL, &nok)) return nok;
    if (keys) order_after_puts(c, n, keys, false);
    return shim.real.kvs_batch_exists(c, n, keys, results);
}

EXPORT int kvs_batch_put_async(kvs_client *c, size_t n, const char *const keys[],
                               const void *const vals[], const size_t lens[], int status[],
                               kvs_done_fn done, void *arg, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_put_async) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, true);
    struct done_wrap *w = wrap_done(done, arg);
    return wrapped_call(w, shim.real.kvs_batch_put_async(c, n, keys, vals, lens, status,
                                                         w ? done_trampoline : done,
                                                         w ? (void *)w : arg, op));
}

EXPORT int kvs_batch_get_async(kvs_client *c, size_t n, const char *const keys[],
                               void *const bufs[], const size_t caps[], ssize_t results[],
                               kvs_done_fn done, void *arg, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_get_async) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, false);
    struct done_wrap *w = wrap_done(done, arg);
    return wrapped_call(w, shim.real.kvs_batch_get_async(c, n, keys, bufs, caps, results,
                                                         w ? done_trampoline : done,
                                                         w ? (void *)w : arg, op));
}

EXPORT int kvs_batch_exists_async(kvs_client *c, size_t n, const char *const keys[], int results[],
                                  kvs_done_fn done, void *arg, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_exists_async) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, false);
    struct done_wrap *w = wrap_done(done, arg);
    return wrapped_call(w, shim.real.kvs_batch_exists_async(c, n, keys, results,
                                                            w ? done_trampoline : done,
                                                            w ? (void *)w : arg, op));
}

EXPORT int kvs_batch_putv(kvs_client *c, size_t n, const char *const keys[],
                          const struct iovec *const iovs[], const size_t iovcnt[], int status[])
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_putv) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, true);
    return shim.real.kvs_batch_putv(c, n, keys, iovs, iovcnt, status);
}

EXPORT int kvs_batch_getv(kvs_client *c, size_t n, const char *const keys[],
                          const struct iovec *const iovs[], const size_t iovcnt[],
                          ssize_t results[])
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_getv) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, false);
    return shim.real.kvs_batch_getv(c, n, keys, iovs, iovcnt, results);
}

EXPORT int kvs_batch_putv_async(kvs_client *c, size_t n, const char *const keys[],
                                const struct iovec *const iovs[], const size_t iovcnt[],
                                int status[], kvs_done_fn done, void *arg, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_putv_async) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, true);
    struct done_wrap *w = wrap_done(done, arg);
    return wrapped_call(w, shim.real.kvs_batch_putv_async(c, n, keys, iovs, iovcnt, status,
                                                          w ? done_trampoline : done,
                                                          w ? (void *)w : arg, op));
}

EXPORT int kvs_batch_getv_async(kvs_client *c, size_t n, const char *const keys[],
                                const struct iovec *const iovs[], const size_t iovcnt[],
                                ssize_t results[], kvs_done_fn done, void *arg, kvs_op **op)
{
    kvb_shim_init();
    if (!shim.real.kvs_batch_getv_async) return -ENOSYS;
    if (keys) order_after_puts(c, n, keys, false);
    struct done_wrap *w = wrap_done(done, arg);
    return wrapped_call(w, shim.real.kvs_batch_getv_async(c, n, keys, iovs, iovcnt, results,
                                                          w ? done_trampoline : done,
                                                          w ? (void *)w : arg, op));
}

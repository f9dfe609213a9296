/*
 * batcher.h - the time/size-window batcher: turns single-key calls (and
 * small batch calls, kvb_batch_call) from many threads into calls of the
 * library's asynchronous batch API.
 *
 * It reaches the library below only through a backend vtable (backend.h:
 * the shim plugs in libkvstore's batch calls, backend_kvs.c; unit tests plug
 * in a fake); of the rest it uses include/kvstore.h's types and common/'s
 * clock and futex.
 * A batch is sent at the first of: its window since the first op, max_ops,
 * max_bytes; adaptive policy also sends at once when nothing is in flight,
 * and auto tunes the window and batches in flight while it runs.
 * Completion wakes exactly the callers of that batch.
 */
#ifndef KVB_BATCHER_H
#define KVB_BATCHER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "kvstore.h"
#include "stats.h"

/*
 * ADAPTIVE: a batch is sent at once when nothing is in flight or every
 * caller expected has joined it, else at the window; a sync op whose batch
 * would go alone at once is its caller's own single-key call. AUTO: the
 * same rules, with the window and the in-flight limit picked while running
 * by the controller (controller.h) under window_ns and max_inflight as
 * ceilings. FIXED: every batch waits for the window or a size limit.
 */
enum kvb_batch_policy { KVB_BATCH_ADAPTIVE, KVB_BATCH_FIXED, KVB_BATCH_AUTO };

struct kvb_params {
    enum kvb_batch_policy policy;
    uint64_t window_ns;
    uint32_t max_ops;           /* >= 1 */
    uint64_t max_bytes;         /* value bytes (put lengths, get capacities) per batch */
    uint32_t max_inflight;      /* >= 1 */
    int writeback;              /* kvb_put returns once the value is copied */
    uint64_t writeback_bytes;   /* bound on copied, unsent/unacknowledged put values */
    uint64_t latency_target_ns; /* auto: the p99 op latency to stay within; 0 = none */
};

struct kvb_batcher;
struct kvb_op;

/*
 * NULL (errno set) on bad params or out of memory; be then stays the
 * caller's. Otherwise the batcher owns be and releases it when it is freed.
 * stats must outlive the batcher.
 */
struct kvb_batcher *kvb_batcher_create(const struct kvb_params *p, const struct kvb_backend *be,
                                       struct kvb_stats *stats);
/*
 * Sends what is queued, waits for it (up to timeout_ns; UINT64_MAX = no
 * bound), stops the flusher thread and frees b. Returns 0, or -EBUSY when
 * batches were still in flight at the timeout: b is then left allocated
 * (their completions still point to it) and only the thread is stopped.
 * Write-behind failures no kvb_flush returned are dropped: a caller that
 * must report them flushes with kvb_flush_counted first.
 */
int kvb_batcher_destroy(struct kvb_batcher *b, uint64_t timeout_ns);

/*
 * 1 if a call with these arguments can go through the batcher, 0 if it must
 * go to the real function (which then returns its own error code): NULL or
 * empty or oversize key, NULL value/buffer with a length.
 */
int kvb_args_batchable(const char *key, const void *ptr, size_t len);

/* Synchronous calls: same results as kvs_put / kvs_get / kvs_exists. */
int kvb_put(struct kvb_batcher *b, const char *key, const void *val, size_t len);
/*
 * kvb_put of a put in group (kvb_put is group 0): puts of different groups
 * never share a batch, and the backend is told the group of each batch (the
 * Mooncake backend's groups are replicate configs). Write-behind ordering
 * holds across groups.
 */
int kvb_put_group(struct kvb_batcher *b, unsigned group, const char *key, const void *val,
                  size_t len);
ssize_t kvb_get(struct kvb_batcher *b, const char *key, void *buf, size_t cap);
int kvb_exists(struct kvb_batcher *b, const char *key);

/*
 * Asynchronous calls: 0 and *op set, or a negative code; key/val/buf live
 * until kvb_wait. Until it completes, a later put of the same key (any
 * form) waits for an async get, as a later get waits for an async put.
 */
int kvb_put_async(struct kvb_batcher *b, const char *key, const void *val, size_t len,
                  struct kvb_op **op);
int kvb_get_async(struct kvb_batcher *b, const char *key, void *buf, size_t cap,
                  struct kvb_op **op);
/* Waits for op, frees it, returns its result. */
ssize_t kvb_wait(struct kvb_op *op);

/*
 * A small synchronous batch call (kvs_batch_put / _get / _exists, or
 * Mooncake's batch calls) merged into the forming batch of its kind, as its
 * keys' single-key calls would be: kind KVB_OP_PUT (ptrs the values, group
 * as kvb_put_group), KVB_OP_GET (ptrs the buffers) or KVB_OP_EXISTS (ptrs
 * and lens unused). All n keys go in one batch, in call order (a forming
 * batch they would overflow, or of another group, is sealed first), after
 * this process's pending puts of them (and, for puts, as kvb_order_after_ops,
 * its pending async gets); the call waits for that batch. Each
 * key's result is what the backend's batch call gives it (ist for put and
 * exists, sres for get), *nok the number >= 0, and the call returns 1.
 * Returns 0, with nothing done, for a call it does not merge - n 0, n >=
 * max_ops, value bytes >= max_bytes, a NULL array, a key kvb_args_batchable
 * refuses, a get with a NULL buffer, out of memory: the caller makes the
 * real call. Not from a backend's completion (it waits).
 */
int kvb_batch_call(struct kvb_batcher *b, int kind, unsigned group, size_t n,
                   const char *const keys[], void *const ptrs[], const size_t lens[], int ist[],
                   ssize_t sres[], size_t *nok);

/*
 * For a call on keys that the batcher does not carry (kvs_remove, the batch
 * calls, Mooncake's calls): returns once every put of one of keys that was
 * pending in b when it was called (write-behind or async, queued or in
 * flight) has completed, sending what holds them - so the call that follows
 * sees those puts and is not overtaken by them. keys NULL: every pending
 * put (a call whose keys are not known, kvs_remove_matching). NULL entries
 * are skipped. Costs one lock round when none of keys is pending. A
 * write-behind put that failed keeps its error for the next kvb_flush.
 */
void kvb_order_after_puts(struct kvb_batcher *b, size_t n, const char *const keys[]);

/*
 * kvb_order_after_puts for a call that changes keys (kvs_remove,
 * kvs_remove_matching, the batch puts, Mooncake's removes and batch put):
 * it also waits for the async gets of keys pending when it was called
 * (kvb_get_async, queued or in flight), so that the change does not reach
 * the store before a get the program made first.
 */
void kvb_order_after_ops(struct kvb_batcher *b, size_t n, const char *const keys[]);

/*
 * Sends everything queued now (counted under reason) and waits until every
 * batch formed before the call has completed, up to timeout_ns (UINT64_MAX
 * = no bound). Returns the first write-behind failure since the previous
 * flush (and forgets it), -ETIMEDOUT if the wait timed out, else 0.
 */
int kvb_flush(struct kvb_batcher *b, enum kvb_flush_reason reason, uint64_t timeout_ns);
/*
 * kvb_flush that also says, in *failed (if not NULL), how many write-behind
 * puts failed since the previous flush that returned a failure - the count
 * behind the first failure it returns (0 when it returns none).
 */
int kvb_flush_counted(struct kvb_batcher *b, enum kvb_flush_reason reason, uint64_t timeout_ns,
                      uint64_t *failed);

#endif

/*
 * shim.h - the state of libkvbatch.so, and what its preload_*.c files share.
 *
 *   preload.c          lifecycle: the real functions (dlsym), the
 *                      configuration, the stats file, fork and exit
 *   preload_clients.c  backend binding: each client opened through the shim
 *                      and its batcher over the kvs backend
 *   preload_kvs.c      the interposed kvs_* entry points
 *   preload_mooncake.c the interposed mooncake_store_* entry points, each
 *                      store handle with its batcher over the Mooncake
 *                      backend (its state is its own: nothing of it runs
 *                      until a program calls Mooncake's C API)
 *
 * These files exist only in the preloaded library (the unit-test archive
 * holds config.c, metrics.c and statsfile.c). Modelled on rdma-core's
 * librdmacm/preload.c: the real functions in one struct filled once with
 * dlsym(RTLD_NEXT); every interposed call starts with kvb_shim_init() and
 * falls through to the real function whenever the shim cannot do its job.
 */
#ifndef KVB_SHIM_H
#define KVB_SHIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../batcher/backend_kvs.h"
#include "../batcher/batcher.h"
#include "config.h"
#include "kvstore.h"
#include "metrics.h"
#include "../batcher/stats.h"
#include "statsfile.h"

#define EXPORT __attribute__((visibility("default")))

/* libkvstore's functions, as dlsym(RTLD_NEXT) found them. */
struct kvb_real_calls {
    kvs_client *(*kvs_open)(const char *);
    void (*kvs_close)(kvs_client *);
    int (*kvs_put)(kvs_client *, const char *, const void *, size_t);
    ssize_t (*kvs_get)(kvs_client *, const char *, void *, size_t);
    int (*kvs_exists)(kvs_client *, const char *);
    int (*kvs_put_async)(kvs_client *, const char *, const void *, size_t, kvs_op **);
    int (*kvs_get_async)(kvs_client *, const char *, void *, size_t, kvs_op **);
    ssize_t (*kvs_wait)(kvs_op *);
    int (*kvs_flush)(kvs_client *);
    /* Passed through, after the pending puts of their keys (preload_kvs.c's ordered calls): */
    int (*kvs_remove)(kvs_client *, const char *);
    int (*kvs_batch_put)(kvs_client *, size_t, const char *const[], const void *const[],
                         const size_t[], int[]);
    int (*kvs_batch_get)(kvs_client *, size_t, const char *const[], void *const[], const size_t[],
                         ssize_t[]);
    int (*kvs_batch_exists)(kvs_client *, size_t, const char *const[], int[]);
    ssize_t (*kvs_remove_matching)(kvs_client *, const char *); /* optional */
    int (*kvs_batch_put_async)(kvs_client *, size_t, const char *const[], const void *const[],
                               const size_t[], int[], kvs_done_fn, void *, kvs_op **);
    int (*kvs_batch_get_async)(kvs_client *, size_t, const char *const[], void *const[],
                               const size_t[], ssize_t[], kvs_done_fn, void *, kvs_op **);
    int (*kvs_batch_exists_async)(kvs_client *, size_t, const char *const[], int[], kvs_done_fn,
                                  void *, kvs_op **);
    int (*kvs_client_counters)(kvs_client *, kvs_counter_cb, void *); /* optional */
    /* Scatter-gather batches (optional: newer than the rest), ordered and passed through: */
    int (*kvs_batch_putv)(kvs_client *, size_t, const char *const[], const struct iovec *const[],
                          const size_t[], int[]);
    int (*kvs_batch_getv)(kvs_client *, size_t, const char *const[], const struct iovec *const[],
                          const size_t[], ssize_t[]);
    int (*kvs_batch_putv_async)(kvs_client *, size_t, const char *const[],
                                const struct iovec *const[], const size_t[], int[], kvs_done_fn,
                                void *, kvs_op **);
    int (*kvs_batch_getv_async)(kvs_client *, size_t, const char *const[],
                                const struct iovec *const[], const size_t[], ssize_t[], kvs_done_fn,
                                void *, kvs_op **);
};

#define KVB_SHIM_MAX_CLIENTS 64

/* A client opened through the shim (an entry of the client table). */
struct kvb_shim_client {
    _Atomic(kvs_client *) client; /* NULL once kvs_close starts: calls stop finding it */
    struct kvb_batcher *b;        /* NULL: its calls pass through; table_lock */
    unsigned gen;                 /* the fork generation b belongs to; table_lock */
    kvs_client *counted;          /* until the real kvs_close: its transport counters; table_lock */
};

struct kvb_shim {
    /* Set once by kvb_shim_init, under init_lock; read-only once `ready`. */
    _Atomic bool ready;
    pthread_mutex_t init_lock;
    struct kvb_real_calls real;
    struct kvb_kvs_calls kvs_calls; /* the real calls the kvs backend makes */
    struct kvb_config cfg;
    bool batching; /* false: pass-through (policy off, a bad variable, no libkvstore) */

    /* This process's counters and start (both reset in a forked child). */
    struct kvb_stats stats;
    double start_time; /* Unix time */

    _Atomic unsigned fork_gen; /* bumped in every forked child */
    /*
     * The exit flush has begun: from then on every call goes straight to the
     * real function, so nothing is queued in a batcher that will not be
     * flushed again (an atexit handler of the program that runs after the
     * shim's, a C++ destructor, another thread).
     */
    _Atomic bool exited;
    /*
     * The first write-behind failure of a client that kvs_close had to
     * report (it returns nothing): the next kvs_flush of any client returns
     * it, so the process still learns that acknowledged puts were lost.
     */
    _Atomic int lost_error;

    /* The client table (preload_clients.c). Lock order: statsfile.lock, then table_lock. */
    pthread_mutex_t table_lock;
    struct kvb_shim_client clients[KVB_SHIM_MAX_CLIENTS];
    _Atomic unsigned table_version; /* bumped on every close and fork: thread caches go stale */
    struct kvb_transport_totals retired; /* closed clients' counters (totals never go down) */

    struct kvb_statsfile statsfile;
    struct kvb_transport_totals transport; /* the stats writer's scratch; statsfile.lock */
};

extern struct kvb_shim shim;

/* Once per process: real functions, configuration, stats writer, fork and exit hooks. */
void kvb_shim_init(void);

/* One line on stderr, if KVBATCH_LOG lets this level through. */
void kvb_shim_log(enum kvs_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- preload_clients.c ---- */

/* Lists c, just opened (with a batcher if the shim batches), so its calls find it. */
void kvb_shim_client_opened(kvs_client *c);

/*
 * The batcher of c for this process, or NULL: pass through (not batching,
 * after the exit flush, c not opened through the shim). A forked child gets
 * a new batcher for a client its parent opened, on first use.
 */
struct kvb_batcher *kvb_shim_batcher_for(kvs_client *c);

/* Unlists c, flushes and frees its batcher, and closes it for real. */
void kvb_shim_client_close(kvs_client *c);

/* At exit: flushes every batcher of this process, each bounded by KVBATCH_EXIT_TIMEOUT_MS. */
void kvb_shim_flush_all(void);

/* libkvstore's transport counters over the clients opened through the shim, closed ones too. */
void kvb_shim_transport_totals(struct kvb_transport_totals *t);

/* The batcher parameters KVBATCH_* give (every backend's batchers). */
struct kvb_params kvb_shim_params(void);

/* ---- preload_mooncake.c ---- */

/* The Mooncake backend's counters, or NULL while no Mooncake store was batched in this process. */
const struct kvb_stats *kvb_shim_mc_stats(void);

/* At exit: flushes the batcher of every Mooncake store of this process (bounded as above). */
void kvb_shim_mc_flush_all(void);

#endif

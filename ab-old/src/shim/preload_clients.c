/*
 * preload_clients.c - the shim's backend binding: every client opened
 * through the shim is listed in a table (shim.clients), with its batcher
 * over the kvs backend (batcher/backend_kvs.c) for the process, or fork
 * generation, that made it. kvs_open returns the real client; calls find
 * its batcher here, through a per-thread cache.
 */
#include <errno.h>
#include <string.h>

#include "shim.h"

/* kvs_close waits this long for a closing client's batches before the real close. */
#define CLOSE_TIMEOUT_NS (60ull * 1000000000ull)

/*
 * The last client this thread looked up (the one per-thread piece of the
 * shim's state): valid while the fork generation and the table version it
 * was read at still hold.
 */
static __thread struct {
    kvs_client *c;
    struct kvb_batcher *b;
    unsigned gen, version;
} cache;

struct kvb_params kvb_shim_params(void)
{
    const struct kvb_config *cfg = &shim.cfg;
    struct kvb_params p = {
        .policy = cfg->policy == KVB_POLICY_FIXED  ? KVB_BATCH_FIXED
                  : cfg->policy == KVB_POLICY_AUTO ? KVB_BATCH_AUTO
                                                   : KVB_BATCH_ADAPTIVE,
        .window_ns = cfg->window_ns,
        .max_ops = cfg->max_ops,
        .max_bytes = cfg->max_bytes,
        .max_inflight = cfg->max_inflight,
        .writeback = cfg->put_mode == KVB_PUT_WRITEBACK,
        .writeback_bytes = cfg->writeback_bytes,
        .latency_target_ns = cfg->latency_target_ns,
    };
    return p;
}

/* A batcher over c's kvs backend, configured by KVBATCH_*; NULL (logged) if none. */
static struct kvb_batcher *make_batcher(kvs_client *c)
{
    struct kvb_params p = kvb_shim_params();
    struct kvb_backend be;
    struct kvb_batcher *b = NULL;
    int rc = kvb_backend_kvs(&shim.kvs_calls, c, &be);
    if (rc == 0 && !(b = kvb_batcher_create(&p, &be, &shim.stats))) {
        rc = -errno;
        kvb_backend_release(&be);
    }
    if (!b)
        kvb_shim_log(KVS_LOG_WARN,
                     "kvbatch: cannot create a batcher (%s); this client is not batched",
                     strerror(-rc));
    return b;
}

void kvb_shim_client_opened(kvs_client *c)
{
    if (atomic_load(&shim.exited)) return; /* its calls pass through: nothing to find */
    /* Passing through, a client is still listed: the stats file shows its transport counters. */
    struct kvb_batcher *b = shim.batching ? make_batcher(c) : NULL;
    if (shim.batching && !b) return;
    pthread_mutex_lock(&shim.table_lock);
    struct kvb_shim_client *e = NULL;
    for (int i = 0; i < KVB_SHIM_MAX_CLIENTS && !e; i++)
        if (!atomic_load(&shim.clients[i].client) && !shim.clients[i].counted) e = &shim.clients[i];
    if (e) {
        e->b = b;
        e->gen = atomic_load(&shim.fork_gen);
        e->counted = c;
        atomic_store_explicit(&e->client, c, memory_order_release);
        b = NULL;
    } else if (shim.batching) {
        kvb_shim_log(KVS_LOG_WARN, "kvbatch: more than %d clients open; this one is not batched",
                     KVB_SHIM_MAX_CLIENTS);
    }
    pthread_mutex_unlock(&shim.table_lock);
    if (b) kvb_batcher_destroy(b, 0);
}

struct kvb_batcher *kvb_shim_batcher_for(kvs_client *c)
{
    unsigned gen = atomic_load_explicit(&shim.fork_gen, memory_order_relaxed);
    unsigned version = atomic_load_explicit(&shim.table_version, memory_order_acquire);
    if (!c || !shim.batching || atomic_load_explicit(&shim.exited, memory_order_relaxed))
        return NULL;
    if (cache.c == c && cache.gen == gen && cache.version == version) return cache.b;
    struct kvb_shim_client *e = NULL;
    for (int i = 0; i < KVB_SHIM_MAX_CLIENTS && !e; i++)
        if (atomic_load_explicit(&shim.clients[i].client, memory_order_acquire) == c)
            e = &shim.clients[i];
    if (!e) return NULL; /* not opened through the shim, or the table was full */
    if (e->gen != gen) {
        pthread_mutex_lock(&shim.table_lock);
        if (e->gen != gen) {
            e->b = make_batcher(c); /* the parent's stays with the parent */
            e->gen = gen;
        }
        pthread_mutex_unlock(&shim.table_lock);
        kvb_statsfile_start(&shim.statsfile, gen);
    }
    cache.c = c;
    cache.b = e->b;
    cache.gen = gen;
    cache.version = version;
    return cache.b;
}

/* Moves c's transport counters into the retired totals, just before the real close. */
static void retire_counters(kvs_client *c)
{
    pthread_mutex_lock(&shim.table_lock);
    for (int i = 0; i < KVB_SHIM_MAX_CLIENTS; i++) {
        if (shim.clients[i].counted != c) continue;
        if (shim.real.kvs_client_counters)
            shim.real.kvs_client_counters(c, kvb_transport_add, &shim.retired);
        shim.clients[i].counted = NULL;
        break;
    }
    pthread_mutex_unlock(&shim.table_lock);
}

/*
 * n write-behind puts of a closing client failed after their kvs_put
 * returned 0, first the first failure: a warning, and the failure is kept
 * for the next kvs_flush (kvs_close returns nothing).
 */
static void report_lost_at_close(uint64_t n, int first)
{
    if (n == 0) return;
    kvb_shim_log(KVS_LOG_WARN,
                 "kvbatch: kvs_close: %llu write-behind put%s not stored (first: %s); the next "
                 "kvs_flush returns it",
                 (unsigned long long)n, n == 1 ? " was" : "s were", strerror(-first));
    int none = 0;
    atomic_compare_exchange_strong(&shim.lost_error, &none, first);
}

void kvb_shim_client_close(kvs_client *c)
{
    struct kvb_batcher *b = NULL;
    bool owned = false;
    unsigned gen = atomic_load(&shim.fork_gen);
    /* After the exit flush the batcher is left as it is: only the real close. */
    if (c && !atomic_load(&shim.exited)) {
        pthread_mutex_lock(&shim.table_lock);
        for (int i = 0; i < KVB_SHIM_MAX_CLIENTS; i++) {
            struct kvb_shim_client *e = &shim.clients[i];
            if (atomic_load(&e->client) != c) continue;
            b = e->b;
            owned = e->gen == gen;
            atomic_store(&e->client, NULL);
            e->b = NULL;
            atomic_fetch_add(&shim.table_version, 1);
            break;
        }
        pthread_mutex_unlock(&shim.table_lock);
    }
    uint64_t lost = 0;
    int first = 0, rc = 0;
    if (b && owned) {
        first = kvb_flush_counted(b, KVB_FLUSH_EXPLICIT, CLOSE_TIMEOUT_NS, &lost);
        rc = kvb_batcher_destroy(b, 0); /* -EBUSY: the flush timed out */
    }
    if (c) retire_counters(c);
    shim.real.kvs_close(c); /* completes whatever is still in flight */
    if (rc == -EBUSY) {
        uint64_t more = 0;
        int late = kvb_flush_counted(b, KVB_FLUSH_EXPLICIT, 0, &more);
        if (more && !lost) first = late;
        lost += more;
        kvb_batcher_destroy(b, 0);
    }
    report_lost_at_close(lost, first);
}

void kvb_shim_flush_all(void)
{
    unsigned gen = atomic_load(&shim.fork_gen);
    uint64_t timeout = shim.cfg.exit_timeout_ns;
    for (int i = 0; i < KVB_SHIM_MAX_CLIENTS; i++) {
        struct kvb_shim_client *e = &shim.clients[i];
        if (!atomic_load(&e->client) || e->gen != gen || !e->b) continue;
        uint64_t lost = 0;
        int rc = kvb_flush_counted(e->b, KVB_FLUSH_EXIT, timeout, &lost);
        if (rc == -ETIMEDOUT)
            kvb_shim_log(KVS_LOG_WARN, "kvbatch: exit: pending ops not acknowledged within %llums",
                         (unsigned long long)(timeout / 1000000));
        else if (rc < 0)
            kvb_shim_log(KVS_LOG_WARN,
                         "kvbatch: exit: %llu write-behind put%s not stored (first: %s)",
                         (unsigned long long)lost, lost == 1 ? " was" : "s were", strerror(-rc));
    }
}

/*
 * table_lock keeps kvs_close from freeing a client meanwhile: it retires the
 * client's counters under that lock before the real close.
 */
void kvb_shim_transport_totals(struct kvb_transport_totals *t)
{
    pthread_mutex_lock(&shim.table_lock);
    *t = shim.retired;
    for (int i = 0; i < KVB_SHIM_MAX_CLIENTS && shim.real.kvs_client_counters; i++)
        if (shim.clients[i].counted)
            shim.real.kvs_client_counters(shim.clients[i].counted, kvb_transport_add, t);
    pthread_mutex_unlock(&shim.table_lock);
}

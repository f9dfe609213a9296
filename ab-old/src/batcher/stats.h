/*
 * stats.h - the batcher's counters: plain atomics updated without any lock
 * (relaxed; they are statistics, exactness comes from counting each event
 * exactly once). The batcher only counts; shim/metrics.c renders them in the
 * Prometheus text format for the stats file.
 * Per-op figures are aggregated per batch by the completing thread, so the
 * calling threads touch no shared counter on the hot path.
 */
#ifndef KVB_STATS_H
#define KVB_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "status.h"

enum kvb_opkind { KVB_OP_PUT, KVB_OP_GET, KVB_OP_EXISTS, KVB_OP_KINDS };

enum kvb_flush_reason {
    KVB_FLUSH_WINDOW,
    KVB_FLUSH_MAX_OPS,
    KVB_FLUSH_MAX_BYTES,
    KVB_FLUSH_IDLE,
    KVB_FLUSH_EXPLICIT,
    KVB_FLUSH_EXIT,
    KVB_FLUSH_GROUP,  /* a put of another group came (kvb_put_group) */
    KVB_FLUSH_DIRECT, /* a sync op sent alone as its caller's own single-key call */
    KVB_FLUSH_REASONS
};

#define KVB_HIST_MAX_BUCKETS 24

/* A fixed-bucket histogram; bounds are in the unit the histogram is fed with. */
struct kvb_hist {
    const uint64_t *bounds; /* nbounds upper bounds, ascending; +Inf is implicit */
    size_t nbounds;
    _Atomic uint64_t bucket[KVB_HIST_MAX_BUCKETS + 1]; /* not cumulative; last = +Inf */
    _Atomic uint64_t sum;
    _Atomic uint64_t count;
};

/*
 * One batcher's window and in-flight limit in effect and, under policy auto
 * (batcher/controller.h), what its controller holds: gauges the batcher
 * stores whenever they change. levels is 0 under any other policy.
 */
struct kvb_batcher_gauges {
    _Atomic int used; /* 1 while a batcher holds this slot */
    _Atomic int64_t window_ns, max_inflight;
    _Atomic int64_t level, levels, reason; /* reason: enum kvb_ctl_reason */
    _Atomic int64_t mean_ns, p99_ns;       /* the last epoch's op latency */
};

/* Batchers whose setting one struct kvb_stats shows (as many as the shim batches per backend). */
#define KVB_STATS_BATCHERS 64

struct kvb_stats {
    _Atomic uint64_t ops[KVB_OP_KINDS];
    _Atomic uint64_t batches[KVB_OP_KINDS];
    _Atomic uint64_t bytes[KVB_OP_KINDS];
    _Atomic uint64_t direct_ops[KVB_OP_KINDS]; /* passed to the real single-key call */
    _Atomic uint64_t errors[KVB_OP_KINDS][KVS_STATUS_CLASSES]; /* by common/status.h class */
    _Atomic uint64_t flushes[KVB_FLUSH_REASONS];
    _Atomic uint64_t writeback_errors;
    _Atomic int64_t queued_ops;       /* gauge: accepted, not yet sent */
    _Atomic int64_t inflight_batches; /* gauge */
    _Atomic int64_t writeback_bytes;  /* gauge: value bytes held for write-behind */
    /* Each batcher's setting in effect, in the slot it holds (kvb_stats_claim_slot). */
    struct kvb_batcher_gauges batcher[KVB_STATS_BATCHERS];
    _Atomic int64_t batchers;      /* gauge: batchers counting here, with a slot or without */
    _Atomic uint64_t tune_changes; /* policy auto: level changes, all batchers */
    struct kvb_hist batch_ops;     /* ops per batch */
    struct kvb_hist batch_bytes;   /* value bytes per batch */
    struct kvb_hist queue_delay;   /* ns from enqueue to send */
    struct kvb_hist op_latency;    /* ns from enqueue to completion */
    /*
     * The class a negative result counts under in errors[][]: NULL for the
     * status table's (libkvstore's codes, kvs_status_class); a backend
     * whose library has codes of its own sets its mapping after
     * kvb_stats_init (the Mooncake backend: kvb_mc_status_class).
     */
    enum kvs_status_class (*classify)(long status);
};

/* Zeroes s and attaches the bucket bounds. */
void kvb_stats_init(struct kvb_stats *s);

/*
 * A batcher's slot in s->batcher (the lowest free one: its index is the
 * batcher label of the stats file), or -1 when all are taken (its setting
 * is then not shown). Counts the batcher in s->batchers either way.
 */
int kvb_stats_claim_slot(struct kvb_stats *s);

/* Gives back what kvb_stats_claim_slot took (slot -1: only the count). */
void kvb_stats_release_slot(struct kvb_stats *s, int slot);

/* Bucket index of v in h (nbounds for +Inf). */
size_t kvb_hist_index(const struct kvb_hist *h, uint64_t v);

/* Adds `count` observations whose total is `sum` into bucket idx (pre-aggregated per batch). */
void kvb_hist_add_bucket(struct kvb_hist *h, size_t idx, uint64_t count, uint64_t sum);

static inline void kvb_hist_observe(struct kvb_hist *h, uint64_t v)
{
    kvb_hist_add_bucket(h, kvb_hist_index(h, v), 1, v);
}

static inline void kvb_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline void kvb_gauge(_Atomic int64_t *g, int64_t d)
{
    atomic_fetch_add_explicit(g, d, memory_order_relaxed);
}

/* Value bytes an op moved, given its result r: a put's length once stored, what a get read. */
static inline uint64_t kvb_result_bytes(enum kvb_opkind k, ssize_t r, size_t put_len)
{
    if (k == KVB_OP_PUT) return r == 0 ? put_len : 0;
    if (k == KVB_OP_GET) return r > 0 ? (uint64_t)r : 0;
    return 0;
}

/* Counts one op's result: success adds nothing, a negative status one error. */
static inline void kvb_count_result(struct kvb_stats *s, enum kvb_opkind k, long status)
{
    if (status < 0)
        kvb_count(&s->errors[k][s->classify ? s->classify(status) : kvs_status_class(status)], 1);
}

/* Counts a call passed straight to the library's single-key function, with its result r. */
static inline void kvb_count_direct(struct kvb_stats *s, enum kvb_opkind k, ssize_t r,
                                    size_t put_len)
{
    kvb_count(&s->direct_ops[k], 1);
    kvb_count(&s->ops[k], 1);
    kvb_count(&s->bytes[k], kvb_result_bytes(k, r, put_len));
    kvb_count_result(s, k, r);
}

#endif

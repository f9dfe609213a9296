/*
 * stats.c - bucket bounds, status classes and histogram updates for struct
 * kvb_stats (shim/metrics.c renders them).
 */
#include "stats.h"

#include <errno.h>
#include <string.h>

static const uint64_t batch_ops_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
static const uint64_t batch_bytes_bounds[] = {1024,    4096,    16384,    65536,    262144,
                                              1048576, 4194304, 16777216, 67108864, 268435456};
/* Nanoseconds: 1us .. 1s, about three buckets per decade. */
static const uint64_t delay_bounds[] = {1000,      2000,      5000,      10000,     20000,
                                        50000,     100000,    200000,    500000,    1000000,
                                        2000000,   5000000,   10000000,  20000000,  50000000,
                                        100000000, 200000000, 500000000, 1000000000};

/* Points h at bounds (the arrays above are all shorter than KVB_HIST_MAX_BUCKETS). */
static void hist_setup(struct kvb_hist *h, const uint64_t *bounds, size_t n)
{
    h->bounds = bounds;
    h->nbounds = n;
}

void kvb_stats_init(struct kvb_stats *s)
{
    memset(s, 0, sizeof(*s));
    hist_setup(&s->batch_ops, batch_ops_bounds,
               sizeof(batch_ops_bounds) / sizeof(batch_ops_bounds[0]));
    hist_setup(&s->batch_bytes, batch_bytes_bounds,
               sizeof(batch_bytes_bounds) / sizeof(batch_bytes_bounds[0]));
    hist_setup(&s->queue_delay, delay_bounds, sizeof(delay_bounds) / sizeof(delay_bounds[0]));
    hist_setup(&s->op_latency, delay_bounds, sizeof(delay_bounds) / sizeof(delay_bounds[0]));
}

int kvb_stats_claim_slot(struct kvb_stats *s)
{
    atomic_fetch_add_explicit(&s->batchers, 1, memory_order_relaxed);
    for (int i = 0; i < KVB_STATS_BATCHERS; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&s->batcher[i].used, &free_slot, 1)) return i;
    }
    return -1;
}

void kvb_stats_release_slot(struct kvb_stats *s, int slot)
{
    atomic_fetch_sub_explicit(&s->batchers, 1, memory_order_relaxed);
    if (slot >= 0 && slot < KVB_STATS_BATCHERS) atomic_store(&s->batcher[slot].used, 0);
}

size_t kvb_hist_index(const struct kvb_hist *h, uint64_t v)
{
    size_t lo = 0, hi = h->nbounds;
    while (lo < hi) { /* first bound >= v */
        size_t mid = (lo + hi) / 2;
        if (h->bounds[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void kvb_hist_add_bucket(struct kvb_hist *h, size_t idx, uint64_t count, uint64_t sum)
{
    if (count == 0) return;
    if (idx > h->nbounds) idx = h->nbounds;
    atomic_fetch_add_explicit(&h->bucket[idx], count, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, sum, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, count, memory_order_relaxed);
}

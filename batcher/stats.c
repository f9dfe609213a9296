/*
 * stats.c - bucket bounds, labels and histogram updates for struct kvb_stats.
 */
#include "stats.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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

enum kvb_status_class kvb_status_class(long status)
{
    switch (-status) {
    case ENOENT:
        return KVB_ST_ENOENT;
    case ERANGE:
        return KVB_ST_ERANGE;
    case E2BIG:
        return KVB_ST_E2BIG;
    case ENOSPC:
        return KVB_ST_ENOSPC;
    case EINVAL:
        return KVB_ST_EINVAL;
    case ENOMEM:
        return KVB_ST_ENOMEM;
    case ECONNREFUSED:
        return KVB_ST_ECONNREFUSED;
    case ECONNRESET:
        return KVB_ST_ECONNRESET;
    case ETIMEDOUT:
        return KVB_ST_ETIMEDOUT;
    case EIO:
        return KVB_ST_EIO;
    case EPROTO:
        return KVB_ST_EPROTO;
    default:
        return KVB_ST_OTHER;
    }
}

const char *kvb_status_label(enum kvb_status_class c)
{
    static const char *const names[KVB_ST_CLASSES] = {
        "ENOENT",       "ERANGE",     "E2BIG",     "ENOSPC", "EINVAL", "ENOMEM",
        "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EIO",    "EPROTO", "other"};
    return (unsigned)c < KVB_ST_CLASSES ? names[c] : "other";
}

const char *kvb_op_label(enum kvb_opkind k)
{
    static const char *const names[KVB_OP_KINDS] = {"put", "get", "exists"};
    return (unsigned)k < KVB_OP_KINDS ? names[k] : "?";
}

const char *kvb_flush_label(enum kvb_flush_reason r)
{
    static const char *const names[KVB_FLUSH_REASONS] = {"window", "max_ops",  "max_bytes",
                                                         "idle",   "explicit", "exit"};
    return (unsigned)r < KVB_FLUSH_REASONS ? names[r] : "?";
}

/* An appender that counts what it would write past the end. */
struct out {
    char *buf;
    size_t cap, len;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static uint64_t load(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* One counter family with an op label. */
static void render_per_op(struct out *o, const char *name, const char *help,
                          const _Atomic uint64_t v[KVB_OP_KINDS])
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int k = 0; k < KVB_OP_KINDS; k++)
        put(o, "%s{op=\"%s\"} %llu\n", name, kvb_op_label(k), (unsigned long long)load(&v[k]));
}

/* One histogram; scale divides bounds and sum (1e9 turns ns into seconds). */
static void render_hist(struct out *o, const char *name, const char *help, const struct kvb_hist *h,
                        double scale)
{
    uint64_t cum = 0;
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < h->nbounds; i++) {
        cum += load(&h->bucket[i]);
        put(o, "%s_bucket{le=\"%.9g\"} %llu\n", name, (double)h->bounds[i] / scale,
            (unsigned long long)cum);
    }
    cum += load(&h->bucket[h->nbounds]);
    put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    put(o, "%s_sum %.9g\n", name, (double)load(&h->sum) / scale);
    /* count equals the +Inf bucket by construction; a reader can check it. */
    put(o, "%s_count %llu\n", name, (unsigned long long)cum);
}

size_t kvb_stats_render(const struct kvb_stats *s, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    render_per_op(&o, "kvbatch_ops_total", "Single-key calls handled, per op.", s->ops);
    render_per_op(&o, "kvbatch_batches_total", "Batches sent to the store, per op.", s->batches);
    render_per_op(&o, "kvbatch_bytes_total", "Value bytes moved (put: sent, get: received).",
                  s->bytes);
    render_per_op(&o, "kvbatch_direct_ops_total",
                  "Calls passed straight to the real single-key function (not batched).",
                  s->direct_ops);

    put(&o, "# HELP kvbatch_errors_total Calls that returned a negative status, per op and "
            "status.\n# TYPE kvbatch_errors_total counter\n");
    for (int k = 0; k < KVB_OP_KINDS; k++)
        for (int c = 0; c < KVB_ST_CLASSES; c++) {
            uint64_t v = load(&s->errors[k][c]);
            /* ENOENT on get is an ordinary miss: always shown so rates work. */
            if (v || c == KVB_ST_ENOENT)
                put(&o, "kvbatch_errors_total{op=\"%s\",status=\"%s\"} %llu\n", kvb_op_label(k),
                    kvb_status_label(c), (unsigned long long)v);
        }

    put(&o, "# HELP kvbatch_flush_total Batches sent, per reason.\n"
            "# TYPE kvbatch_flush_total counter\n");
    for (int r = 0; r < KVB_FLUSH_REASONS; r++)
        put(&o, "kvbatch_flush_total{reason=\"%s\"} %llu\n", kvb_flush_label(r),
            (unsigned long long)load(&s->flushes[r]));

    put(&o,
        "# HELP kvbatch_writeback_errors_total Write-behind puts that failed after "
        "returning 0.\n# TYPE kvbatch_writeback_errors_total counter\n"
        "kvbatch_writeback_errors_total %llu\n",
        (unsigned long long)load(&s->writeback_errors));

    put(&o,
        "# HELP kvbatch_queued_ops Ops accepted and not yet sent.\n"
        "# TYPE kvbatch_queued_ops gauge\nkvbatch_queued_ops %lld\n",
        (long long)atomic_load_explicit(&s->queued_ops, memory_order_relaxed));
    put(&o,
        "# HELP kvbatch_inflight_batches Batches sent and not yet completed.\n"
        "# TYPE kvbatch_inflight_batches gauge\nkvbatch_inflight_batches %lld\n",
        (long long)atomic_load_explicit(&s->inflight_batches, memory_order_relaxed));
    put(&o,
        "# HELP kvbatch_writeback_pending_bytes Value bytes held for write-behind puts.\n"
        "# TYPE kvbatch_writeback_pending_bytes gauge\nkvbatch_writeback_pending_bytes %lld\n",
        (long long)atomic_load_explicit(&s->writeback_bytes, memory_order_relaxed));

    render_hist(&o, "kvbatch_batch_ops", "Ops per batch.", &s->batch_ops, 1.0);
    render_hist(&o, "kvbatch_batch_bytes", "Value bytes per batch.", &s->batch_bytes, 1.0);
    render_hist(&o, "kvbatch_queue_delay_seconds", "Time from a call to its batch being sent.",
                &s->queue_delay, 1e9);
    render_hist(&o, "kvbatch_op_latency_seconds", "Time from a call to its result.", &s->op_latency,
                1e9);
    return o.len;
}

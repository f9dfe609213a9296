/*
 * metrics.c - the stats file's text in the Prometheus text exposition format
 * (see metrics.h): HELP and TYPE lines, then the samples.
 */
#include "metrics.h"

#include "../batcher/controller.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static const char *op_label(enum kvb_opkind k)
{
    static const char *const names[KVB_OP_KINDS] = {"put", "get", "exists"};
    return (unsigned)k < KVB_OP_KINDS ? names[k] : "?";
}

static const char *flush_label(enum kvb_flush_reason r)
{
    static const char *const names[KVB_FLUSH_REASONS] = {
        "window", "max_ops", "max_bytes", "idle", "explicit", "exit", "group", "direct"};
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

/* HELP and TYPE lines of one metric family. */
static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The sources being rendered: every family has one sample set per source. */
struct sources {
    const struct kvb_stats_source *v;
    size_t n;
};

/* A member of a source's counters, at offset off. */
#define MEMBER(src, i, type, off) ((const type *)((const char *)(src)->v[i].s + (off)))

/* One counter family with an op label; off: the per-op array in struct kvb_stats. */
static void render_per_op(struct out *o, const struct sources *src, const char *name,
                          const char *help, size_t off)
{
    family(o, name, "counter", help);
    for (size_t i = 0; i < src->n; i++) {
        const _Atomic uint64_t *v = MEMBER(src, i, _Atomic uint64_t, off);
        for (int k = 0; k < KVB_OP_KINDS; k++)
            put(o, "%s{backend=\"%s\",op=\"%s\"} %llu\n", name, src->v[i].backend, op_label(k),
                (unsigned long long)load(&v[k]));
    }
}

/* One histogram (off: its member); scale divides bounds and sum (1e9 turns ns into seconds). */
static void render_hist(struct out *o, const struct sources *src, const char *name,
                        const char *help, size_t off, double scale)
{
    family(o, name, "histogram", help);
    for (size_t s = 0; s < src->n; s++) {
        const struct kvb_hist *h = MEMBER(src, s, struct kvb_hist, off);
        const char *be = src->v[s].backend;
        uint64_t cum = 0;
        for (size_t i = 0; i < h->nbounds; i++) {
            cum += load(&h->bucket[i]);
            put(o, "%s_bucket{backend=\"%s\",le=\"%.9g\"} %llu\n", name, be,
                (double)h->bounds[i] / scale, (unsigned long long)cum);
        }
        cum += load(&h->bucket[h->nbounds]);
        put(o, "%s_bucket{backend=\"%s\",le=\"+Inf\"} %llu\n", name, be, (unsigned long long)cum);
        put(o, "%s_sum{backend=\"%s\"} %.9g\n", name, be, (double)load(&h->sum) / scale);
        /* count equals the +Inf bucket by construction; a reader can check it. */
        put(o, "%s_count{backend=\"%s\"} %llu\n", name, be, (unsigned long long)cum);
    }
}

/* One gauge (off: its member), labelled by backend only. */
static void render_gauge(struct out *o, const struct sources *src, const char *name,
                         const char *help, size_t off)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < src->n; i++)
        put(o, "%s{backend=\"%s\"} %lld\n", name, src->v[i].backend,
            (long long)atomic_load_explicit(MEMBER(src, i, _Atomic int64_t, off),
                                            memory_order_relaxed));
}

/* kvbatch_errors_total{backend,op,status}; ENOENT always shown (an ordinary miss) so rates work. */
static void render_errors(struct out *o, const struct sources *src)
{
    family(o, "kvbatch_errors_total", "counter",
           "Calls that returned a negative status, per op and status.");
    for (size_t i = 0; i < src->n; i++)
        for (int k = 0; k < KVB_OP_KINDS; k++)
            for (int c = 0; c < KVS_STATUS_CLASSES; c++) {
                uint64_t v = load(&src->v[i].s->errors[k][c]);
                if (v || c == KVS_STATUS_C_ENOENT)
                    put(o, "kvbatch_errors_total{backend=\"%s\",op=\"%s\",status=\"%s\"} %llu\n",
                        src->v[i].backend, op_label(k), kvs_status_class_name(c),
                        (unsigned long long)v);
            }
}

static void render_flushes(struct out *o, const struct sources *src)
{
    family(o, "kvbatch_flush_total", "counter", "Batches sent, per reason.");
    for (size_t i = 0; i < src->n; i++)
        for (int r = 0; r < KVB_FLUSH_REASONS; r++)
            put(o, "kvbatch_flush_total{backend=\"%s\",reason=\"%s\"} %llu\n", src->v[i].backend,
                flush_label(r), (unsigned long long)load(&src->v[i].s->flushes[r]));
    family(o, "kvbatch_writeback_errors_total", "counter",
           "Write-behind puts that failed after returning 0.");
    for (size_t i = 0; i < src->n; i++)
        put(o, "kvbatch_writeback_errors_total{backend=\"%s\"} %llu\n", src->v[i].backend,
            (unsigned long long)load(&src->v[i].s->writeback_errors));
}

#define OFF(member) offsetof(struct kvb_stats, member)

#define KVB_TUNED_SOURCES_MAX 8 /* more than there are backends */

/* One gauge in seconds (off: its member, in ns), labelled by backend only. */
static void render_seconds(struct out *o, const struct sources *src, const char *name,
                           const char *help, size_t off)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < src->n; i++)
        put(o, "%s{backend=\"%s\"} %.9g\n", name, src->v[i].backend,
            (double)atomic_load_explicit(MEMBER(src, i, _Atomic int64_t, off),
                                         memory_order_relaxed) /
                1e9);
}

/*
 * The window and in-flight limit in effect and, for the sources under
 * policy auto (tune_levels > 0), what the controller holds, why it last set
 * it, how often it moved and the last epoch it scored.
 */
static void render_tuning(struct out *o, const struct sources *src)
{
    render_seconds(o, src, "kvbatch_window_seconds",
                   "The window in effect now (policy auto: the controller's choice).",
                   OFF(window_ns));
    render_gauge(o, src, "kvbatch_max_inflight",
                 "Batches in flight allowed now (policy auto: the controller's choice).",
                 OFF(max_inflight));
    struct kvb_stats_source tuned[KVB_TUNED_SOURCES_MAX];
    struct sources t = {tuned, 0};
    for (size_t i = 0; i < src->n && t.n < KVB_TUNED_SOURCES_MAX; i++)
        if (atomic_load_explicit(&src->v[i].s->tune_levels, memory_order_relaxed) > 0)
            tuned[t.n++] = src->v[i];
    if (t.n == 0) return;
    render_gauge(o, &t, "kvbatch_auto_level",
                 "The level the auto controller holds, 0 = most direct calls.", OFF(tune_level));
    render_gauge(o, &t, "kvbatch_auto_levels", "Levels on the auto controller's ladder.",
                 OFF(tune_levels));
    family(o, "kvbatch_auto_changes_total", "counter", "Level changes of the auto controller.");
    for (size_t i = 0; i < t.n; i++)
        put(o, "kvbatch_auto_changes_total{backend=\"%s\"} %llu\n", t.v[i].backend,
            (unsigned long long)load(&t.v[i].s->tune_changes));
    family(o, "kvbatch_auto_reason", "gauge", "Why the auto controller last set its level.");
    for (size_t i = 0; i < t.n; i++)
        put(o, "kvbatch_auto_reason{backend=\"%s\",reason=\"%s\"} 1\n", t.v[i].backend,
            kvb_ctl_reason_name((enum kvb_ctl_reason)atomic_load_explicit(&t.v[i].s->tune_reason,
                                                                          memory_order_relaxed)));
    render_seconds(o, &t, "kvbatch_auto_epoch_mean_seconds",
                   "Mean op latency of the last epoch the auto controller scored.",
                   OFF(tune_mean_ns));
    render_seconds(o, &t, "kvbatch_auto_epoch_p99_seconds",
                   "p99 op latency of the last epoch the auto controller scored.",
                   OFF(tune_p99_ns));
}

/* The families in the order of docs/shim.md's table. */
size_t kvb_stats_render(const struct kvb_stats_source *v, size_t n, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    struct sources src = {v, n};
    if (cap) buf[0] = '\0';
    render_per_op(&o, &src, "kvbatch_ops_total", "Single-key calls handled, per op.", OFF(ops));
    render_per_op(&o, &src, "kvbatch_batches_total", "Batches sent to the store, per op.",
                  OFF(batches));
    render_per_op(&o, &src, "kvbatch_bytes_total", "Value bytes moved (put: sent, get: received).",
                  OFF(bytes));
    render_per_op(&o, &src, "kvbatch_direct_ops_total",
                  "Calls passed straight to the real single-key function (not batched).",
                  OFF(direct_ops));
    render_errors(&o, &src);
    render_flushes(&o, &src);
    render_gauge(&o, &src, "kvbatch_queued_ops", "Ops accepted and not yet sent.", OFF(queued_ops));
    render_gauge(&o, &src, "kvbatch_inflight_batches", "Batches sent and not yet completed.",
                 OFF(inflight_batches));
    render_gauge(&o, &src, "kvbatch_writeback_pending_bytes",
                 "Value bytes held for write-behind puts.", OFF(writeback_bytes));
    render_tuning(&o, &src);
    render_hist(&o, &src, "kvbatch_batch_ops", "Ops per batch.", OFF(batch_ops), 1.0);
    render_hist(&o, &src, "kvbatch_batch_bytes", "Value bytes per batch.", OFF(batch_bytes), 1.0);
    render_hist(&o, &src, "kvbatch_queue_delay_seconds",
                "Time from a call to its batch being sent.", OFF(queue_delay), 1e9);
    render_hist(&o, &src, "kvbatch_op_latency_seconds", "Time from a call to its result.",
                OFF(op_latency), 1e9);
    return o.len;
}

size_t kvb_settings_render(const struct kvb_config *cfg, int passthrough, double start_time,
                           double now, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    put(&o,
        "# HELP kvbatch_info The shim's mode; pass-through is 1 when it does not batch.\n"
        "# TYPE kvbatch_info gauge\n"
        "kvbatch_info{policy=\"%s\",put_mode=\"%s\",passthrough=\"%d\"} 1\n"
        "# HELP kvbatch_setting_window_seconds KVBATCH_WINDOW_US in effect.\n"
        "# TYPE kvbatch_setting_window_seconds gauge\nkvbatch_setting_window_seconds %.9g\n"
        "# HELP kvbatch_setting_max_ops KVBATCH_MAX_OPS in effect.\n"
        "# TYPE kvbatch_setting_max_ops gauge\nkvbatch_setting_max_ops %u\n"
        "# HELP kvbatch_setting_max_bytes KVBATCH_MAX_BYTES in effect.\n"
        "# TYPE kvbatch_setting_max_bytes gauge\nkvbatch_setting_max_bytes %llu\n"
        "# HELP kvbatch_setting_max_inflight KVBATCH_MAX_INFLIGHT in effect.\n"
        "# TYPE kvbatch_setting_max_inflight gauge\nkvbatch_setting_max_inflight %u\n"
        "# HELP kvbatch_setting_writeback_bytes KVBATCH_WRITEBACK_BYTES in effect.\n"
        "# TYPE kvbatch_setting_writeback_bytes gauge\nkvbatch_setting_writeback_bytes %llu\n"
        "# HELP kvbatch_start_time_seconds When the shim started (Unix time).\n"
        "# TYPE kvbatch_start_time_seconds gauge\nkvbatch_start_time_seconds %.3f\n"
        "# HELP kvbatch_write_time_seconds When this file was written (Unix time).\n"
        "# TYPE kvbatch_write_time_seconds gauge\nkvbatch_write_time_seconds %.3f\n",
        kvb_policy_name(cfg->policy), kvb_put_mode_name(cfg->put_mode), passthrough ? 1 : 0,
        (double)cfg->window_ns / 1e9, cfg->max_ops, (unsigned long long)cfg->max_bytes,
        cfg->max_inflight, (unsigned long long)cfg->writeback_bytes, start_time, now);
    return o.len;
}

void kvb_transport_add(void *arg, const char *server, const char *name, uint64_t value)
{
    struct kvb_transport_totals *t = arg;
    for (unsigned i = 0; i < t->n; i++)
        if (strcmp(t->e[i].server, server) == 0 && strcmp(t->e[i].name, name) == 0) {
            t->e[i].value += value;
            return;
        }
    if (t->n == KVB_TRANSPORT_MAX || strlen(server) >= sizeof(t->e[0].server) ||
        strlen(name) >= sizeof(t->e[0].name)) {
        t->dropped++;
        return;
    }
    snprintf(t->e[t->n].server, sizeof(t->e[0].server), "%s", server);
    snprintf(t->e[t->n].name, sizeof(t->e[0].name), "%s", name);
    t->e[t->n].value = value;
    t->n++;
}

/* Copies s as a Prometheus label value: backslash, quote and newline escaped. */
static void label_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 2 < cap; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') out[o++] = '\\';
        out[o++] = *s == '\n' ? 'n' : *s;
    }
    out[o] = '\0';
}

size_t kvb_transport_render(const struct kvb_transport_totals *t, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    put(&o, "# HELP kvbatch_transport_total libkvstore's transport counters for this "
            "process's clients, per server: frames and system calls on TCP; doorbells "
            "(ibv_post_send calls), work requests, completions and round trips on RDMA.\n"
            "# TYPE kvbatch_transport_total counter\n");
    for (unsigned i = 0; i < t->n; i++) {
        char server[2 * sizeof(t->e[0].server)];
        label_escape(t->e[i].server, server, sizeof(server));
        put(&o, "kvbatch_transport_total{server=\"%s\",counter=\"%s\"} %llu\n", server,
            t->e[i].name, (unsigned long long)t->e[i].value);
    }
    put(&o,
        "# HELP kvbatch_transport_dropped Transport counters left out of "
        "kvbatch_transport_total (table full).\n"
        "# TYPE kvbatch_transport_dropped gauge\nkvbatch_transport_dropped %u\n",
        t->dropped);
    return o.len;
}

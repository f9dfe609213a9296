/*
 * metrics.c - the stats file's text in the Prometheus text exposition format
 * (see metrics.h): HELP and TYPE lines, then the samples.
 */
#include "metrics.h"

#include "../batcher/controller.h"

#include <stdarg.h>
#include <stdbool.h>
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
    char pid[32]; /* the label every sample starts with: pid="N" */
};

/* An appender over buf, its samples labelled with pid. */
static struct out out_start(char *buf, size_t cap, long pid)
{
    struct out o = {buf, cap, 0, ""};
    snprintf(o.pid, sizeof(o.pid), "pid=\"%ld\"", pid);
    if (cap) buf[0] = '\0';
    return o;
}

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
            put(o, "%s{%s,backend=\"%s\",op=\"%s\"} %llu\n", name, o->pid, src->v[i].backend,
                op_label(k), (unsigned long long)load(&v[k]));
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
            put(o, "%s_bucket{%s,backend=\"%s\",le=\"%.9g\"} %llu\n", name, o->pid, be,
                (double)h->bounds[i] / scale, (unsigned long long)cum);
        }
        cum += load(&h->bucket[h->nbounds]);
        put(o, "%s_bucket{%s,backend=\"%s\",le=\"+Inf\"} %llu\n", name, o->pid, be,
            (unsigned long long)cum);
        put(o, "%s_sum{%s,backend=\"%s\"} %.9g\n", name, o->pid, be, (double)load(&h->sum) / scale);
        /* count equals the +Inf bucket by construction; a reader can check it. */
        put(o, "%s_count{%s,backend=\"%s\"} %llu\n", name, o->pid, be, (unsigned long long)cum);
    }
}

/* One gauge (off: its member), labelled by backend only. */
static void render_gauge(struct out *o, const struct sources *src, const char *name,
                         const char *help, size_t off)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < src->n; i++)
        put(o, "%s{%s,backend=\"%s\"} %lld\n", name, o->pid, src->v[i].backend,
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
                    put(o, "kvbatch_errors_total{%s,backend=\"%s\",op=\"%s\",status=\"%s\"} %llu\n",
                        o->pid, src->v[i].backend, op_label(k), kvs_status_class_name(c),
                        (unsigned long long)v);
            }
}

static void render_flushes(struct out *o, const struct sources *src)
{
    family(o, "kvbatch_flush_total", "counter", "Batches sent, per reason.");
    for (size_t i = 0; i < src->n; i++)
        for (int r = 0; r < KVB_FLUSH_REASONS; r++)
            put(o, "kvbatch_flush_total{%s,backend=\"%s\",reason=\"%s\"} %llu\n", o->pid,
                src->v[i].backend, flush_label(r),
                (unsigned long long)load(&src->v[i].s->flushes[r]));
    family(o, "kvbatch_writeback_errors_total", "counter",
           "Write-behind puts that failed after returning 0.");
    for (size_t i = 0; i < src->n; i++)
        put(o, "kvbatch_writeback_errors_total{%s,backend=\"%s\"} %llu\n", o->pid,
            src->v[i].backend, (unsigned long long)load(&src->v[i].s->writeback_errors));
}

#define OFF(member) offsetof(struct kvb_stats, member)

/* A batcher's gauges in a source's slot table. */
typedef int64_t (*slot_value_fn)(const struct kvb_batcher_gauges *g);

static int64_t slot_window(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->window_ns, memory_order_relaxed);
}
static int64_t slot_inflight(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->max_inflight, memory_order_relaxed);
}
static int64_t slot_level(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->level, memory_order_relaxed);
}
static int64_t slot_levels(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->levels, memory_order_relaxed);
}
static int64_t slot_mean(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->mean_ns, memory_order_relaxed);
}
static int64_t slot_p99(const struct kvb_batcher_gauges *g)
{
    return atomic_load_explicit(&g->p99_ns, memory_order_relaxed);
}

/* The slot holds a batcher (tuned_only: one under policy auto). */
static bool slot_shown(const struct kvb_batcher_gauges *g, bool tuned_only)
{
    return atomic_load_explicit(&g->used, memory_order_relaxed) &&
           (!tuned_only || slot_levels(g) > 0);
}

/*
 * One gauge per batcher, labelled backend and batcher (its slot);
 * scale: 1e9 turns ns into seconds, 0 prints the integer.
 */
static void render_per_batcher(struct out *o, const struct sources *src, const char *name,
                               const char *help, slot_value_fn value, double scale, bool tuned_only)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < src->n; i++)
        for (int k = 0; k < KVB_STATS_BATCHERS; k++) {
            const struct kvb_batcher_gauges *g = &src->v[i].s->batcher[k];
            if (!slot_shown(g, tuned_only)) continue;
            if (scale > 0)
                put(o, "%s{%s,backend=\"%s\",batcher=\"%d\"} %.9g\n", name, o->pid,
                    src->v[i].backend, k, (double)value(g) / scale);
            else
                put(o, "%s{%s,backend=\"%s\",batcher=\"%d\"} %lld\n", name, o->pid,
                    src->v[i].backend, k, (long long)value(g));
        }
}

/* Some batcher of the source is under policy auto, or was. */
static bool source_tuned(const struct kvb_stats *s)
{
    if (load(&s->tune_changes) > 0) return true;
    for (int k = 0; k < KVB_STATS_BATCHERS; k++)
        if (slot_shown(&s->batcher[k], true)) return true;
    return false;
}

/*
 * Each batcher's window and in-flight limit in effect and, for those under
 * policy auto, what its controller holds, why it last set it and the last
 * epoch it scored; how often the controllers moved, per backend.
 */
static void render_tuning(struct out *o, const struct sources *src)
{
    render_gauge(o, src, "kvbatch_batchers", "Batchers (clients or stores batched) alive now.",
                 OFF(batchers));
    render_per_batcher(
        o, src, "kvbatch_window_seconds",
        "The window in effect now, per batcher (policy auto: its controller's choice).",
        slot_window, 1e9, false);
    render_per_batcher(
        o, src, "kvbatch_max_inflight",
        "Batches in flight allowed now, per batcher (policy auto: its controller's choice).",
        slot_inflight, 0, false);
    bool any = false;
    for (size_t i = 0; i < src->n; i++)
        any = any || source_tuned(src->v[i].s);
    if (!any) return;
    render_per_batcher(o, src, "kvbatch_auto_level",
                       "The level the auto controller holds, 0 = most direct calls.", slot_level, 0,
                       true);
    render_per_batcher(o, src, "kvbatch_auto_levels", "Levels on the auto controller's ladder.",
                       slot_levels, 0, true);
    family(o, "kvbatch_auto_reason", "gauge", "Why the auto controller last set its level.");
    for (size_t i = 0; i < src->n; i++)
        for (int k = 0; k < KVB_STATS_BATCHERS; k++) {
            const struct kvb_batcher_gauges *g = &src->v[i].s->batcher[k];
            if (!slot_shown(g, true)) continue;
            put(o, "kvbatch_auto_reason{%s,backend=\"%s\",batcher=\"%d\",reason=\"%s\"} 1\n",
                o->pid, src->v[i].backend, k,
                kvb_ctl_reason_name(
                    (enum kvb_ctl_reason)atomic_load_explicit(&g->reason, memory_order_relaxed)));
        }
    render_per_batcher(o, src, "kvbatch_auto_epoch_mean_seconds",
                       "Mean op latency of the last epoch the auto controller scored.", slot_mean,
                       1e9, true);
    render_per_batcher(o, src, "kvbatch_auto_epoch_p99_seconds",
                       "p99 op latency of the last epoch the auto controller scored.", slot_p99,
                       1e9, true);
    family(o, "kvbatch_auto_changes_total", "counter",
           "Level changes of the auto controllers, all batchers of the backend.");
    for (size_t i = 0; i < src->n; i++)
        if (source_tuned(src->v[i].s))
            put(o, "kvbatch_auto_changes_total{%s,backend=\"%s\"} %llu\n", o->pid,
                src->v[i].backend, (unsigned long long)load(&src->v[i].s->tune_changes));
}

/* The families in the order of docs/shim.md's table. */
size_t kvb_stats_render(const struct kvb_stats_source *v, size_t n, long pid, char *buf, size_t cap)
{
    struct out o = out_start(buf, cap, pid);
    struct sources src = {v, n};
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

/* One gauge family of one sample, labelled with the pid only. */
static void proc_gauge(struct out *o, const char *name, const char *help, double v)
{
    family(o, name, "gauge", help);
    put(o, "%s{%s} %.9g\n", name, o->pid, v);
}

size_t kvb_settings_render(const struct kvb_config *cfg, int passthrough,
                           const struct kvb_proc_facts *p, char *buf, size_t cap)
{
    struct out o = out_start(buf, cap, p->pid);
    family(&o, "kvbatch_info", "gauge",
           "The shim's mode; pass-through is 1 when it does not batch.");
    put(&o, "kvbatch_info{%s,policy=\"%s\",put_mode=\"%s\",passthrough=\"%d\"} 1\n", o.pid,
        kvb_policy_name(cfg->policy), kvb_put_mode_name(cfg->put_mode), passthrough ? 1 : 0);
    proc_gauge(&o, "kvbatch_setting_window_seconds", "KVBATCH_WINDOW_US in effect.",
               (double)cfg->window_ns / 1e9);
    proc_gauge(&o, "kvbatch_setting_max_ops", "KVBATCH_MAX_OPS in effect.", cfg->max_ops);
    proc_gauge(&o, "kvbatch_setting_max_bytes", "KVBATCH_MAX_BYTES in effect.",
               (double)cfg->max_bytes);
    proc_gauge(&o, "kvbatch_setting_max_inflight", "KVBATCH_MAX_INFLIGHT in effect.",
               cfg->max_inflight);
    proc_gauge(&o, "kvbatch_setting_writeback_bytes", "KVBATCH_WRITEBACK_BYTES in effect.",
               (double)cfg->writeback_bytes);
    proc_gauge(&o, "kvbatch_setting_stats_interval_seconds",
               "KVBATCH_STATS_INTERVAL_MS in effect: how often this file is rewritten.",
               (double)cfg->stats_interval_ns / 1e9);
    family(&o, "kvbatch_start_time_seconds", "gauge", "When the shim started (Unix time).");
    put(&o, "kvbatch_start_time_seconds{%s} %.3f\n", o.pid, p->start_time);
    family(&o, "kvbatch_write_time_seconds", "gauge", "When this file was written (Unix time).");
    put(&o, "kvbatch_write_time_seconds{%s} %.3f\n", o.pid, p->now);
    proc_gauge(&o, "kvbatch_exited",
               "1 in the file's last write, at the process's exit; 0 while it runs.",
               p->exited ? 1 : 0);
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

size_t kvb_transport_render(const struct kvb_transport_totals *t, long pid, char *buf, size_t cap)
{
    struct out o = out_start(buf, cap, pid);
    put(&o, "# HELP kvbatch_transport_total libkvstore's transport counters for this "
            "process's clients, per server: frames and system calls on TCP; doorbells "
            "(ibv_post_send calls), work requests, completions and round trips on RDMA.\n"
            "# TYPE kvbatch_transport_total counter\n");
    for (unsigned i = 0; i < t->n; i++) {
        char server[2 * sizeof(t->e[0].server)];
        label_escape(t->e[i].server, server, sizeof(server));
        put(&o, "kvbatch_transport_total{%s,server=\"%s\",counter=\"%s\"} %llu\n", o.pid, server,
            t->e[i].name, (unsigned long long)t->e[i].value);
    }
    put(&o,
        "# HELP kvbatch_transport_dropped Transport counters left out of "
        "kvbatch_transport_total (table full).\n"
        "# TYPE kvbatch_transport_dropped gauge\nkvbatch_transport_dropped{%s} %u\n",
        o.pid, t->dropped);
    return o.len;
}

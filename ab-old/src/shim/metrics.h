/*
 * metrics.h - the stats file's text, in the Prometheus text exposition
 * format: the batcher's counters and histograms (struct kvb_stats, which the
 * batcher only counts into), the settings in effect, and libkvstore's
 * transport counters. Each renderer returns the length its full text needs;
 * the text is complete only if that is < cap.
 */
#ifndef KVB_METRICS_H
#define KVB_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "../batcher/stats.h"

/* One backend's counters, and the name its samples carry in their backend label. */
struct kvb_stats_source {
    const char *backend; /* "kvs", "mooncake" */
    const struct kvb_stats *s;
};

/*
 * Every sample of a stats file starts with the label pid="<pid>" (the
 * process that wrote it), so that the files of several processes, merged by
 * a scraper (node_exporter's textfile collector), never hold one series twice.
 */

/*
 * The n sources' counters as counter families with an op label
 * (kvbatch_ops_total, ...), errors per op and status, flushes per reason,
 * gauges, each batcher's setting in effect (labelled batcher="<slot>"), and
 * histograms with cumulative buckets (latencies in seconds): each family
 * once, with one sample set per source, labelled pid="<pid>",
 * backend="<name>" first.
 */
size_t kvb_stats_render(const struct kvb_stats_source *src, size_t n, long pid, char *buf,
                        size_t cap);

/* What the stats file says of its process. */
struct kvb_proc_facts {
    long pid;
    double start_time, now; /* Unix times: the shim's start, this write */
    bool exited;            /* this is the last write, at exit */
};

/*
 * The effective settings and process facts as gauges (kvbatch_info,
 * kvbatch_setting_*, kvbatch_start_time_seconds, kvbatch_write_time_seconds,
 * kvbatch_exited).
 */
size_t kvb_settings_render(const struct kvb_config *cfg, int passthrough,
                           const struct kvb_proc_facts *p, char *buf, size_t cap);

/*
 * libkvstore's transport counters (kvs_client_counters), summed over the
 * process's clients per server and counter name, for kvbatch_transport_total.
 * A fixed table: a process with more server x counter pairs than it holds
 * drops the rest and says so (dropped).
 */
#define KVB_TRANSPORT_MAX 256
struct kvb_transport_totals {
    struct {
        char server[64];
        char name[32];
        uint64_t value;
    } e[KVB_TRANSPORT_MAX];
    unsigned n, dropped;
};

/* A kvs_counter_cb: adds (server, name, value) into the kvb_transport_totals at arg. */
void kvb_transport_add(void *arg, const char *server, const char *name, uint64_t value);

/* The totals as the kvbatch_transport_total counter family and kvbatch_transport_dropped. */
size_t kvb_transport_render(const struct kvb_transport_totals *t, long pid, char *buf, size_t cap);

#endif

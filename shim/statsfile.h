/*
 * statsfile.h - writes the stats file atomically: a temporary file beside
 * it, fsync-free (it is a snapshot, not a journal), then rename() over it,
 * so a scraper never sees a half-written file.
 */
#ifndef KVB_STATSFILE_H
#define KVB_STATSFILE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Writes text[0..len) to path via "path.tmp.PID" + rename. 0 or a negative errno. */
int kvb_write_file_atomic(const char *path, const char *text, size_t len);

/*
 * Renders the effective settings and process facts as Prometheus gauges
 * (kvbatch_info, kvbatch_setting_*, kvbatch_start_time_seconds,
 * kvbatch_write_time_seconds). Returns the length it needs (complete if < cap).
 */
size_t kvb_settings_render(const struct kvb_config *cfg, int passthrough, double start_time,
                           double now, char *buf, size_t cap);

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

/* Renders the totals as the kvbatch_transport_total counter family. Length needed, as above. */
size_t kvb_transport_render(const struct kvb_transport_totals *t, char *buf, size_t cap);

#endif

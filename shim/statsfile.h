/*
 * statsfile.h - writes the stats file atomically: a temporary file beside
 * it, fsync-free (it is a snapshot, not a journal), then rename() over it,
 * so a scraper never sees a half-written file.
 */
#ifndef KVB_STATSFILE_H
#define KVB_STATSFILE_H

#include <stddef.h>

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

#endif

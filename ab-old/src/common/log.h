/*
 * log.h - diagnostics on stderr, one line per call, for every room.
 *
 * kvs_log is libkvstore's: "libkvstore[level]: text", the threshold from
 * KVSTORE_LOG=error|warn|info|debug (default warn), read once. A room with
 * its own threshold and prefix (the shim: KVBATCH_LOG) checks its level and
 * writes through kvs_log_vline. Level names are one table for both.
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

#include <stdarg.h>

enum kvs_log_level { KVS_LOG_ERROR, KVS_LOG_WARN, KVS_LOG_INFO, KVS_LOG_DEBUG, KVS_LOG_LEVELS };

/* "error", "warn", "info", "debug", indexed by level. */
extern const char *const kvs_log_level_names[KVS_LOG_LEVELS];

/* True if a kvs_log line of this level would be printed. */
int kvs_log_enabled(enum kvs_log_level level);
/* Prints "libkvstore[level]: <text>\n" if the level is enabled. */
void kvs_log(enum kvs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Writes prefix, the formatted text and a newline to stderr in one write(2)
 * (lines from several threads do not interleave; no stdio lock is taken),
 * truncated to 1 KiB.
 */
void kvs_log_vline(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/*
 * A server's log line, as kvs_log_vline writes it:
 * "<name>[<pid>] 2026-12-02T00:33:45.123Z <text>" (UTC, milliseconds), so
 * that lines from several servers and hosts sort and merge by time.
 */
void kvs_log_server(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVS_LOG_H */

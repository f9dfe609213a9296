/*
 * log.h - libkvstore's diagnostics on stderr, one line per call.
 * KVSTORE_LOG=error|warn|info|debug (default warn) sets what reaches stderr.
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

enum kvs_log_level { KVS_LOG_ERROR, KVS_LOG_WARN, KVS_LOG_INFO, KVS_LOG_DEBUG };

/* True if a line of this level would be printed. */
int kvs_log_enabled(enum kvs_log_level level);
/* Prints "libkvstore[level]: <text>\n" if the level is enabled. */
void kvs_log(enum kvs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVS_LOG_H */

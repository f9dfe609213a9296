/*
 * log.c - libkvstore's diagnostics on stderr.
 *
 * KVSTORE_LOG=error|warn|info|debug picks the least severe level printed
 * (default warn). The variable is read once; a bad value is reported once and
 * the default kept.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum kvs_log_level log_threshold = KVS_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void log_init(void)
{
    const char *env = getenv("KVSTORE_LOG");
    if (!env || !*env) return;
    for (int i = 0; i <= KVS_LOG_DEBUG; i++) {
        if (strcasecmp(env, level_names[i]) == 0) {
            log_threshold = (enum kvs_log_level)i;
            return;
        }
    }
    fprintf(stderr,
            "libkvstore: KVSTORE_LOG=%s is not one of error, warn, info, debug; using warn\n", env);
}

int kvs_log_enabled(enum kvs_log_level level)
{
    pthread_once(&log_once, log_init);
    return level <= log_threshold;
}

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
{
    if (!kvs_log_enabled(level)) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One fprintf per line so that lines from several threads do not interleave. */
    fprintf(stderr, "libkvstore[%s]: %s\n", level_names[level], line);
}

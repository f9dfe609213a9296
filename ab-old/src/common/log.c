/*
 * log.c - diagnostics on stderr: kvs_log (libkvstore's), kvs_log_server
 * (kvstored's, with time and pid) and the line writer every logger uses.
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
#include <time.h>
#include <unistd.h>

#include "clock.h"

static enum kvs_log_level log_threshold = KVS_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

const char *const kvs_log_level_names[KVS_LOG_LEVELS] = {"error", "warn", "info", "debug"};

static void log_init(void)
{
    const char *env = getenv("KVSTORE_LOG");
    if (!env || !*env) return;
    for (int i = 0; i < KVS_LOG_LEVELS; i++) {
        if (strcasecmp(env, kvs_log_level_names[i]) == 0) {
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

void kvs_log_vline(const char *prefix, const char *fmt, va_list ap)
{
    char line[1024];
    size_t n = strnlen(prefix, 64);
    memcpy(line, prefix, n);
    int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    if (m < 0) return;
    n += (size_t)m < sizeof(line) - n - 2 ? (size_t)m : sizeof(line) - n - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w; /* nowhere to report a failed diagnostic */
}

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
{
    if (!kvs_log_enabled(level)) return;
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "libkvstore[%s]: ", kvs_log_level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    kvs_log_vline(prefix, fmt, ap);
    va_end(ap);
}

void kvs_log_server(const char *name, const char *fmt, ...)
{
    double now = kvs_wall_s();
    time_t secs = (time_t)now;
    struct tm tm;
    char stamp[32] = "", prefix[64];
    if (gmtime_r(&secs, &tm)) strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(prefix, sizeof(prefix), "%.16s[%d] %s.%03dZ ", name, (int)getpid(), stamp,
             (int)((now - (double)secs) * 1000.0) % 1000);
    va_list ap;
    va_start(ap, fmt);
    kvs_log_vline(prefix, fmt, ap);
    va_end(ap);
}

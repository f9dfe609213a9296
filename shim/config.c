/*
 * config.c - parsing and range-checking of the KVBATCH_* variables.
 */
#include "config.h"

#include "clock.h"
#include "parse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void kvb_config_defaults(struct kvb_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->policy = KVB_POLICY_ADAPTIVE;
    cfg->window_ns = 50 * KVS_NS_PER_US;
    cfg->max_ops = 128;
    cfg->max_bytes = 1ull << 20;
    cfg->max_inflight = 4;
    cfg->put_mode = KVB_PUT_SYNC;
    cfg->writeback_bytes = 64ull << 20;
    cfg->stats_file[0] = '\0';
    cfg->stats_interval_ns = 1000 * KVS_NS_PER_MS;
    cfg->exit_timeout_ns = 2000 * KVS_NS_PER_MS;
    cfg->log_level = KVB_LOG_WARN;
}

int kvb_expand_path(const char *pattern, long pid, char *out, size_t cap)
{
    size_t o = 0;
    if (!pattern || !out || cap == 0) return -EINVAL;
    for (const char *p = pattern; *p; p++) {
        char tmp[32];
        const char *piece = tmp;
        size_t len;
        if (*p != '%') {
            tmp[0] = *p;
            len = 1;
        } else if (p[1] == 'p') {
            len = (size_t)snprintf(tmp, sizeof(tmp), "%ld", pid);
            p++;
        } else if (p[1] == '%') {
            tmp[0] = '%';
            len = 1;
            p++;
        } else {
            return -EINVAL;
        }
        if (o + len >= cap) return -ENAMETOOLONG;
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
    return 0;
}

/* One error line into err, first error only. */
static void report(char *err, size_t errcap, int *failed, const char *name, const char *val,
                   const char *accepted)
{
    if (*failed) return;
    *failed = 1;
    if (err && errcap)
        snprintf(err, errcap,
                 "kvbatch: %s='%.200s' is not valid; accepted: %s; running in pass-through "
                 "(no batching)",
                 name, val, accepted);
}

/* A duration variable in [lo, hi] ns; a bare number is in unit_ns. */
static void load_duration(kvb_getenv_fn get, const char *name, uint64_t unit_ns, uint64_t lo,
                          uint64_t hi, const char *accepted, uint64_t *dst, char *err,
                          size_t errcap, int *failed)
{
    const char *v = get(name);
    uint64_t ns;
    if (!v) return;
    if (kvs_parse_duration(v, unit_ns, &ns) < 0 || ns < lo || ns > hi) {
        report(err, errcap, failed, name, v, accepted);
        return;
    }
    *dst = ns;
}

/* A size variable in [lo, hi] bytes. */
static void load_size(kvb_getenv_fn get, const char *name, uint64_t lo, uint64_t hi,
                      const char *accepted, uint64_t *dst, char *err, size_t errcap, int *failed)
{
    const char *v = get(name);
    uint64_t bytes;
    if (!v) return;
    if (kvs_parse_size(v, &bytes) < 0 || bytes < lo || bytes > hi) {
        report(err, errcap, failed, name, v, accepted);
        return;
    }
    *dst = bytes;
}

/* A plain count in [lo, hi]. */
static void load_count(kvb_getenv_fn get, const char *name, uint32_t lo, uint32_t hi,
                       const char *accepted, uint32_t *dst, char *err, size_t errcap, int *failed)
{
    const char *v = get(name);
    uint64_t n;
    if (!v) return;
    if (kvs_parse_uint(v, &n) < 0 || n < lo || n > hi) {
        report(err, errcap, failed, name, v, accepted);
        return;
    }
    *dst = (uint32_t)n;
}

/* A keyword from names[0..n); stores its index. */
static void load_enum(kvb_getenv_fn get, const char *name, const char *const names[], int n,
                      const char *accepted, int *dst, char *err, size_t errcap, int *failed)
{
    const char *v = get(name);
    if (!v) return;
    for (int i = 0; i < n; i++) {
        if (strcasecmp(v, names[i]) == 0) {
            *dst = i;
            return;
        }
    }
    report(err, errcap, failed, name, v, accepted);
}

static const char *const policy_names[] = {"adaptive", "fixed", "off"};
static const char *const put_mode_names[] = {"sync", "writeback"};
static const char *const log_names[] = {"error", "warn", "info", "debug"};

const char *kvb_policy_name(enum kvb_policy p)
{
    return (unsigned)p < 3 ? policy_names[p] : "?";
}

const char *kvb_put_mode_name(enum kvb_put_mode m)
{
    return (unsigned)m < 2 ? put_mode_names[m] : "?";
}

int kvb_config_load(struct kvb_config *cfg, kvb_getenv_fn get, long pid, char *err, size_t errcap)
{
    int failed = 0, e;
    kvb_config_defaults(cfg);
    if (err && errcap) err[0] = '\0';

    e = (int)cfg->log_level;
    load_enum(get, "KVBATCH_LOG", log_names, 4, "error, warn, info or debug", &e, err, errcap,
              &failed);
    cfg->log_level = (enum kvb_log_level)e;
    e = (int)cfg->policy;
    load_enum(get, "KVBATCH_POLICY", policy_names, 3, "adaptive, fixed or off", &e, err, errcap,
              &failed);
    cfg->policy = (enum kvb_policy)e;
    load_duration(get, "KVBATCH_WINDOW_US", KVS_NS_PER_US, 0, KVS_NS_PER_S,
                  "a duration from 0 to 1s (bare number = microseconds; units ns, us, ms, s)",
                  &cfg->window_ns, err, errcap, &failed);
    load_count(get, "KVBATCH_MAX_OPS", 1, 65536, "an integer from 1 to 65536", &cfg->max_ops, err,
               errcap, &failed);
    load_size(get, "KVBATCH_MAX_BYTES", 4096, 256ull << 20,
              "a size from 4K to 256MiB (bare number = bytes; units K, M, G, KiB, MiB, GiB)",
              &cfg->max_bytes, err, errcap, &failed);
    load_count(get, "KVBATCH_MAX_INFLIGHT", 1, 64, "an integer from 1 to 64", &cfg->max_inflight,
               err, errcap, &failed);
    e = (int)cfg->put_mode;
    load_enum(get, "KVBATCH_PUT_MODE", put_mode_names, 2, "sync or writeback", &e, err, errcap,
              &failed);
    cfg->put_mode = (enum kvb_put_mode)e;
    load_size(get, "KVBATCH_WRITEBACK_BYTES", 64ull << 10, 64ull << 30,
              "a size from 64K to 64GiB (bare number = bytes; units K, M, G, KiB, MiB, GiB)",
              &cfg->writeback_bytes, err, errcap, &failed);
    load_duration(get, "KVBATCH_STATS_INTERVAL_MS", KVS_NS_PER_MS, 10 * KVS_NS_PER_MS,
                  3600 * KVS_NS_PER_S,
                  "a duration from 10ms to 3600s (bare number = milliseconds; units ms, s)",
                  &cfg->stats_interval_ns, err, errcap, &failed);
    load_duration(get, "KVBATCH_EXIT_TIMEOUT_MS", KVS_NS_PER_MS, 0, 60 * KVS_NS_PER_S,
                  "a duration from 0 to 60s (bare number = milliseconds; units ms, s)",
                  &cfg->exit_timeout_ns, err, errcap, &failed);

    const char *path = get("KVBATCH_STATS_FILE");
    if (path && *path) {
        int r = kvb_expand_path(path, pid, cfg->stats_file, sizeof(cfg->stats_file));
        if (r < 0) {
            cfg->stats_file[0] = '\0';
            report(err, errcap, &failed, "KVBATCH_STATS_FILE", path,
                   "a file path (up to 4095 bytes) where %p stands for the pid and %% for %");
        }
    }
    if (failed) {
        cfg->policy = KVB_POLICY_OFF;
        return -EINVAL;
    }
    return 0;
}

size_t kvb_config_describe(const struct kvb_config *cfg, char *out, size_t cap)
{
    int n = snprintf(
        out, cap,
        "KVBATCH_POLICY=%s\nKVBATCH_WINDOW_US=%lluus\nKVBATCH_MAX_OPS=%u\n"
        "KVBATCH_MAX_BYTES=%llu\nKVBATCH_MAX_INFLIGHT=%u\nKVBATCH_PUT_MODE=%s\n"
        "KVBATCH_WRITEBACK_BYTES=%llu\nKVBATCH_STATS_FILE=%s\n"
        "KVBATCH_STATS_INTERVAL_MS=%llums\nKVBATCH_EXIT_TIMEOUT_MS=%llums\n"
        "KVBATCH_LOG=%s\n",
        kvb_policy_name(cfg->policy), (unsigned long long)(cfg->window_ns / KVS_NS_PER_US),
        cfg->max_ops, (unsigned long long)cfg->max_bytes, cfg->max_inflight,
        kvb_put_mode_name(cfg->put_mode), (unsigned long long)cfg->writeback_bytes,
        cfg->stats_file[0] ? cfg->stats_file : "(none)",
        (unsigned long long)(cfg->stats_interval_ns / KVS_NS_PER_MS),
        (unsigned long long)(cfg->exit_timeout_ns / KVS_NS_PER_MS), log_names[cfg->log_level]);
    if (n < 0) return 0;
    return (size_t)n < cap ? (size_t)n : (cap ? cap - 1 : 0);
}

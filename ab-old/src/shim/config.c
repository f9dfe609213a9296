/*
 * config.c - the KVBATCH_* variables. One table (vars[]) gives each its
 * field, default, range and the text its error line names as accepted; the
 * defaults, the loader and the description all walk it.
 */
#include "config.h"

#include "clock.h"
#include "parse.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const policy_names[] = {"adaptive", "fixed", "off", "auto"};
static const char *const put_mode_names[] = {"sync", "writeback"};
static const char *const stats_at_exit_names[] = {"keep", "remove"};
static const char *const batch_calls_names[] = {"pass", "merge"};

const char *kvb_policy_name(enum kvb_policy p)
{
    return (unsigned)p < sizeof(policy_names) / sizeof(policy_names[0]) ? policy_names[p] : "?";
}

const char *kvb_put_mode_name(enum kvb_put_mode m)
{
    return (unsigned)m < 2 ? put_mode_names[m] : "?";
}

/* What a variable's value is, and so how it is parsed and stored. */
enum var_kind {
    VAR_KEYWORD,  /* one of `keywords`, stored as its index in an enum field */
    VAR_COUNT,    /* an integer, in a uint32_t field */
    VAR_SIZE,     /* bytes (common/parse.h's size grammar), in a uint64_t field */
    VAR_DURATION, /* nanoseconds (its duration grammar), in a uint64_t field */
    VAR_PATH,     /* a file path, %p expanded, in a KVB_STATS_PATH_MAX char field ("" = none) */
};

/* One KVBATCH_* variable: where it goes in struct kvb_config, its default and what it accepts. */
struct var {
    const char *name;
    enum var_kind kind;
    size_t offset;
    uint64_t def, lo, hi;        /* keyword index, count, bytes or ns */
    uint64_t unit_ns;            /* a duration's bare-number unit, also the unit it is shown in */
    const char *const *keywords; /* VAR_KEYWORD: lo..hi index it */
    const char *accepted;        /* for the error line */
};

#define FIELD(f)   offsetof(struct kvb_config, f)
#define SIZE_UNITS "(bare number = bytes; units K, M, G, KiB, MiB, GiB)"

/* Every variable, in the README's order (and the order errors are looked for). */
static const struct var vars[] = {
    {"KVBATCH_POLICY", VAR_KEYWORD, FIELD(policy), KVB_POLICY_AUTO, 0, 3, 0, policy_names,
     "auto, adaptive, fixed or off"},
    {"KVBATCH_WINDOW_US", VAR_DURATION, FIELD(window_ns), 50 * KVS_NS_PER_US, 0, KVS_NS_PER_S,
     KVS_NS_PER_US, NULL,
     "a duration from 0 to 1s (bare number = microseconds; units ns, us, ms, s)"},
    {"KVBATCH_MAX_OPS", VAR_COUNT, FIELD(max_ops), 128, 1, 65536, 0, NULL,
     "an integer from 1 to 65536"},
    {"KVBATCH_MAX_BYTES", VAR_SIZE, FIELD(max_bytes), 1ull << 20, 4096, 256ull << 20, 0, NULL,
     "a size from 4K to 256MiB " SIZE_UNITS},
    {"KVBATCH_MAX_INFLIGHT", VAR_COUNT, FIELD(max_inflight), 4, 1, 64, 0, NULL,
     "an integer from 1 to 64"},
    {"KVBATCH_LATENCY_TARGET", VAR_DURATION, FIELD(latency_target_ns), 0, 0, 10 * KVS_NS_PER_S,
     KVS_NS_PER_US, NULL,
     "a duration from 0 (none) to 10s (bare number = microseconds; units ns, us, ms, s)"},
    {"KVBATCH_PUT_MODE", VAR_KEYWORD, FIELD(put_mode), KVB_PUT_SYNC, 0, 1, 0, put_mode_names,
     "sync or writeback"},
    {"KVBATCH_BATCH_CALLS", VAR_KEYWORD, FIELD(batch_calls), KVB_CALLS_MERGE, 0, 1, 0,
     batch_calls_names, "merge or pass"},
    {"KVBATCH_WRITEBACK_BYTES", VAR_SIZE, FIELD(writeback_bytes), 64ull << 20, 64ull << 10,
     64ull << 30, 0, NULL, "a size from 64K to 64GiB " SIZE_UNITS},
    {"KVBATCH_STATS_FILE", VAR_PATH, FIELD(stats_file), 0, 0, 0, 0, NULL,
     "a file path (up to 4095 bytes) where %p stands for the pid and %% for %"},
    {"KVBATCH_STATS_INTERVAL_MS", VAR_DURATION, FIELD(stats_interval_ns), 1000 * KVS_NS_PER_MS,
     10 * KVS_NS_PER_MS, 3600 * KVS_NS_PER_S, KVS_NS_PER_MS, NULL,
     "a duration from 10ms to 3600s (bare number = milliseconds; units ms, s)"},
    {"KVBATCH_STATS_AT_EXIT", VAR_KEYWORD, FIELD(stats_at_exit), KVB_STATS_KEEP, 0, 1, 0,
     stats_at_exit_names, "keep or remove"},
    {"KVBATCH_EXIT_TIMEOUT_MS", VAR_DURATION, FIELD(exit_timeout_ns), 2000 * KVS_NS_PER_MS, 0,
     60 * KVS_NS_PER_S, KVS_NS_PER_MS, NULL,
     "a duration from 0 to 60s (bare number = milliseconds; units ms, s)"},
    {"KVBATCH_LOG", VAR_KEYWORD, FIELD(log_level), KVS_LOG_WARN, 0, KVS_LOG_LEVELS - 1, 0,
     kvs_log_level_names, "error, warn, info or debug"},
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

/* Stores v into the field of var in cfg. */
static void var_store(struct kvb_config *cfg, const struct var *var, uint64_t v)
{
    char *field = (char *)cfg + var->offset;
    if (var->kind == VAR_KEYWORD) {
        int e = (int)v;
        memcpy(field, &e, sizeof(e)); /* the enum fields are int-sized */
    } else if (var->kind == VAR_COUNT) {
        uint32_t n = (uint32_t)v;
        memcpy(field, &n, sizeof(n));
    } else {
        memcpy(field, &v, sizeof(v));
    }
}

/* The value of var's field in cfg, as var_store took it. */
static uint64_t var_value(const struct kvb_config *cfg, const struct var *var)
{
    const char *field = (const char *)cfg + var->offset;
    if (var->kind == VAR_KEYWORD) {
        int e;
        memcpy(&e, field, sizeof(e));
        return (uint64_t)e;
    }
    if (var->kind == VAR_COUNT) {
        uint32_t n;
        memcpy(&n, field, sizeof(n));
        return n;
    }
    uint64_t v;
    memcpy(&v, field, sizeof(v));
    return v;
}

/* Parses text as var's kind into *v; 0, or -EINVAL (junk or out of range). Not for paths. */
static int var_parse(const struct var *var, const char *text, uint64_t *v)
{
    int rc = -EINVAL;
    switch (var->kind) {
    case VAR_KEYWORD:
        for (uint64_t i = var->lo; i <= var->hi; i++)
            if (strcasecmp(text, var->keywords[i]) == 0) {
                *v = i;
                return 0;
            }
        return -EINVAL;
    case VAR_COUNT:
        rc = kvs_parse_uint(text, v);
        break;
    case VAR_SIZE:
        rc = kvs_parse_size(text, v);
        break;
    case VAR_DURATION:
        rc = kvs_parse_duration(text, var->unit_ns, v);
        break;
    case VAR_PATH:
        return -EINVAL;
    }
    return rc < 0 || *v < var->lo || *v > var->hi ? -EINVAL : 0;
}

/* Sets var in cfg from text (a path with %p expanded for pid). 0, or -EINVAL: cfg unchanged. */
static int var_set(struct kvb_config *cfg, const struct var *var, const char *text, long pid)
{
    uint64_t v;
    if (var->kind == VAR_PATH) {
        char path[KVB_STATS_PATH_MAX];
        if (!*text) return 0; /* empty: none */
        if (kvb_expand_path(text, pid, path, sizeof(path)) < 0) return -EINVAL;
        memcpy((char *)cfg + var->offset, path, strlen(path) + 1);
        return 0;
    }
    if (var_parse(var, text, &v) < 0) return -EINVAL;
    var_store(cfg, var, v);
    return 0;
}

void kvb_config_defaults(struct kvb_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NVARS; i++)
        if (vars[i].kind != VAR_PATH) var_store(cfg, &vars[i], vars[i].def);
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

static void describe_var(const struct kvb_config *cfg, const struct var *var, char *out, size_t cap,
                         size_t *len);

/*
 * One line into err for a bad variable (lines joined by '\n', no trailing
 * newline; what does not fit is cut): its value, what it accepts and the
 * default used instead.
 */
static void report(char *err, size_t errcap, const struct kvb_config *defaults,
                   const struct var *var, const char *val)
{
    if (!err || !errcap) return;
    char def[KVB_STATS_PATH_MAX + 64];
    size_t dlen = 0;
    describe_var(defaults, var, def, sizeof(def), &dlen);
    const char *d = strchr(def, '=');
    d = d ? d + 1 : def;
    def[strcspn(def, "\n")] = '\0';
    size_t len = strlen(err);
    if (len + 1 >= errcap) return;
    snprintf(err + len, errcap - len,
             "%skvbatch: %s='%.200s' is not valid; accepted: %s; using the default %s",
             len ? "\n" : "", var->name, val, var->accepted, d);
}

int kvb_config_load(struct kvb_config *cfg, kvb_getenv_fn get, long pid, char *err, size_t errcap)
{
    int failed = 0;
    struct kvb_config defaults;
    kvb_config_defaults(&defaults);
    *cfg = defaults;
    if (err && errcap) err[0] = '\0';
    for (size_t i = 0; i < NVARS; i++) {
        const char *text = get(vars[i].name);
        if (text && var_set(cfg, &vars[i], text, pid) < 0) {
            report(err, errcap, &defaults, &vars[i], text);
            failed = 1;
        }
    }
    return failed ? -EINVAL : 0;
}

/* Appends "NAME=value\n" for var (a duration in its own unit) to out at *len. */
static void describe_var(const struct kvb_config *cfg, const struct var *var, char *out, size_t cap,
                         size_t *len)
{
    const char *field = (const char *)cfg + var->offset;
    uint64_t v = var->kind == VAR_PATH ? 0 : var_value(cfg, var);
    size_t room = *len < cap ? cap - *len : 0;
    int n;
    out = room ? out + *len : NULL;
    if (var->kind == VAR_PATH)
        n = snprintf(out, room, "%s=%s\n", var->name, *field ? field : "(none)");
    else if (var->kind == VAR_KEYWORD)
        n = snprintf(out, room, "%s=%s\n", var->name, var->keywords[v]);
    else if (var->kind == VAR_DURATION)
        n = snprintf(out, room, "%s=%llu%s\n", var->name, (unsigned long long)(v / var->unit_ns),
                     var->unit_ns == KVS_NS_PER_US ? "us" : "ms");
    else
        n = snprintf(out, room, "%s=%llu\n", var->name, (unsigned long long)v);
    if (n > 0) *len += (size_t)n;
}

size_t kvb_config_describe(const struct kvb_config *cfg, char *out, size_t cap)
{
    size_t len = 0;
    if (!cap) return 0;
    out[0] = '\0';
    for (size_t i = 0; i < NVARS; i++)
        describe_var(cfg, &vars[i], out, cap, &len);
    return len < cap ? len : cap - 1;
}

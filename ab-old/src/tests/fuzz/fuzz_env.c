/*
 * fuzz_env.c - libFuzzer target for the KVBATCH_* parser: arbitrary bytes
 * become variable values (split on NUL); the loader must never crash, must
 * either accept or name each bad variable (whose default is kept) in err,
 * and the size/duration parsers must agree with a re-parse.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "parse.h"

static const char *const names[] = {
    "KVBATCH_POLICY",          "KVBATCH_WINDOW_US",
    "KVBATCH_MAX_OPS",         "KVBATCH_MAX_BYTES",
    "KVBATCH_MAX_INFLIGHT",    "KVBATCH_LATENCY_TARGET",
    "KVBATCH_PUT_MODE",        "KVBATCH_WRITEBACK_BYTES",
    "KVBATCH_STATS_FILE",      "KVBATCH_STATS_INTERVAL_MS",
    "KVBATCH_EXIT_TIMEOUT_MS", "KVBATCH_LOG",
    "KVBATCH_BATCH_CALLS",
};
#define NVARS (sizeof(names) / sizeof(names[0]))
static const char *values[NVARS];

static const char *get(const char *name)
{
    for (size_t i = 0; i < NVARS; i++)
        if (strcmp(name, names[i]) == 0) return values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    /* The first byte picks which variables are set; the rest are their values. */
    unsigned mask = size ? data[0] | (size > 1 ? (unsigned)data[1] << 8 : 0) : 0;
    char *p = size > 2 ? buf + 2 : buf + size;
    for (size_t i = 0; i < NVARS; i++) {
        values[i] = NULL;
        if (!(mask & (1u << i))) continue;
        values[i] = p;
        p += strlen(p);
        if (p < buf + size) p++;
    }
    struct kvb_config cfg;
    char err[512], text[8192];
    int rc = kvb_config_load(&cfg, get, 4242, err, sizeof(err));
    if (rc < 0 && !strstr(err, "using the default")) abort();
    if (rc == 0 && err[0]) abort();
    if (cfg.max_ops < 1 || cfg.max_inflight < 1 || cfg.max_bytes < 4096) abort();
    kvb_config_describe(&cfg, text, sizeof(text));

    uint64_t a, b;
    if (kvs_parse_size(buf, &a) == 0 && (kvs_parse_size(buf, &b) != 0 || a != b)) abort();
    /* A bare number is the caller's unit: the same digits as a size, times that unit. */
    if (buf[0] >= '0' && buf[0] <= '9' && strspn(buf, "0123456789") == strlen(buf) &&
        kvs_parse_duration(buf, 1000, &a) == 0 && (kvs_parse_size(buf, &b) != 0 || a != b * 1000))
        abort();
    char out[64];
    kvb_expand_path(buf, 77, out, sizeof(out));
    free(buf);
    return 0;
}

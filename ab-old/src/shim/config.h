/*
 * config.h - the shim's environment variables: range checks over
 * common/parse.h's grammar of counts, sizes and durations, and a loader
 * that turns KVBATCH_* into a struct kvb_config. Pure functions (the environment is read through a
 * caller-supplied getter), so they are unit-tested and fuzzed directly.
 */
#ifndef KVB_CONFIG_H
#define KVB_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "log.h" /* enum kvs_log_level */

enum kvb_policy { KVB_POLICY_ADAPTIVE, KVB_POLICY_FIXED, KVB_POLICY_OFF, KVB_POLICY_AUTO };
enum kvb_put_mode { KVB_PUT_SYNC, KVB_PUT_WRITEBACK };
/* What the stats file becomes at exit: written a last time (kvbatch_exited 1), or removed. */
enum kvb_stats_at_exit { KVB_STATS_KEEP, KVB_STATS_REMOVE };
/* KVBATCH_BATCH_CALLS: small synchronous batch calls join the forming batches, or pass through. */
enum kvb_batch_calls { KVB_CALLS_PASS, KVB_CALLS_MERGE };

#define KVB_STATS_PATH_MAX 4096

struct kvb_config {
    enum kvb_policy policy;
    uint64_t window_ns;
    uint32_t max_ops;
    uint64_t max_bytes;
    uint32_t max_inflight;
    uint64_t latency_target_ns; /* auto: p99 op latency to stay within; 0 = none */
    enum kvb_put_mode put_mode;
    enum kvb_batch_calls batch_calls;
    uint64_t writeback_bytes;
    char stats_file[KVB_STATS_PATH_MAX]; /* "" = no stats file; %p already expanded */
    uint64_t stats_interval_ns;
    enum kvb_stats_at_exit stats_at_exit;
    uint64_t exit_timeout_ns;
    enum kvs_log_level log_level;
};

/* Getter for one variable (getenv in the shim, a table in tests); NULL = unset. */
typedef const char *(*kvb_getenv_fn)(const char *name);

/* The defaults every unset variable takes. */
void kvb_config_defaults(struct kvb_config *cfg);

/*
 * Expands %p in pattern to pid (and %% to %) into out. 0, or -ENAMETOOLONG
 * when out is too small, or -EINVAL for any other %-sequence.
 */
int kvb_expand_path(const char *pattern, long pid, char *out, size_t cap);

/*
 * Fills cfg from the KVBATCH_* variables seen through get. A bad variable
 * keeps its default (the one policy for bad settings, README "Configuration"):
 * err gets one line per bad variable ("kvbatch: KVBATCH_X='v' is not valid;
 * accepted: ...; using the default D", joined by '\n') and the result is
 * -EINVAL; the other settings are as given. 0 when all is well.
 */
int kvb_config_load(struct kvb_config *cfg, kvb_getenv_fn get, long pid, char *err, size_t errcap);

/*
 * Renders the effective settings, one "KVBATCH_X=value" per line, into out
 * (for KVBATCH_LOG=info). Returns the length written (truncated to cap-1).
 */
size_t kvb_config_describe(const struct kvb_config *cfg, char *out, size_t cap);

const char *kvb_policy_name(enum kvb_policy p);
const char *kvb_put_mode_name(enum kvb_put_mode m);

#endif

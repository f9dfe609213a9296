/*
 * kvbench.h - shared pieces of kvbench: the options every command takes,
 * latency histograms, results and their output (text, CSV, JSON), progress
 * reporting, the basic workload.
 *
 * kvbench.c           main: the commands, put/get/exists's command line, --server-stats
 * kvbench_basic.c     the basic put/get/exists workload (single-key, batch, async)
 * kvbench_stats.c     histograms, result printing, CSV/JSON, progress line, sessions
 * kvbench_layerwise.c engine-shaped layer-by-layer save/load workload
 * kvbench_micro.c     sweep of sizes x threads x paths
 * kvbench_mooncake.c  threads on Mooncake's C API (put_from / get_into), the library dlopened
 *
 * kvbench's own names take the bench_ prefix (kvb_ is the batcher's).
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "clock.h"
#include "kvstore.h"
#include "opts.h"
#include "values.h"

/* Exit codes: 0 ok, 1 the run saw errors, KVOPT_EXIT_USAGE (2) bad command line. */
#define BENCH_EXIT_ERRORS 1

enum bench_op { BENCH_PUT, BENCH_GET, BENCH_EXISTS };
enum bench_mode { BENCH_SINGLE, BENCH_BATCH, BENCH_ASYNC };

/* Log-linear latency histogram in nanoseconds: 64 sub-buckets per power of two (~1.5 %). */
#define BENCH_HIST_SUB     64
#define BENCH_HIST_SUBBITS 6
#define BENCH_HIST_BUCKETS (2 * BENCH_HIST_SUB + 48 * BENCH_HIST_SUB)

struct bench_hist {
    uint64_t count;
    uint64_t max_ns;
    uint64_t bucket[BENCH_HIST_BUCKETS];
};

void bench_hist_add(struct bench_hist *h, uint64_t ns, uint64_t times);
void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from);
/* Value (ns) at quantile q in [0,1]; 0 when empty. */
double bench_hist_quantile(const struct bench_hist *h, double q);

/* One measured run, whatever the workload; unused figures stay 0. */
struct bench_result {
    char workload[16]; /* put, get, exists, layerwise-save, layerwise-load */
    char path[16];     /* single, batch, async, shim */
    char label[96];    /* free text: preset, policy... */
    int run;           /* 1..repeat, 0 for a median row */
    int threads;
    int batch;
    int first_error;
    size_t size;
    uint64_t ops;    /* ops attempted */
    uint64_t errors; /* ops that failed (any negative status) */
    uint64_t bytes;  /* value bytes moved by successful ops */
    double seconds;
    double ops_per_s;
    double bytes_per_s;
    double p50_us, p99_us;             /* latency per op, as its caller waited */
    double batch_p50_us, batch_p99_us; /* latency per call carrying a batch (batch, async) */
    /* layerwise only */
    double exposed_p50_us, exposed_p99_us;   /* save: transfer time left after the last compute */
    double wait_p50_us, wait_p99_us;         /* load: wait per layer */
    double req_wait_p50_us, req_wait_p99_us; /* load: total wait per request */
};

/* Output sinks: a CSV and a JSON file, both optional, written as results come. */
struct bench_output {
    FILE *csv;
    FILE *json;
    int json_rows;
    int quiet; /* no progress line */
};

int bench_output_open(struct bench_output *out, const char *csv_path, const char *json_path);
void bench_output_row(struct bench_output *out, const struct bench_result *r);
int bench_output_close(struct bench_output *out);

/* One human line for a result on stdout. */
void bench_print_result(const struct bench_result *r);
/* The median of each figure over n runs (n >= 1), marked run 0. */
void bench_median(const struct bench_result *runs, int n, struct bench_result *med);
/*
 * Fills r's path ("shim" for single calls with libkvbatch preloaded, else the
 * mode), seconds, and the rates from its ops, errors and bytes.
 */
void bench_result_timing(struct bench_result *r, enum bench_mode mode, uint64_t start_ns,
                         uint64_t end_ns);

/*
 * Progress while workers run: a line updated in place on a terminal, a plain
 * line every few seconds otherwise. done_ops is read, never written.
 */
struct bench_progress {
    const char *what;
    _Atomic uint64_t *done_ops;
    uint64_t total_ops; /* 0 when the run is bounded by time only */
    double seconds;     /* time bound */
    uint64_t start_ns;
    uint64_t last_print_ns;
    uint64_t last_ops;
    int tty;
    int quiet;
    int printed;
};

void bench_progress_start(struct bench_progress *p, const char *what, _Atomic uint64_t *done_ops,
                          uint64_t total_ops, double seconds, int quiet);
void bench_progress_tick(struct bench_progress *p);
void bench_progress_end(struct bench_progress *p);

/* Sleeps ns nanoseconds (bounded; restarts on EINTR). */
void bench_sleep_ns(uint64_t ns);
/* 1 if an LD_PRELOADed libkvbatch is in this process's environment. */
int bench_shim_preloaded(void);

const char *bench_op_name(enum bench_op op);
const char *bench_mode_name(enum bench_mode mode);
/* The names of the ops and of the paths, for options and commands ({NULL, 0} ended). */
extern const struct kvopt_choice bench_op_choices[];
extern const struct kvopt_choice bench_mode_choices[];

/* What every workload command takes: where the servers are, how often, where results go. */
struct bench_common {
    const char *servers;
    const char *csv, *json;
    int repeat; /* runs of each measurement, 1..64 */
    int quiet;  /* no progress line */
};

/*
 * Their option table entries: --servers first, the rest last in a command's
 * table (kept one entry a line, as in the tables that use them).
 */
/* clang-format off */
#define BENCH_OPT_SERVERS(c)                                                                       \
    {"servers", 0, KVOPT_STRING, KVOPT_TO((c).servers), "S", "host:port[,host:port]",             \
     .dflt = "$KVSTORE_SERVERS or " KVS_DEFAULT_SERVERS}
#define BENCH_OPTS_OUTPUT(c)                                                                       \
    {"repeat", 0, KVOPT_COUNT, KVOPT_TO((c).repeat), "R",                                         \
     "runs of each measurement; the median of several is printed", .lo = 1, .hi = 64},           \
    {"csv", 0, KVOPT_STRING, KVOPT_TO((c).csv), "FILE", "write results as CSV"},                   \
    {"json", 0, KVOPT_STRING, KVOPT_TO((c).json), "FILE", "write results as JSON"},                \
    {"quiet", 0, KVOPT_FLAG, KVOPT_TO((c).quiet), NULL, "no progress line"}
/* clang-format on */

/*
 * Opens the client on c->servers and the output files; on failure says why
 * (as who) and returns -1 with nothing open.
 */
int bench_session_open(const struct bench_common *c, const char *who, kvs_client **client,
                       struct bench_output *out);
/* Closes both; -1 if the output files could not be written out. */
int bench_session_close(kvs_client *client, struct bench_output *out);

/* Prints r and writes it to out. */
void bench_emit(struct bench_output *out, const struct bench_result *r);
/* The median of runs[0..n) into *med; printed and written too when n > 1. */
void bench_emit_median(struct bench_output *out, const struct bench_result *runs, int n,
                       struct bench_result *med);

/* Sub-commands beyond the basic put/get/exists (argc/argv start at the sub-command). */
int bench_layerwise_main(int argc, char **argv);
int bench_micro_main(int argc, char **argv);
int bench_mooncake_main(int argc, char **argv);
int bench_memcpy_main(int argc, char **argv); /* one thread's memcpy bandwidth (no server) */

/*
 * The basic workload, shared by the put/get/exists command and by micro: the
 * keys prefix.i for i < keys, prefilled by the caller for get/exists.
 */
struct bench_basic {
    kvs_client *client;
    enum bench_op op;
    enum bench_mode mode;
    size_t size;
    int threads;
    int batch; /* keys per batch (batch) or ops in flight (async) */
    uint64_t ops;
    double seconds;
    uint64_t keys;
    const char *prefix;
    int quiet;
    int shared_buffers; /* values in kvs_alloc_buffer memory (one copy over shm) */
};

/* Most memory one basic run may take for buffers: batch x size x threads (not for single). */
#define BENCH_MAX_BUFFER_BYTES (1ull << 30)
/* 1 if b's buffers are within BENCH_MAX_BUFFER_BYTES. */
int bench_basic_fits(const struct bench_basic *b);
/* Runs one measured pass; fills r. Returns 0, or a negative code if it could not run at all. */
int bench_basic_run(const struct bench_basic *b, struct bench_result *r);
/*
 * Runs b repeat times (1..64); prints each run when print_each, then, when
 * repeat > 1, their median, which goes to *med either way. Adds the errors
 * seen to *errors. Returns 0, or the code of a run that could not run.
 */
int bench_basic_repeat(const struct bench_basic *b, int repeat, int print_each,
                       struct bench_output *out, struct bench_result *med, uint64_t *errors);
/* Puts every key of the key space once (for get/exists); returns 0 or the first error. */
int bench_basic_prefill(kvs_client *c, const char *prefix, uint64_t keys, size_t size);

#endif /* KVBENCH_H */

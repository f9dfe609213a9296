/*
 * kvbench_micro.c - "kvbench micro": a sweep of the basic workload over
 * ops (put/get/exists) x paths (single/batch/async) x value sizes x thread
 * counts, each point bounded in time and count, results as text, CSV, JSON.
 * Run it under LD_PRELOAD=libkvbatch.so and the "single" path is reported as
 * "shim".
 */
#include "kvbench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 16
/* Keep each size's key space (and so the store's footprint) near this many bytes. */
#define KEYSPACE_BYTES (64ull << 20)

/* The sweep as given on the command line. */
struct micro_cmd {
    struct bench_common common;
    size_t sizes[MAX_LIST];
    int threads[MAX_LIST];
    enum bench_mode paths[MAX_LIST];
    enum bench_op ops[MAX_LIST];
    int nsizes, nthreads, npaths, nops;
    int batch;
    long long max_ops;
    double seconds;
};

/* Parses micro's options into mc; 0, KVOPT_HELP or -EINVAL. */
static int micro_parse(struct micro_cmd *mc, int argc, char **argv)
{
    const struct kvopt opts[] = {BENCH_OPT_SERVERS(mc->common),
                                 {"sizes", 0, KVOPT_SIZE, KVOPT_LIST(mc->sizes, mc->nsizes), "L",
                                  "value sizes", .lo = 0, .hi = 64 << 20},
                                 {"threads", 0, KVOPT_COUNT, KVOPT_LIST(mc->threads, mc->nthreads),
                                  "L", "thread counts", .lo = 1, .hi = 1024},
                                 {"paths", 0, KVOPT_ENUM, KVOPT_LIST(mc->paths, mc->npaths), "L",
                                  "the I/O paths", .choices = bench_mode_choices},
                                 {"ops", 0, KVOPT_ENUM, KVOPT_LIST(mc->ops, mc->nops), "L",
                                  "the operations", .choices = bench_op_choices},
                                 {"batch", 0, KVOPT_COUNT, KVOPT_TO(mc->batch), "N",
                                  "keys per batch / async depth", .lo = 1, .hi = 65536},
                                 {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(mc->seconds), "S",
                                  "time bound per point", .lo = 0, .hi = 3600},
                                 {"max-ops", 0, KVOPT_COUNT, KVOPT_TO(mc->max_ops), "N",
                                  "op bound per point", .lo = 1, .hi = 1000000000,
                                  .accepted = "1..10^9"},
                                 BENCH_OPTS_OUTPUT(mc->common),
                                 {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbench micro", .usage = "usage: kvbench micro [options]\n", .opts = opts};
    return kvopt_parse(&cmd, argc, argv);
}

/* One point of the sweep, --repeat times: the run printed, or only the median of several. */
static int micro_point(struct bench_basic *b, const struct micro_cmd *mc, struct bench_output *out,
                       uint64_t *errors)
{
    /* Big values x many threads: fewer keys per batch, the same bound on buffers. */
    uint64_t per = (uint64_t)b->size * (uint64_t)b->threads;
    if (per && (uint64_t)b->batch * per > BENCH_MAX_BUFFER_BYTES)
        b->batch = BENCH_MAX_BUFFER_BYTES / per ? (int)(BENCH_MAX_BUFFER_BYTES / per) : 1;
    struct bench_result med;
    return bench_basic_repeat(b, mc->common.repeat, mc->common.repeat == 1, out, &med, errors);
}

/* Every op x path x thread count at one value size, on its own prefilled key space. */
static int micro_size(kvs_client *client, size_t size, const struct micro_cmd *mc,
                      struct bench_output *out, uint64_t *errors)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "kvbm.%d.%zu", (int)getpid(), size);
    uint64_t keys = KEYSPACE_BYTES / (size ? size : 1);
    keys = keys < 64 ? 64 : keys > 4096 ? 4096 : keys;
    int prefilled = 0;
    for (int oi = 0; oi < mc->nops; oi++) {
        if (mc->ops[oi] != BENCH_PUT && !prefilled) {
            int rc = bench_basic_prefill(client, prefix, keys, size);
            if (rc < 0) {
                fprintf(stderr, "kvbench micro: prefill of %zu B values failed: %s\n", size,
                        kvs_strerror(rc));
                return rc;
            }
            prefilled = 1;
        }
        for (int pi = 0; pi < mc->npaths; pi++) {
            if (mc->paths[pi] == BENCH_ASYNC && mc->ops[oi] == BENCH_EXISTS) continue;
            for (int ti = 0; ti < mc->nthreads; ti++) {
                struct bench_basic b = {.client = client,
                                        .op = mc->ops[oi],
                                        .mode = mc->paths[pi],
                                        .size = size,
                                        .threads = mc->threads[ti],
                                        .batch = mc->batch,
                                        .ops = (uint64_t)mc->max_ops,
                                        .seconds = mc->seconds,
                                        .keys = keys,
                                        .prefix = prefix,
                                        .quiet = mc->common.quiet};
                int rc = micro_point(&b, mc, out, errors);
                if (rc < 0) return rc;
            }
        }
    }
    return 0;
}

int bench_micro_main(int argc, char **argv)
{
    struct micro_cmd mc = {.common = {.repeat = 1},
                           .sizes = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20},
                           .nsizes = 6,
                           .threads = {1, 4, 16, 64},
                           .nthreads = 4,
                           .paths = {BENCH_SINGLE, BENCH_BATCH},
                           .npaths = 2,
                           .ops = {BENCH_PUT, BENCH_GET, BENCH_EXISTS},
                           .nops = 3,
                           .batch = 64,
                           .max_ops = 1000000,
                           .seconds = 1};
    int rc = micro_parse(&mc, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;

    kvs_client *client;
    struct bench_output out;
    if (bench_session_open(&mc.common, "kvbench micro", &client, &out) < 0) return KVOPT_EXIT_USAGE;
    uint64_t errors = 0;
    rc = 0;
    for (int si = 0; si < mc.nsizes && rc == 0; si++)
        if (micro_size(client, mc.sizes[si], &mc, &out, &errors) < 0) rc = BENCH_EXIT_ERRORS;
    if (bench_session_close(client, &out) < 0 && rc == 0) rc = BENCH_EXIT_ERRORS;
    if (rc == 0 && errors) rc = BENCH_EXIT_ERRORS;
    return rc;
}

/*
 * kvbench.c - benchmark driver for kvbatch: main picks the command; the
 * command line of put|get|exists and of --server-stats. The workloads live
 * beside it (kvbench_basic.c, kvbench_layerwise.c, kvbench_micro.c,
 * kvbench_mooncake.c, kvbench_memcpy.c).
 */
#include "kvbench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char USAGE[] = "usage: kvbench put|get|exists [options]\n"
                            "       kvbench layerwise [options]\n"
                            "       kvbench micro [options]\n"
                            "       kvbench mooncake [options]\n"
                            "       kvbench memcpy [options]\n"
                            "       kvbench --server-stats [--servers S]\n"
                            "kvbench COMMAND --help lists a command's options.\n"
                            "exit status: 0 ok, 1 some ops failed, 2 bad arguments\n";

/* ---- command line ---- */

static int server_stats(const char *servers)
{
    kvs_client *c = kvs_open(servers);
    if (!c) {
        fprintf(stderr, "kvbench: bad server list '%s': %s\n", servers ? servers : "(default)",
                strerror(errno));
        return KVOPT_EXIT_USAGE;
    }
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    int rc = BENCH_EXIT_ERRORS;
    if (!buf) {
        fprintf(stderr, "kvbench: out of memory\n");
        goto out;
    }
    ssize_t n = kvs_server_stats(c, buf, cap);
    if (n < 0) {
        fprintf(stderr, "kvbench: server stats: %s\n", kvs_strerror((int)n));
        goto out;
    }
    fwrite(buf, 1, strlen(buf), stdout);
    rc = 0;
out:
    free(buf);
    kvs_close(c);
    return rc;
}

/* put|get|exists as given on the command line. */
struct basic_cmd {
    struct bench_basic b;
    struct bench_common common;
    enum bench_mode modes[8];
    int nmodes;
    long long ops;  /* 0: not given */
    double seconds; /* 0: not given */
    char prefix[64];
};

/* Parses put|get|exists's options into bc; 0, KVOPT_HELP or -EINVAL. */
static int basic_parse(struct basic_cmd *bc, const char *who, int argc, char **argv)
{
    struct bench_basic *b = &bc->b;
    const struct kvopt opts[] = {
        BENCH_OPT_SERVERS(bc->common),
        {"threads", 0, KVOPT_COUNT, KVOPT_TO(b->threads), "N", "client threads", .lo = 1,
         .hi = 1024},
        {"size", 0, KVOPT_SIZE, KVOPT_TO(b->size), "SIZE", "value size", .lo = 0, .hi = 64 << 20},
        {"mode", 0, KVOPT_ENUM, KVOPT_LIST(bc->modes, bc->nmodes), "M[,M...]",
         "the paths to run, one after another, then compared side by side",
         .choices = bench_mode_choices},
        {"batch", 0, KVOPT_COUNT, KVOPT_TO(b->batch), "N",
         "keys per batch call (batch) or ops in flight (async)", .lo = 1, .hi = 65536},
        {"ops", 0, KVOPT_COUNT, KVOPT_TO(bc->ops), "N", "total ops per run over all threads",
         .lo = 1, .hi = 1000000000000LL, .accepted = "1..10^12",
         .dflt = "100000, none with --seconds"},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(bc->seconds), "S", "time bound per run", .lo = 0,
         .hi = 86400, .dflt = "30"},
        {"keys", 0, KVOPT_COUNT, KVOPT_TO(b->keys), "N", "key space size", .lo = 1, .hi = 100000000,
         .accepted = "1..10^8"},
        {"prefix", 0, KVOPT_STRING, KVOPT_TO(b->prefix), "P", "key prefix", .lo = 1, .hi = 40,
         .dflt = "kvb.<pid>"},
        {"shared-buffers", 0, KVOPT_FLAG, KVOPT_TO(b->shared_buffers), NULL,
         "values in kvs_alloc_buffer memory: over shm they cross memory once"},
        BENCH_OPTS_OUTPUT(bc->common),
        {0}};
    const struct kvopt_cmd cmd = {.name = who,
                                  .usage = "usage: kvbench put|get|exists [options]\n",
                                  .footer = "exit status: 0 ok, 1 some ops failed, 2 bad "
                                            "arguments\n",
                                  .opts = opts};
    return kvopt_parse(&cmd, argc, argv);
}

/* The checks across options; 0 or -EINVAL with a message. */
static int basic_check(struct basic_cmd *bc)
{
    struct bench_basic *b = &bc->b;
    b->ops = bc->ops > 0 ? (uint64_t)bc->ops : bc->seconds > 0 ? 1000000000000ull : 100000;
    b->seconds = bc->seconds > 0 ? bc->seconds : 30;
    for (int i = 0; i < bc->nmodes; i++) {
        b->mode = bc->modes[i];
        if (b->mode == BENCH_ASYNC && b->op == BENCH_EXISTS) {
            fprintf(stderr, "kvbench: exists has no async single-key call; use single or batch\n");
            return -EINVAL;
        }
        if (!bench_basic_fits(b)) {
            fprintf(stderr, "kvbench: --batch x --size x --threads is over 1 GiB of buffers\n");
            return -EINVAL;
        }
    }
    return 0;
}

/* The medians of every mode run, each against the first. */
static void print_side_by_side(const struct basic_cmd *bc, const struct bench_result *meds)
{
    const struct bench_basic *b = &bc->b;
    int repeat = bc->common.repeat;
    printf("side by side (median of %d run%s, %s, %d thread%s, %zu B):\n", repeat,
           repeat > 1 ? "s" : "", bench_op_name(b->op), b->threads, b->threads > 1 ? "s" : "",
           b->size);
    for (int m = 0; m < bc->nmodes; m++)
        printf("  %-7s %12.0f ops/s  p50 %9.1fus  p99 %9.1fus  x%.2f vs %s\n", meds[m].path,
               meds[m].ops_per_s, meds[m].p50_us, meds[m].p99_us,
               meds[0].ops_per_s > 0 ? meds[m].ops_per_s / meds[0].ops_per_s : 0, meds[0].path);
}

/* kvbench put|get|exists: runs each mode --repeat times, then compares medians. */
static int basic_main(enum bench_op op, int argc, char **argv)
{
    struct basic_cmd bc = {
        .b = {.op = op, .size = 4096, .threads = 1, .batch = 64, .keys = 4096},
        .common = {.repeat = 1},
        .modes = {BENCH_SINGLE},
        .nmodes = 1,
    };
    snprintf(bc.prefix, sizeof(bc.prefix), "kvb.%d", (int)getpid());
    bc.b.prefix = bc.prefix;
    char who[32];
    snprintf(who, sizeof(who), "kvbench %s", bench_op_name(op));
    int rc = basic_parse(&bc, who, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0 || basic_check(&bc) < 0) return KVOPT_EXIT_USAGE;

    struct bench_basic *b = &bc.b;
    struct bench_output out;
    if (bench_session_open(&bc.common, "kvbench", &b->client, &out) < 0) return KVOPT_EXIT_USAGE;
    rc = BENCH_EXIT_ERRORS;
    if (op != BENCH_PUT) {
        int prc = bench_basic_prefill(b->client, b->prefix, b->keys, b->size);
        if (prc < 0) {
            fprintf(stderr, "kvbench: prefilling %llu keys of %zu bytes failed: %s\n",
                    (unsigned long long)b->keys, b->size, kvs_strerror(prc));
            goto out;
        }
    }
    struct bench_result meds[8];
    uint64_t errors = 0;
    for (int m = 0; m < bc.nmodes; m++) {
        b->mode = bc.modes[m];
        if (bench_basic_repeat(b, bc.common.repeat, 1, &out, &meds[m], &errors) < 0) goto out;
    }
    if (bc.nmodes > 1) print_side_by_side(&bc, meds);
    rc = errors ? BENCH_EXIT_ERRORS : 0;
out:
    if (bench_session_close(b->client, &out) < 0 && rc == 0) rc = BENCH_EXIT_ERRORS;
    return rc;
}

/*
 * kvbench --server-stats [--servers S], in either order (argv[0] is
 * "kvbench"), or kvbench server-stats [--servers S] (argv[0] is the command).
 */
static int server_stats_main(int argc, char **argv, int asked)
{
    struct bench_common common = {0};
    const struct kvopt opts[] = {
        {"server-stats", 0, KVOPT_FLAG, KVOPT_TO(asked), NULL, "print every server's STATS"},
        BENCH_OPT_SERVERS(common),
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbench", .usage = "usage: kvbench --server-stats [--servers S]\n", .opts = opts};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    if (!asked) {
        fprintf(stderr,
                "kvbench: a command (put, get, exists, layerwise, micro, mooncake) comes first\n");
        return KVOPT_EXIT_USAGE;
    }
    return server_stats(common.servers);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(USAGE, stderr);
        return KVOPT_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    for (const struct kvopt_choice *c = bench_op_choices; c->name; c++)
        if (strcmp(cmd, c->name) == 0)
            return basic_main((enum bench_op)c->value, argc - 1, argv + 1);
    if (strcmp(cmd, "layerwise") == 0) return bench_layerwise_main(argc - 1, argv + 1);
    if (strcmp(cmd, "micro") == 0) return bench_micro_main(argc - 1, argv + 1);
    if (strcmp(cmd, "mooncake") == 0) return bench_mooncake_main(argc - 1, argv + 1);
    if (strcmp(cmd, "memcpy") == 0) return bench_memcpy_main(argc - 1, argv + 1);
    if (strcmp(cmd, "server-stats") == 0) return server_stats_main(argc - 1, argv + 1, 1);
    if (strncmp(cmd, "--server", 8) == 0) return server_stats_main(argc, argv, 0);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        kvopt_version("kvbench", stdout);
        return 0;
    }
    fprintf(stderr, "kvbench: unknown command '%s'\n", cmd);
    fputs(USAGE, stderr);
    return KVOPT_EXIT_USAGE;
}

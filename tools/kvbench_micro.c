/*
 * kvbench_micro.c - "kvbench micro": a sweep of the basic workload over
 * ops (put/get/exists) x paths (single/batch/async) x value sizes x thread
 * counts, each point bounded in time and count, results as text, CSV, JSON.
 * Run it under LD_PRELOAD=libkvbatch.so and the "single" path is reported as
 * "shim".
 */
#include "kvbench.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 16
/* Keep each size's key space (and so the store's footprint) near this many bytes. */
#define KEYSPACE_BYTES (64ull << 20)
#define BUFFER_BYTES   (1ull << 30)

static void micro_usage(FILE *f)
{
    fprintf(f, "usage: kvbench micro [options]\n"
               "  --servers S         host:port[,...]\n"
               "  --sizes L           value sizes (default 1K,4K,16K,64K,256K,1M)\n"
               "  --threads L         thread counts (default 1,4,16,64)\n"
               "  --paths L           single,batch,async (default single,batch)\n"
               "  --ops L             put,get,exists (default put,get,exists)\n"
               "  --batch N           keys per batch / async depth (default 64)\n"
               "  --seconds S         time bound per point (default 1)\n"
               "  --max-ops N         op bound per point (default 1000000)\n"
               "  --repeat R          runs per point, median printed (default 1)\n"
               "  --csv FILE, --json FILE, --quiet\n");
}

/* Splits a comma list into up to MAX_LIST tokens inside buf. */
static int split(char *buf, char *tok[])
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) return -EINVAL;
        tok[n++] = t;
    }
    return n ? n : -EINVAL;
}

int kvb_micro_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"servers", required_argument, 0, 's'}, {"sizes", required_argument, 0, 'z'},
        {"threads", required_argument, 0, 't'}, {"paths", required_argument, 0, 'P'},
        {"ops", required_argument, 0, 'o'},     {"batch", required_argument, 0, 'b'},
        {"seconds", required_argument, 0, 'S'}, {"max-ops", required_argument, 0, 'n'},
        {"repeat", required_argument, 0, 'r'},  {"csv", required_argument, 0, 'c'},
        {"json", required_argument, 0, 'j'},    {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    char sizes_s[256] = "1K,4K,16K,64K,256K,1M", threads_s[256] = "1,4,16,64";
    char paths_s[256] = "single,batch", ops_s[256] = "put,get,exists";
    const char *servers = NULL, *csv = NULL, *json = NULL;
    long batch = 64, max_ops = 1000000, repeat = 1;
    double seconds = 1;
    int quiet = 0, c;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            servers = optarg;
            break;
        case 'z':
            snprintf(sizes_s, sizeof(sizes_s), "%s", optarg);
            break;
        case 't':
            snprintf(threads_s, sizeof(threads_s), "%s", optarg);
            break;
        case 'P':
            snprintf(paths_s, sizeof(paths_s), "%s", optarg);
            break;
        case 'o':
            snprintf(ops_s, sizeof(ops_s), "%s", optarg);
            break;
        case 'b':
            if (kvb_parse_long(optarg, 1, 65536, &batch))
                return kvb_bad_arg("kvbench micro", "--batch", optarg, "1..65536");
            break;
        case 'S':
            if (kvb_parse_seconds(optarg, 3600, &seconds))
                return kvb_bad_arg("kvbench micro", "--seconds", optarg, "(0, 3600]");
            break;
        case 'n':
            if (kvb_parse_long(optarg, 1, 1000000000L, &max_ops))
                return kvb_bad_arg("kvbench micro", "--max-ops", optarg, "1..10^9");
            break;
        case 'r':
            if (kvb_parse_long(optarg, 1, 64, &repeat))
                return kvb_bad_arg("kvbench micro", "--repeat", optarg, "1..64");
            break;
        case 'c':
            csv = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            micro_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "kvbench micro: unknown or incomplete option '%s'\n", argv[optind - 1]);
            micro_usage(stderr);
            return KVB_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return kvb_bad_arg("kvbench micro", "argument", argv[optind], "options only");

    char *tok[MAX_LIST];
    size_t sizes[MAX_LIST];
    int threads[MAX_LIST], nsizes, nthreads, npaths, nops;
    enum kvb_mode paths[MAX_LIST];
    enum kvb_op ops[MAX_LIST];
    nsizes = split(sizes_s, tok);
    for (int i = 0; i < nsizes; i++)
        if (kvb_parse_size(tok[i], &sizes[i]) || sizes[i] > (64u << 20))
            return kvb_bad_arg("kvbench micro", "--sizes", tok[i],
                               "sizes up to 64M, e.g. 1K,4K,1M");
    if (nsizes < 0)
        return kvb_bad_arg("kvbench micro", "--sizes", sizes_s, "a comma list of sizes");
    nthreads = split(threads_s, tok);
    if (nthreads < 0)
        return kvb_bad_arg("kvbench micro", "--threads", threads_s, "a comma list of 1..1024");
    for (int i = 0; i < nthreads; i++) {
        long v;
        if (kvb_parse_long(tok[i], 1, 1024, &v))
            return kvb_bad_arg("kvbench micro", "--threads", tok[i], "1..1024");
        threads[i] = (int)v;
    }
    npaths = split(paths_s, tok);
    if (npaths < 0) return kvb_bad_arg("kvbench micro", "--paths", paths_s, "single,batch,async");
    for (int i = 0; i < npaths; i++) {
        if (strcmp(tok[i], "single") == 0)
            paths[i] = KVB_SINGLE;
        else if (strcmp(tok[i], "batch") == 0)
            paths[i] = KVB_BATCH;
        else if (strcmp(tok[i], "async") == 0)
            paths[i] = KVB_ASYNC;
        else
            return kvb_bad_arg("kvbench micro", "--paths", tok[i], "single, batch, async");
    }
    nops = split(ops_s, tok);
    if (nops < 0) return kvb_bad_arg("kvbench micro", "--ops", ops_s, "put,get,exists");
    for (int i = 0; i < nops; i++) {
        if (strcmp(tok[i], "put") == 0)
            ops[i] = KVB_PUT;
        else if (strcmp(tok[i], "get") == 0)
            ops[i] = KVB_GET;
        else if (strcmp(tok[i], "exists") == 0)
            ops[i] = KVB_EXISTS;
        else
            return kvb_bad_arg("kvbench micro", "--ops", tok[i], "put, get, exists");
    }

    kvs_client *client = kvs_open(servers);
    if (!client) {
        fprintf(stderr, "kvbench micro: bad server list: %s\n", strerror(errno));
        return KVB_EXIT_USAGE;
    }
    struct kvb_output out;
    if (kvb_output_open(&out, csv, json) < 0) {
        kvs_close(client);
        return KVB_EXIT_USAGE;
    }
    int rc = 0;
    uint64_t errors = 0;
    for (int si = 0; si < nsizes && rc == 0; si++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "kvbm.%d.%zu", (int)getpid(), sizes[si]);
        uint64_t keys = KEYSPACE_BYTES / (sizes[si] ? sizes[si] : 1);
        keys = keys < 64 ? 64 : keys > 4096 ? 4096 : keys;
        int prefilled = 0;
        for (int oi = 0; oi < nops && rc == 0; oi++) {
            if (ops[oi] != KVB_PUT && !prefilled) {
                int prc = kvb_basic_prefill(client, prefix, keys, sizes[si]);
                if (prc < 0) {
                    fprintf(stderr, "kvbench micro: prefill of %zu B values failed: %s\n",
                            sizes[si], kvs_strerror(prc));
                    rc = KVB_EXIT_ERRORS;
                    break;
                }
                prefilled = 1;
            }
            for (int pi = 0; pi < npaths && rc == 0; pi++) {
                if (paths[pi] == KVB_ASYNC && ops[oi] == KVB_EXISTS) continue;
                for (int ti = 0; ti < nthreads && rc == 0; ti++) {
                    struct kvb_basic b = {.client = client,
                                          .op = ops[oi],
                                          .mode = paths[pi],
                                          .size = sizes[si],
                                          .threads = threads[ti],
                                          .batch = (int)batch,
                                          .ops = (uint64_t)max_ops,
                                          .seconds = seconds,
                                          .keys = keys,
                                          .prefix = prefix,
                                          .quiet = quiet};
                    /* Big values x many threads: fewer keys per batch, same buffer bound. */
                    uint64_t per = (uint64_t)b.size * (uint64_t)b.threads;
                    if (per && (uint64_t)b.batch * per > BUFFER_BYTES)
                        b.batch = (int)(BUFFER_BYTES / per) ? (int)(BUFFER_BYTES / per) : 1;
                    struct kvb_result runs[64], med;
                    for (int r = 0; r < repeat; r++) {
                        int brc = kvb_basic_run(&b, &runs[r]);
                        if (brc < 0) {
                            fprintf(stderr, "kvbench micro: run failed: %s\n", kvs_strerror(brc));
                            rc = KVB_EXIT_ERRORS;
                            break;
                        }
                        runs[r].run = r + 1;
                        errors += runs[r].errors;
                        if (repeat == 1) {
                            kvb_print_result(&runs[r]);
                            kvb_output_row(&out, &runs[r]);
                        }
                    }
                    if (rc == 0 && repeat > 1) {
                        kvb_median(runs, (int)repeat, &med);
                        kvb_print_result(&med);
                        kvb_output_row(&out, &med);
                    }
                }
            }
        }
    }
    if (kvb_output_close(&out) < 0 && rc == 0) rc = KVB_EXIT_ERRORS;
    kvs_close(client);
    if (rc == 0 && errors) rc = KVB_EXIT_ERRORS;
    return rc;
}

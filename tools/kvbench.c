/*
 * kvbench.c - benchmark driver for kvbatch: command line, the basic
 * put/get/exists workload (single-key, explicit batch, async) and
 * --server-stats. Engine-shaped and sweep workloads live beside it
 * (kvbench_layerwise.c, kvbench_micro.c).
 *
 * The "single" path calls only kvs_put/kvs_get/kvs_exists, one key per call,
 * so that the same binary run under LD_PRELOAD=libkvbatch.so measures the
 * shim's batching. Every loop is bounded both in count and in time.
 */
#include "kvbench.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Most memory a run may take for per-thread buffers. */
#define KVB_MAX_BUFFER_BYTES (1ull << 30)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvbench put|get|exists [options]\n"
            "       kvbench layerwise [options]   (kvbench layerwise --help)\n"
            "       kvbench micro [options]       (kvbench micro --help)\n"
            "       kvbench --server-stats [--servers S]\n"
            "\n"
            "options of put|get|exists:\n"
            "  --servers S       host:port[,host:port] (default $KVSTORE_SERVERS or %s)\n"
            "  --threads N       client threads, 1..1024 (default 1)\n"
            "  --size B          value size: 4096, 4K, 64KiB, 1M (default 4K)\n"
            "  --mode M[,M..]    single, batch, async; several are run one after another\n"
            "                    and compared (default single)\n"
            "  --batch N         keys per batch call (batch) or ops in flight (async), 1..65536\n"
            "                    (default 64)\n"
            "  --ops N           total ops per run over all threads (default 100000)\n"
            "  --seconds S       time bound per run (default 30 with --ops, else required)\n"
            "  --keys N          key space size (default 4096)\n"
            "  --repeat R        runs per mode; prints each run and the median (default 1)\n"
            "  --prefix P        key prefix (default kvb.<pid>)\n"
            "  --csv FILE        write results as CSV\n"
            "  --json FILE       write results as JSON\n"
            "  --quiet           no progress line\n"
            "exit status: 0 ok, 1 some ops failed, 2 bad arguments\n",
            KVS_DEFAULT_SERVERS);
}

/* ---- the basic workload ---- */

struct worker {
    const struct kvb_basic *b;
    char *const *keys;
    int id;
    uint64_t my_ops;
    uint64_t start_ns, deadline_ns, end_ns;
    _Atomic uint64_t *done;
    _Atomic int *finished;
    struct kvb_hist op_lat, batch_lat;
    uint64_t ops, errors, bytes;
    int first_error;
};

static void note_status(struct worker *w, ssize_t rc, size_t moved)
{
    w->ops++;
    if (rc < 0) {
        w->errors++;
        if (!w->first_error) w->first_error = (int)rc;
    } else {
        w->bytes += moved;
    }
}

/* Checks a get's result: right length and the pattern kvb_basic_prefill wrote. */
static ssize_t check_get(const struct worker *w, const char *key, const void *buf, ssize_t rc)
{
    if (rc < 0) return rc;
    if ((size_t)rc != w->b->size || !kvb_check_value(buf, (size_t)rc, key)) return -EBADMSG;
    return rc;
}

/* One key per call: the path the shim interposes on. */
static void run_single(struct worker *w, void *buf)
{
    const struct kvb_basic *b = w->b;
    uint64_t idx = (uint64_t)w->id * 7919u;
    for (uint64_t j = 0; j < w->my_ops; j++) {
        uint64_t t0 = kvs_now_ns();
        if (t0 >= w->deadline_ns) break;
        const char *key = w->keys[(idx + j) % b->keys];
        ssize_t rc;
        if (b->op == KVB_PUT)
            rc = kvs_put(b->client, key, buf, b->size);
        else if (b->op == KVB_GET)
            rc = check_get(w, key, buf, kvs_get(b->client, key, buf, b->size));
        else
            rc = kvs_exists(b->client, key) == 1 ? 0 : -ENOENT;
        uint64_t t1 = kvs_now_ns();
        kvb_hist_add(&w->op_lat, t1 - t0, 1);
        note_status(w, rc, b->op == KVB_EXISTS ? 0 : b->size);
        atomic_fetch_add_explicit(w->done, 1, memory_order_relaxed);
    }
}

/* Explicit batches of up to b->batch keys per call. */
static int run_batch(struct worker *w, void *bufs)
{
    const struct kvb_basic *b = w->b;
    size_t n = (size_t)b->batch;
    const char **keys = calloc(n, sizeof(*keys));
    const void **vals = calloc(n, sizeof(*vals));
    void **outs = calloc(n, sizeof(*outs));
    size_t *lens = calloc(n, sizeof(*lens));
    int *status = calloc(n, sizeof(*status));
    ssize_t *results = calloc(n, sizeof(*results));
    int rc = -ENOMEM;
    if (!keys || !vals || !outs || !lens || !status || !results) goto out;
    for (size_t i = 0; i < n; i++) {
        vals[i] = bufs; /* puts send one buffer for every key */
        outs[i] = (char *)bufs + i * b->size;
        lens[i] = b->size;
    }
    uint64_t idx = (uint64_t)w->id * 7919u;
    for (uint64_t j = 0; j < w->my_ops;) {
        uint64_t t0 = kvs_now_ns();
        if (t0 >= w->deadline_ns) break;
        size_t k = w->my_ops - j < n ? (size_t)(w->my_ops - j) : n;
        for (size_t i = 0; i < k; i++)
            keys[i] = w->keys[(idx + j + i) % b->keys];
        int call;
        if (b->op == KVB_PUT)
            call = kvs_batch_put(b->client, k, keys, vals, lens, status);
        else if (b->op == KVB_GET)
            call = kvs_batch_get(b->client, k, keys, outs, lens, results);
        else
            call = kvs_batch_exists(b->client, k, keys, status);
        uint64_t t1 = kvs_now_ns();
        kvb_hist_add(&w->batch_lat, t1 - t0, 1);
        kvb_hist_add(&w->op_lat, t1 - t0, k); /* each key waited for its whole batch */
        for (size_t i = 0; i < k; i++) {
            ssize_t st;
            if (call < 0)
                st = call;
            else if (b->op == KVB_PUT)
                st = status[i];
            else if (b->op == KVB_GET)
                st = check_get(w, keys[i], outs[i], results[i]);
            else
                st = status[i] == 1 ? 0 : status[i] == 0 ? -ENOENT : status[i];
            note_status(w, st, b->op == KVB_EXISTS ? 0 : b->size);
        }
        atomic_fetch_add_explicit(w->done, k, memory_order_relaxed);
        j += k;
    }
    rc = 0;
out:
    free(results);
    free(status);
    free(lens);
    free(outs);
    free(vals);
    free(keys);
    return rc;
}

/* Up to b->batch single-key async ops in flight, waited in issue order. */
static int run_async(struct worker *w, void *bufs)
{
    const struct kvb_basic *b = w->b;
    size_t depth = (size_t)b->batch;
    kvs_op **ops = calloc(depth, sizeof(kvs_op *));
    uint64_t *issued = calloc(depth, sizeof(*issued));
    const char **keys = calloc(depth, sizeof(*keys));
    if (!ops || !issued || !keys) {
        free(keys);
        free(issued);
        free(ops);
        return -ENOMEM;
    }
    uint64_t idx = (uint64_t)w->id * 7919u;
    uint64_t next = 0, waited = 0;
    /* Slot s = op number % depth; issue while under depth, else wait the oldest. */
    while (waited < w->my_ops) {
        int can_issue = next < w->my_ops && next - waited < depth && kvs_now_ns() < w->deadline_ns;
        if (can_issue) {
            size_t s = (size_t)(next % depth);
            keys[s] = w->keys[(idx + next) % b->keys];
            char *buf = (char *)bufs + (b->op == KVB_GET ? s * b->size : 0);
            issued[s] = kvs_now_ns();
            int rc = b->op == KVB_PUT ? kvs_put_async(b->client, keys[s], buf, b->size, &ops[s])
                                      : kvs_get_async(b->client, keys[s], buf, b->size, &ops[s]);
            if (rc < 0) {
                /* counted now; its empty slot is skipped when its turn to be waited comes */
                ops[s] = NULL;
                note_status(w, rc, 0);
                atomic_fetch_add_explicit(w->done, 1, memory_order_relaxed);
            }
            next++;
            continue;
        }
        if (waited == next) break; /* nothing in flight and nothing more to issue */
        size_t s = (size_t)(waited % depth);
        if (ops[s]) {
            ssize_t rc = kvs_wait(ops[s]);
            ops[s] = NULL;
            if (b->op == KVB_GET) rc = check_get(w, keys[s], (char *)bufs + s * b->size, rc);
            kvb_hist_add(&w->op_lat, kvs_now_ns() - issued[s], 1);
            note_status(w, rc, b->size);
            atomic_fetch_add_explicit(w->done, 1, memory_order_relaxed);
        }
        waited++;
    }
    free(keys);
    free(issued);
    free(ops);
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct kvb_basic *b = w->b;
    size_t nbufs = b->mode == KVB_SINGLE ? 1 : (size_t)b->batch;
    void *bufs = malloc(nbufs * (b->size ? b->size : 1));
    if (!bufs) {
        w->first_error = -ENOMEM;
        w->errors = 1;
        goto done;
    }
    memset(bufs, 0xa5, nbufs * (b->size ? b->size : 1));
    w->start_ns = kvs_now_ns();
    int rc = 0;
    if (b->mode == KVB_SINGLE)
        run_single(w, bufs);
    else if (b->mode == KVB_BATCH)
        rc = run_batch(w, bufs);
    else
        rc = run_async(w, bufs);
    w->end_ns = kvs_now_ns();
    if (rc < 0 && !w->first_error) w->first_error = rc, w->errors++;
    free(bufs);
done:
    atomic_fetch_add(w->finished, 1);
    return NULL;
}

int kvb_basic_run(const struct kvb_basic *b, struct kvb_result *r)
{
    int rc = -ENOMEM;
    if ((b->mode != KVB_SINGLE &&
         (uint64_t)b->batch * b->size * (uint64_t)b->threads > KVB_MAX_BUFFER_BYTES) ||
        (b->mode == KVB_ASYNC && b->op == KVB_EXISTS))
        return -EINVAL;
    char **keys = calloc(b->keys, sizeof(*keys));
    struct worker *ws = calloc((size_t)b->threads, sizeof(*ws));
    pthread_t *tids = calloc((size_t)b->threads, sizeof(*tids));
    if (!keys || !ws || !tids) goto out;
    for (uint64_t i = 0; i < b->keys; i++)
        if (asprintf(&keys[i], "%s.%llu", b->prefix, (unsigned long long)i) < 0) {
            keys[i] = NULL;
            goto out;
        }

    _Atomic uint64_t done = 0;
    _Atomic int finished = 0;
    uint64_t start = kvs_now_ns();
    uint64_t deadline = start + (uint64_t)(b->seconds * 1e9);
    int started = 0;
    for (int t = 0; t < b->threads; t++) {
        struct worker *w = &ws[t];
        w->b = b;
        w->keys = keys;
        w->id = t;
        w->my_ops = b->ops / (uint64_t)b->threads + ((uint64_t)t < b->ops % (uint64_t)b->threads);
        w->deadline_ns = deadline;
        w->done = &done;
        w->finished = &finished;
        rc = -pthread_create(&tids[t], NULL, worker_main, w);
        if (rc < 0) {
            fprintf(stderr, "kvbench: cannot start thread %d: %s\n", t, strerror(-rc));
            break;
        }
        started++;
    }
    struct kvb_progress prog;
    char what[64];
    snprintf(what, sizeof(what), "%s %s", kvb_op_name(b->op), kvb_mode_name(b->mode));
    kvb_progress_start(&prog, what, &done, b->ops, b->seconds, b->quiet);
    while (atomic_load(&finished) < started) {
        kvb_sleep_ns(50000000);
        kvb_progress_tick(&prog);
    }
    kvb_progress_end(&prog);

    memset(r, 0, sizeof(*r));
    struct kvb_hist *op_lat = calloc(1, sizeof(*op_lat));
    struct kvb_hist *batch_lat = calloc(1, sizeof(*batch_lat));
    uint64_t end = start;
    for (int t = 0; t < started; t++) {
        pthread_join(tids[t], NULL);
        struct worker *w = &ws[t];
        if (op_lat) kvb_hist_merge(op_lat, &w->op_lat);
        if (batch_lat) kvb_hist_merge(batch_lat, &w->batch_lat);
        r->ops += w->ops;
        r->errors += w->errors;
        r->bytes += w->bytes;
        if (!r->first_error) r->first_error = w->first_error;
        if (w->end_ns > end) end = w->end_ns;
    }
    if (!op_lat || !batch_lat) {
        free(op_lat);
        free(batch_lat);
        rc = -ENOMEM;
        goto out;
    }
    snprintf(r->workload, sizeof(r->workload), "%s", kvb_op_name(b->op));
    kvb_result_timing(r, b->mode, start, end);
    r->size = b->size;
    r->threads = b->threads;
    r->batch = b->mode == KVB_SINGLE ? 1 : b->batch;
    r->p50_us = kvb_hist_quantile(op_lat, 0.50) / 1e3;
    r->p99_us = kvb_hist_quantile(op_lat, 0.99) / 1e3;
    r->batch_p50_us = kvb_hist_quantile(batch_lat, 0.50) / 1e3;
    r->batch_p99_us = kvb_hist_quantile(batch_lat, 0.99) / 1e3;
    free(op_lat);
    free(batch_lat);
    rc = started == b->threads ? 0 : rc;
out:
    if (keys)
        for (uint64_t i = 0; i < b->keys; i++)
            free(keys[i]);
    free(tids);
    free(ws);
    free(keys);
    return rc;
}

int kvb_basic_prefill(kvs_client *c, const char *prefix, uint64_t keys, size_t size)
{
    enum { CHUNK = 32 };
    char *names[CHUNK] = {0};
    const void *vals[CHUNK];
    size_t lens[CHUNK];
    int status[CHUNK];
    int rc = -ENOMEM;
    char *buf = malloc(CHUNK * (size ? size : 1));
    if (!buf) return -ENOMEM;
    for (int i = 0; i < CHUNK; i++) {
        names[i] = malloc(strlen(prefix) + 24);
        if (!names[i]) goto out;
    }
    for (uint64_t base = 0; base < keys; base += CHUNK) {
        size_t n = keys - base < CHUNK ? (size_t)(keys - base) : CHUNK;
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], strlen(prefix) + 24, "%s.%llu", prefix,
                     (unsigned long long)base + i);
            kvb_fill_value(buf + i * size, size, names[i]);
            vals[i] = buf + i * size;
            lens[i] = size;
        }
        int ok = kvs_batch_put(c, n, (const char *const *)names, vals, lens, status);
        if (ok < 0 || (size_t)ok != n) {
            rc = ok < 0 ? ok : -EIO;
            for (size_t i = 0; ok >= 0 && i < n; i++)
                if (status[i] < 0) {
                    rc = status[i];
                    break;
                }
            goto out;
        }
    }
    rc = 0;
out:
    for (int i = 0; i < CHUNK; i++)
        free(names[i]);
    free(buf);
    return rc;
}

/* ---- command line ---- */

static int server_stats(const char *servers)
{
    kvs_client *c = kvs_open(servers);
    if (!c) {
        fprintf(stderr, "kvbench: bad server list '%s': %s\n", servers ? servers : "(default)",
                strerror(errno));
        return KVB_EXIT_USAGE;
    }
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    int rc = KVB_EXIT_ERRORS;
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

/* Splits "single,batch" into modes; returns how many or -EINVAL. */
static int parse_modes(const char *s, enum kvb_mode modes[], int max)
{
    int n = 0;
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s", s);
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max) return -EINVAL;
        if (strcmp(tok, "single") == 0)
            modes[n++] = KVB_SINGLE;
        else if (strcmp(tok, "batch") == 0)
            modes[n++] = KVB_BATCH;
        else if (strcmp(tok, "async") == 0)
            modes[n++] = KVB_ASYNC;
        else
            return -EINVAL;
    }
    return n ? n : -EINVAL;
}

/* kvbench put|get|exists: runs each mode --repeat times, then compares medians. */
static int basic_main(enum kvb_op op, int argc, char **argv)
{
    static const struct option longopts[] = {{"servers", required_argument, 0, 's'},
                                             {"threads", required_argument, 0, 't'},
                                             {"size", required_argument, 0, 'z'},
                                             {"mode", required_argument, 0, 'm'},
                                             {"batch", required_argument, 0, 'b'},
                                             {"ops", required_argument, 0, 'n'},
                                             {"seconds", required_argument, 0, 'S'},
                                             {"keys", required_argument, 0, 'k'},
                                             {"repeat", required_argument, 0, 'r'},
                                             {"prefix", required_argument, 0, 'p'},
                                             {"csv", required_argument, 0, 'c'},
                                             {"json", required_argument, 0, 'j'},
                                             {"quiet", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    struct kvb_basic b = {.op = op, .size = 4096, .threads = 1, .batch = 64, .keys = 4096};
    const char *servers = NULL, *csv = NULL, *json = NULL;
    enum kvb_mode modes[8] = {KVB_SINGLE};
    int nmodes = 1;
    long repeat = 1, v;
    long ops = -1;
    double seconds = -1;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "kvb.%d", (int)getpid());
    b.prefix = prefix;

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            servers = optarg;
            break;
        case 't':
            if (kvb_parse_long(optarg, 1, 1024, &v))
                return kvb_bad_arg("kvbench", "--threads", optarg, "1..1024");
            b.threads = (int)v;
            break;
        case 'z':
            if (kvb_parse_size(optarg, &b.size) || b.size > (64u << 20))
                return kvb_bad_arg("kvbench", "--size", optarg, "0..64M, e.g. 4096, 4K, 64KiB, 1M");
            break;
        case 'm':
            nmodes = parse_modes(optarg, modes, 8);
            if (nmodes < 0)
                return kvb_bad_arg("kvbench", "--mode", optarg,
                                   "single, batch, async, comma-separated");
            break;
        case 'b':
            if (kvb_parse_long(optarg, 1, 65536, &v))
                return kvb_bad_arg("kvbench", "--batch", optarg, "1..65536");
            b.batch = (int)v;
            break;
        case 'n':
            if (kvb_parse_long(optarg, 1, 1000000000000L, &ops))
                return kvb_bad_arg("kvbench", "--ops", optarg, "1..10^12");
            break;
        case 'S':
            if (kvb_parse_seconds(optarg, 86400, &seconds))
                return kvb_bad_arg("kvbench", "--seconds", optarg,
                                   "a number of seconds in (0, 86400]");
            break;
        case 'k':
            if (kvb_parse_long(optarg, 1, 100000000L, &v))
                return kvb_bad_arg("kvbench", "--keys", optarg, "1..10^8");
            b.keys = (uint64_t)v;
            break;
        case 'r':
            if (kvb_parse_long(optarg, 1, 64, &repeat))
                return kvb_bad_arg("kvbench", "--repeat", optarg, "1..64");
            break;
        case 'p':
            if (!*optarg || strlen(optarg) > 40)
                return kvb_bad_arg("kvbench", "--prefix", optarg, "1..40 characters");
            snprintf(prefix, sizeof(prefix), "%s", optarg);
            break;
        case 'c':
            csv = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'q':
            b.quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "kvbench: unknown or incomplete option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return KVB_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvbench: unexpected argument '%s'\n", argv[optind]);
        return KVB_EXIT_USAGE;
    }
    b.ops = ops > 0 ? (uint64_t)ops : seconds > 0 ? 1000000000000ull : 100000;
    b.seconds = seconds > 0 ? seconds : 30;
    for (int i = 0; i < nmodes; i++) {
        if (modes[i] == KVB_ASYNC && op == KVB_EXISTS) {
            fprintf(stderr, "kvbench: exists has no async single-key call; use single or batch\n");
            return KVB_EXIT_USAGE;
        }
        if (modes[i] != KVB_SINGLE &&
            (uint64_t)b.batch * b.size * (uint64_t)b.threads > KVB_MAX_BUFFER_BYTES) {
            fprintf(stderr, "kvbench: --batch x --size x --threads is over 1 GiB of buffers\n");
            return KVB_EXIT_USAGE;
        }
    }

    b.client = kvs_open(servers);
    if (!b.client) {
        fprintf(stderr, "kvbench: bad server list '%s': %s\n", servers ? servers : "(default)",
                strerror(errno));
        return KVB_EXIT_USAGE;
    }
    struct kvb_output out;
    int rc = KVB_EXIT_ERRORS;
    if (kvb_output_open(&out, csv, json) < 0) {
        kvs_close(b.client);
        return KVB_EXIT_USAGE;
    }
    if (op != KVB_PUT) {
        int prc = kvb_basic_prefill(b.client, b.prefix, b.keys, b.size);
        if (prc < 0) {
            fprintf(stderr, "kvbench: prefilling %llu keys of %zu bytes failed: %s\n",
                    (unsigned long long)b.keys, b.size, kvs_strerror(prc));
            goto out;
        }
    }
    struct kvb_result meds[8];
    uint64_t errors = 0;
    for (int m = 0; m < nmodes; m++) {
        struct kvb_result runs[64];
        b.mode = modes[m];
        for (int i = 0; i < repeat; i++) {
            int brc = kvb_basic_run(&b, &runs[i]);
            if (brc < 0) {
                fprintf(stderr, "kvbench: run failed: %s\n", kvs_strerror(brc));
                goto out;
            }
            runs[i].run = i + 1;
            errors += runs[i].errors;
            kvb_print_result(&runs[i]);
            kvb_output_row(&out, &runs[i]);
        }
        kvb_median(runs, (int)repeat, &meds[m]);
        if (repeat > 1) {
            kvb_print_result(&meds[m]);
            kvb_output_row(&out, &meds[m]);
        }
    }
    if (nmodes > 1) {
        printf("side by side (median of %ld run%s, %s, %d thread%s, %zu B):\n", repeat,
               repeat > 1 ? "s" : "", kvb_op_name(op), b.threads, b.threads > 1 ? "s" : "", b.size);
        for (int m = 0; m < nmodes; m++)
            printf("  %-7s %12.0f ops/s  p50 %9.1fus  p99 %9.1fus  x%.2f vs %s\n", meds[m].path,
                   meds[m].ops_per_s, meds[m].p50_us, meds[m].p99_us,
                   meds[0].ops_per_s > 0 ? meds[m].ops_per_s / meds[0].ops_per_s : 0, meds[0].path);
    }
    rc = errors ? KVB_EXIT_ERRORS : 0;
out:
    if (kvb_output_close(&out) < 0 && rc == 0) rc = KVB_EXIT_ERRORS;
    kvs_close(b.client);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return KVB_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "put") == 0) return basic_main(KVB_PUT, argc - 1, argv + 1);
    if (strcmp(cmd, "get") == 0) return basic_main(KVB_GET, argc - 1, argv + 1);
    if (strcmp(cmd, "exists") == 0) return basic_main(KVB_EXISTS, argc - 1, argv + 1);
    if (strcmp(cmd, "layerwise") == 0) return kvb_layerwise_main(argc - 1, argv + 1);
    if (strcmp(cmd, "micro") == 0) return kvb_micro_main(argc - 1, argv + 1);
    if (strcmp(cmd, "server-stats") == 0 || strncmp(cmd, "--server", 8) == 0) {
        /* --server-stats [--servers S], in either order */
        const char *servers = NULL;
        int stats = strcmp(cmd, "server-stats") == 0;
        for (int i = stats ? 2 : 1; i < argc; i++) {
            if (strcmp(argv[i], "--server-stats") == 0)
                stats = 1;
            else if (strcmp(argv[i], "--servers") == 0 && i + 1 < argc)
                servers = argv[++i];
            else if (strncmp(argv[i], "--servers=", 10) == 0)
                servers = argv[i] + 10;
            else {
                fprintf(stderr, "kvbench: --server-stats takes only --servers S, not '%s'\n",
                        argv[i]);
                return KVB_EXIT_USAGE;
            }
        }
        if (stats) return server_stats(servers);
        fprintf(stderr, "kvbench: a command (put, get, exists, layerwise, micro) comes first\n");
        return KVB_EXIT_USAGE;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "kvbench: unknown command '%s'\n", cmd);
    usage(stderr);
    return KVB_EXIT_USAGE;
}

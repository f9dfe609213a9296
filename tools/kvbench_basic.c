/*
 * kvbench_basic.c - the basic workload of kvbench put|get|exists and of
 * kvbench micro: threads doing put, get or exists on a key space through one
 * path - single-key calls, explicit batches, or async single-key calls in
 * flight. The "single" path calls only kvs_put/kvs_get/kvs_exists, one key
 * per call, so that the same binary run under LD_PRELOAD=libkvbatch.so
 * measures the shim's batching. Every loop is bounded both in count and in
 * time.
 */
#include "kvbench.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct worker {
    const struct bench_basic *b;
    char *const *keys;
    int id;
    uint64_t my_ops;
    uint64_t start_ns, deadline_ns, end_ns;
    _Atomic uint64_t *done;
    _Atomic int *finished;
    struct bench_hist op_lat, batch_lat;
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

/* Checks a get's result: right length and the pattern bench_basic_prefill wrote. */
static ssize_t check_get(const struct worker *w, const char *key, const void *buf, ssize_t rc)
{
    if (rc < 0) return rc;
    if ((size_t)rc != w->b->size || !kvval_check_ends(buf, (size_t)rc, key, 0)) return -EBADMSG;
    return rc;
}

/* One key per call: the path the shim interposes on. */
static void run_single(struct worker *w, void *buf)
{
    const struct bench_basic *b = w->b;
    uint64_t idx = (uint64_t)w->id * 7919u;
    for (uint64_t j = 0; j < w->my_ops; j++) {
        uint64_t t0 = kvs_now_ns();
        if (t0 >= w->deadline_ns) break;
        const char *key = w->keys[(idx + j) % b->keys];
        ssize_t rc;
        if (b->op == BENCH_PUT)
            rc = kvs_put(b->client, key, buf, b->size);
        else if (b->op == BENCH_GET)
            rc = check_get(w, key, buf, kvs_get(b->client, key, buf, b->size));
        else
            rc = kvs_exists(b->client, key) == 1 ? 0 : -ENOENT;
        uint64_t t1 = kvs_now_ns();
        if (rc >= 0) bench_hist_add(&w->op_lat, t1 - t0, 1); /* latency of ops that worked */
        note_status(w, rc, b->op == BENCH_EXISTS ? 0 : b->size);
        atomic_fetch_add_explicit(w->done, 1, memory_order_relaxed);
    }
}

/* The per-key arrays of one batch call of up to n keys. */
struct batch_arrays {
    const char **keys;
    const void **vals;
    void **outs;
    size_t *lens;
    int *status;
    ssize_t *results;
};

static void batch_arrays_free(struct batch_arrays *a)
{
    free(a->results);
    free(a->status);
    free(a->lens);
    free(a->outs);
    free(a->vals);
    free(a->keys);
}

/* Puts send bufs for every key; gets land in bufs + i * size. 0 or -ENOMEM. */
static int batch_arrays_init(struct batch_arrays *a, size_t n, void *bufs, size_t size)
{
    a->keys = calloc(n, sizeof(*a->keys));
    a->vals = calloc(n, sizeof(*a->vals));
    a->outs = calloc(n, sizeof(*a->outs));
    a->lens = calloc(n, sizeof(*a->lens));
    a->status = calloc(n, sizeof(*a->status));
    a->results = calloc(n, sizeof(*a->results));
    if (!a->keys || !a->vals || !a->outs || !a->lens || !a->status || !a->results) {
        batch_arrays_free(a);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        a->vals[i] = bufs;
        a->outs[i] = (char *)bufs + i * size;
        a->lens[i] = size;
    }
    return 0;
}

/* One batch call of the run's op over a->keys[0..k). */
static int batch_call(const struct bench_basic *b, const struct batch_arrays *a, size_t k)
{
    if (b->op == BENCH_PUT)
        return kvs_batch_put(b->client, k, a->keys, a->vals, a->lens, a->status);
    if (b->op == BENCH_GET)
        return kvs_batch_get(b->client, k, a->keys, a->outs, a->lens, a->results);
    return kvs_batch_exists(b->client, k, a->keys, a->status);
}

/* Key i's outcome of a batch call that returned call: 0, or its negative status. */
static ssize_t batch_key_status(const struct worker *w, const struct batch_arrays *a, size_t i,
                                int call)
{
    const struct bench_basic *b = w->b;
    if (call < 0) return call;
    if (b->op == BENCH_PUT) return a->status[i];
    if (b->op == BENCH_GET) return check_get(w, a->keys[i], a->outs[i], a->results[i]);
    return a->status[i] == 1 ? 0 : a->status[i] == 0 ? -ENOENT : a->status[i];
}

/* Explicit batches of up to b->batch keys per call. */
static int run_batch(struct worker *w, void *bufs)
{
    const struct bench_basic *b = w->b;
    size_t n = (size_t)b->batch;
    struct batch_arrays a = {0};
    if (batch_arrays_init(&a, n, bufs, b->size) < 0) return -ENOMEM;
    uint64_t idx = (uint64_t)w->id * 7919u;
    for (uint64_t j = 0; j < w->my_ops;) {
        uint64_t t0 = kvs_now_ns();
        if (t0 >= w->deadline_ns) break;
        size_t k = w->my_ops - j < n ? (size_t)(w->my_ops - j) : n;
        for (size_t i = 0; i < k; i++)
            a.keys[i] = w->keys[(idx + j + i) % b->keys];
        int call = batch_call(b, &a, k);
        uint64_t t1 = kvs_now_ns();
        uint64_t ok = 0;
        for (size_t i = 0; i < k; i++) {
            ssize_t st = batch_key_status(w, &a, i, call);
            ok += st >= 0;
            note_status(w, st, b->op == BENCH_EXISTS ? 0 : b->size);
        }
        if (ok) bench_hist_add(&w->batch_lat, t1 - t0, 1);
        if (ok) bench_hist_add(&w->op_lat, t1 - t0, ok); /* each key waited for its whole batch */
        atomic_fetch_add_explicit(w->done, k, memory_order_relaxed);
        j += k;
    }
    batch_arrays_free(&a);
    return 0;
}

/* Up to b->batch single-key async ops in flight, waited in issue order. */
static int run_async(struct worker *w, void *bufs)
{
    const struct bench_basic *b = w->b;
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
            char *buf = (char *)bufs + (b->op == BENCH_GET ? s * b->size : 0);
            issued[s] = kvs_now_ns();
            int rc = b->op == BENCH_PUT ? kvs_put_async(b->client, keys[s], buf, b->size, &ops[s])
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
            if (b->op == BENCH_GET) rc = check_get(w, keys[s], (char *)bufs + s * b->size, rc);
            if (rc >= 0) bench_hist_add(&w->op_lat, kvs_now_ns() - issued[s], 1);
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
    const struct bench_basic *b = w->b;
    size_t nbufs = b->mode == BENCH_SINGLE ? 1 : (size_t)b->batch;
    void *bufs = NULL;
    int rc = 0;
    if (b->shared_buffers)
        rc = kvs_alloc_buffer(b->client, nbufs * (b->size ? b->size : 1), &bufs);
    else if (!(bufs = malloc(nbufs * (b->size ? b->size : 1))))
        rc = -ENOMEM;
    if (rc < 0) {
        w->first_error = rc;
        w->errors = 1;
        goto done;
    }
    memset(bufs, 0xa5, nbufs * (b->size ? b->size : 1));
    w->start_ns = kvs_now_ns();
    if (b->mode == BENCH_SINGLE)
        run_single(w, bufs);
    else if (b->mode == BENCH_BATCH)
        rc = run_batch(w, bufs);
    else
        rc = run_async(w, bufs);
    /* Puts count once delivered: under the shim's write-behind a put returns before it is. */
    if (b->op == BENCH_PUT && rc >= 0) rc = kvs_flush(b->client);
    w->end_ns = kvs_now_ns();
    if (rc < 0 && !w->first_error) w->first_error = rc, w->errors++;
    if (b->shared_buffers)
        kvs_free_buffer(b->client, bufs);
    else
        free(bufs);
done:
    atomic_fetch_add(w->finished, 1);
    return NULL;
}

int bench_basic_fits(const struct bench_basic *b)
{
    return b->mode == BENCH_SINGLE ||
           (uint64_t)b->batch * b->size * (uint64_t)b->threads <= BENCH_MAX_BUFFER_BYTES;
}

/* The key names prefix.0 .. prefix.(n-1), or NULL when out of memory. */
static char **make_keys(const char *prefix, uint64_t n)
{
    char **keys = calloc(n, sizeof(*keys));
    for (uint64_t i = 0; keys && i < n; i++)
        if (asprintf(&keys[i], "%s.%llu", prefix, (unsigned long long)i) < 0) {
            while (i > 0)
                free(keys[--i]);
            free(keys);
            keys = NULL;
        }
    return keys;
}

static void free_keys(char **keys, uint64_t n)
{
    for (uint64_t i = 0; keys && i < n; i++)
        free(keys[i]);
    free(keys);
}

/* What every worker of a run shares: its keys, its deadline and two counters. */
struct run {
    const struct bench_basic *b;
    char **keys;
    uint64_t start_ns, deadline_ns;
    _Atomic uint64_t done;
    _Atomic int finished;
};

/* Starts b->threads workers, each with its share of b->ops; returns how many started. */
static int start_workers(struct run *run, struct worker *ws, pthread_t *tids)
{
    const struct bench_basic *b = run->b;
    uint64_t n = (uint64_t)b->threads;
    for (int t = 0; t < b->threads; t++) {
        struct worker *w = &ws[t];
        w->b = b;
        w->keys = run->keys;
        w->id = t;
        w->my_ops = b->ops / n + ((uint64_t)t < b->ops % n);
        w->deadline_ns = run->deadline_ns;
        w->done = &run->done;
        w->finished = &run->finished;
        int rc = pthread_create(&tids[t], NULL, worker_main, w);
        if (rc) {
            fprintf(stderr, "kvbench: cannot start thread %d: %s\n", t, strerror(rc));
            return t;
        }
    }
    return b->threads;
}

/* Ticks the progress line until the started workers have finished. */
static void watch_workers(struct run *run, int started)
{
    const struct bench_basic *b = run->b;
    struct bench_progress prog;
    char what[64];
    snprintf(what, sizeof(what), "%s %s", bench_op_name(b->op), bench_mode_name(b->mode));
    bench_progress_start(&prog, what, &run->done, b->ops, b->seconds, b->quiet);
    while (atomic_load(&run->finished) < started) {
        bench_sleep_ns(50000000);
        bench_progress_tick(&prog);
    }
    bench_progress_end(&prog);
}

/* Joins the started workers and sums their figures and latencies into r. */
static int collect(struct run *run, struct worker *ws, pthread_t *tids, int started,
                   struct bench_result *r)
{
    const struct bench_basic *b = run->b;
    struct bench_hist *op_lat = calloc(1, sizeof(*op_lat));
    struct bench_hist *batch_lat = calloc(1, sizeof(*batch_lat));
    uint64_t end = run->start_ns;
    memset(r, 0, sizeof(*r));
    for (int t = 0; t < started; t++) {
        pthread_join(tids[t], NULL);
        struct worker *w = &ws[t];
        if (op_lat) bench_hist_merge(op_lat, &w->op_lat);
        if (batch_lat) bench_hist_merge(batch_lat, &w->batch_lat);
        r->ops += w->ops;
        r->errors += w->errors;
        r->bytes += w->bytes;
        if (!r->first_error) r->first_error = w->first_error;
        if (w->end_ns > end) end = w->end_ns;
    }
    int rc = op_lat && batch_lat ? 0 : -ENOMEM;
    if (rc == 0) {
        snprintf(r->workload, sizeof(r->workload), "%s", bench_op_name(b->op));
        bench_result_timing(r, b->mode, run->start_ns, end);
        r->size = b->size;
        r->threads = b->threads;
        r->batch = b->mode == BENCH_SINGLE ? 1 : b->batch;
        r->p50_us = bench_hist_quantile(op_lat, 0.50) / 1e3;
        r->p99_us = bench_hist_quantile(op_lat, 0.99) / 1e3;
        r->batch_p50_us = bench_hist_quantile(batch_lat, 0.50) / 1e3;
        r->batch_p99_us = bench_hist_quantile(batch_lat, 0.99) / 1e3;
    }
    free(op_lat);
    free(batch_lat);
    return rc;
}

int bench_basic_run(const struct bench_basic *b, struct bench_result *r)
{
    if (!bench_basic_fits(b) || (b->mode == BENCH_ASYNC && b->op == BENCH_EXISTS)) return -EINVAL;
    struct run run = {.b = b, .keys = make_keys(b->prefix, b->keys)};
    struct worker *ws = calloc((size_t)b->threads, sizeof(*ws));
    pthread_t *tids = calloc((size_t)b->threads, sizeof(*tids));
    int rc = -ENOMEM;
    if (run.keys && ws && tids) {
        run.start_ns = kvs_now_ns();
        run.deadline_ns = run.start_ns + (uint64_t)(b->seconds * 1e9);
        int started = start_workers(&run, ws, tids);
        watch_workers(&run, started);
        rc = collect(&run, ws, tids, started, r);
        if (rc == 0 && started < b->threads) rc = -EAGAIN;
    }
    free(tids);
    free(ws);
    free_keys(run.keys, b->keys);
    return rc;
}

int bench_basic_repeat(const struct bench_basic *b, int repeat, int print_each,
                       struct bench_output *out, struct bench_result *med, uint64_t *errors)
{
    struct bench_result runs[64];
    for (int i = 0; i < repeat; i++) {
        int rc = bench_basic_run(b, &runs[i]);
        if (rc < 0) {
            fprintf(stderr, "kvbench: run failed: %s\n", kvs_strerror(rc));
            return rc;
        }
        runs[i].run = i + 1;
        *errors += runs[i].errors;
        if (print_each) bench_emit(out, &runs[i]);
    }
    bench_emit_median(out, runs, repeat, med);
    return 0;
}

int bench_basic_prefill(kvs_client *c, const char *prefix, uint64_t keys, size_t size)
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
            kvval_fill(buf + i * size, size, names[i], 0);
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

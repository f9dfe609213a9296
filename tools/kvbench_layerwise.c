/*
 * kvbench_layerwise.c - "kvbench layerwise": the KV traffic of a vLLM /
 * SGLang connector that saves and loads KV cache layer by layer.
 *
 * Each concurrent request has a compute thread (the model: a simulated
 * per-layer compute time) and an I/O thread (the connector's transfer
 * stream). Save: layer i's slices are put right after layer i's compute; what
 * the engine feels is the transfer time it is exposed to: the save round's
 * time beyond its compute (the tail after the last layer's compute, plus any
 * stall for a staging buffer still being transferred). Load: the I/O thread
 * fetches layers in order while the compute thread waits layer by layer; what
 * the engine feels is the wait per layer. A ring of LAYER_RING staging
 * buffers bounds memory, as GPU staging does.
 *
 * Keys: model@tp@rank@chunkhash@layer, one slice per (block, layer) of
 * block_tokens * 4 KiB / tp bytes (K+V, fp16, 8 KV heads x 128 dims).
 */
#include "kvbench.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAYER_RING     4
#define KV_BYTES_TOKEN 4096 /* per layer, K+V fp16, whole model (before TP) */
#define MAX_REQUESTS   256

struct lw_config {
    kvs_client *client;
    const char *model;
    int layers;
    int block_tokens;
    int tp;
    int rank;
    int requests;
    int prompt_tokens;
    int rounds;
    uint64_t compute_ns;
    enum bench_mode mode;
    double seconds;
    int verify;
    int quiet;
    size_t slice;
    int blocks;
    unsigned run_tag;
    int shared_buffers; /* staging rings from kvs_alloc_buffer (one copy over shm) */
};

enum lw_phase { PHASE_SAVE, PHASE_LOAD };

/* One request: a compute thread and an I/O thread around a ring of layer buffers. */
struct lw_request {
    const struct lw_config *cfg;
    int id;
    enum lw_phase phase;
    uint64_t deadline_ns;
    char **keys;  /* blocks * layers, index layer * blocks + block */
    char *ring;   /* LAYER_RING * blocks * slice */
    uint8_t *got; /* load: LAYER_RING * blocks, 1 where the slice's get succeeded */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int produced; /* save: layers computed; load: layers fetched */
    int consumed; /* save: layers put;      load: layers used by compute */
    int failed;
    int fail_error; /* why failed was set; under mu */
    /* results, written by the owning thread, read after join */
    struct bench_hist op_lat;     /* io thread */
    struct bench_hist layer_wait; /* compute thread, load */
    uint64_t ops, errors, bytes;  /* io thread */
    int first_error;
    uint64_t bad_values;       /* compute thread, load: slices whose content was wrong */
    struct bench_hist exposed; /* compute thread: save exposure / load total wait, per round */
    _Atomic uint64_t *done;
};

static char *layer_buf(struct lw_request *rq, int layer)
{
    return rq->ring + (size_t)(layer % LAYER_RING) * (size_t)rq->cfg->blocks * rq->cfg->slice;
}

/* Waits until pred holds (under rq->mu); 0, or -ETIMEDOUT past the deadline / on failure. */
#define WAIT_UNTIL(rq, pred)                                                                       \
    ({                                                                                             \
        int _rc = 0;                                                                               \
        while (!(pred) && !(rq)->failed) {                                                         \
            if (kvs_now_ns() >= (rq)->deadline_ns) {                                               \
                _rc = -ETIMEDOUT;                                                                  \
                break;                                                                             \
            }                                                                                      \
            struct timespec _ts = kvs_realtime_in(20000000);                                       \
            pthread_cond_timedwait(&(rq)->cv, &(rq)->mu, &_ts);                                    \
        }                                                                                          \
        if ((rq)->failed && !(pred)) _rc = -ECANCELED;                                             \
        _rc;                                                                                       \
    })

static void fail(struct lw_request *rq, int err)
{
    pthread_mutex_lock(&rq->mu);
    rq->failed = 1;
    if (!rq->fail_error) rq->fail_error = err;
    pthread_cond_broadcast(&rq->cv);
    pthread_mutex_unlock(&rq->mu);
}

/*
 * Counts one op's outcome. On load, also records whether slice b of layer
 * arrived: a slice whose get failed is already one error and is not checked
 * (and counted) again as a wrong value.
 */
static void note(struct lw_request *rq, int layer, int b, ssize_t st)
{
    if (rq->phase == PHASE_LOAD)
        rq->got[(size_t)(layer % LAYER_RING) * (size_t)rq->cfg->blocks + (size_t)b] = st >= 0;
    rq->ops++;
    if (st < 0) {
        rq->errors++;
        if (!rq->first_error) rq->first_error = (int)st;
    } else {
        rq->bytes += rq->cfg->slice;
    }
}

/* One call per slice. */
static void transfer_single(struct lw_request *rq, int layer, char **keys, char *buf, int put)
{
    const struct lw_config *cfg = rq->cfg;
    for (int b = 0; b < cfg->blocks; b++) {
        char *p = buf + (size_t)b * cfg->slice;
        uint64_t t0 = kvs_now_ns();
        ssize_t st = put ? kvs_put(cfg->client, keys[b], p, cfg->slice)
                         : kvs_get(cfg->client, keys[b], p, cfg->slice);
        bench_hist_add(&rq->op_lat, kvs_now_ns() - t0, 1);
        note(rq, layer, b, st);
    }
}

/* The whole layer in one batch call; each slice waited for the call. */
static void transfer_batch(struct lw_request *rq, int layer, char **keys, char *buf, int put)
{
    const struct lw_config *cfg = rq->cfg;
    int n = cfg->blocks;
    const void *vals[n];
    void *bufs[n];
    size_t lens[n];
    int status[n];
    ssize_t results[n];
    for (int b = 0; b < n; b++) {
        vals[b] = bufs[b] = buf + (size_t)b * cfg->slice;
        lens[b] = cfg->slice;
    }
    const char *const *k = (const char *const *)keys;
    uint64_t t0 = kvs_now_ns();
    int call = put ? kvs_batch_put(cfg->client, (size_t)n, k, vals, lens, status)
                   : kvs_batch_get(cfg->client, (size_t)n, k, bufs, lens, results);
    bench_hist_add(&rq->op_lat, kvs_now_ns() - t0, (uint64_t)n);
    for (int b = 0; b < n; b++)
        note(rq, layer, b, call < 0 ? call : put ? status[b] : results[b]);
}

/* Every slice's async call issued, then each waited in order. */
static void transfer_async(struct lw_request *rq, int layer, char **keys, char *buf, int put)
{
    const struct lw_config *cfg = rq->cfg;
    int n = cfg->blocks;
    kvs_op *ops[n];
    uint64_t t0 = kvs_now_ns();
    for (int b = 0; b < n; b++) {
        char *p = buf + (size_t)b * cfg->slice;
        int rc = put ? kvs_put_async(cfg->client, keys[b], p, cfg->slice, &ops[b])
                     : kvs_get_async(cfg->client, keys[b], p, cfg->slice, &ops[b]);
        if (rc < 0) ops[b] = NULL, note(rq, layer, b, rc);
    }
    for (int b = 0; b < n; b++) {
        if (!ops[b]) continue;
        ssize_t st = kvs_wait(ops[b]);
        bench_hist_add(&rq->op_lat, kvs_now_ns() - t0, 1);
        note(rq, layer, b, st);
    }
}

/* Moves one layer's slices (put on save, get on load) with the configured path. */
static void transfer_layer(struct lw_request *rq, int layer)
{
    const struct lw_config *cfg = rq->cfg;
    char **keys = &rq->keys[(size_t)layer * (size_t)cfg->blocks];
    char *buf = layer_buf(rq, layer);
    int put = rq->phase == PHASE_SAVE;
    if (cfg->mode == BENCH_SINGLE)
        transfer_single(rq, layer, keys, buf, put);
    else if (cfg->mode == BENCH_BATCH)
        transfer_batch(rq, layer, keys, buf, put);
    else
        transfer_async(rq, layer, keys, buf, put);
    atomic_fetch_add_explicit(rq->done, (uint64_t)cfg->blocks, memory_order_relaxed);
}

/* Sets a layer counter (produced or consumed) under rq->mu and wakes the other thread. */
static void advance(struct lw_request *rq, int *counter, int layers)
{
    pthread_mutex_lock(&rq->mu);
    *counter = layers;
    pthread_cond_broadcast(&rq->cv);
    pthread_mutex_unlock(&rq->mu);
}

/* The connector's transfer stream: saves or loads layers in order. */
static void *io_main(void *arg)
{
    struct lw_request *rq = arg;
    int layers = rq->cfg->layers;
    for (int i = 0; i < layers; i++) {
        pthread_mutex_lock(&rq->mu);
        int rc = rq->phase == PHASE_SAVE ? WAIT_UNTIL(rq, rq->produced > i)
                                         : WAIT_UNTIL(rq, i - rq->consumed < LAYER_RING);
        pthread_mutex_unlock(&rq->mu);
        if (rc < 0) {
            fail(rq, rc);
            return NULL;
        }
        transfer_layer(rq, i);
        advance(rq, rq->phase == PHASE_SAVE ? &rq->consumed : &rq->produced, i + 1);
    }
    return NULL;
}

/* Writes the checkable ends of each slice of a layer: what the model "computed". */
static void produce_layer(struct lw_request *rq, int layer)
{
    const struct lw_config *cfg = rq->cfg;
    char *buf = layer_buf(rq, layer);
    for (int b = 0; b < cfg->blocks; b++)
        kvval_stamp_ends(buf + (size_t)b * cfg->slice, cfg->slice,
                         rq->keys[(size_t)layer * (size_t)cfg->blocks + (size_t)b], 0);
}

/* Counts slices whose ends are not what the save phase wrote. */
static int check_layer(struct lw_request *rq, int layer)
{
    const struct lw_config *cfg = rq->cfg;
    char *buf = layer_buf(rq, layer);
    int bad = 0;
    const uint8_t *got = rq->got + (size_t)(layer % LAYER_RING) * (size_t)cfg->blocks;
    for (int b = 0; b < cfg->blocks; b++) {
        const char *key = rq->keys[(size_t)layer * (size_t)cfg->blocks + (size_t)b];
        if (got[b] && !kvval_check_ends(buf + (size_t)b * cfg->slice, cfg->slice, key, 0)) bad++;
    }
    return bad;
}

/*
 * The model on save: computes layer after layer into a free staging buffer,
 * which the I/O thread puts behind it. Exposed: the round's time beyond the
 * compute itself (the tail after the last layer, and any stall for a staging
 * buffer the transfers had not freed yet).
 */
static int save_round(struct lw_request *rq)
{
    const struct lw_config *cfg = rq->cfg;
    uint64_t compute_spent = 0, round_start = kvs_now_ns();
    int rc = 0;
    for (int i = 0; i < cfg->layers && rc == 0; i++) {
        pthread_mutex_lock(&rq->mu);
        rc = WAIT_UNTIL(rq, i - rq->consumed < LAYER_RING);
        pthread_mutex_unlock(&rq->mu);
        if (rc < 0) break;
        uint64_t t0 = kvs_now_ns();
        produce_layer(rq, i);
        bench_sleep_ns(cfg->compute_ns);
        compute_spent += kvs_now_ns() - t0; /* as slept: sleeps overshoot a little */
        advance(rq, &rq->produced, i + 1);
    }
    if (rc < 0) return rc;
    pthread_mutex_lock(&rq->mu);
    rc = WAIT_UNTIL(rq, rq->consumed == cfg->layers);
    pthread_mutex_unlock(&rq->mu);
    uint64_t spent = kvs_now_ns() - round_start;
    if (rc == 0) bench_hist_add(&rq->exposed, spent > compute_spent ? spent - compute_spent : 0, 1);
    return rc;
}

/*
 * The model on load: waits for each layer the I/O thread fetched ahead of
 * it, checks it, computes it. Exposed: the round's total wait.
 */
static int load_round(struct lw_request *rq)
{
    const struct lw_config *cfg = rq->cfg;
    uint64_t total_wait = 0;
    for (int i = 0; i < cfg->layers; i++) {
        uint64_t t0 = kvs_now_ns();
        pthread_mutex_lock(&rq->mu);
        int rc = WAIT_UNTIL(rq, rq->produced > i);
        pthread_mutex_unlock(&rq->mu);
        if (rc < 0) return rc;
        uint64_t waited = kvs_now_ns() - t0;
        bench_hist_add(&rq->layer_wait, waited, 1);
        total_wait += waited;
        /* own counter: the io thread updates ops/errors meanwhile */
        if (cfg->verify) rq->bad_values += (uint64_t)check_layer(rq, i);
        bench_sleep_ns(cfg->compute_ns);
        advance(rq, &rq->consumed, i + 1);
    }
    bench_hist_add(&rq->exposed, total_wait, 1);
    return 0;
}

/* One request's thread: runs `rounds` rounds of the phase, each with a fresh I/O thread. */
static void *request_main(void *arg)
{
    struct lw_request *rq = arg;
    for (int r = 0; r < rq->cfg->rounds; r++) {
        if (kvs_now_ns() >= rq->deadline_ns) break;
        rq->produced = rq->consumed = 0;
        pthread_t io;
        int rc = pthread_create(&io, NULL, io_main, rq);
        if (rc) {
            fail(rq, -rc);
            break;
        }
        rc = rq->phase == PHASE_SAVE ? save_round(rq) : load_round(rq);
        if (rc < 0) fail(rq, rc);
        pthread_join(io, NULL);
        if (rq->failed) break;
    }
    return NULL;
}

static int requests_init(struct lw_request *rqs, const struct lw_config *cfg,
                         _Atomic uint64_t *done)
{
    for (int q = 0; q < cfg->requests; q++) {
        struct lw_request *rq = &rqs[q];
        rq->cfg = cfg;
        rq->id = q;
        rq->done = done;
        pthread_mutex_init(&rq->mu, NULL);
        pthread_cond_init(&rq->cv, NULL);
        size_t nkeys = (size_t)cfg->layers * (size_t)cfg->blocks;
        rq->keys = calloc(nkeys, sizeof(char *));
        size_t ring = (size_t)LAYER_RING * (size_t)cfg->blocks * cfg->slice;
        if (cfg->shared_buffers) {
            int rc = kvs_alloc_buffer(cfg->client, ring, (void **)&rq->ring);
            if (rc < 0) return rc;
        } else {
            rq->ring = malloc(ring);
        }
        rq->got = calloc((size_t)LAYER_RING * (size_t)cfg->blocks, 1);
        if (!rq->keys || !rq->ring || !rq->got) return -ENOMEM;
        memset(rq->ring, 0, (size_t)LAYER_RING * (size_t)cfg->blocks * cfg->slice);
        for (int b = 0; b < cfg->blocks; b++) {
            /* a stand-in for the hash of the block's token prefix: unique per run and request */
            unsigned long long chunk = ((unsigned long long)cfg->run_tag << 32) ^
                                       ((unsigned long long)q << 16) ^ (unsigned)b;
            chunk *= 0x9e3779b97f4a7c15ull;
            for (int l = 0; l < cfg->layers; l++)
                if (asprintf(&rq->keys[(size_t)l * (size_t)cfg->blocks + (size_t)b],
                             "%s@%d@%d@%016llx@%d", cfg->model, cfg->tp, cfg->rank, chunk, l) < 0)
                    return -ENOMEM;
        }
    }
    return 0;
}

static void requests_free(struct lw_request *rqs, const struct lw_config *cfg)
{
    for (int q = 0; q < cfg->requests; q++) {
        struct lw_request *rq = &rqs[q];
        if (rq->keys)
            for (size_t k = 0; k < (size_t)cfg->layers * (size_t)cfg->blocks; k++)
                free(rq->keys[k]);
        free(rq->keys);
        if (cfg->shared_buffers && rq->ring)
            kvs_free_buffer(cfg->client, rq->ring);
        else
            free(rq->ring);
        free(rq->got);
        if (rq->cfg) {
            pthread_mutex_destroy(&rq->mu);
            pthread_cond_destroy(&rq->cv);
        }
    }
}

/* Makes every request ready for a phase: its deadline, zero figures, no failure. */
static void reset_requests(struct lw_request *rqs, const struct lw_config *cfg, enum lw_phase phase,
                           uint64_t deadline_ns)
{
    for (int q = 0; q < cfg->requests; q++) {
        struct lw_request *rq = &rqs[q];
        rq->phase = phase;
        rq->deadline_ns = deadline_ns;
        rq->failed = rq->fail_error = 0;
        rq->ops = rq->errors = rq->bytes = rq->bad_values = 0;
        rq->first_error = 0;
        memset(&rq->op_lat, 0, sizeof(rq->op_lat));
        memset(&rq->layer_wait, 0, sizeof(rq->layer_wait));
        memset(&rq->exposed, 0, sizeof(rq->exposed));
    }
}

/*
 * Starts a thread per request and joins them in order, ticking the progress
 * line while the first unfinished one runs. Returns how many started.
 */
static int run_requests(struct lw_request *rqs, const struct lw_config *cfg, enum lw_phase phase,
                        _Atomic uint64_t *done)
{
    pthread_t tids[MAX_REQUESTS];
    int started = 0;
    while (started < cfg->requests &&
           pthread_create(&tids[started], NULL, request_main, &rqs[started]) == 0)
        started++;
    struct bench_progress prog;
    uint64_t total = (uint64_t)cfg->requests * (uint64_t)cfg->rounds * (uint64_t)cfg->layers *
                     (uint64_t)cfg->blocks;
    bench_progress_start(&prog, phase == PHASE_SAVE ? "layerwise save" : "layerwise load", done,
                         total, cfg->seconds, cfg->quiet);
    for (int q = 0; q < started; q++) {
        for (;;) {
            struct timespec ts = kvs_realtime_in(100000000);
            if (pthread_timedjoin_np(tids[q], NULL, &ts) == 0) break;
            bench_progress_tick(&prog);
        }
    }
    bench_progress_end(&prog);
    return started;
}

/* Sums what the started requests measured into r; -ENOMEM if it cannot. */
static int summarise(const struct lw_request *rqs, int started, enum lw_phase phase,
                     struct bench_result *r)
{
    struct bench_hist *op_lat = calloc(1, sizeof(*op_lat));
    struct bench_hist *wait = calloc(1, sizeof(*wait));
    struct bench_hist *exposed = calloc(1, sizeof(*exposed));
    int rc = op_lat && wait && exposed ? 0 : -ENOMEM;
    for (int q = 0; rc == 0 && q < started; q++) {
        const struct lw_request *rq = &rqs[q];
        bench_hist_merge(op_lat, &rq->op_lat);
        bench_hist_merge(wait, &rq->layer_wait);
        bench_hist_merge(exposed, &rq->exposed);
        r->ops += rq->ops;
        r->errors += rq->errors + rq->bad_values;
        r->bytes += rq->bytes;
        if (!r->first_error) r->first_error = rq->first_error;
        if (!r->first_error && rq->bad_values) r->first_error = -EBADMSG;
        if (!r->first_error) r->first_error = rq->fail_error;
    }
    if (rc == 0) {
        r->p50_us = bench_hist_quantile(op_lat, 0.5) / 1e3;
        r->p99_us = bench_hist_quantile(op_lat, 0.99) / 1e3;
        if (phase == PHASE_SAVE) {
            r->exposed_p50_us = bench_hist_quantile(exposed, 0.5) / 1e3;
            r->exposed_p99_us = bench_hist_quantile(exposed, 0.99) / 1e3;
        } else {
            r->wait_p50_us = bench_hist_quantile(wait, 0.5) / 1e3;
            r->wait_p99_us = bench_hist_quantile(wait, 0.99) / 1e3;
            r->req_wait_p50_us = bench_hist_quantile(exposed, 0.5) / 1e3;
            r->req_wait_p99_us = bench_hist_quantile(exposed, 0.99) / 1e3;
        }
    }
    /* A round that timed out counts as an error even if no single op failed. */
    for (int q = 0; q < started; q++)
        if (rqs[q].failed && !r->errors) r->errors = 1;
    free(exposed);
    free(wait);
    free(op_lat);
    return rc;
}

/* Runs one phase for every request at once and summarises it into r. */
static int run_phase(struct lw_request *rqs, const struct lw_config *cfg, enum lw_phase phase,
                     _Atomic uint64_t *done, struct bench_result *r)
{
    atomic_store(done, 0);
    uint64_t start = kvs_now_ns();
    reset_requests(rqs, cfg, phase, start + (uint64_t)(cfg->seconds * 1e9));
    int started = run_requests(rqs, cfg, phase, done);
    uint64_t end = kvs_now_ns();
    memset(r, 0, sizeof(*r));
    snprintf(r->workload, sizeof(r->workload), "%s",
             phase == PHASE_SAVE ? "layerwise-save" : "layerwise-load");
    snprintf(r->label, sizeof(r->label), "%s tp%d block%d prompt%d req%d compute%lluus", cfg->model,
             cfg->tp, cfg->block_tokens, cfg->prompt_tokens, cfg->requests,
             (unsigned long long)(cfg->compute_ns / 1000));
    r->size = cfg->slice;
    r->threads = cfg->requests;
    r->batch = cfg->mode == BENCH_SINGLE ? 1 : cfg->blocks;
    int rc = summarise(rqs, started, phase, r);
    bench_result_timing(r, cfg->mode, start, end);
    return rc < 0 ? rc : started < cfg->requests ? -EAGAIN : 0;
}

static const struct kvopt_choice model_choices[] = {{"llama3-8b", 0}, {"llama3-70b", 1}, {NULL, 0}};
static const int model_layers[] = {32, 80};
static const struct kvopt_choice block_choices[] = {{"16", 16}, {"64", 64}, {NULL, 0}};
static const struct kvopt_choice tp_choices[] = {{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}, {NULL, 0}};
enum { DO_SAVE = 1, DO_LOAD = 2 };
static const struct kvopt_choice phase_choices[] = {
    {"save", DO_SAVE}, {"load", DO_LOAD}, {"both", DO_SAVE | DO_LOAD}, {NULL, 0}};

/* kvbench layerwise as given on the command line. */
struct lw_cmd {
    struct lw_config cfg;
    struct bench_common common;
    int model;  /* index into model_choices */
    int phases; /* DO_SAVE | DO_LOAD */
    long long compute_us;
    int no_verify;
};

/* Parses layerwise's options into lc; 0, KVOPT_HELP or -EINVAL. */
static int lw_parse(struct lw_cmd *lc, int argc, char **argv)
{
    struct lw_config *cfg = &lc->cfg;
    const struct kvopt opts[] = {
        BENCH_OPT_SERVERS(lc->common),
        {"model", 0, KVOPT_ENUM, KVOPT_TO(lc->model), "M",
         "the model: llama3-8b has 32 layers, llama3-70b 80", .choices = model_choices},
        {"block", 0, KVOPT_ENUM, KVOPT_TO(cfg->block_tokens), "T", "tokens per block",
         .choices = block_choices},
        {"tp", 0, KVOPT_ENUM, KVOPT_TO(cfg->tp), "N", "tensor-parallel degree",
         .choices = tp_choices},
        {"rank", 0, KVOPT_COUNT, KVOPT_TO(cfg->rank), "R", "this worker's TP rank, for key names",
         .lo = 0, .hi = 7, .accepted = "0..tp-1"},
        {"requests", 0, KVOPT_COUNT, KVOPT_TO(cfg->requests), "N", "concurrent requests", .lo = 1,
         .hi = MAX_REQUESTS},
        {"prompt", 0, KVOPT_COUNT, KVOPT_TO(cfg->prompt_tokens), "T", "prompt tokens per request",
         .lo = 1, .hi = 1 << 20},
        {"compute-us", 0, KVOPT_COUNT, KVOPT_TO(lc->compute_us), "U",
         "simulated compute per layer, in microseconds", .lo = 0, .hi = 1000000},
        {"rounds", 0, KVOPT_COUNT, KVOPT_TO(cfg->rounds), "R", "save/load rounds per request",
         .lo = 1, .hi = 10000},
        {"shared-buffers", 0, KVOPT_FLAG, KVOPT_TO(cfg->shared_buffers), NULL,
         "staging rings in kvs_alloc_buffer memory: over shm their values cross memory once"},
        {"phase", 0, KVOPT_ENUM, KVOPT_TO(lc->phases), "P", "what is measured (load needs save)",
         .choices = phase_choices},
        {"mode", 0, KVOPT_ENUM, KVOPT_TO(cfg->mode), "M", "the I/O path",
         .choices = bench_mode_choices},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(cfg->seconds), "S", "time bound per phase", .lo = 0,
         .hi = 86400},
        {"no-verify", 0, KVOPT_FLAG, KVOPT_TO(lc->no_verify), NULL, "do not check loaded values"},
        BENCH_OPTS_OUTPUT(lc->common),
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbench layerwise", .usage = "usage: kvbench layerwise [options]\n", .opts = opts};
    return kvopt_parse(&cmd, argc, argv);
}

/* Checks across options, and the shape they give (slice size, blocks); 0 or -EINVAL. */
static int lw_derive(struct lw_cmd *lc)
{
    struct lw_config *cfg = &lc->cfg;
    const char *who = "kvbench layerwise";
    cfg->model = model_choices[lc->model].name;
    cfg->layers = model_layers[lc->model];
    cfg->compute_ns = (uint64_t)lc->compute_us * 1000;
    cfg->verify = !lc->no_verify;
    if (cfg->rank >= cfg->tp) return kvopt_bad(who, "--rank", "(>= tp)", "0..tp-1");
    cfg->slice = (size_t)cfg->block_tokens * KV_BYTES_TOKEN / (size_t)cfg->tp;
    cfg->blocks = (cfg->prompt_tokens + cfg->block_tokens - 1) / cfg->block_tokens;
    if ((uint64_t)cfg->requests * LAYER_RING * (uint64_t)cfg->blocks * cfg->slice > (2ull << 30))
        return kvopt_bad(who, "--prompt", "(x requests)", "staging buffers up to 2 GiB in all");
    if (cfg->blocks > 4096) return kvopt_bad(who, "--prompt", "(blocks)", "at most 4096 blocks");
    return 0;
}

static void lw_print_shape(const struct lw_config *cfg)
{
    printf("layerwise: %s (%d layers), tp %d, %d-token blocks, %d blocks/request, slice %zu B, "
           "%d requests x %d rounds, compute %llu us/layer, path %s\n",
           cfg->model, cfg->layers, cfg->tp, cfg->block_tokens, cfg->blocks, cfg->slice,
           cfg->requests, cfg->rounds, (unsigned long long)(cfg->compute_ns / 1000),
           cfg->mode == BENCH_SINGLE && bench_shim_preloaded() ? "single (shim preloaded)"
                                                               : bench_mode_name(cfg->mode));
}

/*
 * The measured runs: --repeat times save then load (a load-only run saves
 * once, unmeasured, so that there is something to load), each run printed,
 * then the medians. Adds the errors seen to *errors; -1 if a phase could not run.
 */
static int lw_measure(struct lw_request *rqs, const struct lw_cmd *lc, _Atomic uint64_t *done,
                      struct bench_output *out, uint64_t *errors)
{
    const struct lw_config *cfg = &lc->cfg;
    int repeat = lc->common.repeat;
    int do_save = lc->phases & DO_SAVE, do_load = lc->phases & DO_LOAD;
    struct bench_result save_runs[64], load_runs[64], med;
    for (int i = 0; i < repeat; i++) {
        if (do_save || i == 0) {
            if (run_phase(rqs, cfg, PHASE_SAVE, done, &save_runs[i]) < 0) return -1;
            save_runs[i].run = i + 1;
            *errors += save_runs[i].errors;
            if (do_save) bench_emit(out, &save_runs[i]);
        }
        if (do_load) {
            if (run_phase(rqs, cfg, PHASE_LOAD, done, &load_runs[i]) < 0) return -1;
            load_runs[i].run = i + 1;
            *errors += load_runs[i].errors;
            bench_emit(out, &load_runs[i]);
        }
    }
    if (do_save) bench_emit_median(out, save_runs, repeat, &med);
    if (do_load) bench_emit_median(out, load_runs, repeat, &med);
    return 0;
}

int bench_layerwise_main(int argc, char **argv)
{
    struct lw_cmd lc = {.cfg = {.block_tokens = 16,
                                .tp = 1,
                                .requests = 8,
                                .prompt_tokens = 256,
                                .rounds = 3,
                                .mode = BENCH_SINGLE,
                                .seconds = 120},
                        .common = {.repeat = 1},
                        .phases = DO_SAVE | DO_LOAD,
                        .compute_us = 100};
    int rc = lw_parse(&lc, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0 || lw_derive(&lc) < 0) return KVOPT_EXIT_USAGE;

    struct lw_config *cfg = &lc.cfg;
    struct bench_output out;
    if (bench_session_open(&lc.common, "kvbench layerwise", &cfg->client, &out) < 0)
        return KVOPT_EXIT_USAGE;
    cfg->run_tag = (unsigned)getpid() ^ (unsigned)kvs_now_ns();
    struct lw_request *rqs = calloc((size_t)cfg->requests, sizeof(*rqs));
    _Atomic uint64_t done = 0;
    uint64_t errors = 0;
    rc = BENCH_EXIT_ERRORS;
    if (!rqs || requests_init(rqs, cfg, &done) < 0) {
        fprintf(stderr, "kvbench layerwise: out of memory\n");
    } else {
        lw_print_shape(cfg);
        if (lw_measure(rqs, &lc, &done, &out, &errors) == 0) rc = errors ? BENCH_EXIT_ERRORS : 0;
    }
    if (rqs) requests_free(rqs, cfg);
    free(rqs);
    if (bench_session_close(cfg->client, &out) < 0 && rc == 0) rc = BENCH_EXIT_ERRORS;
    return rc;
}

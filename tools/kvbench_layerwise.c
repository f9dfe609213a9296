/*
 * kvbench_layerwise.c - "kvbench layerwise": the KV traffic of a vLLM /
 * SGLang connector that saves and loads KV cache layer by layer.
 *
 * Each concurrent request has a compute thread (the model: a simulated
 * per-layer compute time) and an I/O thread (the connector's transfer
 * stream). Save: layer i's slices are put right after layer i's compute; what
 * the engine feels is the transfer time it is exposed to: the save round's
 * time beyond its compute (the tail after the last layer's compute, plus any
 * stall for a staging buffer still being transferred). Load: the I/O thread fetches layers in order
 * while the compute thread waits layer by layer; what the engine feels is the wait per layer. A
 * ring of LAYER_RING staging buffers bounds memory, as GPU staging does.
 *
 * Keys: model@tp@rank@chunkhash@layer, one slice per (block, layer) of
 * block_tokens * 4 KiB / tp bytes (K+V, fp16, 8 KV heads x 128 dims).
 */
#include "kvbench.h"

#include <errno.h>
#include <getopt.h>
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
    enum kvb_mode mode;
    double seconds;
    int verify;
    int quiet;
    size_t slice;
    int blocks;
    unsigned run_tag;
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
    struct kvb_hist op_lat;      /* io thread */
    struct kvb_hist layer_wait;  /* compute thread, load */
    uint64_t ops, errors, bytes; /* io thread */
    int first_error;
    uint64_t bad_values;     /* compute thread, load: slices whose content was wrong */
    struct kvb_hist exposed; /* compute thread: save exposure / load total wait, per round */
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
            struct timespec _ts;                                                                   \
            clock_gettime(CLOCK_REALTIME, &_ts);                                                   \
            _ts.tv_nsec += 20000000;                                                               \
            if (_ts.tv_nsec >= 1000000000) _ts.tv_sec++, _ts.tv_nsec -= 1000000000;                \
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

/* Moves one layer's slices (put or get) with the configured path. */
static void transfer_layer(struct lw_request *rq, int layer)
{
    const struct lw_config *cfg = rq->cfg;
    int n = cfg->blocks;
    char **keys = &rq->keys[(size_t)layer * (size_t)n];
    char *buf = layer_buf(rq, layer);
    int put = rq->phase == PHASE_SAVE;

    if (cfg->mode == KVB_SINGLE) {
        for (int b = 0; b < n; b++) {
            char *p = buf + (size_t)b * cfg->slice;
            uint64_t t0 = kvs_now_ns();
            ssize_t st = put ? kvs_put(cfg->client, keys[b], p, cfg->slice)
                             : kvs_get(cfg->client, keys[b], p, cfg->slice);
            kvb_hist_add(&rq->op_lat, kvs_now_ns() - t0, 1);
            note(rq, layer, b, st);
        }
    } else if (cfg->mode == KVB_BATCH) {
        const void *vals[n];
        void *bufs[n];
        size_t lens[n];
        int status[n];
        ssize_t results[n];
        for (int b = 0; b < n; b++) {
            vals[b] = bufs[b] = buf + (size_t)b * cfg->slice;
            lens[b] = cfg->slice;
        }
        uint64_t t0 = kvs_now_ns();
        int call = put ? kvs_batch_put(cfg->client, (size_t)n, (const char *const *)keys, vals,
                                       lens, status)
                       : kvs_batch_get(cfg->client, (size_t)n, (const char *const *)keys, bufs,
                                       lens, results);
        kvb_hist_add(&rq->op_lat, kvs_now_ns() - t0, (uint64_t)n);
        for (int b = 0; b < n; b++)
            note(rq, layer, b, call < 0 ? call : put ? status[b] : results[b]);
    } else {
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
            kvb_hist_add(&rq->op_lat, kvs_now_ns() - t0, 1);
            note(rq, layer, b, st);
        }
    }
    atomic_fetch_add_explicit(rq->done, (uint64_t)n, memory_order_relaxed);
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
        pthread_mutex_lock(&rq->mu);
        if (rq->phase == PHASE_SAVE)
            rq->consumed = i + 1;
        else
            rq->produced = i + 1;
        pthread_cond_broadcast(&rq->cv);
        pthread_mutex_unlock(&rq->mu);
    }
    return NULL;
}

/* Writes the checkable ends of each slice of a layer: what the model "computed". */
static void produce_layer(struct lw_request *rq, int layer)
{
    const struct lw_config *cfg = rq->cfg;
    char *buf = layer_buf(rq, layer);
    for (int b = 0; b < cfg->blocks; b++)
        kvb_stamp_value(buf + (size_t)b * cfg->slice, cfg->slice,
                        rq->keys[(size_t)layer * (size_t)cfg->blocks + (size_t)b]);
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
        if (got[b] && !kvb_check_value(buf + (size_t)b * cfg->slice, cfg->slice, key)) bad++;
    }
    return bad;
}

/* The model: computes layer after layer; saves behind it or waits for loads ahead of it. */
static int compute_round(struct lw_request *rq)
{
    const struct lw_config *cfg = rq->cfg;
    int rc = 0;
    uint64_t total_wait = 0, compute_spent = 0, round_start = kvs_now_ns();
    for (int i = 0; i < cfg->layers && rc == 0; i++) {
        if (rq->phase == PHASE_SAVE) {
            pthread_mutex_lock(&rq->mu);
            rc = WAIT_UNTIL(rq, i - rq->consumed < LAYER_RING); /* staging buffer free */
            pthread_mutex_unlock(&rq->mu);
            if (rc < 0) break;
            uint64_t t0 = kvs_now_ns();
            produce_layer(rq, i);
            kvb_sleep_ns(cfg->compute_ns);
            compute_spent += kvs_now_ns() - t0; /* as slept: sleeps overshoot a little */
            pthread_mutex_lock(&rq->mu);
            rq->produced = i + 1;
            pthread_cond_broadcast(&rq->cv);
            pthread_mutex_unlock(&rq->mu);
        } else {
            uint64_t t0 = kvs_now_ns();
            pthread_mutex_lock(&rq->mu);
            rc = WAIT_UNTIL(rq, rq->produced > i);
            pthread_mutex_unlock(&rq->mu);
            if (rc < 0) break;
            uint64_t waited = kvs_now_ns() - t0;
            kvb_hist_add(&rq->layer_wait, waited, 1);
            total_wait += waited;
            if (cfg->verify) {
                /* own counter: the io thread updates ops/errors meanwhile */
                rq->bad_values += (uint64_t)check_layer(rq, i);
            }
            kvb_sleep_ns(cfg->compute_ns);
            pthread_mutex_lock(&rq->mu);
            rq->consumed = i + 1;
            pthread_cond_broadcast(&rq->cv);
            pthread_mutex_unlock(&rq->mu);
        }
    }
    if (rc < 0) return rc;
    if (rq->phase == PHASE_SAVE) {
        pthread_mutex_lock(&rq->mu);
        rc = WAIT_UNTIL(rq, rq->consumed == cfg->layers);
        pthread_mutex_unlock(&rq->mu);
        /* everything beyond the compute itself: the tail after the last layer and any stall
         * waiting for a staging buffer the transfers had not freed yet */
        uint64_t spent = kvs_now_ns() - round_start;
        if (rc == 0)
            kvb_hist_add(&rq->exposed, spent > compute_spent ? spent - compute_spent : 0, 1);
    } else {
        kvb_hist_add(&rq->exposed, total_wait, 1);
    }
    return rc;
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
        rc = compute_round(rq);
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
        rq->ring = malloc((size_t)LAYER_RING * (size_t)cfg->blocks * cfg->slice);
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
        free(rq->ring);
        free(rq->got);
        if (rq->cfg) {
            pthread_mutex_destroy(&rq->mu);
            pthread_cond_destroy(&rq->cv);
        }
    }
}

/* Runs one phase for every request at once and summarises it into r. */
static int run_phase(struct lw_request *rqs, const struct lw_config *cfg, enum lw_phase phase,
                     _Atomic uint64_t *done, struct kvb_result *r)
{
    pthread_t tids[MAX_REQUESTS];
    int started = 0, rc = 0;
    atomic_store(done, 0);
    uint64_t start = kvs_now_ns();
    for (int q = 0; q < cfg->requests; q++) {
        struct lw_request *rq = &rqs[q];
        rq->phase = phase;
        rq->deadline_ns = start + (uint64_t)(cfg->seconds * 1e9);
        rq->failed = rq->fail_error = 0;
        rq->ops = rq->errors = rq->bytes = rq->bad_values = 0;
        rq->first_error = 0;
        memset(&rq->op_lat, 0, sizeof(rq->op_lat));
        memset(&rq->layer_wait, 0, sizeof(rq->layer_wait));
        memset(&rq->exposed, 0, sizeof(rq->exposed));
    }
    for (int q = 0; q < cfg->requests; q++) {
        rc = -pthread_create(&tids[q], NULL, request_main, &rqs[q]);
        if (rc < 0) break;
        started++;
    }
    struct kvb_progress prog;
    uint64_t total = (uint64_t)cfg->requests * (uint64_t)cfg->rounds * (uint64_t)cfg->layers *
                     (uint64_t)cfg->blocks;
    kvb_progress_start(&prog, phase == PHASE_SAVE ? "layerwise save" : "layerwise load", done,
                       total, cfg->seconds, cfg->quiet);
    /* Join in order, ticking the progress line while the first unfinished one runs. */
    for (int q = 0; q < started; q++) {
        for (;;) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            if (pthread_timedjoin_np(tids[q], NULL, &ts) == 0) break;
            kvb_progress_tick(&prog);
        }
    }
    kvb_progress_end(&prog);
    uint64_t end = kvs_now_ns();

    struct kvb_hist *op_lat = calloc(1, sizeof(*op_lat));
    struct kvb_hist *wait = calloc(1, sizeof(*wait));
    struct kvb_hist *exposed = calloc(1, sizeof(*exposed));
    if (!op_lat || !wait || !exposed) {
        rc = -ENOMEM;
        goto out;
    }
    memset(r, 0, sizeof(*r));
    for (int q = 0; q < started; q++) {
        struct lw_request *rq = &rqs[q];
        kvb_hist_merge(op_lat, &rq->op_lat);
        kvb_hist_merge(wait, &rq->layer_wait);
        kvb_hist_merge(exposed, &rq->exposed);
        r->ops += rq->ops;
        r->errors += rq->errors + rq->bad_values;
        r->bytes += rq->bytes;
        if (!r->first_error) r->first_error = rq->first_error;
        if (!r->first_error && rq->bad_values) r->first_error = -EBADMSG;
        if (!r->first_error) r->first_error = rq->fail_error;
    }
    snprintf(r->workload, sizeof(r->workload), "%s",
             phase == PHASE_SAVE ? "layerwise-save" : "layerwise-load");
    kvb_result_timing(r, cfg->mode, start, end);
    snprintf(r->label, sizeof(r->label), "%s tp%d block%d prompt%d req%d compute%lluus", cfg->model,
             cfg->tp, cfg->block_tokens, cfg->prompt_tokens, cfg->requests,
             (unsigned long long)(cfg->compute_ns / 1000));
    r->size = cfg->slice;
    r->threads = cfg->requests;
    r->batch = cfg->mode == KVB_SINGLE ? 1 : cfg->blocks;
    r->p50_us = kvb_hist_quantile(op_lat, 0.5) / 1e3;
    r->p99_us = kvb_hist_quantile(op_lat, 0.99) / 1e3;
    if (phase == PHASE_SAVE) {
        r->exposed_p50_us = kvb_hist_quantile(exposed, 0.5) / 1e3;
        r->exposed_p99_us = kvb_hist_quantile(exposed, 0.99) / 1e3;
    } else {
        r->wait_p50_us = kvb_hist_quantile(wait, 0.5) / 1e3;
        r->wait_p99_us = kvb_hist_quantile(wait, 0.99) / 1e3;
        r->req_wait_p50_us = kvb_hist_quantile(exposed, 0.5) / 1e3;
        r->req_wait_p99_us = kvb_hist_quantile(exposed, 0.99) / 1e3;
    }
    /* A round that timed out counts as an error even if no single op failed. */
    for (int q = 0; q < started; q++)
        if (rqs[q].failed && !r->errors) r->errors = 1;
out:
    free(exposed);
    free(wait);
    free(op_lat);
    return rc;
}

static void lw_usage(FILE *f)
{
    fprintf(f,
            "usage: kvbench layerwise [options]\n"
            "  --servers S        host:port[,...]\n"
            "  --model M          llama3-8b (32 layers) or llama3-70b (80 layers)\n"
            "  --block T          tokens per block: 16 or 64 (default 16)\n"
            "  --tp N             tensor-parallel degree 1..8 (default 1)\n"
            "  --rank R           this worker's TP rank, for key names (default 0)\n"
            "  --requests N       concurrent requests, 1..%d (default 8)\n"
            "  --prompt T         prompt tokens per request (default 256)\n"
            "  --compute-us U     simulated compute per layer (default 100)\n"
            "  --rounds R         save/load rounds per request (default 3)\n"
            "  --phase P          save, load or both (default both; load needs save)\n"
            "  --mode M           single, batch or async (default single)\n"
            "  --seconds S        time bound per phase (default 120)\n"
            "  --repeat R         runs; each printed, then the median (default 1)\n"
            "  --no-verify        do not check loaded values\n"
            "  --csv FILE, --json FILE, --quiet\n",
            MAX_REQUESTS);
}

int kvb_layerwise_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"servers", required_argument, 0, 's'},
                                             {"model", required_argument, 0, 'M'},
                                             {"block", required_argument, 0, 'B'},
                                             {"tp", required_argument, 0, 'T'},
                                             {"rank", required_argument, 0, 'R'},
                                             {"requests", required_argument, 0, 'q'},
                                             {"prompt", required_argument, 0, 'p'},
                                             {"compute-us", required_argument, 0, 'u'},
                                             {"rounds", required_argument, 0, 'o'},
                                             {"phase", required_argument, 0, 'P'},
                                             {"mode", required_argument, 0, 'm'},
                                             {"seconds", required_argument, 0, 'S'},
                                             {"repeat", required_argument, 0, 'r'},
                                             {"no-verify", no_argument, 0, 'V'},
                                             {"csv", required_argument, 0, 'c'},
                                             {"json", required_argument, 0, 'j'},
                                             {"quiet", no_argument, 0, 'Q'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    struct lw_config cfg = {.model = "llama3-8b",
                            .layers = 32,
                            .block_tokens = 16,
                            .tp = 1,
                            .requests = 8,
                            .prompt_tokens = 256,
                            .rounds = 3,
                            .compute_ns = 100000,
                            .mode = KVB_SINGLE,
                            .seconds = 120,
                            .verify = 1};
    const char *servers = NULL, *csv = NULL, *json = NULL, *phase = "both";
    long v, repeat = 1;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            servers = optarg;
            break;
        case 'M':
            if (strcmp(optarg, "llama3-8b") == 0)
                cfg.model = "llama3-8b", cfg.layers = 32;
            else if (strcmp(optarg, "llama3-70b") == 0)
                cfg.model = "llama3-70b", cfg.layers = 80;
            else
                return kvb_bad_arg("kvbench layerwise", "--model", optarg, "llama3-8b, llama3-70b");
            break;
        case 'B':
            if (strcmp(optarg, "16") && strcmp(optarg, "64"))
                return kvb_bad_arg("kvbench layerwise", "--block", optarg, "16, 64");
            cfg.block_tokens = optarg[0] == '1' ? 16 : 64;
            break;
        case 'T':
            if (kvb_parse_long(optarg, 1, 8, &v) || (v & (v - 1)))
                return kvb_bad_arg("kvbench layerwise", "--tp", optarg, "1, 2, 4, 8");
            cfg.tp = (int)v;
            break;
        case 'R':
            if (kvb_parse_long(optarg, 0, 7, &v))
                return kvb_bad_arg("kvbench layerwise", "--rank", optarg, "0..tp-1");
            cfg.rank = (int)v;
            break;
        case 'q':
            if (kvb_parse_long(optarg, 1, MAX_REQUESTS, &v))
                return kvb_bad_arg("kvbench layerwise", "--requests", optarg, "1..256");
            cfg.requests = (int)v;
            break;
        case 'p':
            if (kvb_parse_long(optarg, 1, 1 << 20, &v))
                return kvb_bad_arg("kvbench layerwise", "--prompt", optarg, "1..1048576");
            cfg.prompt_tokens = (int)v;
            break;
        case 'u':
            if (kvb_parse_long(optarg, 0, 1000000, &v))
                return kvb_bad_arg("kvbench layerwise", "--compute-us", optarg, "0..1000000");
            cfg.compute_ns = (uint64_t)v * 1000;
            break;
        case 'o':
            if (kvb_parse_long(optarg, 1, 10000, &v))
                return kvb_bad_arg("kvbench layerwise", "--rounds", optarg, "1..10000");
            cfg.rounds = (int)v;
            break;
        case 'P':
            if (strcmp(optarg, "save") && strcmp(optarg, "load") && strcmp(optarg, "both"))
                return kvb_bad_arg("kvbench layerwise", "--phase", optarg, "save, load, both");
            phase = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "single") == 0)
                cfg.mode = KVB_SINGLE;
            else if (strcmp(optarg, "batch") == 0)
                cfg.mode = KVB_BATCH;
            else if (strcmp(optarg, "async") == 0)
                cfg.mode = KVB_ASYNC;
            else
                return kvb_bad_arg("kvbench layerwise", "--mode", optarg, "single, batch, async");
            break;
        case 'S':
            if (kvb_parse_seconds(optarg, 86400, &cfg.seconds))
                return kvb_bad_arg("kvbench layerwise", "--seconds", optarg, "(0, 86400]");
            break;
        case 'r':
            if (kvb_parse_long(optarg, 1, 64, &repeat))
                return kvb_bad_arg("kvbench layerwise", "--repeat", optarg, "1..64");
            break;
        case 'V':
            cfg.verify = 0;
            break;
        case 'c':
            csv = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'Q':
            cfg.quiet = 1;
            break;
        case 'h':
            lw_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "kvbench layerwise: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            lw_usage(stderr);
            return KVB_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return kvb_bad_arg("kvbench layerwise", "argument", argv[optind], "options only");
    if (cfg.rank >= cfg.tp) return kvb_bad_arg("kvbench layerwise", "--rank", "(>= tp)", "0..tp-1");
    cfg.slice = (size_t)cfg.block_tokens * KV_BYTES_TOKEN / (size_t)cfg.tp;
    cfg.blocks = (cfg.prompt_tokens + cfg.block_tokens - 1) / cfg.block_tokens;
    if ((uint64_t)cfg.requests * LAYER_RING * (uint64_t)cfg.blocks * cfg.slice > (2ull << 30))
        return kvb_bad_arg("kvbench layerwise", "--prompt", "(x requests)",
                           "staging buffers up to 2 GiB in all");
    if (cfg.blocks > 4096)
        return kvb_bad_arg("kvbench layerwise", "--prompt", "(blocks)", "at most 4096 blocks");
    int do_save = strcmp(phase, "load") != 0, do_load = strcmp(phase, "save") != 0;

    cfg.client = kvs_open(servers);
    if (!cfg.client) {
        fprintf(stderr, "kvbench layerwise: bad server list: %s\n", strerror(errno));
        return KVB_EXIT_USAGE;
    }
    struct kvb_output out;
    if (kvb_output_open(&out, csv, json) < 0) {
        kvs_close(cfg.client);
        return KVB_EXIT_USAGE;
    }
    cfg.run_tag = (unsigned)getpid() ^ (unsigned)kvs_now_ns();
    struct lw_request *rqs = calloc((size_t)cfg.requests, sizeof(*rqs));
    _Atomic uint64_t done = 0;
    int rc = KVB_EXIT_ERRORS;
    uint64_t errors = 0;
    if (!rqs || requests_init(rqs, &cfg, &done) < 0) {
        fprintf(stderr, "kvbench layerwise: out of memory\n");
        goto out;
    }
    printf("layerwise: %s (%d layers), tp %d, %d-token blocks, %d blocks/request, slice %zu B, "
           "%d requests x %d rounds, compute %llu us/layer, path %s%s\n",
           cfg.model, cfg.layers, cfg.tp, cfg.block_tokens, cfg.blocks, cfg.slice, cfg.requests,
           cfg.rounds, (unsigned long long)(cfg.compute_ns / 1000),
           cfg.mode == KVB_SINGLE && kvb_shim_preloaded() ? "single (shim preloaded)"
                                                          : kvb_mode_name(cfg.mode),
           "");
    struct kvb_result save_runs[64], load_runs[64], med;
    for (int i = 0; i < repeat; i++) {
        if (do_save || (do_load && i == 0)) {
            /* a load-only run still needs the values: save once, unmeasured if not asked */
            if (run_phase(rqs, &cfg, PHASE_SAVE, &done, &save_runs[i]) < 0) goto out;
            save_runs[i].run = i + 1;
            errors += save_runs[i].errors;
            if (do_save) {
                kvb_print_result(&save_runs[i]);
                kvb_output_row(&out, &save_runs[i]);
            }
        }
        if (do_load) {
            if (run_phase(rqs, &cfg, PHASE_LOAD, &done, &load_runs[i]) < 0) goto out;
            load_runs[i].run = i + 1;
            errors += load_runs[i].errors;
            kvb_print_result(&load_runs[i]);
            kvb_output_row(&out, &load_runs[i]);
        }
    }
    if (repeat > 1 && do_save) {
        kvb_median(save_runs, (int)repeat, &med);
        kvb_print_result(&med);
        kvb_output_row(&out, &med);
    }
    if (repeat > 1 && do_load) {
        kvb_median(load_runs, (int)repeat, &med);
        kvb_print_result(&med);
        kvb_output_row(&out, &med);
    }
    rc = errors ? KVB_EXIT_ERRORS : 0;
out:
    if (rqs) requests_free(rqs, &cfg);
    free(rqs);
    if (kvb_output_close(&out) < 0 && rc == 0) rc = KVB_EXIT_ERRORS;
    kvs_close(cfg.client);
    return rc;
}

/*
 * backend_mooncake.c - struct kvb_backend_ops over one Mooncake Store handle
 * (see backend_mooncake.h): the groups table, the submit-thread pool, and
 * the batch calls, split into rounds of distinct keys and fanned out key by
 * key when a call fails as a whole.
 */
#include "backend_mooncake.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "stats.h" /* enum kvb_opkind */

/* A replicate config and copy mode, as kvb_mc_group copied them. */
struct mc_group {
    bool has_config; /* false: the library's default (NULL) */
    bool copy;
    mooncake_replicate_config_t cfg; /* preferred_segments points into segs */
    const char **segs;               /* owned, strings too; NULL entries kept */
};

/* One batch handed to the pool. The arrays are the batcher's, alive until done. */
struct mc_job {
    struct mc_job *next;
    int kind;
    unsigned group;
    size_t n;
    const char *const *keys;
    void *const *ptrs;  /* put values, get buffers */
    const size_t *lens; /* put lengths, get capacities */
    int *ist;           /* put and exists results */
    ssize_t *sres;      /* get results */
    kvs_done_fn done;
    void *arg;
};

/* A submit thread and its staging buffer for copy-mode puts. */
struct mc_worker {
    struct kvb_mc_backend *mc;
    pthread_t thread;
    void *stage;     /* stage_bytes, registered with the library if it registers */
    int stage_state; /* 0 not made yet, 1 ready, -1 unavailable (copy-mode puts go one by one) */
};

struct kvb_mc_backend {
    const struct kvb_mc_calls *calls;
    mooncake_store_t store;
    size_t stage_bytes;

    pthread_mutex_t lock; /* the queue and the pool */
    pthread_cond_t cv;
    struct mc_job *head, *tail;
    unsigned queued, idle, nthreads, max_threads;
    bool stopping;
    struct mc_worker *workers; /* max_threads of them; [0, nthreads) started */

    pthread_mutex_t group_lock; /* adding a group */
    _Atomic unsigned ngroups;   /* groups[0, ngroups) are set and never change */
    struct mc_group groups[KVB_MC_MAX_GROUPS];
};

/* ---- groups ---- */

static bool same_string(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Is g the group of (config, copy)? Configs compare by value, segments included. */
static bool group_is(const struct mc_group *g, const mooncake_replicate_config_t *c, bool copy)
{
    if (g->copy != copy || g->has_config != (c != NULL)) return false;
    if (!c) return true;
    const mooncake_replicate_config_t *h = &g->cfg;
    if (h->replica_num != c->replica_num || h->with_soft_pin != c->with_soft_pin ||
        h->with_hard_pin != c->with_hard_pin ||
        h->preferred_segments_count != c->preferred_segments_count ||
        (h->preferred_segments == NULL) != (c->preferred_segments == NULL))
        return false;
    for (size_t i = 0; c->preferred_segments && i < c->preferred_segments_count; i++)
        if (!same_string(h->preferred_segments[i], c->preferred_segments[i])) return false;
    return true;
}

static void group_free(struct mc_group *g)
{
    for (size_t i = 0; g->segs && i < g->cfg.preferred_segments_count; i++)
        free((char *)g->segs[i]);
    free((void *)g->segs);
    g->segs = NULL;
}

/* Fills g with a copy of (c, copy). 0 or -ENOMEM. */
static int group_set(struct mc_group *g, const mooncake_replicate_config_t *c, bool copy)
{
    memset(g, 0, sizeof(*g));
    g->copy = copy;
    g->has_config = c != NULL;
    if (!c) return 0;
    g->cfg = *c;
    if (!c->preferred_segments) return 0;
    size_t n = c->preferred_segments_count;
    g->segs = calloc(n ? n : 1, sizeof(*g->segs));
    if (!g->segs) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!c->preferred_segments[i]) continue;
        if (!(g->segs[i] = strdup(c->preferred_segments[i]))) {
            group_free(g);
            return -ENOMEM;
        }
    }
    g->cfg.preferred_segments = g->segs;
    return 0;
}

/* Index of (c, copy) among the first n groups, or -1. */
static int group_find(struct kvb_mc_backend *mc, unsigned n, const mooncake_replicate_config_t *c,
                      bool copy)
{
    for (unsigned i = 0; i < n; i++)
        if (group_is(&mc->groups[i], c, copy)) return (int)i;
    return -1;
}

int kvb_mc_group(struct kvb_mc_backend *mc, const mooncake_replicate_config_t *config, bool copy)
{
    if (!config && !copy) return 0;
    int g = group_find(mc, atomic_load_explicit(&mc->ngroups, memory_order_acquire), config, copy);
    if (g >= 0) return g;
    pthread_mutex_lock(&mc->group_lock);
    unsigned n = atomic_load_explicit(&mc->ngroups, memory_order_relaxed);
    if ((g = group_find(mc, n, config, copy)) < 0) {
        g = n < KVB_MC_MAX_GROUPS ? group_set(&mc->groups[n], config, copy) : -ENOSPC;
        if (g == 0) {
            g = (int)n;
            atomic_store_explicit(&mc->ngroups, n + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&mc->group_lock);
    return g;
}

/* The config to pass for group g (NULL: the library's default). */
static const mooncake_replicate_config_t *group_config(const struct kvb_mc_backend *mc, unsigned g)
{
    return mc->groups[g].has_config ? &mc->groups[g].cfg : NULL;
}

/* ---- single-key calls ---- */

/* One put of group g: copy mode through mooncake_store_put (which copies), else put_from. */
static int put_single(struct kvb_mc_backend *mc, unsigned g, const char *key, const void *val,
                      size_t len)
{
    const mooncake_replicate_config_t *cfg = group_config(mc, g);
    if (mc->groups[g].copy) return mc->calls->put(mc->store, key, val, len, cfg);
    return mc->calls->put_from(mc->store, key, (void *)val, len, cfg);
}

/* One get; the batcher's size probe (NULL, 0) is get_size. */
static int64_t get_single(struct kvb_mc_backend *mc, const char *key, void *buf, size_t cap)
{
    if (!buf && cap == 0) return mc->calls->get_size(mc->store, key);
    return mc->calls->get_into(mc->store, key, buf, cap);
}

static int mc_put_one(void *ctx, unsigned group, const char *key, const void *val, size_t len)
{
    kvb_backend_call_begin();
    int rc = put_single(ctx, group, key, val, len);
    kvb_backend_call_end();
    return rc;
}

static ssize_t mc_get_one(void *ctx, const char *key, void *buf, size_t cap)
{
    kvb_backend_call_begin();
    int64_t r = get_single(ctx, key, buf, cap);
    kvb_backend_call_end();
    return (ssize_t)r;
}

static int mc_exists_one(void *ctx, const char *key)
{
    struct kvb_mc_backend *mc = ctx;
    kvb_backend_call_begin();
    int rc = mc->calls->is_exist(mc->store, key);
    kvb_backend_call_end();
    return rc;
}

/* ---- one batch call ---- */

/*
 * The keys of one library call: m entries gathered from the job (idx[i] is
 * the job's index of entry i), with the library's argument types.
 */
struct mc_call {
    size_t m;
    size_t *idx;
    const char **keys;
    void **ptrs;
    size_t *lens;
    int64_t *r64; /* get results */
    int *ri;      /* put and exists results */
};

/* Scratch for calls of up to n keys, in one block; false if out of memory. */
static bool call_alloc(struct mc_call *c, size_t n)
{
    size_t each = sizeof(size_t) + sizeof(char *) + sizeof(void *) + sizeof(size_t) +
                  sizeof(int64_t) + sizeof(int);
    char *p = malloc(n * each + 1);
    memset(c, 0, sizeof(*c));
    if (!p) return false;
    c->r64 = (int64_t *)p, p += n * sizeof(int64_t);
    c->idx = (size_t *)p, p += n * sizeof(size_t);
    c->keys = (const char **)p, p += n * sizeof(char *);
    c->ptrs = (void **)p, p += n * sizeof(void *);
    c->lens = (size_t *)p, p += n * sizeof(size_t);
    c->ri = (int *)p;
    return true;
}

static void call_add(struct mc_call *c, const struct mc_job *j, size_t i, void *ptr)
{
    c->idx[c->m] = i;
    c->keys[c->m] = j->keys[i];
    c->ptrs[c->m] = ptr;
    c->lens[c->m] = j->lens ? j->lens[i] : 0; /* exists has neither */
    c->m++;
}

/* The single-key answer for key i of j, stored as its result; true if it succeeded. */
static bool answer_single(struct kvb_mc_backend *mc, const struct mc_job *j, size_t i)
{
    if (j->kind == KVB_OP_PUT) {
        j->ist[i] = put_single(mc, j->group, j->keys[i], j->ptrs[i], j->lens[i]);
        return j->ist[i] == 0;
    }
    if (j->kind == KVB_OP_GET) {
        void *buf = j->ptrs ? j->ptrs[i] : NULL; /* a get's job always has both */
        j->sres[i] = (ssize_t)get_single(mc, j->keys[i], buf, j->lens ? j->lens[i] : 0);
        return j->sres[i] >= 0;
    }
    j->ist[i] = mc->calls->is_exist(mc->store, j->keys[i]);
    return j->ist[i] >= 0;
}

/*
 * Makes the library's batch call for c and stores each key's result in j;
 * when the call fails as a whole, each key gets its single-key call's.
 * Returns the keys that succeeded.
 */
static size_t call_run(struct kvb_mc_backend *mc, const struct mc_job *j, struct mc_call *c)
{
    const struct kvb_mc_calls *k = mc->calls;
    size_t nok = 0;
    int rc;
    if (c->m == 0) return 0;
    if (j->kind == KVB_OP_PUT)
        rc = k->batch_put_from(mc->store, c->keys, c->ptrs, c->lens, c->m,
                               group_config(mc, j->group), c->ri);
    else if (j->kind == KVB_OP_GET)
        rc = k->batch_get_into(mc->store, c->keys, c->ptrs, c->lens, c->m, c->r64);
    else
        rc = k->batch_is_exist(mc->store, c->keys, c->m, c->ri);
    for (size_t e = 0; e < c->m; e++) {
        size_t i = c->idx[e];
        if (rc != 0) {
            nok += answer_single(mc, j, i);
        } else if (j->kind == KVB_OP_GET) {
            j->sres[i] = (ssize_t)c->r64[e];
            nok += c->r64[e] >= 0;
        } else {
            j->ist[i] = c->ri[e];
            nok += j->kind == KVB_OP_PUT ? c->ri[e] == 0 : c->ri[e] >= 0;
        }
    }
    c->m = 0;
    return nok;
}

/* ---- rounds of distinct keys ---- */

static uint64_t key_hash(const char *s)
{
    return kvs_fnv1a(s, strlen(s));
}

/*
 * round[i] = how many of keys[0, i) equal keys[i]. Returns the number of
 * rounds (1 + the largest), or 0 if out of memory.
 */
static size_t key_rounds(size_t n, const char *const keys[], uint32_t round[])
{
    size_t cap = 4;
    while (cap < 2 * n)
        cap *= 2;
    struct slot {
        size_t first; /* index of the key's first occurrence + 1; 0 = empty */
        uint32_t count;
    } *t = calloc(cap, sizeof(*t));
    if (!t) return 0;
    size_t rounds = 1;
    for (size_t i = 0; i < n; i++) {
        size_t s = (size_t)key_hash(keys[i]) & (cap - 1);
        while (t[s].first && strcmp(keys[t[s].first - 1], keys[i]) != 0)
            s = (s + 1) & (cap - 1);
        if (!t[s].first) t[s].first = i + 1;
        round[i] = t[s].count++;
        if (round[i] + 1 > rounds) rounds = round[i] + 1;
    }
    free(t);
    return rounds;
}

/* ---- staging of copy-mode puts ---- */

/* The worker's staging buffer, made and registered on first use; NULL if unavailable. */
static void *stage_of(struct mc_worker *w)
{
    struct kvb_mc_backend *mc = w->mc;
    if (w->stage_state == 0) {
        w->stage_state = -1;
        void *p = NULL;
        if (posix_memalign(&p, 4096, mc->stage_bytes) != 0) return NULL;
        if (mc->calls->register_buffer &&
            mc->calls->register_buffer(mc->store, p, mc->stage_bytes) != 0) {
            free(p);
            return NULL;
        }
        w->stage = p;
        w->stage_state = 1;
    }
    return w->stage_state > 0 ? w->stage : NULL;
}

static void stage_free(struct kvb_mc_backend *mc, struct mc_worker *w)
{
    if (w->stage_state <= 0) return;
    kvb_backend_call_begin();
    if (mc->calls->unregister_buffer) mc->calls->unregister_buffer(mc->store, w->stage);
    kvb_backend_call_end();
    free(w->stage);
    w->stage = NULL;
    w->stage_state = 0;
}

/*
 * Runs the job's entries of round r: put_from with the caller's buffers, or,
 * in copy mode, from the staging buffer, as many values per call as fit
 * (one that never fits, or no staging buffer: a single put). Returns the
 * keys that succeeded.
 */
static size_t run_round(struct mc_worker *w, const struct mc_job *j, const uint32_t *round,
                        uint32_t r, struct mc_call *c)
{
    struct kvb_mc_backend *mc = w->mc;
    bool staged = j->kind == KVB_OP_PUT && mc->groups[j->group].copy;
    char *stage = staged ? stage_of(w) : NULL;
    size_t used = 0, nok = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (round && round[i] != r) continue;
        if (!staged) {
            call_add(c, j, i, j->ptrs ? j->ptrs[i] : NULL);
            continue;
        }
        size_t len = j->lens[i];
        if (!stage || len > mc->stage_bytes) {
            nok += answer_single(mc, j, i);
            continue;
        }
        if (used + len > mc->stage_bytes) {
            nok += call_run(mc, j, c);
            used = 0;
        }
        memcpy(stage + used, j->ptrs[i], len);
        call_add(c, j, i, stage + used);
        used += len;
    }
    return nok + call_run(mc, j, c);
}

/* Runs one job inside a backend call and reports it. */
static void run_job(struct mc_worker *w, struct mc_job *j)
{
    struct kvb_mc_backend *mc = w->mc;
    struct mc_call c;
    size_t nok = 0;
    uint32_t *round = NULL;
    size_t rounds = 1;
    kvb_backend_call_begin();
    if (j->n > 1) {
        round = malloc(j->n * sizeof(*round));
        rounds = round ? key_rounds(j->n, j->keys, round) : 0;
    }
    if (rounds == 0 || !call_alloc(&c, j->n)) {
        for (size_t i = 0; i < j->n; i++) /* out of memory: key by key */
            nok += answer_single(mc, j, i);
    } else {
        for (uint32_t r = 0; r < rounds; r++)
            nok += run_round(w, j, rounds > 1 ? round : NULL, r, &c);
        free(c.r64);
    }
    free(round);
    kvb_backend_call_end();
    kvs_done_fn done = j->done;
    void *arg = j->arg;
    free(j);
    done(arg, (ssize_t)nok);
}

/* ---- the pool ---- */

static void *worker_main(void *arg)
{
    struct mc_worker *w = arg;
    struct kvb_mc_backend *mc = w->mc;
    pthread_mutex_lock(&mc->lock);
    for (;;) {
        struct mc_job *j = mc->head;
        if (j) {
            mc->head = j->next;
            if (!mc->head) mc->tail = NULL;
            mc->queued--;
            pthread_mutex_unlock(&mc->lock);
            run_job(w, j);
            pthread_mutex_lock(&mc->lock);
            continue;
        }
        if (mc->stopping) break;
        mc->idle++;
        pthread_cond_wait(&mc->cv, &mc->lock);
        mc->idle--;
    }
    pthread_mutex_unlock(&mc->lock);
    return NULL;
}

/*
 * Queues j, starting a submit thread if every started one is busy and the
 * pool is not full. 0, or -EAGAIN when no thread runs and none could start
 * (the batcher then makes the single-key calls itself).
 */
static int submit(struct kvb_mc_backend *mc, struct mc_job *j)
{
    int rc = 0;
    j->next = NULL;
    pthread_mutex_lock(&mc->lock);
    if (mc->tail)
        mc->tail->next = j;
    else
        mc->head = j;
    mc->tail = j;
    mc->queued++;
    if (mc->queued > mc->idle && mc->nthreads < mc->max_threads) {
        struct mc_worker *w = &mc->workers[mc->nthreads];
        w->mc = mc;
        if (pthread_create(&w->thread, NULL, worker_main, w) == 0) {
            mc->nthreads++;
        } else if (mc->nthreads == 0) {
            mc->head = mc->tail = NULL; /* j is the only job: nobody would run it */
            mc->queued = 0;
            rc = -EAGAIN;
        }
    }
    if (rc == 0) pthread_cond_signal(&mc->cv);
    pthread_mutex_unlock(&mc->lock);
    return rc;
}

static int queue_job(struct kvb_mc_backend *mc, struct mc_job job)
{
    struct mc_job *j = malloc(sizeof(*j));
    if (!j) return -ENOMEM;
    *j = job;
    int rc = submit(mc, j);
    if (rc < 0) free(j);
    return rc;
}

static int mc_put(void *ctx, unsigned group, size_t n, const char *const keys[],
                  const void *const vals[], const size_t lens[], int status[], kvs_done_fn done,
                  void *arg)
{
    struct mc_job j = {NULL, KVB_OP_PUT, group, n,    keys, (void *const *)vals,
                       lens, status,     NULL,  done, arg};
    return queue_job(ctx, j);
}

static int mc_get(void *ctx, size_t n, const char *const keys[], void *const bufs[],
                  const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg)
{
    struct mc_job j = {NULL, KVB_OP_GET, 0, n, keys, bufs, caps, NULL, results, done, arg};
    return queue_job(ctx, j);
}

static int mc_exists(void *ctx, size_t n, const char *const keys[], int results[], kvs_done_fn done,
                     void *arg)
{
    struct mc_job j = {NULL, KVB_OP_EXISTS, 0, n, keys, NULL, NULL, results, NULL, done, arg};
    return queue_job(ctx, j);
}

/* Stops the pool (the batcher has no batch in flight any more) and frees everything. */
static void mc_release(void *ctx)
{
    struct kvb_mc_backend *mc = ctx;
    pthread_mutex_lock(&mc->lock);
    mc->stopping = true;
    pthread_cond_broadcast(&mc->cv);
    unsigned n = mc->nthreads;
    pthread_mutex_unlock(&mc->lock);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(mc->workers[i].thread, NULL);
        stage_free(mc, &mc->workers[i]);
    }
    for (unsigned i = 0; i < atomic_load(&mc->ngroups); i++)
        group_free(&mc->groups[i]);
    pthread_cond_destroy(&mc->cv);
    pthread_mutex_destroy(&mc->lock);
    pthread_mutex_destroy(&mc->group_lock);
    free(mc->workers);
    free(mc);
}

static const struct kvb_backend_ops mc_ops = {
    .put = mc_put,
    .get = mc_get,
    .exists = mc_exists,
    .put_one = mc_put_one,
    .get_one = mc_get_one,
    .exists_one = mc_exists_one,
    .release = mc_release,
};

enum kvs_status_class kvb_mc_status_class(long code)
{
    static const struct {
        long code;
        enum kvs_status_class c;
    } map[] = {
        {-704, KVS_STATUS_C_ENOENT},   {-600, KVS_STATUS_C_EINVAL}, {-10, KVS_STATUS_C_ERANGE},
        {-200, KVS_STATUS_C_ENOSPC},   {-900, KVS_STATUS_C_EIO},    {-901, KVS_STATUS_C_ETIMEDOUT},
        {-1012, KVS_STATUS_C_ENOTSUP},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].code == code) return map[i].c;
    return KVS_STATUS_C_OTHER;
}

unsigned kvb_mc_threads(struct kvb_mc_backend *mc)
{
    pthread_mutex_lock(&mc->lock);
    unsigned n = mc->nthreads;
    pthread_mutex_unlock(&mc->lock);
    return n;
}

int kvb_backend_mooncake(const struct kvb_mc_calls *calls, mooncake_store_t store,
                         unsigned max_threads, size_t stage_bytes, struct kvb_backend *be,
                         struct kvb_mc_backend **out)
{
    if (!calls || !calls->batch_put_from || !calls->batch_get_into || !calls->batch_is_exist ||
        !calls->put || !calls->put_from || !calls->get_into || !calls->is_exist ||
        !calls->get_size || max_threads == 0 || stage_bytes == 0)
        return -EINVAL;
    struct kvb_mc_backend *mc = calloc(1, sizeof(*mc));
    if (!mc) return -ENOMEM;
    mc->workers = calloc(max_threads, sizeof(*mc->workers));
    if (!mc->workers) {
        free(mc);
        return -ENOMEM;
    }
    if (pthread_mutex_init(&mc->lock, NULL)) goto err;
    if (pthread_cond_init(&mc->cv, NULL)) goto err_lock;
    if (pthread_mutex_init(&mc->group_lock, NULL)) goto err_cv;
    mc->calls = calls;
    mc->store = store;
    mc->max_threads = max_threads;
    mc->stage_bytes = stage_bytes;
    atomic_init(&mc->ngroups, 1); /* group 0: the default config, put_from */
    be->ops = &mc_ops;
    be->ctx = mc;
    if (out) *out = mc;
    return 0;

err_cv:
    pthread_cond_destroy(&mc->cv);
err_lock:
    pthread_mutex_destroy(&mc->lock);
err:
    free(mc->workers);
    free(mc);
    return -ENOMEM;
}

/*
 * fake_backend.h - an in-memory store behind the batcher's backend vtable
 * (batcher/backend.h), for batcher tests.
 * Batches complete inside the call (FAKE_SYNC), when the test says so
 * (FAKE_MANUAL, in any order), or on a completer thread (FAKE_THREAD, newest
 * first, so completions arrive out of order). Keys starting "err-" fail with
 * -EIO; refuse_batches makes every batch call fail as a whole. struct fake_env
 * puts a batcher over it.
 */
#ifndef FAKE_BACKEND_H
#define FAKE_BACKEND_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "batcher.h"

enum fake_mode { FAKE_SYNC, FAKE_MANUAL, FAKE_THREAD };

#define FAKE_MAX_KEYS    4096
#define FAKE_MAX_PENDING 256

struct fake_batch {
    int kind;
    unsigned group; /* of a put batch */
    size_t n;
    const char *const *keys;
    void *const *ptrs;
    const size_t *lens;
    int *ist;
    ssize_t *sres;
    kvs_done_fn done;
    void *arg;
};

struct fake {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    enum fake_mode mode;
    bool refuse_batches;
    char *keys[FAKE_MAX_KEYS];
    void *vals[FAKE_MAX_KEYS];
    size_t lens[FAKE_MAX_KEYS];
    struct fake_batch pending[FAKE_MAX_PENDING];
    int npending;
    atomic_int submitted; /* batch calls accepted */
    atomic_int one_calls; /* synchronous single-key calls */
    size_t last_n;        /* size of the newest batch */
    unsigned last_group;  /* group of the newest put batch or single put */
    pthread_t thread;
    bool stop;
};

static inline int fake_find(struct fake *f, const char *key)
{
    for (int i = 0; i < FAKE_MAX_KEYS; i++)
        if (f->keys[i] && strcmp(f->keys[i], key) == 0) return i;
    return -1;
}

static inline int fake_put_locked(struct fake *f, const char *key, const void *val, size_t len)
{
    if (strncmp(key, "err-", 4) == 0) return -EIO;
    int i = fake_find(f, key);
    if (i < 0)
        for (i = 0; i < FAKE_MAX_KEYS && f->keys[i]; i++)
            ;
    if (i >= FAKE_MAX_KEYS) return -ENOSPC;
    if (!f->keys[i]) f->keys[i] = strdup(key);
    free(f->vals[i]);
    f->vals[i] = malloc(len ? len : 1);
    if (len) memcpy(f->vals[i], val, len);
    f->lens[i] = len;
    return 0;
}

static inline ssize_t fake_get_locked(struct fake *f, const char *key, void *buf, size_t cap)
{
    if (strncmp(key, "err-", 4) == 0) return -EIO;
    int i = fake_find(f, key);
    if (i < 0) return -ENOENT;
    if (!buf && cap == 0) return (ssize_t)f->lens[i];
    if (cap < f->lens[i]) return -ERANGE;
    memcpy(buf, f->vals[i], f->lens[i]);
    return (ssize_t)f->lens[i];
}

static inline int fake_exists_locked(struct fake *f, const char *key)
{
    if (strncmp(key, "err-", 4) == 0) return -EIO;
    return fake_find(f, key) >= 0;
}

/* Applies a batch to the store and calls its done (outside the lock). */
static inline void fake_run(struct fake *f, struct fake_batch *b)
{
    ssize_t nok = 0;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < b->n; i++) {
        ssize_t r;
        if (b->kind == KVB_OP_PUT)
            r = b->ist[i] = fake_put_locked(f, b->keys[i], b->ptrs[i], b->lens[i]);
        else if (b->kind == KVB_OP_GET)
            r = b->sres[i] = fake_get_locked(f, b->keys[i], b->ptrs[i], b->lens[i]);
        else
            r = b->ist[i] = fake_exists_locked(f, b->keys[i]);
        nok += r >= 0;
    }
    pthread_mutex_unlock(&f->lock);
    b->done(b->arg, nok);
}

static inline int fake_submit(struct fake *f, struct fake_batch b)
{
    if (f->refuse_batches) return -ENOMEM;
    atomic_fetch_add(&f->submitted, 1);
    if (f->mode == FAKE_SYNC) {
        pthread_mutex_lock(&f->lock);
        f->last_n = b.n;
        if (b.kind == KVB_OP_PUT) f->last_group = b.group;
        pthread_mutex_unlock(&f->lock);
        fake_run(f, &b);
        return 0;
    }
    pthread_mutex_lock(&f->lock);
    f->last_n = b.n;
    if (b.kind == KVB_OP_PUT) f->last_group = b.group;
    if (f->npending >= FAKE_MAX_PENDING) {
        pthread_mutex_unlock(&f->lock);
        return -EAGAIN;
    }
    f->pending[f->npending++] = b;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static inline int fake_be_put(void *ctx, unsigned group, size_t n, const char *const keys[],
                              const void *const vals[], const size_t lens[], int status[],
                              kvs_done_fn done, void *arg)
{
    struct fake_batch b = {KVB_OP_PUT, group,  n,    keys, (void *const *)vals,
                           lens,       status, NULL, done, arg};
    return fake_submit(ctx, b);
}

static inline int fake_be_get(void *ctx, size_t n, const char *const keys[], void *const bufs[],
                              const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg)
{
    struct fake_batch b = {KVB_OP_GET, 0, n, keys, bufs, caps, NULL, results, done, arg};
    return fake_submit(ctx, b);
}

static inline int fake_be_exists(void *ctx, size_t n, const char *const keys[], int results[],
                                 kvs_done_fn done, void *arg)
{
    struct fake_batch b = {KVB_OP_EXISTS, 0, n, keys, NULL, NULL, results, NULL, done, arg};
    return fake_submit(ctx, b);
}

static inline int fake_be_put_one(void *ctx, unsigned group, const char *key, const void *val,
                                  size_t len)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->one_calls, 1);
    pthread_mutex_lock(&f->lock);
    f->last_group = group;
    int r = fake_put_locked(f, key, val, len);
    pthread_mutex_unlock(&f->lock);
    return r;
}

static inline ssize_t fake_be_get_one(void *ctx, const char *key, void *buf, size_t cap)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->one_calls, 1);
    pthread_mutex_lock(&f->lock);
    ssize_t r = fake_get_locked(f, key, buf, cap);
    pthread_mutex_unlock(&f->lock);
    return r;
}

static inline int fake_be_exists_one(void *ctx, const char *key)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->one_calls, 1);
    pthread_mutex_lock(&f->lock);
    int r = fake_exists_locked(f, key);
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* Completes pending batch idx (FAKE_MANUAL); false if there is none. */
static inline bool fake_complete(struct fake *f, int idx)
{
    pthread_mutex_lock(&f->lock);
    if (idx >= f->npending) {
        pthread_mutex_unlock(&f->lock);
        return false;
    }
    struct fake_batch b = f->pending[idx];
    memmove(&f->pending[idx], &f->pending[idx + 1], (size_t)(f->npending - idx - 1) * sizeof(b));
    f->npending--;
    pthread_mutex_unlock(&f->lock);
    fake_run(f, &b);
    return true;
}

static inline int fake_npending(struct fake *f)
{
    pthread_mutex_lock(&f->lock);
    int n = f->npending;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Completer thread: takes the newest pending batch first (out of order on purpose). */
static inline void *fake_thread(void *arg)
{
    struct fake *f = arg;
    pthread_mutex_lock(&f->lock);
    while (!f->stop || f->npending) {
        if (!f->npending) {
            pthread_cond_wait(&f->cv, &f->lock);
            continue;
        }
        struct fake_batch b = f->pending[--f->npending];
        pthread_mutex_unlock(&f->lock);
        fake_run(f, &b);
        pthread_mutex_lock(&f->lock);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static inline void fake_init(struct fake *f, enum fake_mode mode)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->mode = mode;
    if (mode == FAKE_THREAD) pthread_create(&f->thread, NULL, fake_thread, f);
}

static inline void fake_fini(struct fake *f)
{
    if (f->mode == FAKE_THREAD) {
        pthread_mutex_lock(&f->lock);
        f->stop = true;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->thread, NULL);
    }
    for (int i = 0; i < FAKE_MAX_KEYS; i++) {
        free(f->keys[i]);
        free(f->vals[i]);
    }
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->lock);
}

static const struct kvb_backend_ops fake_ops = {
    .put = fake_be_put,
    .get = fake_be_get,
    .exists = fake_be_exists,
    .put_one = fake_be_put_one,
    .get_one = fake_be_get_one,
    .exists_one = fake_be_exists_one,
    .release = NULL, /* the test owns f */
};

/* The backend vtable over f (struct kvb_backend_ops, batcher/backend.h). */
static inline struct kvb_backend fake_backend(struct fake *f)
{
    struct kvb_backend be = {&fake_ops, f};
    return be;
}

/* Sleeps about 1 ms (bounded polling helper for tests). */
static inline void fake_nap(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* ---- a batcher over the fake, for batcher tests (asserts with cmocka) ---- */

#define FAKE_LONG_WINDOW (10ull * 1000000000ull) /* never expires within a test */

/* The batcher under test, its stats and the fake behind it. */
struct fake_env {
    struct fake f;
    struct kvb_stats st;
    struct kvb_batcher *b;
};

/* Batcher parameters with write-behind off and a 1 MiB write-behind byte bound. */
static inline struct kvb_params fake_params(enum kvb_batch_policy pol, uint64_t window_ns,
                                            uint32_t max_ops, uint64_t max_bytes,
                                            uint32_t max_inflight)
{
    struct kvb_params p = {pol, window_ns, max_ops, max_bytes, max_inflight, 0, 1 << 20};
    return p;
}

static inline void fake_env_up(struct fake_env *e, enum fake_mode mode, struct kvb_params p)
{
    fake_init(&e->f, mode);
    kvb_stats_init(&e->st);
    struct kvb_backend be = fake_backend(&e->f);
    e->b = kvb_batcher_create(&p, &be, &e->st);
    assert_non_null(e->b);
}

static inline void fake_env_down(struct fake_env *e)
{
    /* Manual completions left over would block destroy: finish them first. */
    while (e->f.mode == FAKE_MANUAL && fake_complete(&e->f, 0))
        ;
    assert_int_equal(kvb_batcher_destroy(e->b, FAKE_LONG_WINDOW), 0);
    fake_fini(&e->f);
}

/* Waits (bounded: 5 s) until the fake has seen n batch calls. */
static inline void fake_wait_submitted(struct fake_env *e, int n)
{
    for (int i = 0; i < 5000 && atomic_load(&e->f.submitted) < n; i++)
        fake_nap();
    assert_int_equal(atomic_load(&e->f.submitted), n);
}

#endif

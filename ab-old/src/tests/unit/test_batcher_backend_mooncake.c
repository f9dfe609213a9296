/*
 * test_batcher_backend_mooncake.c - the batcher's Mooncake backend
 * (batcher/backend_mooncake.c) over a fake Mooncake library: a table of
 * functions with Mooncake's signatures and return conventions over an
 * in-memory store, which records every call (on which thread, inside the
 * re-entry guard or not, with which config and keys). Each op's batch call
 * and per-key results, the single-key calls (the size probe is get_size),
 * replicate configs compared by value, error fan-out, the submit-thread
 * bound, rounds of distinct keys, copy-mode staging, and a batcher over it
 * with many threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_mooncake.h"
#include "batcher.h"

/* Mooncake's codes as the fake returns them. */
enum { MC_INVALID_PARAMS = -600, MC_NOT_FOUND = -704, MC_RPC_FAIL = -900 };

#define FM_KEYS    512
#define FM_THREADS 64

/* ---- the fake library ---- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    char *keys[FM_KEYS];
    char *vals[FM_KEYS];
    size_t lens[FM_KEYS];
    int batch_calls, single_calls, put_calls, get_size_calls, registers, unregisters;
    int unguarded;    /* calls made outside kvb_backend_call_begin/end */
    int dup_batches;  /* batch calls that carried one key twice */
    int fail_batches; /* batch calls return -1 */
    int refuse_register;
    int block; /* batch calls wait until cleared */
    int running, max_running;
    pthread_t threads[FM_THREADS]; /* distinct threads that made batch calls */
    int nthreads;
    size_t last_n;
    /* The newest batch_put_from's config, by value. */
    int last_cfg_null;
    size_t last_replica;
    size_t last_nsegs;
    char last_seg0[32];
    /* Registered staging, and whether every copy-mode buffer was inside it. */
    char *reg[FM_THREADS];
    size_t reg_len[FM_THREADS];
    int nreg;
    int outside_reg;
} F = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static char store_object;
#define STORE ((mooncake_store_t)&store_object) /* the handle the fake expects */

static void fm_reset(void)
{
    pthread_mutex_lock(&F.lock);
    for (int i = 0; i < FM_KEYS; i++) {
        free(F.keys[i]);
        free(F.vals[i]);
    }
    pthread_mutex_t l = F.lock;
    pthread_cond_t c = F.cv;
    memset(&F, 0, sizeof(F));
    F.lock = l;
    F.cv = c;
    pthread_mutex_unlock(&F.lock);
}

/* Lock held: common bookkeeping of every call. */
static void fm_enter(mooncake_store_t s)
{
    assert_ptr_equal(s, STORE);
    if (!kvb_in_backend_call()) F.unguarded++;
}

static int fm_find(const char *key)
{
    for (int i = 0; i < FM_KEYS; i++)
        if (F.keys[i] && strcmp(F.keys[i], key) == 0) return i;
    return -1;
}

static int fm_put_locked(const char *key, const void *val, size_t len)
{
    if (strncmp(key, "err-", 4) == 0) return MC_RPC_FAIL;
    if (len == 0) return MC_INVALID_PARAMS;
    int i = fm_find(key);
    for (int j = 0; i < 0 && j < FM_KEYS; j++)
        if (!F.keys[j]) i = j;
    assert_true(i >= 0);
    if (!F.keys[i]) F.keys[i] = strdup(key);
    free(F.vals[i]);
    F.vals[i] = malloc(len);
    memcpy(F.vals[i], val, len);
    F.lens[i] = len;
    return 0;
}

static int64_t fm_get_locked(const char *key, void *buf, size_t cap)
{
    if (strncmp(key, "err-", 4) == 0) return MC_RPC_FAIL;
    int i = fm_find(key);
    if (i < 0) return MC_NOT_FOUND;
    if (cap < F.lens[i]) return MC_INVALID_PARAMS;
    memcpy(buf, F.vals[i], F.lens[i]);
    return (int64_t)F.lens[i];
}

static int fm_exists_locked(const char *key)
{
    if (strncmp(key, "err-", 4) == 0) return MC_RPC_FAIL;
    return fm_find(key) >= 0;
}

/* Lock held: a batch call's bookkeeping; false if it is to fail as a whole. */
static bool fm_batch_begin(mooncake_store_t s, const char **keys, size_t n)
{
    fm_enter(s);
    F.batch_calls++;
    F.last_n = n;
    bool seen = false;
    for (int i = 0; i < F.nthreads; i++)
        seen = seen || pthread_equal(F.threads[i], pthread_self());
    if (!seen && F.nthreads < FM_THREADS) F.threads[F.nthreads++] = pthread_self();
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(keys[i], keys[k]) == 0) {
                F.dup_batches++;
                i = k = n;
            }
    F.running++;
    if (F.running > F.max_running) F.max_running = F.running;
    pthread_cond_broadcast(&F.cv);
    while (F.block)
        pthread_cond_wait(&F.cv, &F.lock);
    F.running--;
    return !F.fail_batches;
}

static bool fm_registered(const void *p, size_t len)
{
    for (int i = 0; i < F.nreg; i++)
        if ((const char *)p >= F.reg[i] && (const char *)p + len <= F.reg[i] + F.reg_len[i])
            return true;
    return false;
}

static int fm_batch_put_from(mooncake_store_t s, const char **keys, void **bufs,
                             const size_t *sizes, size_t n, const mooncake_replicate_config_t *cfg,
                             int *res)
{
    pthread_mutex_lock(&F.lock);
    if (!fm_batch_begin(s, keys, n)) {
        pthread_mutex_unlock(&F.lock);
        return -1;
    }
    F.last_cfg_null = cfg == NULL;
    F.last_replica = cfg ? cfg->replica_num : 0;
    F.last_nsegs = cfg ? cfg->preferred_segments_count : 0;
    F.last_seg0[0] = '\0';
    if (cfg && cfg->preferred_segments && cfg->preferred_segments_count)
        snprintf(F.last_seg0, sizeof(F.last_seg0), "%s", cfg->preferred_segments[0]);
    for (size_t i = 0; i < n; i++) {
        if (F.nreg && !fm_registered(bufs[i], sizes[i])) F.outside_reg++;
        res[i] = fm_put_locked(keys[i], bufs[i], sizes[i]);
    }
    pthread_mutex_unlock(&F.lock);
    return 0;
}

static int fm_batch_get_into(mooncake_store_t s, const char **keys, void **bufs,
                             const size_t *sizes, size_t n, int64_t *res)
{
    pthread_mutex_lock(&F.lock);
    if (!fm_batch_begin(s, keys, n)) {
        pthread_mutex_unlock(&F.lock);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        res[i] = fm_get_locked(keys[i], bufs[i], sizes[i]);
    pthread_mutex_unlock(&F.lock);
    return 0;
}

static int fm_batch_is_exist(mooncake_store_t s, const char **keys, size_t n, int *res)
{
    pthread_mutex_lock(&F.lock);
    if (!fm_batch_begin(s, keys, n)) {
        pthread_mutex_unlock(&F.lock);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        res[i] = fm_exists_locked(keys[i]);
    pthread_mutex_unlock(&F.lock);
    return 0;
}

static int fm_put(mooncake_store_t s, const char *key, const void *val, size_t len,
                  const mooncake_replicate_config_t *cfg)
{
    (void)cfg;
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.single_calls++;
    F.put_calls++;
    int rc = fm_put_locked(key, val, len);
    pthread_mutex_unlock(&F.lock);
    return rc;
}

static int fm_put_from(mooncake_store_t s, const char *key, void *buf, size_t len,
                       const mooncake_replicate_config_t *cfg)
{
    (void)cfg;
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.single_calls++;
    int rc = fm_put_locked(key, buf, len);
    pthread_mutex_unlock(&F.lock);
    return rc;
}

static int64_t fm_get_into(mooncake_store_t s, const char *key, void *buf, size_t cap)
{
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.single_calls++;
    int64_t r = fm_get_locked(key, buf, cap);
    pthread_mutex_unlock(&F.lock);
    return r;
}

static int fm_is_exist(mooncake_store_t s, const char *key)
{
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.single_calls++;
    int r = fm_exists_locked(key);
    pthread_mutex_unlock(&F.lock);
    return r;
}

static int64_t fm_get_size(mooncake_store_t s, const char *key)
{
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.get_size_calls++;
    int i = fm_find(key);
    int64_t r = i < 0 ? MC_NOT_FOUND : (int64_t)F.lens[i];
    pthread_mutex_unlock(&F.lock);
    return r;
}

static int fm_register(mooncake_store_t s, void *p, size_t len)
{
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.registers++;
    int rc = F.refuse_register ? MC_INVALID_PARAMS : 0;
    if (rc == 0 && F.nreg < FM_THREADS) {
        F.reg[F.nreg] = p;
        F.reg_len[F.nreg++] = len;
    }
    pthread_mutex_unlock(&F.lock);
    return rc;
}

static int fm_unregister(mooncake_store_t s, void *p)
{
    (void)p;
    pthread_mutex_lock(&F.lock);
    fm_enter(s);
    F.unregisters++;
    pthread_mutex_unlock(&F.lock);
    return 0;
}

static const struct kvb_mc_calls CALLS = {
    fm_batch_put_from, fm_batch_get_into, fm_batch_is_exist, fm_put,      fm_put_from,
    fm_get_into,       fm_is_exist,       fm_get_size,       fm_register, fm_unregister,
};

static int get(int *field)
{
    pthread_mutex_lock(&F.lock);
    int v = *field;
    pthread_mutex_unlock(&F.lock);
    return v;
}

/* ---- completion of one batch handed to the backend directly ---- */

struct wait {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done;
    ssize_t nok;
    pthread_t thread;
};

static void wait_init(struct wait *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void on_done(void *arg, ssize_t nok)
{
    struct wait *w = arg;
    pthread_mutex_lock(&w->lock);
    w->nok = nok;
    w->thread = pthread_self();
    w->done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->lock);
}

/* Waits (bounded: 10 s) for w's batch; returns its nok. */
static ssize_t wait_done(struct wait *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&w->lock);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->lock, &ts) != 0) break;
    assert_int_equal(w->done, 1);
    ssize_t nok = w->nok;
    pthread_mutex_unlock(&w->lock);
    return nok;
}

static struct kvb_backend backend(unsigned threads, size_t stage, struct kvb_mc_backend **mc)
{
    struct kvb_backend be;
    assert_int_equal(kvb_backend_mooncake(&CALLS, STORE, threads, stage, &be, mc), 0);
    return be;
}

/* ---- tests ---- */

static void test_each_op_runs_its_batch_call_on_a_submit_thread(void **state)
{
    (void)state;
    fm_reset();
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(2, 1 << 16, &mc);
    const char *keys[] = {"a", "err-b", "c"};
    const void *vals[] = {"111", "2", "33"};
    size_t lens[] = {3, 1, 2};
    int st[3] = {9, 9, 9};
    struct wait w;
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, 0, 3, keys, vals, lens, st, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 2);
    assert_false(pthread_equal(w.thread, pthread_self())); /* a submit thread reported it */
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], MC_RPC_FAIL);
    assert_int_equal(st[2], 0);
    assert_int_equal(get(&F.last_cfg_null), 1);

    /* get_into: the length, not found, too small (nothing copied), an error. */
    const char *gkeys[] = {"a", "missing", "c", "err-x"};
    char b0[8], b1[8], b2[1] = {'z'}, b3[8];
    void *bufs[] = {b0, b1, b2, b3};
    size_t caps[] = {sizeof(b0), sizeof(b1), sizeof(b2), sizeof(b3)};
    ssize_t res[4];
    wait_init(&w);
    assert_int_equal(be.ops->get(be.ctx, 4, gkeys, bufs, caps, res, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 1);
    assert_int_equal(res[0], 3);
    assert_memory_equal(b0, "111", 3);
    assert_int_equal(res[1], MC_NOT_FOUND);
    assert_int_equal(res[2], MC_INVALID_PARAMS);
    assert_int_equal(b2[0], 'z');
    assert_int_equal(res[3], MC_RPC_FAIL);

    /* is_exist: 1, 0, negative. */
    const char *ekeys[] = {"c", "missing", "err-y"};
    int ex[3];
    wait_init(&w);
    assert_int_equal(be.ops->exists(be.ctx, 3, ekeys, ex, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 2);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(ex[2], MC_RPC_FAIL);
    assert_int_equal(get(&F.batch_calls), 3);
    assert_int_equal(get(&F.single_calls), 0);

    /* The single-key calls, on the caller's thread; the size probe is get_size. */
    assert_false(kvb_in_backend_call());
    assert_int_equal(be.ops->put_one(be.ctx, 0, "d", "4444", 4), 0);
    assert_int_equal(be.ops->put_one(be.ctx, 0, "empty", "", 0), MC_INVALID_PARAMS);
    assert_int_equal(be.ops->get_one(be.ctx, "d", b0, sizeof(b0)), 4);
    assert_int_equal(be.ops->get_one(be.ctx, "d", b2, 1), MC_INVALID_PARAMS);
    assert_int_equal(be.ops->get_one(be.ctx, "d", NULL, 0), 4);
    assert_int_equal(be.ops->get_one(be.ctx, "missing", NULL, 0), MC_NOT_FOUND);
    assert_int_equal(be.ops->exists_one(be.ctx, "d"), 1);
    assert_int_equal(be.ops->exists_one(be.ctx, "missing"), 0);
    assert_false(kvb_in_backend_call());
    assert_int_equal(get(&F.get_size_calls), 2);
    assert_int_equal(get(&F.unguarded), 0); /* every library call inside the guard */
    kvb_backend_release(&be);
}

static void test_configs_compare_by_value(void **state)
{
    (void)state;
    fm_reset();
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(1, 1 << 16, &mc);
    const char *segs_a[] = {"seg-a", "seg-b"};
    char s1[] = "seg-a", s2[] = "seg-b";
    const char *segs_a2[] = {s1, s2}; /* equal strings, other memory */
    const char *segs_c[] = {"seg-c", "seg-b"};
    mooncake_replicate_config_t a = {2, 0, 0, segs_a, 2};
    mooncake_replicate_config_t a2 = {2, 0, 0, segs_a2, 2};
    mooncake_replicate_config_t c = {2, 0, 0, segs_c, 2};
    mooncake_replicate_config_t pinned = {2, 1, 0, segs_a, 2};
    mooncake_replicate_config_t zero = {0};
    assert_int_equal(kvb_mc_group(mc, NULL, false), 0);
    int ga = kvb_mc_group(mc, &a, false);
    assert_true(ga > 0);
    assert_int_equal(kvb_mc_group(mc, &a2, false), ga);
    int gc = kvb_mc_group(mc, &c, false), gp = kvb_mc_group(mc, &pinned, false);
    int gz = kvb_mc_group(mc, &zero, false), gcopy = kvb_mc_group(mc, &a, true);
    int gnull_copy = kvb_mc_group(mc, NULL, true);
    int all[] = {0, ga, gc, gp, gz, gcopy, gnull_copy};
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < i; j++)
            assert_int_not_equal(all[i], all[j]);
    /* The group keeps its own copy: the caller's config may change afterwards. */
    s1[4] = 'x';
    a2.replica_num = 7;
    assert_int_equal(kvb_mc_group(mc, &a, false), ga);

    const char *keys[] = {"k"};
    const void *vals[] = {"v"};
    size_t lens[] = {1};
    int st[1];
    struct wait w;
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, (unsigned)ga, 1, keys, vals, lens, st, on_done, &w), 0);
    wait_done(&w);
    pthread_mutex_lock(&F.lock);
    assert_int_equal(F.last_cfg_null, 0);
    assert_int_equal(F.last_replica, 2);
    assert_int_equal(F.last_nsegs, 2);
    assert_string_equal(F.last_seg0, "seg-a");
    pthread_mutex_unlock(&F.lock);
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, (unsigned)gc, 1, keys, vals, lens, st, on_done, &w), 0);
    wait_done(&w);
    pthread_mutex_lock(&F.lock);
    assert_string_equal(F.last_seg0, "seg-c");
    pthread_mutex_unlock(&F.lock);

    /* A full table: existing groups are still found, a new one is refused. */
    mooncake_replicate_config_t more = {100, 0, 0, NULL, 0};
    int rc = 0;
    for (int i = 0; i < KVB_MC_MAX_GROUPS && rc >= 0; i++, more.replica_num++)
        rc = kvb_mc_group(mc, &more, false);
    assert_int_equal(rc, -ENOSPC);
    assert_int_equal(kvb_mc_group(mc, &c, false), gc);
    kvb_backend_release(&be);
}

static void test_failed_batch_call_fans_out_key_by_key(void **state)
{
    (void)state;
    fm_reset();
    F.fail_batches = 1;
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(1, 1 << 16, &mc);
    const char *keys[] = {"a", "err-b", "c"};
    const void *vals[] = {"1", "2", "3"};
    size_t lens[] = {1, 1, 1};
    int st[3];
    struct wait w;
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, 0, 3, keys, vals, lens, st, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 2);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], MC_RPC_FAIL);
    assert_int_equal(st[2], 0);
    const char *gkeys[] = {"a", "missing"};
    char b0[4], b1[4];
    void *bufs[] = {b0, b1};
    size_t caps[] = {4, 4};
    ssize_t res[2];
    wait_init(&w);
    assert_int_equal(be.ops->get(be.ctx, 2, gkeys, bufs, caps, res, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 1);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], MC_NOT_FOUND);
    int ex[2];
    wait_init(&w);
    assert_int_equal(be.ops->exists(be.ctx, 2, gkeys, ex, on_done, &w), 0);
    wait_done(&w);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(get(&F.batch_calls), 3);
    assert_int_equal(get(&F.single_calls), 7);
    assert_int_equal(get(&F.unguarded), 0);
    kvb_backend_release(&be);
}

static void test_submit_threads_are_bounded(void **state)
{
    (void)state;
    fm_reset();
    F.block = 1;
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(2, 1 << 16, &mc);
    enum { N = 6 };
    struct wait w[N];
    const char *keys[N][1];
    char names[N][16];
    int ex[N][1];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        keys[i][0] = names[i];
        wait_init(&w[i]);
        assert_int_equal(be.ops->exists(be.ctx, 1, keys[i], ex[i], on_done, &w[i]), 0);
    }
    pthread_mutex_lock(&F.lock);
    for (int i = 0; i < 1000 && F.running < 2; i++) {
        pthread_mutex_unlock(&F.lock);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&F.lock);
    }
    assert_int_equal(F.running, 2); /* two calls run, four wait for a thread */
    pthread_mutex_unlock(&F.lock);
    assert_int_equal(kvb_mc_threads(mc), 2);
    pthread_mutex_lock(&F.lock);
    F.block = 0;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.lock);
    for (int i = 0; i < N; i++) {
        wait_done(&w[i]);
        assert_int_equal(ex[i][0], 0);
    }
    assert_int_equal(get(&F.max_running), 2);
    assert_int_equal(get(&F.nthreads), 2);
    assert_int_equal(kvb_mc_threads(mc), 2);
    kvb_backend_release(&be);
}

static void test_one_key_twice_goes_in_rounds(void **state)
{
    (void)state;
    fm_reset();
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(1, 1 << 16, &mc);
    const char *keys[] = {"a", "b", "a", "a"};
    const void *vals[] = {"1", "2", "3", "4"};
    size_t lens[] = {1, 1, 1, 1};
    int st[4];
    struct wait w;
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, 0, 4, keys, vals, lens, st, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 4);
    assert_int_equal(get(&F.batch_calls), 3); /* {a, b}, {a}, {a} */
    assert_int_equal(get(&F.dup_batches), 0);
    const char *gkeys[] = {"a", "a"};
    char b0[4], b1[4];
    void *bufs[] = {b0, b1};
    size_t caps[] = {4, 4};
    ssize_t res[2];
    wait_init(&w);
    assert_int_equal(be.ops->get(be.ctx, 2, gkeys, bufs, caps, res, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 2);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], 1);
    assert_memory_equal(b0, "4", 1); /* the last put of the batch won, as in call order */
    assert_memory_equal(b1, "4", 1);
    assert_int_equal(get(&F.dup_batches), 0);
    kvb_backend_release(&be);
}

static void test_copy_mode_puts_go_from_registered_staging(void **state)
{
    (void)state;
    fm_reset();
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(1, 8, &mc); /* 8-byte staging buffer */
    int g = kvb_mc_group(mc, NULL, true);
    const char *keys[] = {"a", "b", "big", "c"};
    const void *vals[] = {"1234", "5678", "0123456789", "9"};
    size_t lens[] = {4, 4, 10, 1};
    int st[4];
    struct wait w;
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, (unsigned)g, 4, keys, vals, lens, st, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 4);
    pthread_mutex_lock(&F.lock);
    assert_int_equal(F.registers, 1);
    assert_int_equal(F.outside_reg, 0); /* every batched value came from the staging buffer */
    assert_int_equal(F.batch_calls, 2); /* {a, b} filled it, then {c} */
    assert_int_equal(F.put_calls, 1);   /* "big" never fits: mooncake_store_put, which copies */
    int i = fm_find("b");
    assert_memory_equal(F.vals[i], "5678", 4);
    i = fm_find("big");
    assert_memory_equal(F.vals[i], "0123456789", 10);
    pthread_mutex_unlock(&F.lock);
    kvb_backend_release(&be);
    assert_int_equal(get(&F.unregisters), 1);

    /* A library that refuses the registration: each copy-mode put goes through put. */
    fm_reset();
    F.refuse_register = 1;
    be = backend(1, 64, &mc);
    g = kvb_mc_group(mc, NULL, true);
    wait_init(&w);
    assert_int_equal(be.ops->put(be.ctx, (unsigned)g, 4, keys, vals, lens, st, on_done, &w), 0);
    assert_int_equal(wait_done(&w), 4);
    assert_int_equal(get(&F.batch_calls), 0);
    assert_int_equal(get(&F.put_calls), 4);
    kvb_backend_release(&be);
    assert_int_equal(get(&F.unregisters), 0);
}

/* Mooncake's codes count under the class of their meaning, through a batcher's stats. */
static void test_mooncake_codes_count_by_meaning(void **state)
{
    (void)state;
    struct kvb_stats st;
    kvb_stats_init(&st);
    st.classify = kvb_mc_status_class;
    kvb_count_result(&st, KVB_OP_GET, MC_NOT_FOUND);
    kvb_count_result(&st, KVB_OP_GET, MC_INVALID_PARAMS);
    kvb_count_result(&st, KVB_OP_PUT, MC_RPC_FAIL);
    kvb_count_result(&st, KVB_OP_PUT, -705); /* OBJECT_ALREADY_EXISTS: no errno of that meaning */
    kvb_count_result(&st, KVB_OP_PUT, -ENOENT); /* not a Mooncake code: not ENOENT */
    assert_int_equal(atomic_load(&st.errors[KVB_OP_GET][KVS_STATUS_C_ENOENT]), 1);
    assert_int_equal(atomic_load(&st.errors[KVB_OP_GET][KVS_STATUS_C_EINVAL]), 1);
    assert_int_equal(atomic_load(&st.errors[KVB_OP_PUT][KVS_STATUS_C_EIO]), 1);
    assert_int_equal(atomic_load(&st.errors[KVB_OP_PUT][KVS_STATUS_C_OTHER]), 2);
    assert_int_equal(kvb_mc_status_class(-901), KVS_STATUS_C_ETIMEDOUT);
    assert_int_equal(kvb_mc_status_class(-200), KVS_STATUS_C_ENOSPC);
    assert_int_equal(kvb_mc_status_class(-1), KVS_STATUS_C_OTHER);
}

/* ---- a batcher over the backend, many threads ---- */

struct worker {
    struct kvb_batcher *b;
    unsigned group;
    int id, errors;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32], val[64], buf[64];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "t%d-%d", w->id, i % 10);
        int n = snprintf(val, sizeof(val), "value %d of %d", i, w->id);
        w->errors += kvb_put_group(w->b, w->group, key, val, (size_t)n) != 0;
        w->errors += kvb_get(w->b, key, buf, sizeof(buf)) != n;
        w->errors += memcmp(buf, val, (size_t)n) != 0;
        w->errors += kvb_exists(w->b, key) != 1;
        w->errors += kvb_get(w->b, key, buf, 2) != MC_INVALID_PARAMS;
    }
    return NULL;
}

static void run_threads(int writeback)
{
    enum { T = 16 };
    fm_reset();
    struct kvb_mc_backend *mc;
    struct kvb_backend be = backend(4, 1 << 20, &mc);
    struct kvb_stats st;
    kvb_stats_init(&st);
    /* fixed: the fake answers at once, so adaptive would send most calls alone. */
    struct kvb_params p = {KVB_BATCH_FIXED, 500000, 64, 1 << 20, 4, writeback, 1 << 20};
    struct kvb_batcher *b = kvb_batcher_create(&p, &be, &st);
    assert_non_null(b);
    mooncake_replicate_config_t two = {2, 0, 0, NULL, 0};
    pthread_t t[T];
    struct worker w[T];
    for (int i = 0; i < T; i++) {
        /* Half the threads use another config: their puts never share a batch with the rest. */
        int g = kvb_mc_group(mc, i % 2 ? &two : NULL, writeback != 0);
        assert_true(g >= 0);
        w[i] = (struct worker){b, (unsigned)g, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].errors, 0);
    }
    assert_int_equal(kvb_batcher_destroy(b, UINT64_MAX), 0);
    uint64_t ops = atomic_load(&st.ops[KVB_OP_PUT]) + atomic_load(&st.ops[KVB_OP_GET]) +
                   atomic_load(&st.ops[KVB_OP_EXISTS]);
    fprintf(stderr, "%d threads%s: %llu ops in %d library batch calls over %d threads\n", T,
            writeback ? " (write-behind)" : "", (unsigned long long)ops, F.batch_calls, F.nthreads);
    assert_true(F.nthreads <= 4);
    assert_true(F.batch_calls > 0 && (uint64_t)F.batch_calls < ops / 2);
    assert_int_equal(F.unguarded, 0);
    assert_int_equal(F.dup_batches, 0);
}

static void test_batcher_over_it_16_threads(void **state)
{
    (void)state;
    run_threads(0);
}

static void test_batcher_over_it_16_threads_writeback(void **state)
{
    (void)state;
    run_threads(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_op_runs_its_batch_call_on_a_submit_thread),
        cmocka_unit_test(test_configs_compare_by_value),
        cmocka_unit_test(test_failed_batch_call_fans_out_key_by_key),
        cmocka_unit_test(test_submit_threads_are_bounded),
        cmocka_unit_test(test_one_key_twice_goes_in_rounds),
        cmocka_unit_test(test_copy_mode_puts_go_from_registered_staging),
        cmocka_unit_test(test_mooncake_codes_count_by_meaning),
        cmocka_unit_test(test_batcher_over_it_16_threads),
        cmocka_unit_test(test_batcher_over_it_16_threads_writeback),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fm_reset();
    return rc;
}

/*
 * test_shm_threads.c - the shared region under threads (docs/shm.md "The
 * region", "Copies per value"), one client and one connection over the local
 * socket:
 *
 *   - the ring: 8 threads with a small region (256 KiB), each with its own
 *     keys, send batch puts and gets (sync and async, 1 to 8 keys of 8 bytes
 *     to 48 KiB), so runs are taken and given back out of order, the ring
 *     wraps, and requests that find no room go through the socket;
 *   - a steady stream: 8 threads of small batches through an 8 MiB region hold
 *     a fraction of it, so the ring goes back to its start early, lap after
 *     lap (tcp_shm.c ring_take), and no request misses room;
 *   - GETs: 16 threads (a 4 MiB region) get distinct values by every call
 *     (sync batch, single-key, async single-key waited, async batch with a
 *     callback checking its values on the library's thread) while they
 *     change them.
 *
 * Every value read is whole and the version its thread last wrote. Runs
 * under TSan (tests/threaded.txt).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "values.h"

enum { RING_THREADS = 8, RING_ROUNDS = 150, MAXK = 8, RING_MAXLEN = 48 * 1024 };

struct worker {
    kvs_client *c;
    int id;
    unsigned seed;
    int failures; /* checks that did not hold (asserting off the main thread is not cmocka's) */
};

static size_t pick(unsigned *seed, size_t lo, size_t hi)
{
    return lo + (size_t)rand_r(seed) % (hi - lo + 1);
}

/* n threads of fn on c, worker i seeded seed0 + i; the checks that did not hold, summed. */
static int run_workers(kvs_client *c, int n, unsigned seed0, void *(*fn)(void *))
{
    enum { MAX_WORKERS = 16 };
    pthread_t th[MAX_WORKERS];
    struct worker w[MAX_WORKERS];
    assert_true(n <= MAX_WORKERS);
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){.c = c, .id = i, .seed = seed0 + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, fn, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        failures += w[i].failures;
    }
    return failures;
}

/* A kvstored (its --memory) and a client of it with a region of region bytes (KVSTORE_SHM_SIZE). */
static kvs_client *open_with_region(struct kvt_server *s, const char *memory, const char *region)
{
    char args[64];
    snprintf(args, sizeof(args), "--memory %s", memory);
    assert_int_equal(kvt_server_start(s, 0, args), 0);
    setenv("KVSTORE_SHM_SIZE", region, 1);
    kvs_client *c = kvs_open(s->addr); /* auto: the local socket, with a region */
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    return c;
}

/* The connection had a region, kvstored served at least puts / gets SHM frames, none out of range.
 */
static void assert_through_region(kvs_client *c, long long puts, long long gets)
{
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    assert_true(kvt_server_counter(c, "requests_shm_put") >= puts);
    assert_true(kvt_server_counter(c, "requests_shm_get") >= gets);
    assert_int_equal(kvt_server_counter(c, "shm_bad_ranges"), 0);
}

/* ---- the ring: batch puts and gets of every size ---- */

static void *ring_worker(void *arg)
{
    struct worker *w = arg;
    char names[MAXK][32];
    const char *keys[MAXK];
    void *vals[MAXK], *bufs[MAXK];
    size_t lens[MAXK], caps[MAXK];
    int st[MAXK];
    ssize_t got[MAXK];
    for (int i = 0; i < MAXK; i++) {
        vals[i] = malloc(RING_MAXLEN);
        bufs[i] = malloc(RING_MAXLEN);
        if (!vals[i] || !bufs[i]) w->failures++;
        keys[i] = names[i];
    }
    for (unsigned round = 1; round <= RING_ROUNDS && !w->failures; round++) {
        size_t n = pick(&w->seed, 1, MAXK);
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof(names[i]), "t%d-k%zu", w->id, pick(&w->seed, 0, 15));
            for (size_t j = 0; j < i; j++) /* one key once per batch */
                if (strcmp(names[i], names[j]) == 0) snprintf(names[i], 32, "t%d-u%zu", w->id, i);
            lens[i] = pick(&w->seed, 8, RING_MAXLEN); /* 8 bytes at least: room for a version */
            kvval_fill(vals[i], lens[i], names[i], round);
            caps[i] = RING_MAXLEN;
        }
        int async = (int)pick(&w->seed, 0, 1);
        if (async) {
            kvs_op *op = NULL;
            if (kvs_batch_put_async(w->c, n, keys, (const void *const *)vals, lens, st, NULL, NULL,
                                    &op) != 0 ||
                kvs_wait(op) != (ssize_t)n)
                w->failures++;
        } else if (kvs_batch_put(w->c, n, keys, (const void *const *)vals, lens, st) != (int)n) {
            w->failures++;
        }
        if (kvs_batch_get(w->c, n, keys, bufs, caps, got) != (int)n) w->failures++;
        for (size_t i = 0; i < n && !w->failures; i++) {
            unsigned version = 0;
            if (got[i] != (ssize_t)lens[i] || !kvval_check(bufs[i], lens[i], names[i], &version) ||
                version != round) {
                fprintf(stderr, "thread %d round %u key %s: got %zd of %zu, version %u\n", w->id,
                        round, names[i], got[i], lens[i], version);
                w->failures++;
            }
        }
    }
    for (int i = 0; i < MAXK; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    return NULL;
}

static void test_ring_under_threads(void **state)
{
    (void)state;
    struct kvt_server s;
    kvs_client *c = open_with_region(&s, "64M", "256K");
    assert_int_equal(run_workers(c, RING_THREADS, 1234u, ring_worker), 0);
    assert_through_region(c, 1, 1);
    assert_true(kvt_server_counter(c, "client_shm_fallbacks") > 0); /* the ring was full at times */
    kvs_close(c);
    kvt_server_stop(&s);
}

/* ---- a steady stream: the ring cycles through a part of the region ---- */

enum { STEADY_THREADS = 8, STEADY_ROUNDS = 600, STEADY_KEYS = 8, STEADY_LEN = 4096 };

/*
 * Each round puts one key set (async) while it gets the other, written the
 * round before (async): two requests in flight per thread, so the ring is
 * seldom empty (an empty ring starts again at 0 anyway).
 */
static void *steady_worker(void *arg)
{
    struct worker *w = arg;
    char names[2][STEADY_KEYS][32];
    const char *keys[2][STEADY_KEYS];
    void *vals[STEADY_KEYS], *bufs[STEADY_KEYS];
    size_t lens[STEADY_KEYS], caps[STEADY_KEYS];
    int st[STEADY_KEYS];
    ssize_t got[STEADY_KEYS];
    for (int i = 0; i < STEADY_KEYS; i++) {
        vals[i] = malloc(STEADY_LEN);
        bufs[i] = malloc(STEADY_LEN);
        if (!vals[i] || !bufs[i]) w->failures++;
        for (int set = 0; set < 2; set++) {
            snprintf(names[set][i], sizeof(names[set][i]), "s%d-%d-k%d", w->id, set, i);
            keys[set][i] = names[set][i];
        }
        lens[i] = caps[i] = STEADY_LEN;
    }
    for (unsigned round = 1; round <= STEADY_ROUNDS && !w->failures; round++) {
        int put_set = round % 2, get_set = !put_set;
        for (int i = 0; i < STEADY_KEYS; i++)
            kvval_fill(vals[i], STEADY_LEN, names[put_set][i], round);
        kvs_op *put = NULL, *get = NULL;
        if (kvs_batch_put_async(w->c, STEADY_KEYS, keys[put_set], (const void *const *)vals, lens,
                                st, NULL, NULL, &put) != 0)
            w->failures++;
        if (round > 1 && kvs_batch_get_async(w->c, STEADY_KEYS, keys[get_set], bufs, caps, got,
                                             NULL, NULL, &get) != 0)
            w->failures++;
        if (put && kvs_wait(put) != STEADY_KEYS) w->failures++;
        if (get && kvs_wait(get) != STEADY_KEYS) w->failures++;
        for (int i = 0; get && i < STEADY_KEYS; i++) {
            unsigned version = 0;
            if (got[i] != STEADY_LEN ||
                !kvval_check(bufs[i], STEADY_LEN, names[get_set][i], &version) ||
                version != round - 1) {
                fprintf(stderr, "thread %d round %u key %s: got %zd, version %u\n", w->id, round,
                        names[get_set][i], got[i], version);
                w->failures++;
            }
        }
    }
    for (int i = 0; i < STEADY_KEYS; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    return NULL;
}

static void test_steady_stream_cycles_early(void **state)
{
    (void)state;
    struct kvt_server s;
    kvs_client *c = open_with_region(&s, "64M", "8M");
    /* 9,600 jobs of 32 KiB: 300 MiB through 8 MiB, about 1 MiB held at once. */
    assert_int_equal(run_workers(c, STEADY_THREADS, 99u, steady_worker), 0);
    assert_through_region(c, STEADY_THREADS * STEADY_ROUNDS, STEADY_THREADS * (STEADY_ROUNDS - 1));
    assert_int_equal(kvt_server_counter(c, "client_shm_fallbacks"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

/* ---- GETs: many threads getting distinct values ---- */

enum { GET_THREADS = 16, GET_ROUNDS = 60, NK = 4, GET_MAXLEN = 64 * 1024 };

/* An async batch's callback state: it checks the values on the thread it runs on. */
struct cb_state {
    struct worker *w;
    size_t n;
    const char *const *keys;
    void *const *bufs;
    const size_t *lens;
    const ssize_t *got;
    const unsigned *versions;
    atomic_int done;
    atomic_int bad;
};

/* 1 when bufs[i] holds the whole value of keys[i] at versions[i], len lens[i] (got[i]). */
static int value_ok(const char *key, const void *buf, size_t len, ssize_t got, unsigned want)
{
    unsigned version = 0;
    if (got != (ssize_t)len || !kvval_check(buf, len, key, &version) || version != want) {
        fprintf(stderr, "key %s: got %zd of %zu, version %u (want %u)\n", key, got, len, version,
                want);
        return 0;
    }
    return 1;
}

static void batch_checked(void *arg, ssize_t nok)
{
    struct cb_state *cb = arg;
    int bad = nok != (ssize_t)cb->n;
    for (size_t i = 0; i < cb->n; i++)
        if (!value_ok(cb->keys[i], cb->bufs[i], cb->lens[i], cb->got[i], cb->versions[i])) bad = 1;
    atomic_store(&cb->bad, bad);
    atomic_store(&cb->done, 1);
}

static void *get_worker(void *arg)
{
    struct worker *w = arg;
    char names[NK][32];
    const char *keys[NK];
    void *vals[NK], *bufs[NK];
    size_t lens[NK], caps[NK];
    unsigned versions[NK];
    ssize_t got[NK];
    for (int i = 0; i < NK; i++) {
        snprintf(names[i], sizeof(names[i]), "g%d-%d", w->id, i);
        keys[i] = names[i];
        vals[i] = malloc(GET_MAXLEN);
        bufs[i] = malloc(GET_MAXLEN);
        if (!vals[i] || !bufs[i]) w->failures++;
        caps[i] = GET_MAXLEN;
        versions[i] = 0;
    }
    for (unsigned round = 1; round <= GET_ROUNDS && !w->failures; round++) {
        /* A new version of some of the keys, of a new length (8 bytes at least: a version). */
        for (int i = 0; i < NK; i++) {
            if (versions[i] && pick(&w->seed, 0, 1)) continue;
            versions[i] = round;
            lens[i] = pick(&w->seed, 8, GET_MAXLEN);
            kvval_fill(vals[i], lens[i], names[i], round);
            if (kvs_put(w->c, names[i], vals[i], lens[i]) != 0) w->failures++;
        }
        for (int i = 0; i < NK; i++)
            memset(bufs[i], 0, GET_MAXLEN);
        switch (round % 4) {
        case 0:
            if (kvs_batch_get(w->c, NK, keys, bufs, caps, got) != NK) w->failures++;
            break;
        case 1:
            for (int i = 0; i < NK; i++)
                got[i] = kvs_get(w->c, keys[i], bufs[i], caps[i]);
            break;
        case 2: {
            kvs_op *ops[NK];
            for (int i = 0; i < NK; i++)
                if (kvs_get_async(w->c, keys[i], bufs[i], caps[i], &ops[i]) != 0) w->failures++;
            for (int i = 0; i < NK && !w->failures; i++)
                got[i] = kvs_wait(ops[i]);
            break;
        }
        default: {
            struct cb_state cb = {.w = w,
                                  .n = NK,
                                  .keys = keys,
                                  .bufs = bufs,
                                  .lens = lens,
                                  .got = got,
                                  .versions = versions};
            atomic_init(&cb.done, 0);
            atomic_init(&cb.bad, 0);
            if (kvs_batch_get_async(w->c, NK, keys, bufs, caps, got, batch_checked, &cb, NULL) !=
                0) {
                w->failures++;
                break;
            }
            for (int spin = 0; !atomic_load(&cb.done) && spin < 20000; spin++)
                usleep(500);
            if (!atomic_load(&cb.done) || atomic_load(&cb.bad)) w->failures++;
            break;
        }
        }
        for (int i = 0; i < NK && !w->failures; i++)
            if (!value_ok(keys[i], bufs[i], lens[i], got[i], versions[i])) w->failures++;
    }
    for (int i = 0; i < NK; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    return NULL;
}

static void test_threads_get_distinct_values(void **state)
{
    (void)state;
    struct kvt_server s;
    kvs_client *c = open_with_region(&s, "128M", "4M"); /* the ring goes round many times */
    assert_int_equal(run_workers(c, GET_THREADS, 777u, get_worker), 0);
    if (!kvt_over_rdma()) assert_through_region(c, 0, GET_THREADS * GET_ROUNDS + 1);
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_under_threads),
        cmocka_unit_test(test_steady_stream_cycles_early),
        cmocka_unit_test(test_threads_get_distinct_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

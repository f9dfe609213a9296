/*
 * test_shm_get.c - GETs through the shared region (docs/shm.md "Copies per
 * value", "The region"):
 *
 *   - a batch GET that times out while kvstored cannot answer (SIGSTOPped)
 *     fails with -ETIMEDOUT; its buffers are not written, neither then nor
 *     once kvstored goes on and answers late; and the region's room it held
 *     comes back (later GETs of the same size all go through the region);
 *   - 16 threads on one client (one connection, one region) get distinct
 *     values by every call (sync batch, single-key, async single-key waited,
 *     async batch with a callback checking its values on the library's
 *     thread) while other threads change them; every value read is whole and
 *     the version its thread last wrote.
 *
 * Runs under TSan (tests/threaded.txt).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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

/* ---- a GET timing out while its reply is in flight ---- */

enum { TK = 4, TLEN = 32000, TCAP = 32 * 1024 }; /* 4 x 32 KiB: half of a 256 KiB region */

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void test_timed_out_get_leaves_buffers_and_room(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("SIGSTOPs a local kvstored to hold a shared-memory reply");
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    setenv("KVSTORE_SHM_SIZE", "256K", 1);
    setenv("KVSTORE_TIMEOUT_MS", "400", 1);
    kvs_client *c = kvs_open(s.addr); /* auto: the local socket, with a region */
    unsetenv("KVSTORE_SHM_SIZE");
    unsetenv("KVSTORE_TIMEOUT_MS");
    assert_non_null(c);

    char names[TK][16];
    const char *keys[TK];
    void *vals[TK], *bufs[TK];
    size_t lens[TK], caps[TK];
    int st[TK];
    ssize_t got[TK];
    for (int i = 0; i < TK; i++) {
        snprintf(names[i], sizeof(names[i]), "to-%d", i);
        keys[i] = names[i];
        vals[i] = malloc(TLEN);
        bufs[i] = malloc(TCAP);
        assert_non_null(vals[i]);
        assert_non_null(bufs[i]);
        kvval_fill(vals[i], TLEN, names[i], 1);
        lens[i] = TLEN;
        caps[i] = TCAP;
    }
    assert_int_equal(kvs_batch_put(c, TK, keys, (const void *const *)vals, lens, st), TK);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    long long fallbacks = kvt_server_counter(c, "client_shm_fallbacks");
    long long shm_gets = kvt_server_counter(c, "requests_shm_get");

    for (int i = 0; i < TK; i++)
        memset(bufs[i], 0xab, TCAP);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    uint64_t t0 = kvs_now_ms();
    assert_int_equal(kvs_batch_get(c, TK, keys, bufs, caps, got), 0);
    uint64_t took = kvs_now_ms() - t0;
    for (int i = 0; i < TK; i++)
        assert_int_equal(got[i], -ETIMEDOUT);
    assert_true(took >= 350 && took < 5000);
    for (int i = 0; i < TK; i++)
        assert_true(all_bytes(bufs[i], TCAP, 0xab));

    /* kvstored goes on: it copies the values into the region and answers, late. */
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    usleep(500 * 1000);
    for (int i = 0; i < TK; i++)
        assert_true(all_bytes(bufs[i], TCAP, 0xab)); /* nothing written after the timeout */
    assert_int_equal(kvt_server_counter(c, "requests_shm_get"), shm_gets + 1);

    /*
     * Its room came back: each of these needs half the region, so with the
     * timed-out run still held the second would find none and go through
     * the socket.
     */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < TK; i++)
            memset(bufs[i], 0, TCAP);
        assert_int_equal(kvs_batch_get(c, TK, keys, bufs, caps, got), TK);
        for (int i = 0; i < TK; i++) {
            unsigned version = 0;
            assert_int_equal(got[i], TLEN);
            assert_true(kvval_check(bufs[i], TLEN, names[i], &version));
            assert_int_equal(version, 1);
        }
    }
    assert_int_equal(kvt_server_counter(c, "client_shm_fallbacks"), fallbacks);
    assert_int_equal(kvt_server_counter(c, "requests_shm_get"), shm_gets + 1 + 4);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1); /* the same connection */
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    for (int i = 0; i < TK; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    kvs_close(c);
    kvt_server_stop(&s);
}

/* ---- many threads getting distinct values on one connection ---- */

enum { THREADS = 16, ROUNDS = 60, NK = 4, MAXLEN = 64 * 1024 };

struct worker {
    kvs_client *c;
    int id;
    unsigned seed;
    int failures; /* checks that did not hold (asserting off the main thread is not cmocka's) */
};

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

static size_t pick(unsigned *seed, size_t lo, size_t hi)
{
    return lo + (size_t)rand_r(seed) % (hi - lo + 1);
}

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

static void *worker_main(void *arg)
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
        vals[i] = malloc(MAXLEN);
        bufs[i] = malloc(MAXLEN);
        if (!vals[i] || !bufs[i]) w->failures++;
        caps[i] = MAXLEN;
        versions[i] = 0;
    }
    for (unsigned round = 1; round <= ROUNDS && !w->failures; round++) {
        /* A new version of some of the keys, of a new length (8 bytes at least: a version). */
        for (int i = 0; i < NK; i++) {
            if (versions[i] && pick(&w->seed, 0, 1)) continue;
            versions[i] = round;
            lens[i] = pick(&w->seed, 8, MAXLEN);
            kvval_fill(vals[i], lens[i], names[i], round);
            if (kvs_put(w->c, names[i], vals[i], lens[i]) != 0) w->failures++;
        }
        for (int i = 0; i < NK; i++)
            memset(bufs[i], 0, MAXLEN);
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
    assert_int_equal(kvt_server_start(&s, 0, "--memory 128M"), 0);
    setenv("KVSTORE_SHM_SIZE", "4M", 1); /* the ring goes round many times */
    kvs_client *c = kvs_open(s.addr);
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.c = c, .id = i, .seed = 777u + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    if (!kvt_over_rdma()) {
        assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
        assert_true(kvt_server_counter(c, "requests_shm_get") > THREADS * ROUNDS);
        assert_int_equal(kvt_server_counter(c, "shm_bad_ranges"), 0);
    }
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_out_get_leaves_buffers_and_room),
        cmocka_unit_test(test_threads_get_distinct_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

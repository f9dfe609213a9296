/*
 * test_shm_threads.c - the shared region's ring under threads (docs/shm.md
 * "The region"): 8 threads share one client and one connection over the
 * local socket with a small region (256 KiB), each with its own keys,
 * sending batch puts and gets (sync and async, 1 to 8 keys of 8 bytes to
 * 48 KiB), so runs are taken and given back out of order, the ring wraps,
 * and requests that find no room go through the socket. Every value read is
 * the one its thread last wrote. Runs under TSan (tests/threaded.txt).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
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

enum { THREADS = 8, ROUNDS = 150, MAXK = 8, MAXLEN = 48 * 1024 };

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

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char names[MAXK][32];
    const char *keys[MAXK];
    void *vals[MAXK], *bufs[MAXK];
    size_t lens[MAXK], caps[MAXK];
    int st[MAXK];
    ssize_t got[MAXK];
    for (int i = 0; i < MAXK; i++) {
        vals[i] = malloc(MAXLEN);
        bufs[i] = malloc(MAXLEN);
        if (!vals[i] || !bufs[i]) w->failures++;
        keys[i] = names[i];
    }
    for (unsigned round = 1; round <= ROUNDS && !w->failures; round++) {
        size_t n = pick(&w->seed, 1, MAXK);
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof(names[i]), "t%d-k%zu", w->id, pick(&w->seed, 0, 15));
            for (size_t j = 0; j < i; j++) /* one key once per batch */
                if (strcmp(names[i], names[j]) == 0) snprintf(names[i], 32, "t%d-u%zu", w->id, i);
            lens[i] = pick(&w->seed, 8, MAXLEN); /* 8 bytes at least: room for a version */
            kvval_fill(vals[i], lens[i], names[i], round);
            caps[i] = MAXLEN;
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
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    setenv("KVSTORE_SHM_SIZE", "256K", 1);
    kvs_client *c = kvs_open(s.addr); /* auto: the local socket, with a region */
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.c = c, .id = i, .seed = 1234u + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    assert_true(kvt_server_counter(c, "requests_shm_put") > 0);
    assert_true(kvt_server_counter(c, "requests_shm_get") > 0);
    assert_true(kvt_server_counter(c, "client_shm_fallbacks") > 0); /* the ring was full at times */
    assert_int_equal(kvt_server_counter(c, "shm_bad_ranges"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

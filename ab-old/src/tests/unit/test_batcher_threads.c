/*
 * test_batcher_threads.c - 64 threads calling one batcher at once, with
 * completions arriving out of order on another thread: every call gets its
 * own result, nothing deadlocks, no wake-up is lost, counters are exact.
 * Run under ThreadSanitizer in CI (tests/threaded.txt).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "fake_backend.h"

#define THREADS 64
#define ROUNDS  60

struct worker {
    struct kvb_batcher *b;
    int id;
    int failures;
};

/* Each thread writes its own keys, reads them back, and probes a missing key. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32], val[64], buf[64];
    for (int r = 0; r < ROUNDS; r++) {
        snprintf(key, sizeof(key), "t%d-k%d", w->id, r % 7);
        int len = snprintf(val, sizeof(val), "value-%d-%d", w->id, r);
        if (r % 3 == 0) {
            struct kvb_op *op;
            if (kvb_put_async(w->b, key, val, (size_t)len, &op) != 0 || kvb_wait(op) != 0)
                w->failures++;
        } else if (kvb_put(w->b, key, val, (size_t)len) != 0) {
            w->failures++;
        }
        ssize_t n = kvb_get(w->b, key, buf, sizeof(buf));
        if (n != len || memcmp(buf, val, (size_t)len) != 0) w->failures++;
        snprintf(key, sizeof(key), "missing-%d", w->id);
        if (kvb_exists(w->b, key) != 0) w->failures++;
        if (kvb_get(w->b, key, buf, sizeof(buf)) != -ENOENT) w->failures++;
    }
    return NULL;
}

static void run(enum kvb_batch_policy pol, int writeback)
{
    struct fake f;
    struct kvb_stats st;
    struct worker w[THREADS];
    pthread_t t[THREADS];
    struct kvb_params p = {pol, 20000, 16, 1 << 20, 2, writeback, 1 << 20};
    fake_init(&f, FAKE_THREAD);
    kvb_stats_init(&st);
    struct kvb_backend be = fake_backend(&f);
    struct kvb_batcher *b = kvb_batcher_create(&p, &be, &st);
    assert_non_null(b);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){b, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(kvb_flush(b, KVB_FLUSH_EXPLICIT, 10ull * 1000000000ull), 0);
    assert_int_equal(atomic_load(&st.ops[KVB_OP_PUT]), THREADS * ROUNDS);
    assert_int_equal(atomic_load(&st.ops[KVB_OP_GET]), THREADS * ROUNDS * 2);
    assert_int_equal(atomic_load(&st.ops[KVB_OP_EXISTS]), THREADS * ROUNDS);
    assert_int_equal(atomic_load(&st.queued_ops), 0);
    assert_int_equal(atomic_load(&st.inflight_batches), 0);
    assert_int_equal(kvb_batcher_destroy(b, 10ull * 1000000000ull), 0);
    fake_fini(&f);
}

static void test_adaptive_64_threads(void **state)
{
    (void)state;
    run(KVB_BATCH_ADAPTIVE, 0);
}

static void test_fixed_64_threads(void **state)
{
    (void)state;
    run(KVB_BATCH_FIXED, 0);
}

static void test_writeback_64_threads(void **state)
{
    (void)state;
    run(KVB_BATCH_ADAPTIVE, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_64_threads),
        cmocka_unit_test(test_fixed_64_threads),
        cmocka_unit_test(test_writeback_64_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

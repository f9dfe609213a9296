/*
 * test_batcher_sizing.c - who sends and when, against the fake backend:
 * adaptive sizing with several batches in flight (a batch goes once every
 * expected caller joined it, not as soon as a slot frees), the window as the
 * fallback for a batch formed while no slot was free, the synchronous opener
 * of a batch acting as its window timer, and a completion handing the next
 * batch to one of its woken synchronous callers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "fake_backend.h"

/* Waits (bounded: 5 s) until n ops are queued (accepted, not sent). */
static void wait_queued(struct fake_env *e, int64_t n)
{
    for (int i = 0; i < 5000 && atomic_load(&e->st.queued_ops) < n; i++)
        fake_nap();
    assert_int_equal(atomic_load(&e->st.queued_ops), n);
}

static size_t last_n(struct fake_env *e)
{
    pthread_mutex_lock(&e->f.lock);
    size_t n = e->f.last_n;
    pthread_mutex_unlock(&e->f.lock);
    return n;
}

static void test_free_slot_waits_for_every_expected_caller(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[5];
    static const char *keys[] = {"a", "b", "c", "d", "e"};
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 64, 1 << 20, 2));
    /* a: idle, sent at once; b: a slot is free and b is everyone seen so far: sent. */
    assert_int_equal(kvb_put_async(e.b, keys[0], "v", 1, &ops[0]), 0);
    assert_int_equal(kvb_put_async(e.b, keys[1], "v", 1, &ops[1]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    /* c, d: both slots busy, they form a batch; 4 ops are now active. */
    assert_int_equal(kvb_put_async(e.b, keys[2], "v", 1, &ops[2]), 0);
    assert_int_equal(kvb_put_async(e.b, keys[3], "v", 1, &ops[3]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    /* a completes: a slot is free, but a's caller is expected back, so {c, d} waits. */
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_wait(ops[0]), 0);
    fake_nap();
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    /* e: every expected caller is in: {c, d, e} goes at once, no window wait. */
    assert_int_equal(kvb_put_async(e.b, keys[4], "v", 1, &ops[4]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 3);
    assert_int_equal(last_n(&e), 3);
    while (fake_complete(&e.f, 0))
        ;
    for (int i = 1; i < 5; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_IDLE]), 3);
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_WINDOW]), 0);
    fake_env_down(&e);
}

static void test_window_sends_when_expected_callers_do_not_come(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[4];
    static const char *keys[] = {"a", "b", "c", "d"};
    (void)state;
    fake_env_up(&e, FAKE_MANUAL,
                fake_params(KVB_BATCH_ADAPTIVE, 2000000 /* 2 ms */, 64, 1 << 20, 2));
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2); /* {c, d} formed with no slot free */
    assert_true(fake_complete(&e.f, 0));
    /* a's caller never comes back: the window (armed by the completion) sends {c, d}. */
    fake_wait_submitted(&e, 3);
    assert_int_equal(last_n(&e), 2);
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_WINDOW]), 1);
    while (fake_complete(&e.f, 0))
        ;
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    fake_env_down(&e);
}

static void test_sync_opener_is_the_window_timer(void **state)
{
    struct fake_env e;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_FIXED, 2000000 /* 2 ms */, 64, 1 << 20, 4));
    /* Nothing else arrives: the caller itself seals and sends its batch at the window. */
    assert_int_equal(kvb_put(e.b, "k", "v", 1), 0);
    assert_int_equal(kvb_put(e.b, "k2", "v", 1), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_WINDOW]), 2);
    char buf[4];
    assert_int_equal(kvb_get(e.b, "k2", buf, sizeof(buf)), 1);
    fake_env_down(&e);
}

struct caller {
    struct kvb_batcher *b;
    char key[16];
    int rc;
    pthread_t t;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    c->rc = kvb_put(c->b, c->key, "v", 1);
    return NULL;
}

static void start_callers(struct fake_env *e, struct caller *c, int first, int n)
{
    for (int i = first; i < first + n; i++) {
        c[i].b = e->b;
        c[i].rc = 1;
        snprintf(c[i].key, sizeof(c[i].key), "sync%d", i);
        assert_int_equal(pthread_create(&c[i].t, NULL, caller_main, &c[i]), 0);
    }
}

static void test_completion_sends_next_batch(void **state)
{
    struct fake_env e;
    struct kvb_op *op;
    struct caller c[5];
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 64, 1 << 20, 1));
    assert_int_equal(kvb_put_async(e.b, "x", "v", 1, &op), 0); /* holds the only slot */
    start_callers(&e, c, 0, 3);
    wait_queued(&e, 3);
    assert_true(fake_complete(&e.f, 0)); /* x had no synchronous caller: the flusher sends */
    fake_wait_submitted(&e, 2);
    assert_int_equal(last_n(&e), 3);
    assert_int_equal(kvb_wait(op), 0);
    start_callers(&e, c, 3, 2);
    wait_queued(&e, 2);
    /* This completion (not inside a submit) wakes 3 callers, then sends the next batch itself. */
    assert_true(fake_complete(&e.f, 0));
    fake_wait_submitted(&e, 3);
    assert_int_equal(last_n(&e), 2);
    for (int i = 0; i < 500 && !fake_complete(&e.f, 0); i++)
        fake_nap();
    for (int i = 0; i < 5; i++) {
        assert_int_equal(pthread_join(c[i].t, NULL), 0);
        assert_int_equal(c[i].rc, 0);
    }
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_IDLE]), 3);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 6);
    fake_env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_slot_waits_for_every_expected_caller),
        cmocka_unit_test(test_window_sends_when_expected_callers_do_not_come),
        cmocka_unit_test(test_sync_opener_is_the_window_timer),
        cmocka_unit_test(test_completion_sends_next_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_batcher_direct.c - when a synchronous op is its caller's own
 * single-key call and when it joins a batch, against the fake backend:
 * an op whose batch would be sent alone at once goes direct (also beside a
 * batch in flight; never under fixed), an op that can expect company waits
 * for it unless the window is 0; and policy auto: its setting in the stats,
 * a single caller's ops all direct, the batcher taking the controller's
 * choices.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "controller.h"
#include "fake_backend.h"

struct caller {
    struct kvb_batcher *b;
    const char *key;
    int rc;
    _Atomic bool done;
    pthread_t t;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    c->rc = kvb_put(c->b, c->key, "v", 1);
    atomic_store(&c->done, true);
    return NULL;
}

static void start_caller(struct fake_env *e, struct caller *c, const char *key)
{
    c->b = e->b;
    c->key = key;
    c->rc = 1;
    atomic_init(&c->done, false);
    assert_int_equal(pthread_create(&c->t, NULL, caller_main, c), 0);
}

/* Waits (bounded: 5 s) until c has returned or the fake saw `calls` batch or single calls. */
static void wait_done_or_sent(struct fake_env *e, struct caller *c, int calls)
{
    for (int i = 0; i < 5000 && !atomic_load(&c->done) &&
                    atomic_load(&e->f.submitted) + atomic_load(&e->f.one_calls) < calls;
         i++)
        fake_nap();
}

/* Completes every manual batch until c has returned (bounded), then joins it. */
static void finish(struct fake_env *e, struct caller *c)
{
    for (int i = 0; i < 5000 && !atomic_load(&c->done); i++)
        if (!fake_complete(&e->f, 0)) fake_nap();
    assert_int_equal(pthread_join(c->t, NULL), 0);
}

/*
 * An async put is in flight (a slot taken); a synchronous put of one more
 * caller - everyone seen so far is in - would be a batch of one sent at
 * once: it is the caller's own single-key call instead, and returns without
 * waiting for the batch in flight. Fixed policy keeps it in a batch.
 */
static void test_lone_op_goes_direct_beside_a_batch_in_flight(void **state)
{
    static const enum kvb_batch_policy pols[] = {KVB_BATCH_ADAPTIVE, KVB_BATCH_FIXED};
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct fake_env e;
        struct kvb_op *op;
        struct caller c;
        bool direct = pols[p] != KVB_BATCH_FIXED;
        fake_env_up(&e, FAKE_MANUAL,
                    fake_params(pols[p], direct ? FAKE_LONG_WINDOW : 0, 64, 1 << 20, 4));
        assert_int_equal(kvb_put_async(e.b, "a", "v", 1, &op), 0);
        if (!direct) fake_wait_submitted(&e, 1); /* fixed: at its (zero) window */
        assert_int_equal(atomic_load(&e.f.submitted), 1);
        start_caller(&e, &c, "b");
        wait_done_or_sent(&e, &c, 2);
        assert_int_equal(atomic_load(&e.f.one_calls), direct ? 1 : 0);
        assert_int_equal(atomic_load(&e.f.submitted), direct ? 1 : 2);
        finish(&e, &c);
        assert_int_equal(c.rc, 0);
        while (fake_complete(&e.f, 0))
            ;
        assert_int_equal(kvb_wait(op), 0);
        assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_DIRECT]), direct ? 1 : 0);
        assert_int_equal(atomic_load(&e.st.batches[KVB_OP_PUT]), 2);
        assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 2);
        fake_env_down(&e);
    }
}

/*
 * Three async puts were in flight at once (peak 3); two completed. A
 * synchronous put now can expect a caller more: with a window it opens a
 * batch and waits for that company up to the window, then goes as a batch;
 * with a window of 0 no company is worth waiting for, and it goes direct.
 */
static void test_op_waits_for_expected_company_unless_window_is_zero(void **state)
{
    static const uint64_t windows[] = {2000000 /* 2 ms */, 0};
    (void)state;
    for (int w = 0; w < 2; w++) {
        struct fake_env e;
        struct kvb_op *op[3];
        struct caller c;
        fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_ADAPTIVE, windows[w], 64, 1 << 20, 4));
        for (int i = 0; i < 3; i++)
            assert_int_equal(kvb_put_async(e.b,
                                           i == 0   ? "a"
                                           : i == 1 ? "b"
                                                    : "c",
                                           "v", 1, &op[i]),
                             0);
        assert_int_equal(atomic_load(&e.f.submitted), 3);
        for (int i = 0; i < 2; i++) {
            assert_true(fake_complete(&e.f, 0));
            assert_int_equal(kvb_wait(op[i]), 0);
        }
        start_caller(&e, &c, "d");
        wait_done_or_sent(&e, &c, 4);
        finish(&e, &c);
        assert_int_equal(c.rc, 0);
        if (windows[w]) {
            assert_int_equal(atomic_load(&e.f.one_calls), 0);
            assert_int_equal(atomic_load(&e.f.submitted), 4);
            assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_WINDOW]), 1);
        } else {
            assert_int_equal(atomic_load(&e.f.one_calls), 1);
            assert_int_equal(atomic_load(&e.f.submitted), 3);
        }
        while (fake_complete(&e.f, 0))
            ;
        assert_int_equal(kvb_wait(op[2]), 0);
        fake_env_down(&e);
    }
}

/* Auto shows where its controller starts (pass-through), and a single caller's ops all go direct.
 */
static void test_auto_starts_without_a_window(void **state)
{
    struct fake_env e;
    (void)state;
    struct kvb_params p = fake_params(KVB_BATCH_AUTO, 50000, 64, 1 << 20, 4);
    fake_env_up(&e, FAKE_SYNC, p);
    assert_int_equal(atomic_load(&e.st.batcher[0].levels), 5);
    assert_int_equal(atomic_load(&e.st.batcher[0].level), 0);
    assert_int_equal(atomic_load(&e.st.batcher[0].window_ns), 0);
    assert_int_equal(atomic_load(&e.st.batcher[0].max_inflight), KVB_CTL_PASS_INFLIGHT);
    assert_int_equal(atomic_load(&e.st.batcher[0].reason), KVB_CTL_START);
    for (int i = 0; i < 100; i++)
        assert_int_equal(kvb_put(e.b, "k", "v", 1), 0);
    assert_int_equal(atomic_load(&e.f.one_calls), 100);
    assert_int_equal(atomic_load(&e.f.submitted), 0);
    fake_env_down(&e);
    /* Adaptive shows its fixed setting and no controller. */
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_ADAPTIVE, 20000, 64, 1 << 20, 2));
    assert_int_equal(atomic_load(&e.st.batcher[0].levels), 0);
    assert_int_equal(atomic_load(&e.st.batcher[0].window_ns), 20000);
    assert_int_equal(atomic_load(&e.st.batcher[0].max_inflight), 2);
    fake_env_down(&e);
}

/*
 * Two batchers counting into one struct kvb_stats (two clients of a
 * process) each show their own setting, in their own slot; a destroyed
 * batcher's slot is free again for the next one.
 */
static void test_each_batcher_shows_its_own_setting(void **state)
{
    struct fake_env e;
    struct fake f2;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_ADAPTIVE, 20000, 64, 1 << 20, 2));
    fake_init(&f2, FAKE_SYNC);
    struct kvb_backend be2 = fake_backend(&f2);
    struct kvb_params p2 = fake_params(KVB_BATCH_AUTO, 50000, 64, 1 << 20, 4);
    struct kvb_batcher *b2 = kvb_batcher_create(&p2, &be2, &e.st);
    assert_non_null(b2);
    assert_int_equal(atomic_load(&e.st.batchers), 2);
    assert_int_equal(atomic_load(&e.st.batcher[0].used), 1);
    assert_int_equal(atomic_load(&e.st.batcher[0].window_ns), 20000);
    assert_int_equal(atomic_load(&e.st.batcher[0].max_inflight), 2);
    assert_int_equal(atomic_load(&e.st.batcher[0].levels), 0);
    assert_int_equal(atomic_load(&e.st.batcher[1].used), 1);
    assert_int_equal(atomic_load(&e.st.batcher[1].window_ns), 0); /* auto's start: pass-through */
    assert_int_equal(atomic_load(&e.st.batcher[1].max_inflight), KVB_CTL_PASS_INFLIGHT);
    assert_int_equal(atomic_load(&e.st.batcher[1].levels), 5);
    fake_env_down(&e);
    assert_int_equal(atomic_load(&e.st.batcher[0].used), 0);
    assert_int_equal(atomic_load(&e.st.batchers), 1);
    struct kvb_batcher *b3 = kvb_batcher_create(&p2, &be2, &e.st);
    assert_non_null(b3);
    assert_int_equal(atomic_load(&e.st.batcher[0].used), 1); /* the lowest free slot */
    assert_int_equal(atomic_load(&e.st.batcher[0].levels), 5);
    assert_int_equal(kvb_batcher_destroy(b3, FAKE_LONG_WINDOW), 0);
    assert_int_equal(kvb_batcher_destroy(b2, FAKE_LONG_WINDOW), 0);
    assert_int_equal(atomic_load(&e.st.batchers), 0);
    fake_fini(&f2);
}

struct looper {
    struct kvb_batcher *b;
    _Atomic bool *stop;
    char key[16];
    pthread_t t;
};

static void *looper_main(void *arg)
{
    struct looper *l = arg;
    while (!atomic_load(l->stop))
        if (kvb_put(l->b, l->key, "v", 1) != 0) break;
    return NULL;
}

/*
 * Two callers keep putting: once an epoch ends, the controller walks, and
 * the batcher takes its choice - the setting in the stats is a level of the
 * ladder and the level it names. (The test waits for the first change,
 * bounded; it asserts nothing about time.)
 */
static void test_auto_takes_the_controllers_choice(void **state)
{
    struct fake_env e;
    struct looper l[2];
    _Atomic bool stop = false;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_AUTO, 50000, 64, 1 << 20, 4));
    for (int i = 0; i < 2; i++) {
        l[i].b = e.b;
        l[i].stop = &stop;
        snprintf(l[i].key, sizeof(l[i].key), "loop%d", i);
        assert_int_equal(pthread_create(&l[i].t, NULL, looper_main, &l[i]), 0);
    }
    /* the first change is to the start level (reason "start"); then the walk's own */
    for (int i = 0; i < 5000 && (atomic_load(&e.st.tune_changes) == 0 ||
                                 atomic_load(&e.st.batcher[0].reason) == KVB_CTL_START);
         i++)
        fake_nap();
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(l[i].t, NULL), 0);
    assert_true(atomic_load(&e.st.tune_changes) >= 1);
    struct kvb_ctl ladder;
    kvb_ctl_init(&ladder, 50000, 4, 0, 0);
    int64_t lvl = atomic_load(&e.st.batcher[0].level);
    assert_true(lvl >= 0 && lvl < (int64_t)ladder.nlevels);
    assert_int_equal(atomic_load(&e.st.batcher[0].window_ns), ladder.level[lvl].window_ns);
    assert_int_equal(atomic_load(&e.st.batcher[0].max_inflight), ladder.level[lvl].inflight);
    assert_int_not_equal(atomic_load(&e.st.batcher[0].reason), KVB_CTL_START);
    fake_env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lone_op_goes_direct_beside_a_batch_in_flight),
        cmocka_unit_test(test_op_waits_for_expected_company_unless_window_is_zero),
        cmocka_unit_test(test_auto_starts_without_a_window),
        cmocka_unit_test(test_auto_takes_the_controllers_choice),
        cmocka_unit_test(test_each_batcher_shows_its_own_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

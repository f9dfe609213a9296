/*
 * test_batcher_calls.c - small synchronous batch calls merged into the
 * forming batches (kvb_batch_call): calls of several threads share one
 * batch and each caller gets exactly its own statuses; one call's keys are
 * never split over two batches; calls at max_ops / max_bytes, with a key
 * the batcher does not carry, or with a size probe are not merged (the
 * caller makes the real call); a merged call comes after the pending
 * write-behind puts of its keys; many threads, results checked per key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "fake_backend.h"

/* Pending batch i of the fake (FAKE_MANUAL), copied under its lock. */
static struct fake_batch pending(struct fake *f, int i)
{
    pthread_mutex_lock(&f->lock);
    assert_true(i < f->npending);
    struct fake_batch b = f->pending[i];
    pthread_mutex_unlock(&f->lock);
    return b;
}

/* Waits (bounded) until n ops are queued in the batcher. */
static void wait_queued(struct fake_env *e, int64_t n)
{
    for (int i = 0; i < 5000 && atomic_load(&e->st.queued_ops) < n; i++)
        fake_nap();
    assert_int_equal(atomic_load(&e->st.queued_ops), n);
}

/* One thread's batch put call of n keys (values: the keys themselves). */
struct caller {
    struct kvb_batcher *b;
    size_t n;
    const char *keys[8];
    int st[8];
    size_t nok;
    int merged;
};

static void *put_call_main(void *arg)
{
    struct caller *c = arg;
    const void *vals[8];
    size_t lens[8];
    for (size_t i = 0; i < c->n; i++) {
        vals[i] = c->keys[i];
        lens[i] = strlen(c->keys[i]);
    }
    c->merged = kvb_batch_call(c->b, KVB_OP_PUT, 0, c->n, c->keys, (void *const *)vals, lens, c->st,
                               NULL, &c->nok);
    return NULL;
}

static void test_small_calls_share_a_batch(void **state)
{
    struct fake_env e;
    pthread_t ta, tb;
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 4));
    struct caller a = {e.b, 3, {"a0", "a1", "err-a2"}, {0}, 0, 0};
    struct caller b = {e.b, 2, {"b0", "b1"}, {0}, 0, 0};
    assert_int_equal(pthread_create(&ta, NULL, put_call_main, &a), 0);
    wait_queued(&e, 3);
    assert_int_equal(pthread_create(&tb, NULL, put_call_main, &b), 0);
    wait_queued(&e, 5);
    assert_int_equal(atomic_load(&e.f.submitted), 0); /* both wait in the forming batch */
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT);
    fake_wait_submitted(&e, 1);
    assert_int_equal(pending(&e.f, 0).n, 5); /* one batch call for both */
    assert_true(fake_complete(&e.f, 0));
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.merged, 1);
    assert_int_equal(b.merged, 1);
    assert_int_equal(a.nok, 2);
    assert_int_equal(a.st[0], 0);
    assert_int_equal(a.st[1], 0);
    assert_int_equal(a.st[2], -EIO); /* its own key's failure, nobody else's */
    assert_int_equal(b.nok, 2);
    assert_int_equal(b.st[0], 0);
    assert_int_equal(b.st[1], 0);
    assert_int_equal(atomic_load(&e.f.one_calls), 0);
    fake_env_down(&e);
}

/* A call that would overflow the forming batch seals it and opens its own. */
static void test_a_call_is_never_split(void **state)
{
    struct fake_env e;
    pthread_t ta, tb;
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 4, 1 << 20, 4));
    struct caller a = {e.b, 3, {"x0", "x1", "x2"}, {0}, 0, 0};
    struct caller b = {e.b, 3, {"y0", "y1", "y2"}, {0}, 0, 0};
    assert_int_equal(pthread_create(&ta, NULL, put_call_main, &a), 0);
    wait_queued(&e, 3);
    assert_int_equal(pthread_create(&tb, NULL, put_call_main, &b), 0);
    fake_wait_submitted(&e, 1); /* x's batch sealed (max_ops) and sent */
    wait_queued(&e, 3);         /* y's three wait in their own batch */
    struct fake_batch first = pending(&e.f, 0);
    assert_int_equal(first.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(first.keys[i][0], 'x');
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT);
    fake_wait_submitted(&e, 2);
    struct fake_batch second = pending(&e.f, 1);
    assert_int_equal(second.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(second.keys[i][0], 'y');
    assert_true(fake_complete(&e.f, 0));
    assert_true(fake_complete(&e.f, 0));
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.nok, 3);
    assert_int_equal(b.nok, 3);
    fake_env_down(&e);
}

/* Calls the batcher does not take: the caller makes the real call (0), nothing is queued. */
static void test_calls_not_merged(void **state)
{
    struct fake_env e;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 4, 100, 4));
    const char *keys[4] = {"k0", "k1", "k2", "k3"};
    static char v[128];
    void *vals[4] = {v, v, v, v};
    size_t lens[4] = {1, 1, 1, 1}, big[2] = {60, 40}, none[1] = {0};
    int st[4];
    ssize_t res[4];
    size_t nok = 7;
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_PUT, 0, 4, keys, vals, lens, st, NULL, &nok), 0);
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_PUT, 0, 2, keys, vals, big, st, NULL, &nok), 0);
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_PUT, 0, 0, keys, vals, lens, st, NULL, &nok), 0);
    const char *bad[2] = {"ok", ""};
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_EXISTS, 0, 2, bad, NULL, NULL, st, NULL, &nok), 0);
    void *nobuf[1] = {NULL};
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_GET, 0, 1, keys, nobuf, none, NULL, res, &nok), 0);
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_GET, 0, 1, keys, vals, lens, NULL, NULL, &nok), 0);
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_PUT, 0, 1, keys, NULL, lens, st, NULL, &nok), 0);
    assert_int_equal(nok, 7);
    assert_int_equal(atomic_load(&e.f.submitted), 0);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 0);
    fake_env_down(&e);
}

/* Gets and exists: each key's result as the batch call gives it. */
static void test_get_and_exists_results(void **state)
{
    struct fake_env e;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 64, 1 << 20, 4));
    assert_int_equal(kvb_put(e.b, "g1", "hello", 5), 0);
    const char *keys[3] = {"g1", "missing", "g1"};
    char b0[16], b1[16], b2[2] = {'z', 'z'};
    void *bufs[3] = {b0, b1, b2};
    size_t caps[3] = {sizeof(b0), sizeof(b1), sizeof(b2)};
    ssize_t res[3];
    size_t nok = 0;
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_GET, 0, 3, keys, bufs, caps, NULL, res, &nok), 1);
    assert_int_equal(nok, 1);
    assert_int_equal(res[0], 5);
    assert_memory_equal(b0, "hello", 5);
    assert_int_equal(res[1], -ENOENT);
    assert_int_equal(res[2], -ERANGE);
    assert_memory_equal(b2, "zz", 2);
    const char *ek[3] = {"g1", "missing", "err-x"};
    int er[3];
    assert_int_equal(kvb_batch_call(e.b, KVB_OP_EXISTS, 0, 3, ek, NULL, NULL, er, NULL, &nok), 1);
    assert_int_equal(nok, 2);
    assert_int_equal(er[0], 1);
    assert_int_equal(er[1], 0);
    assert_int_equal(er[2], -EIO);
    fake_env_down(&e);
}

struct get_call {
    struct kvb_batcher *b;
    char buf[8];
    ssize_t res[1];
    size_t nok;
    atomic_int done;
};

static void *get_call_main(void *arg)
{
    struct get_call *g = arg;
    const char *keys[1] = {"wk"};
    void *bufs[1] = {g->buf};
    size_t caps[1] = {sizeof(g->buf)};
    assert_int_equal(
        kvb_batch_call(g->b, KVB_OP_GET, 0, 1, keys, bufs, caps, NULL, g->res, &g->nok), 1);
    atomic_store(&g->done, 1);
    return NULL;
}

/* A merged get comes after the pending write-behind put of its key, and sees it. */
static void test_after_pending_writeback_put(void **state)
{
    struct fake_env e;
    pthread_t t;
    (void)state;
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 4);
    p.writeback = 1;
    fake_env_up(&e, FAKE_MANUAL, p);
    assert_int_equal(kvb_put(e.b, "wk", "value", 5), 0); /* write-behind: queued */
    struct get_call g = {.b = e.b};
    assert_int_equal(pthread_create(&t, NULL, get_call_main, &g), 0);
    fake_wait_submitted(&e, 1); /* the get sent the put on its way */
    for (int i = 0; i < 20; i++)
        fake_nap();
    assert_int_equal(atomic_load(&g.done), 0); /* and waits for it */
    assert_int_equal(pending(&e.f, 0).kind, KVB_OP_PUT);
    assert_true(fake_complete(&e.f, 0));
    wait_queued(&e, 1); /* the get, in its batch now */
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT);
    fake_wait_submitted(&e, 2);
    assert_true(fake_complete(&e.f, 0));
    pthread_join(t, NULL);
    assert_int_equal(g.res[0], 5);
    assert_memory_equal(g.buf, "value", 5);
    fake_env_down(&e);
}

/* Many threads of small put and get calls, completions out of order: every result is its own. */
#define THREADS 8
#define ROUNDS  60

static void *round_trips_main(void *arg)
{
    struct kvb_batcher *b = arg;
    static atomic_int next_id;
    int id = atomic_fetch_add(&next_id, 1);
    for (int r = 0; r < ROUNDS; r++) {
        char names[3][32], got[3][32];
        const char *keys[3];
        const void *vals[3];
        void *bufs[3];
        size_t lens[3], caps[3], nok = 0;
        int st[3];
        ssize_t res[3];
        for (int i = 0; i < 3; i++) {
            snprintf(names[i], sizeof(names[i]), "%s%d-%d-%d", i == 2 && r % 5 == 0 ? "err-" : "",
                     id, r, i);
            keys[i] = names[i];
            vals[i] = names[i];
            lens[i] = strlen(names[i]);
            bufs[i] = got[i];
            caps[i] = sizeof(got[i]);
        }
        assert_int_equal(
            kvb_batch_call(b, KVB_OP_PUT, 0, 3, keys, (void *const *)vals, lens, st, NULL, &nok),
            1);
        assert_int_equal(nok, r % 5 == 0 ? 2 : 3);
        assert_int_equal(kvb_batch_call(b, KVB_OP_GET, 0, 3, keys, bufs, caps, NULL, res, &nok), 1);
        for (int i = 0; i < 3; i++) {
            if (i == 2 && r % 5 == 0) {
                assert_int_equal(st[i], -EIO);
                assert_int_equal(res[i], -EIO);
                continue;
            }
            assert_int_equal(st[i], 0);
            assert_int_equal(res[i], (ssize_t)lens[i]);
            assert_memory_equal(got[i], names[i], lens[i]);
        }
    }
    return NULL;
}

static void test_many_threads_own_results(void **state)
{
    struct fake_env e;
    pthread_t t[THREADS];
    (void)state;
    fake_env_up(&e, FAKE_THREAD, fake_params(KVB_BATCH_ADAPTIVE, 200000, 64, 1 << 20, 2));
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, round_trips_main, e.b), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), THREADS * ROUNDS * 3);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_GET]), THREADS * ROUNDS * 3);
    printf("# %d calls of 3 keys: %llu put batches\n", THREADS * ROUNDS,
           (unsigned long long)atomic_load(&e.st.batches[KVB_OP_PUT]));
    assert_true(atomic_load(&e.st.batches[KVB_OP_PUT]) <= THREADS * ROUNDS);
    fake_env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_calls_share_a_batch),
        cmocka_unit_test(test_a_call_is_never_split),
        cmocka_unit_test(test_calls_not_merged),
        cmocka_unit_test(test_get_and_exists_results),
        cmocka_unit_test(test_after_pending_writeback_put),
        cmocka_unit_test(test_many_threads_own_results),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

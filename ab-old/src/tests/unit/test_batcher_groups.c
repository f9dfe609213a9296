/*
 * test_batcher_groups.c - what the batcher does for the Mooncake backend
 * beyond kvs_put: put groups (kvb_put_group: puts of two groups never share
 * a batch, each batch carries its group to the backend, write-behind order
 * holds across groups), and a get that does not fit the write-behind copy,
 * answered by the store rather than by the copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "fake_backend.h"

static struct kvb_params writeback_params(enum kvb_batch_policy pol, uint32_t max_inflight)
{
    struct kvb_params p = fake_params(pol, FAKE_LONG_WINDOW, 64, 1 << 20, max_inflight);
    p.writeback = 1;
    p.writeback_bytes = 1 << 20;
    return p;
}

/* Pending batch i of the fake (FAKE_MANUAL), copied under its lock. */
static struct fake_batch pending(struct fake *f, int i)
{
    pthread_mutex_lock(&f->lock);
    assert_true(i < f->npending);
    struct fake_batch b = f->pending[i];
    pthread_mutex_unlock(&f->lock);
    return b;
}

static void test_groups_never_share_a_batch(void **state)
{
    struct fake_env e;
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, writeback_params(KVB_BATCH_FIXED, 4));
    assert_int_equal(kvb_put_group(e.b, 1, "a", "1", 1), 0);
    assert_int_equal(kvb_put_group(e.b, 1, "b", "2", 1), 0);
    assert_int_equal(kvb_put_group(e.b, 2, "c", "3", 1), 0); /* seals a+b */
    assert_int_equal(kvb_put_group(e.b, 1, "d", "4", 1), 0); /* seals c */
    assert_int_equal(kvb_put(e.b, "e", "5", 1), 0);          /* group 0: seals d */
    assert_int_equal(atomic_load(&e.st.flushes[KVB_FLUSH_GROUP]), 3);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT); /* sends all four */
    fake_wait_submitted(&e, 4);
    static const unsigned groups[] = {1, 2, 1, 0};
    static const size_t sizes[] = {2, 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        struct fake_batch b = pending(&e.f, i);
        assert_int_equal(b.kind, KVB_OP_PUT);
        assert_int_equal(b.group, groups[i]);
        assert_int_equal(b.n, sizes[i]);
    }
    fake_env_down(&e);
}

struct putter {
    struct kvb_batcher *b;
    unsigned group;
    const char *key, *val;
    atomic_int done;
};

static void *putter_main(void *arg)
{
    struct putter *p = arg;
    assert_int_equal(kvb_put_group(p->b, p->group, p->key, p->val, strlen(p->val)), 0);
    atomic_store(&p->done, 1);
    return NULL;
}

/* A write-behind put of a key in another group waits for the older one: never two in flight. */
static void test_writeback_order_holds_across_groups(void **state)
{
    struct fake_env e;
    pthread_t t;
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, writeback_params(KVB_BATCH_FIXED, 4));
    assert_int_equal(kvb_put_group(e.b, 1, "k", "old", 3), 0);
    struct putter p = {e.b, 2, "k", "new", 0};
    assert_int_equal(pthread_create(&t, NULL, putter_main, &p), 0);
    fake_wait_submitted(&e, 1); /* the newer put sent the older one on its way */
    for (int i = 0; i < 20; i++)
        fake_nap();
    assert_int_equal(atomic_load(&p.done), 0); /* and waits for it */
    assert_int_equal(fake_npending(&e.f), 1);
    assert_true(fake_complete(&e.f, 0));
    pthread_join(t, NULL);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT);
    fake_wait_submitted(&e, 2);
    assert_int_equal(pending(&e.f, 0).group, 2);
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), 0);
    pthread_mutex_lock(&e.f.lock);
    int i = fake_find(&e.f, "k");
    assert_true(i >= 0);
    assert_memory_equal(e.f.vals[i], "new", 3);
    pthread_mutex_unlock(&e.f.lock);
    fake_env_down(&e);
}

struct getter {
    struct kvb_batcher *b;
    char buf[4];
    ssize_t r;
    atomic_int done;
};

static void *getter_main(void *arg)
{
    struct getter *g = arg;
    g->r = kvb_get(g->b, "wb", g->buf, sizeof(g->buf));
    atomic_store(&g->done, 1);
    return NULL;
}

/*
 * A get whose buffer is too small for the pending write-behind value is not
 * answered from the copy (the library's own status for that case is not
 * the batcher's to guess): it waits for the put and asks the store.
 */
static void test_writeback_copy_too_small_asks_the_store(void **state)
{
    struct fake_env e;
    pthread_t t;
    char big[16];
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, writeback_params(KVB_BATCH_ADAPTIVE, 1));
    assert_int_equal(kvb_put(e.b, "wb", "payload", 7), 0);
    fake_wait_submitted(&e, 1); /* adaptive, idle: on its way at once */
    assert_int_equal(kvb_get(e.b, "wb", big, sizeof(big)), 7); /* fits: the copy answers */
    assert_int_equal(atomic_load(&e.f.one_calls), 0);
    struct getter g = {.b = e.b};
    assert_int_equal(pthread_create(&t, NULL, getter_main, &g), 0);
    for (int i = 0; i < 20; i++)
        fake_nap();
    assert_int_equal(atomic_load(&g.done), 0);
    assert_true(fake_complete(&e.f, 0));
    pthread_join(t, NULL);
    assert_int_equal(g.r, -ERANGE);                   /* the fake's answer */
    assert_int_equal(atomic_load(&e.f.one_calls), 1); /* asked of the store (idle: direct) */
    fake_env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_never_share_a_batch),
        cmocka_unit_test(test_writeback_order_holds_across_groups),
        cmocka_unit_test(test_writeback_copy_too_small_asks_the_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

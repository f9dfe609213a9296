/*
 * test_batcher.c - the window batcher against a fake batch backend: each
 * flush trigger, adaptive vs fixed, the in-flight bound, per-key order,
 * write-behind limits and errors, error fan-out, refused batches.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "fake_backend.h"

static uint64_t flushes(struct fake_env *e, enum kvb_flush_reason r)
{
    return atomic_load(&e->st.flushes[r]);
}

static void test_adaptive_idle_sends_at_once(void **state)
{
    struct fake_env e;
    struct kvb_op *op;
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 64, 1 << 20, 1));
    assert_int_equal(kvb_put_async(e.b, "k1", "v", 1, &op), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1); /* sent by the caller, no window wait */
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_wait(op), 0);
    assert_int_equal(flushes(&e, KVB_FLUSH_IDLE), 1);
    fake_env_down(&e);
}

static void test_adaptive_forms_next_batch_while_one_travels(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[5];
    static const char *keys[] = {"k0", "k1", "k2", "k3", "k4"};
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_ADAPTIVE, FAKE_LONG_WINDOW, 64, 1 << 20, 1));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1); /* the other 4 wait for the first */
    assert_true(fake_complete(&e.f, 0));
    fake_wait_submitted(&e, 2); /* completion lets the formed batch go */
    pthread_mutex_lock(&e.f.lock);
    assert_int_equal(e.f.last_n, 4);
    pthread_mutex_unlock(&e.f.lock);
    assert_true(fake_complete(&e.f, 0));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    assert_int_equal(flushes(&e, KVB_FLUSH_IDLE), 2);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 5);
    assert_int_equal(atomic_load(&e.st.batches[KVB_OP_PUT]), 2);
    fake_env_down(&e);
}

static void test_fixed_waits_for_window(void **state)
{
    struct fake_env e;
    struct kvb_op *op;
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_FIXED, 2000000 /* 2 ms */, 64, 1 << 20, 4));
    assert_int_equal(kvb_put_async(e.b, "k", "v", 1, &op), 0);
    assert_int_equal(kvb_wait(op), 0); /* the flusher's timer sent it */
    assert_int_equal(flushes(&e, KVB_FLUSH_WINDOW), 1);
    assert_int_equal(flushes(&e, KVB_FLUSH_IDLE), 0);
    fake_env_down(&e);
}

static void test_max_ops_flushes(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[5];
    static const char *keys[] = {"a", "b", "c", "d", "e"};
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 4, 1 << 20, 4));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1);
    assert_int_equal(e.f.last_n, 4);
    assert_int_equal(flushes(&e, KVB_FLUSH_MAX_OPS), 1);
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT); /* 5th is sent now */
    assert_int_equal(flushes(&e, KVB_FLUSH_EXPLICIT), 1);
    assert_true(fake_complete(&e.f, 0));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    fake_env_down(&e);
}

static void test_max_bytes_flushes_and_oversize_goes_alone(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[3];
    static char small[2048], big[8192];
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 4096, 8));
    assert_int_equal(kvb_put_async(e.b, "s1", small, sizeof(small), &ops[0]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 0);
    assert_int_equal(kvb_put_async(e.b, "s2", small, sizeof(small), &ops[1]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1);
    assert_int_equal(kvb_put_async(e.b, "big", big, sizeof(big), &ops[2]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    assert_int_equal(e.f.last_n, 1);
    assert_int_equal(flushes(&e, KVB_FLUSH_MAX_BYTES), 2);
    assert_true(fake_complete(&e.f, 1));
    assert_true(fake_complete(&e.f, 0));
    for (int i = 0; i < 3; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    fake_env_down(&e);
}

static void test_max_inflight_bounds_batches(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[4];
    static const char *keys[] = {"a", "b", "c", "d"};
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 1, 1 << 20, 2));
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2);
    assert_int_equal(atomic_load(&e.st.inflight_batches), 2);
    assert_int_equal(atomic_load(&e.st.queued_ops), 2);
    assert_true(fake_complete(&e.f, 1)); /* out of order */
    fake_wait_submitted(&e, 3);
    assert_int_equal(fake_npending(&e.f), 2);
    while (fake_complete(&e.f, 0) || atomic_load(&e.f.submitted) < 4)
        fake_nap();
    while (fake_complete(&e.f, 0))
        ;
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    fake_env_down(&e);
}

/*
 * A window that ends while every slot is busy must not cut the forming batch
 * short: sealing it would not send it sooner, only split it (async and
 * write-behind batches fell to 4-5 ops under load that way).
 */
static void test_window_end_with_slots_busy_does_not_split(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[5];
    static const char *keys[] = {"k0", "k1", "k2", "k3", "k4"};
    static char fill[4095];
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, 1000000 /* 1 ms */, 64, 4096, 1));
    /* k0 opens a batch (the flusher's timer is armed for it), k1 fills it: it goes. */
    assert_int_equal(kvb_put_async(e.b, keys[0], "v", 1, &ops[0]), 0);
    assert_int_equal(kvb_put_async(e.b, keys[1], fill, sizeof(fill), &ops[1]), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1);
    for (int i = 2; i < 5; i++) {
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
        for (int j = 0; j < 3; j++)
            fake_nap(); /* windows end while the one slot stays busy */
    }
    assert_int_equal(atomic_load(&e.f.submitted), 1);
    assert_true(fake_complete(&e.f, 0));
    fake_wait_submitted(&e, 2); /* the completion seals and sends the rest */
    pthread_mutex_lock(&e.f.lock);
    assert_int_equal(e.f.last_n, 3);
    pthread_mutex_unlock(&e.f.lock);
    assert_true(fake_complete(&e.f, 0));
    for (int i = 0; i < 5; i++)
        assert_int_equal(kvb_wait(ops[i]), 0);
    assert_int_equal(flushes(&e, KVB_FLUSH_MAX_BYTES), 1);
    assert_int_equal(flushes(&e, KVB_FLUSH_WINDOW), 1);
    assert_int_equal(atomic_load(&e.st.batches[KVB_OP_PUT]), 2);
    fake_env_down(&e);
}

static void test_get_after_async_put_sees_it(void **state)
{
    struct fake_env e;
    struct kvb_op *p1, *p2;
    char buf[16];
    (void)state;
    /* Completions on another thread, newest first: order must come from the batcher. */
    fake_env_up(&e, FAKE_THREAD, fake_params(KVB_BATCH_ADAPTIVE, 1000000, 64, 1 << 20, 4));
    for (int round = 0; round < 50; round++) {
        assert_int_equal(kvb_put_async(e.b, "key", "one", 3, &p1), 0);
        assert_int_equal(kvb_put_async(e.b, "key", "two!", 4, &p2), 0);
        ssize_t n = kvb_get(e.b, "key", buf, sizeof(buf));
        assert_int_equal(n, 4);
        assert_memory_equal(buf, "two!", 4);
        assert_int_equal(kvb_wait(p1), 0);
        assert_int_equal(kvb_wait(p2), 0);
        assert_int_equal(kvb_exists(e.b, "key"), 1);
    }
    fake_env_down(&e);
}

static void test_get_semantics(void **state)
{
    struct fake_env e;
    char buf[8];
    (void)state;
    fake_env_up(&e, FAKE_THREAD, fake_params(KVB_BATCH_ADAPTIVE, 50000, 64, 1 << 20, 2));
    assert_int_equal(kvb_put(e.b, "k", "hello", 5), 0);
    assert_int_equal(kvb_get(e.b, "k", NULL, 0), 5); /* size probe */
    assert_int_equal(kvb_get(e.b, "k", buf, 4), -ERANGE);
    assert_int_equal(kvb_get(e.b, "k", buf, sizeof(buf)), 5);
    assert_int_equal(kvb_get(e.b, "missing", buf, sizeof(buf)), -ENOENT);
    assert_int_equal(kvb_exists(e.b, "missing"), 0);
    assert_int_equal(kvb_exists(e.b, "k"), 1);
    assert_int_equal(kvb_put(e.b, "empty", "", 0), 0);
    assert_int_equal(kvb_get(e.b, "empty", buf, sizeof(buf)), 0);
    assert_int_equal(atomic_load(&e.st.errors[KVB_OP_GET][KVS_STATUS_C_ERANGE]), 1);
    assert_int_equal(atomic_load(&e.st.errors[KVB_OP_GET][KVS_STATUS_C_ENOENT]), 1);
    assert_int_equal(kvb_args_batchable(NULL, "v", 1), 0);
    assert_int_equal(kvb_args_batchable("", "v", 1), 0);
    assert_int_equal(kvb_args_batchable("k", NULL, 1), 0);
    assert_int_equal(kvb_args_batchable("k", NULL, 0), 1);
    char longkey[KVS_MAX_KEY + 2];
    memset(longkey, 'x', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(kvb_args_batchable(longkey, "v", 1), 0);
    longkey[KVS_MAX_KEY] = '\0';
    assert_int_equal(kvb_args_batchable(longkey, "v", 1), 1);
    fake_env_down(&e);
}

static void test_error_fanout_async(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[4];
    static const char *keys[] = {"ok-1", "err-2", "ok-3", "err-4"};
    char bufs[4][8];
    (void)state;
    fake_env_up(&e, FAKE_MANUAL, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 4, 1 << 20, 2));
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "val", 3, &ops[i]), 0);
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_wait(ops[0]), 0);
    assert_int_equal(kvb_wait(ops[1]), -EIO);
    assert_int_equal(kvb_wait(ops[2]), 0);
    assert_int_equal(kvb_wait(ops[3]), -EIO);
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvb_get_async(e.b, keys[i], bufs[i], sizeof(bufs[i]), &ops[i]), 0);
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_wait(ops[0]), 3);
    assert_int_equal(kvb_wait(ops[1]), -EIO);
    assert_int_equal(kvb_wait(ops[2]), 3);
    assert_int_equal(kvb_wait(ops[3]), -EIO);
    assert_int_equal(atomic_load(&e.st.errors[KVB_OP_PUT][KVS_STATUS_C_EIO]), 2);
    assert_int_equal(atomic_load(&e.st.errors[KVB_OP_GET][KVS_STATUS_C_EIO]), 2);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 4);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_GET]), 4);
    fake_env_down(&e);
}

static void test_refused_batch_falls_back_per_key(void **state)
{
    struct fake_env e;
    struct kvb_op *ops[3];
    static const char *keys[] = {"a", "err-b", "c"};
    (void)state;
    fake_env_up(&e, FAKE_SYNC, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 3, 1 << 20, 2));
    e.f.refuse_batches = true;
    for (int i = 0; i < 3; i++)
        assert_int_equal(kvb_put_async(e.b, keys[i], "v", 1, &ops[i]), 0);
    assert_int_equal(kvb_wait(ops[0]), 0);
    assert_int_equal(kvb_wait(ops[1]), -EIO);
    assert_int_equal(kvb_wait(ops[2]), 0);
    assert_int_equal(atomic_load(&e.f.one_calls), 3);
    fake_env_down(&e);
}

static void test_writeback_put_returns_at_once_and_is_readable(void **state)
{
    struct fake_env e;
    char buf[32];
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 2);
    (void)state;
    p.writeback = 1;
    p.writeback_bytes = 64 << 10;
    fake_env_up(&e, FAKE_MANUAL, p);
    assert_int_equal(kvb_put(e.b, "wb", "payload", 7), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 0); /* still queued */
    assert_int_equal(kvb_get(e.b, "wb", buf, sizeof(buf)), 7);
    assert_memory_equal(buf, "payload", 7);
    assert_int_equal(kvb_get(e.b, "wb", NULL, 0), 7);
    assert_int_equal(kvb_exists(e.b, "wb"), 1);
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 7);
    assert_int_equal(kvb_put(e.b, "err-wb", "x", 1), 0); /* fails later */
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT);
    assert_true(fake_complete(&e.f, 0));
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), -EIO);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), 0); /* reported once */
    assert_int_equal(atomic_load(&e.st.writeback_errors), 1);
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 0);
    pthread_mutex_lock(&e.f.lock);
    int i = fake_find(&e.f, "wb");
    assert_true(i >= 0);
    assert_memory_equal(e.f.vals[i], "payload", 7);
    pthread_mutex_unlock(&e.f.lock);
    fake_env_down(&e);
}

struct wb_writer {
    struct fake_env *e;
    int rc;
};

static void *wb_writer_main(void *arg)
{
    struct wb_writer *w = arg;
    static char val[16 << 10];
    char key[32];
    for (int i = 0; i < 8 && w->rc == 0; i++) {
        snprintf(key, sizeof(key), "wb-%d", i);
        w->rc = kvb_put(w->e->b, key, val, sizeof(val));
    }
    return NULL;
}

/* True if the fake store holds key (lock taken). */
static bool fake_has(struct fake *f, const char *key)
{
    pthread_mutex_lock(&f->lock);
    bool has = fake_find(f, key) >= 0;
    pthread_mutex_unlock(&f->lock);
    return has;
}

/*
 * kvb_order_after_puts (the step before a call the batcher does not carry):
 * a key with no pending put costs nothing (no batch sent); one with a
 * write-behind put waiting in its batch returns only once that put is
 * stored; NULL keys wait for every pending put; a failure stays for
 * kvb_flush. Fails if it returns before the put completed.
 */
static void test_order_after_puts_waits_for_the_keys_puts(void **state)
{
    struct fake_env e;
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 2);
    (void)state;
    p.writeback = 1;
    fake_env_up(&e, FAKE_THREAD, p);
    assert_int_equal(kvb_put(e.b, "ord-a", "A", 1), 0);
    assert_int_equal(kvb_put(e.b, "ord-b", "B", 1), 0);
    const char *other[] = {"ord-none", NULL};
    kvb_order_after_puts(e.b, 2, other);
    assert_int_equal(atomic_load(&e.f.submitted), 0); /* still forming: nothing to wait for */
    const char *mine[] = {"ord-none", "ord-a"};
    kvb_order_after_puts(e.b, 2, mine);
    assert_true(fake_has(&e.f, "ord-a"));
    assert_true(fake_has(&e.f, "ord-b")); /* it was in the same batch */
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 0);

    assert_int_equal(kvb_put(e.b, "ord-c", "C", 1), 0);
    assert_int_equal(kvb_put(e.b, "err-ord", "E", 1), 0); /* fails once sent */
    kvb_order_after_puts(e.b, 0, NULL);
    assert_true(fake_has(&e.f, "ord-c"));
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 0);
    assert_int_equal(atomic_load(&e.st.writeback_errors), 1);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), -EIO);
    fake_env_down(&e);
}

/*
 * An async get still waiting in its batch is not overtaken by a later change
 * of its key: kvb_order_after_ops (a remove, a batch put) returns only once
 * the get has completed, and a put of the key is queued only then, while
 * kvb_order_after_puts (a batch get) and another get do not wait for it.
 * Fails if the change can go before the get (the get would read "B").
 */
static void test_changes_wait_for_the_keys_async_gets(void **state)
{
    struct fake_env e;
    struct kvb_op *g, *g2, *g3, *put;
    char buf[4] = "", buf2[4] = "", buf3[4] = "";
    (void)state;
    fake_env_up(&e, FAKE_THREAD, fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 2));
    pthread_mutex_lock(&e.f.lock);
    assert_int_equal(fake_put_locked(&e.f, "og", "A", 1), 0);
    pthread_mutex_unlock(&e.f.lock);

    const char *keys[] = {"og-none", "og"};
    assert_int_equal(kvb_get_async(e.b, "og", buf, sizeof(buf), &g), 0);
    kvb_order_after_puts(e.b, 2, keys); /* a read: gets commute */
    kvb_order_after_ops(e.b, 1, keys);  /* another key */
    assert_int_equal(atomic_load(&e.f.submitted), 0);
    kvb_order_after_ops(e.b, 2, keys);
    assert_int_equal(atomic_load(&e.f.submitted), 1); /* the get's batch, completed */
    assert_int_equal(kvb_wait(g), 1);
    assert_memory_equal(buf, "A", 1);

    assert_int_equal(kvb_get_async(e.b, "og", buf2, sizeof(buf2), &g2), 0);
    assert_int_equal(kvb_get_async(e.b, "og", buf3, sizeof(buf3), &g3), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 1); /* a get does not wait for a get */
    assert_int_equal(kvb_put_async(e.b, "og", "B", 1, &put), 0);
    assert_int_equal(atomic_load(&e.f.submitted), 2); /* queued once the gets completed */
    assert_int_equal(kvb_wait(g2), 1);
    assert_int_equal(kvb_wait(g3), 1);
    assert_memory_equal(buf2, "A", 1);
    assert_memory_equal(buf3, "A", 1);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), 0);
    assert_int_equal(kvb_wait(put), 0);

    /* Keys not known (kvs_remove_matching): every pending get. */
    assert_int_equal(kvb_get_async(e.b, "og", buf, sizeof(buf), &g), 0);
    kvb_order_after_ops(e.b, 0, NULL);
    assert_int_equal(atomic_load(&e.f.submitted), 4);
    assert_int_equal(kvb_wait(g), 1);
    assert_memory_equal(buf, "B", 1);
    fake_env_down(&e);
}

/* kvb_flush_counted: the first write-behind failure and how many failed with it, once. */
static void test_flush_counts_writeback_failures(void **state)
{
    struct fake_env e;
    uint64_t failed = 99;
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 2);
    (void)state;
    p.writeback = 1;
    fake_env_up(&e, FAKE_SYNC, p);
    assert_int_equal(kvb_put(e.b, "err-1", "x", 1), 0);
    assert_int_equal(kvb_put(e.b, "fine", "x", 1), 0);
    assert_int_equal(kvb_put(e.b, "err-2", "x", 1), 0);
    assert_int_equal(kvb_flush_counted(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW, &failed), -EIO);
    assert_int_equal(failed, 2);
    assert_int_equal(kvb_flush_counted(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW, &failed), 0);
    assert_int_equal(failed, 0);
    assert_int_equal(kvb_put(e.b, "err-3", "x", 1), 0);
    assert_int_equal(kvb_flush_counted(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW, &failed), -EIO);
    assert_int_equal(failed, 1);
    fake_env_down(&e);
}

static void test_writeback_memory_is_bounded(void **state)
{
    struct fake_env e;
    struct wb_writer w = {&e, 0};
    pthread_t t;
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 2);
    (void)state;
    p.writeback = 1;
    p.writeback_bytes = 64 << 10; /* four 16K values */
    fake_env_up(&e, FAKE_MANUAL, p);
    assert_int_equal(pthread_create(&t, NULL, wb_writer_main, &w), 0);
    /* The writer blocks after 4 puts until batches complete: pending never exceeds the bound. */
    for (int i = 0; i < 5000 && atomic_load(&e.st.writeback_bytes) < (64 << 10); i++)
        fake_nap();
    for (int i = 0; i < 100; i++) {
        assert_true(atomic_load(&e.st.writeback_bytes) <= (64 << 10));
        fake_complete(&e.f, 0);
        fake_nap();
    }
    for (int i = 0; i < 5000 && fake_npending(&e.f) > 0; i++)
        fake_complete(&e.f, 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    while (kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0) == -ETIMEDOUT)
        fake_complete(&e.f, 0);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 8);
    fake_env_down(&e);
}

/*
 * A writer held back by KVBATCH_WRITEBACK_BYTES while every slot is busy must
 * not seal the forming batch: that sends nothing sooner and cut batches to a
 * few ops under load. The batch grows until the completion frees the slot.
 */
static void test_writeback_backpressure_does_not_split(void **state)
{
    struct fake_env e;
    struct wb_writer w = {&e, 0};
    pthread_t t;
    static char val[16 << 10];
    struct kvb_params p = fake_params(KVB_BATCH_FIXED, FAKE_LONG_WINDOW, 64, 1 << 20, 1);
    (void)state;
    p.writeback = 1;
    p.writeback_bytes = 64 << 10; /* four 16K values */
    fake_env_up(&e, FAKE_MANUAL, p);
    assert_int_equal(kvb_put(e.b, "first", val, sizeof(val)), 0);
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0), -ETIMEDOUT); /* "first" travels */
    assert_int_equal(pthread_create(&t, NULL, wb_writer_main, &w), 0);
    /* wb-0..wb-2 fit beside "first"; wb-3 waits for room. */
    for (int i = 0; i < 5000 && atomic_load(&e.st.writeback_bytes) < (64 << 10); i++)
        fake_nap();
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 64 << 10);
    for (int i = 0; i < 20; i++)
        fake_nap(); /* the writer is blocked: nothing may have been sealed meanwhile */
    assert_int_equal(atomic_load(&e.f.submitted), 1);
    assert_true(fake_complete(&e.f, 0));
    /* wb-3 joins the forming batch; wb-4, blocked with the slot free, sends it. */
    fake_wait_submitted(&e, 2);
    pthread_mutex_lock(&e.f.lock);
    assert_int_equal(e.f.last_n, 4);
    pthread_mutex_unlock(&e.f.lock);
    for (int i = 0; i < 5000 && fake_npending(&e.f) > 0; i++) {
        fake_complete(&e.f, 0);
        fake_nap();
    }
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    while (kvb_flush(e.b, KVB_FLUSH_EXPLICIT, 0) == -ETIMEDOUT)
        fake_complete(&e.f, 0);
    assert_int_equal(atomic_load(&e.st.ops[KVB_OP_PUT]), 9);
    assert_int_equal(atomic_load(&e.st.writeback_bytes), 0);
    fake_env_down(&e);
}

static void test_stats_count_each_op_once(void **state)
{
    struct fake_env e;
    char buf[8];
    (void)state;
    fake_env_up(&e, FAKE_THREAD, fake_params(KVB_BATCH_ADAPTIVE, 100000, 8, 1 << 20, 2));
    for (int i = 0; i < 20; i++) {
        assert_int_equal(kvb_put(e.b, "s", "abc", 3), 0);
        assert_int_equal(kvb_get(e.b, "s", buf, sizeof(buf)), 3);
        assert_int_equal(kvb_exists(e.b, "nope"), 0);
    }
    assert_int_equal(kvb_flush(e.b, KVB_FLUSH_EXPLICIT, FAKE_LONG_WINDOW), 0);
    uint64_t batches = 0, reasons = 0;
    for (int k = 0; k < KVB_OP_KINDS; k++) {
        assert_int_equal(atomic_load(&e.st.ops[k]), 20);
        batches += atomic_load(&e.st.batches[k]);
    }
    for (int r = 0; r < KVB_FLUSH_REASONS; r++)
        reasons += atomic_load(&e.st.flushes[r]);
    assert_int_equal(batches, reasons);
    assert_int_equal(atomic_load(&e.st.batch_ops.count), batches);
    assert_int_equal(atomic_load(&e.st.op_latency.count), 60);
    assert_int_equal(atomic_load(&e.st.bytes[KVB_OP_PUT]), 60);
    assert_int_equal(atomic_load(&e.st.bytes[KVB_OP_GET]), 60);
    fake_env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_idle_sends_at_once),
        cmocka_unit_test(test_adaptive_forms_next_batch_while_one_travels),
        cmocka_unit_test(test_fixed_waits_for_window),
        cmocka_unit_test(test_max_ops_flushes),
        cmocka_unit_test(test_max_bytes_flushes_and_oversize_goes_alone),
        cmocka_unit_test(test_max_inflight_bounds_batches),
        cmocka_unit_test(test_window_end_with_slots_busy_does_not_split),
        cmocka_unit_test(test_get_after_async_put_sees_it),
        cmocka_unit_test(test_get_semantics),
        cmocka_unit_test(test_error_fanout_async),
        cmocka_unit_test(test_refused_batch_falls_back_per_key),
        cmocka_unit_test(test_writeback_put_returns_at_once_and_is_readable),
        cmocka_unit_test(test_writeback_memory_is_bounded),
        cmocka_unit_test(test_order_after_puts_waits_for_the_keys_puts),
        cmocka_unit_test(test_changes_wait_for_the_keys_async_gets),
        cmocka_unit_test(test_flush_counts_writeback_failures),
        cmocka_unit_test(test_writeback_backpressure_does_not_split),
        cmocka_unit_test(test_stats_count_each_op_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

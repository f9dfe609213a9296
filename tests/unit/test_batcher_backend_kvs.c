/*
 * test_batcher_backend_kvs.c - the batcher's libkvstore backend
 * (batcher/backend_kvs.c) over a table of stand-in kvs_* calls: each op
 * reaches the call it names with the backend's client and every argument,
 * the call runs inside the re-entry guard (kvb_in_backend_call) and only
 * there, batch calls (only they) with inline callbacks allowed, and a
 * batcher over the backend delivers the results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "backend_kvs.h"
#include "batcher.h"

#define CLIENT ((kvs_client *)0x1234)

/* What the stand-in calls saw. */
static struct {
    const char *last; /* name of the last call */
    kvs_client *client;
    size_t n;
    const char *key;
    int guarded;   /* kvb_in_backend_call() inside the call */
    int inline_ok; /* the stand-in kvs_inline_callbacks's setting inside the call */
} seen;

static int inline_setting;
static int fake_inline_callbacks(int on)
{
    int was = inline_setting;
    inline_setting = on != 0;
    return was;
}

static void saw(const char *name, kvs_client *c, size_t n, const char *key)
{
    seen.last = name;
    seen.client = c;
    seen.n = n;
    seen.key = key;
    seen.guarded = kvb_in_backend_call();
    seen.inline_ok = inline_setting;
}

static int fake_batch_put(kvs_client *c, size_t n, const char *const keys[],
                          const void *const vals[], const size_t lens[], int status[],
                          kvs_done_fn done, void *arg, kvs_op **op)
{
    saw("batch_put", c, n, keys[0]);
    for (size_t i = 0; i < n; i++)
        status[i] = lens[i] == 3 && memcmp(vals[i], "val", 3) == 0 ? 0 : -EINVAL;
    *op = NULL;
    done(arg, (ssize_t)n);
    return 0;
}

static int fake_batch_get(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                          const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg,
                          kvs_op **op)
{
    saw("batch_get", c, n, keys[0]);
    for (size_t i = 0; i < n; i++) {
        memcpy(bufs[i], "got", caps[i] < 3 ? caps[i] : 3);
        results[i] = caps[i] < 3 ? -ERANGE : 3;
    }
    *op = NULL;
    done(arg, (ssize_t)n);
    return 0;
}

static int fake_batch_exists(kvs_client *c, size_t n, const char *const keys[], int results[],
                             kvs_done_fn done, void *arg, kvs_op **op)
{
    saw("batch_exists", c, n, keys[0]);
    for (size_t i = 0; i < n; i++)
        results[i] = strcmp(keys[i], "there") == 0;
    *op = NULL;
    done(arg, (ssize_t)n);
    return 0;
}

static int fake_put(kvs_client *c, const char *key, const void *val, size_t len)
{
    saw("put", c, 1, key);
    return len == 3 && memcmp(val, "val", 3) == 0 ? 0 : -EINVAL;
}

static ssize_t fake_get(kvs_client *c, const char *key, void *buf, size_t cap)
{
    saw("get", c, 1, key);
    if (!buf) return 3;
    return cap < 3 ? -ERANGE : (memcpy(buf, "one", 3), 3);
}

static int fake_exists(kvs_client *c, const char *key)
{
    saw("exists", c, 1, key);
    return -ENOENT;
}

static const struct kvb_kvs_calls calls = {
    fake_batch_put, fake_batch_get, fake_batch_exists,    fake_put,
    fake_get,       fake_exists,    fake_inline_callbacks};
/* A libkvstore without kvs_inline_callbacks. */
static const struct kvb_kvs_calls calls_without_inline = {
    fake_batch_put, fake_batch_get, fake_batch_exists, fake_put, fake_get, fake_exists, NULL};

static ssize_t done_nok = -1;
static void done(void *arg, ssize_t nok)
{
    (void)arg;
    done_nok = nok;
}

static void test_each_op_reaches_its_call_inside_the_guard(void **state)
{
    struct kvb_backend be;
    const char *keys[] = {"k1", "k2"};
    const void *vals[] = {"val", "bad"};
    size_t lens[] = {3, 3};
    int st[2];
    char b1[8], b2[2];
    void *bufs[] = {b1, b2};
    size_t caps[] = {sizeof(b1), sizeof(b2)};
    ssize_t res[2];
    (void)state;
    assert_int_equal(kvb_backend_kvs(&calls, CLIENT, &be), 0);
    assert_false(kvb_in_backend_call());

    assert_int_equal(be.ops->put(be.ctx, 0, 2, keys, vals, lens, st, done, NULL), 0);
    assert_string_equal(seen.last, "batch_put");
    assert_ptr_equal(seen.client, CLIENT);
    assert_int_equal(seen.n, 2);
    assert_true(seen.guarded);
    assert_true(seen.inline_ok);
    assert_false(inline_setting); /* back to what it was after the call */
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], -EINVAL);
    assert_int_equal(done_nok, 2);

    assert_int_equal(be.ops->get(be.ctx, 2, keys, bufs, caps, res, done, NULL), 0);
    assert_string_equal(seen.last, "batch_get");
    assert_true(seen.guarded);
    assert_true(seen.inline_ok);
    assert_int_equal(res[0], 3);
    assert_int_equal(res[1], -ERANGE);

    const char *ekeys[] = {"there", "gone"};
    assert_int_equal(be.ops->exists(be.ctx, 2, ekeys, st, done, NULL), 0);
    assert_string_equal(seen.last, "batch_exists");
    assert_string_equal(seen.key, "there");
    assert_true(seen.guarded);
    assert_true(seen.inline_ok);
    assert_int_equal(st[0], 1);
    assert_int_equal(st[1], 0);

    assert_int_equal(be.ops->put_one(be.ctx, 0, "one", "val", 3), 0);
    assert_string_equal(seen.last, "put");
    assert_string_equal(seen.key, "one");
    assert_true(seen.guarded);
    assert_int_equal(be.ops->get_one(be.ctx, "one", b1, sizeof(b1)), 3);
    assert_string_equal(seen.last, "get");
    assert_true(seen.guarded);
    assert_int_equal(be.ops->exists_one(be.ctx, "one"), -ENOENT);
    assert_string_equal(seen.last, "exists");
    assert_ptr_equal(seen.client, CLIENT);
    assert_true(seen.guarded);
    assert_false(seen.inline_ok); /* single-key calls wait: no callback to place */
    assert_false(inline_setting);

    assert_false(kvb_in_backend_call()); /* cleared after every call */

    /* A program thread that turned inline callbacks on itself keeps them on. */
    inline_setting = 1;
    assert_int_equal(be.ops->put(be.ctx, 0, 2, keys, vals, lens, st, done, NULL), 0);
    assert_true(seen.inline_ok);
    assert_true(inline_setting);
    inline_setting = 0;
    kvb_backend_release(&be);
    assert_null(be.ops);
}

/* A batcher over the backend: results come back per key, and the batcher frees the backend. */
static void test_batcher_over_kvs_backend(void **state)
{
    struct kvb_backend be;
    struct kvb_stats st;
    struct kvb_params p = {KVB_BATCH_ADAPTIVE, 1000000, 64, 1 << 20, 1, 0, 1 << 20};
    struct kvb_op *op;
    char buf[8];
    (void)state;
    kvb_stats_init(&st);
    assert_int_equal(kvb_backend_kvs(&calls_without_inline, CLIENT, &be), 0);
    struct kvb_batcher *b = kvb_batcher_create(&p, &be, &st);
    assert_non_null(b);
    assert_int_equal(kvb_put_async(b, "a", "val", 3, &op), 0);
    assert_int_equal(kvb_wait(op), 0);
    assert_string_equal(seen.last, "batch_put");
    assert_int_equal(kvb_put(b, "b", "bad", 3), -EINVAL); /* idle: the single-key call */
    assert_string_equal(seen.last, "put");
    assert_int_equal(kvb_get(b, "a", buf, sizeof(buf)), 3);
    assert_int_equal(kvb_get(b, "a", NULL, 0), 3); /* the size probe */
    assert_int_equal(kvb_exists(b, "a"), -ENOENT);
    assert_false(kvb_in_backend_call());
    assert_int_equal(kvb_batcher_destroy(b, UINT64_MAX), 0); /* ASan: the backend is freed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_op_reaches_its_call_inside_the_guard),
        cmocka_unit_test(test_batcher_over_kvs_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

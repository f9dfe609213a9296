/*
 * test_client_iov.c - scatter-gather batches (kvs_batch_putv / _getv and
 * their async forms) against a real kvstored: values of odd-sized and empty
 * segments, a segment split that differs between put and get, totals over
 * the maximum value, gets whose segments are too small (-ERANGE, nothing
 * written), one-segment keys mixed in, more segments than one sendmsg takes,
 * batches cut into several frames, bad segment lists. Over the local socket
 * and TCP here, over RDMA in the VM (scripts/rxe-tests.sh runs test_client_*).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"

#define MAX_OBJECT (1u << 20)

static int setup(void **state)
{
    static struct kvt_client_fixture f;
    if (kvt_client_setup(&f, "--memory 64M --max-object 1M --max-frame 2M") < 0) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    kvt_client_teardown(*state);
    return 0;
}

/* Byte i of the test value of seed s. */
static uint8_t pattern(unsigned s, size_t i)
{
    return (uint8_t)(i * 131u + s * 7u + (i >> 9));
}

static void fill(uint8_t *p, size_t len, unsigned s)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(s, i);
}

/* Cuts region [0, total) into segments of the given sizes (the last takes the rest). */
static size_t cut(struct iovec *iov, uint8_t *region, const size_t *sizes, size_t nsizes)
{
    size_t at = 0;
    for (size_t j = 0; j < nsizes; j++) {
        iov[j] = (struct iovec){region + at, sizes[j]};
        at += sizes[j];
    }
    return at;
}

/* Put in one split, get back in another, and as one buffer: the same bytes. */
static void test_odd_segments_round_trip(void **state)
{
    struct kvt_client_fixture *f = *state;
    static const size_t put_sizes[] = {1, 7, 4093, 0, 65537, 3, 0, 20011};
    static const size_t get_sizes[] = {5000, 0, 3, 70000, 14713};
    enum { NP = sizeof(put_sizes) / sizeof(put_sizes[0]) };
    enum { NG = sizeof(get_sizes) / sizeof(get_sizes[0]) };
    size_t total = 0;
    for (size_t j = 0; j < NP; j++)
        total += put_sizes[j];
    uint8_t *val = malloc(total), *back = malloc(total + 64), *one = malloc(total);
    assert_non_null(val);
    assert_non_null(back);
    assert_non_null(one);
    fill(val, total, 1);

    struct iovec piov[NP], giov[NG];
    assert_int_equal(cut(piov, val, put_sizes, NP), total);
    assert_int_equal(cut(giov, back, get_sizes, NG), total + 64);
    const char *keys[] = {"iov-odd"};
    const struct iovec *pl[] = {piov};
    const struct iovec *gl[] = {giov};
    size_t pc[] = {NP}, gc[] = {NG};
    int st[1] = {99};
    assert_int_equal(kvs_batch_putv(f->c, 1, keys, pl, pc, st), 1);
    assert_int_equal(st[0], 0);

    memset(back, 0xEE, total + 64);
    ssize_t res[1] = {0};
    assert_int_equal(kvs_batch_getv(f->c, 1, keys, gl, gc, res), 1);
    assert_int_equal(res[0], (ssize_t)total);
    assert_memory_equal(back, val, total);
    for (size_t i = total; i < total + 64; i++) /* the capacity past the value is untouched */
        assert_int_equal(back[i], 0xEE);

    assert_int_equal(kvs_get(f->c, "iov-odd", one, total), (ssize_t)total);
    assert_memory_equal(one, val, total);
    free(val);
    free(back);
    free(one);
}

/* Empty values: no segments, only empty segments; a get with no segments probes the length. */
static void test_empty_segments(void **state)
{
    struct kvt_client_fixture *f = *state;
    struct iovec empties[3] = {{"x", 0}, {NULL, 0}, {"y", 0}};
    const char *keys[] = {"iov-none", "iov-empties"};
    const struct iovec *pl[] = {NULL, empties};
    size_t pc[] = {0, 3};
    int st[2] = {99, 99};
    assert_int_equal(kvs_batch_putv(f->c, 2, keys, pl, pc, st), 2);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], 0);
    char b[4];
    assert_int_equal(kvs_get(f->c, "iov-none", b, sizeof(b)), 0);
    assert_int_equal(kvs_get(f->c, "iov-empties", b, sizeof(b)), 0);

    assert_int_equal(kvs_put(f->c, "iov-five", "hello", 5), 0);
    const char *gkeys[] = {"iov-empties", "iov-five", "iov-five"};
    const struct iovec *gl[] = {empties, NULL, empties};
    size_t gc[] = {3, 0, 3};
    ssize_t res[3];
    assert_int_equal(kvs_batch_getv(f->c, 3, gkeys, gl, gc, res), 2);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 5);       /* no segments: the length, as kvs_get(c, key, NULL, 0) */
    assert_int_equal(res[2], -ERANGE); /* empty segments are a capacity of 0 */
}

/* A total over the maximum value is that key's -E2BIG; the others land. */
static void test_total_over_max_value(void **state)
{
    struct kvt_client_fixture *f = *state;
    uint8_t *half = calloc(1, MAX_OBJECT / 2 + 1);
    assert_non_null(half);
    struct iovec big[2] = {{half, MAX_OBJECT / 2 + 1}, {half, MAX_OBJECT / 2}};
    struct iovec exact[2] = {{half, MAX_OBJECT / 2}, {half, MAX_OBJECT / 2}};
    struct iovec small[1] = {{"ok", 2}};
    const char *keys[] = {"iov-over", "iov-exact", "iov-small"};
    const struct iovec *pl[] = {big, exact, small};
    size_t pc[] = {2, 2, 1};
    int st[3];
    assert_int_equal(kvs_batch_putv(f->c, 3, keys, pl, pc, st), 2);
    assert_int_equal(st[0], -E2BIG);
    assert_int_equal(st[1], 0);
    assert_int_equal(st[2], 0);
    assert_int_equal(kvs_get(f->c, "iov-over", NULL, 0), -ENOENT);
    assert_int_equal(kvs_get(f->c, "iov-exact", NULL, 0), (ssize_t)MAX_OBJECT);
    free(half);
}

/* Segments smaller than the value: -ERANGE for that key, not one byte written anywhere. */
static void test_get_segments_too_small(void **state)
{
    struct kvt_client_fixture *f = *state;
    uint8_t val[3000];
    fill(val, sizeof(val), 3);
    assert_int_equal(kvs_put(f->c, "iov-3000", val, sizeof(val)), 0);
    assert_int_equal(kvs_put(f->c, "iov-ten", "0123456789", 10), 0);

    uint8_t region[4096];
    memset(region, 0xAB, sizeof(region));
    /* 1000 + 0 + 1999 = 2999 bytes of capacity, with guard bytes between and after. */
    struct iovec shortv[3] = {{region, 1000}, {region + 1100, 0}, {region + 1200, 1999}};
    struct iovec tenv[2] = {{region + 3300, 4}, {region + 3400, 6}};
    const char *keys[] = {"iov-3000", "iov-ten"};
    const struct iovec *gl[] = {shortv, tenv};
    size_t gc[] = {3, 2};
    ssize_t res[2];
    assert_int_equal(kvs_batch_getv(f->c, 2, keys, gl, gc, res), 1);
    assert_int_equal(res[0], -ERANGE);
    assert_int_equal(res[1], 10);
    assert_memory_equal(region + 3300, "0123", 4);
    assert_memory_equal(region + 3400, "456789", 6);
    for (size_t i = 0; i < sizeof(region); i++) {
        if ((i >= 3300 && i < 3304) || (i >= 3400 && i < 3406)) continue;
        assert_int_equal(region[i], 0xAB);
    }
}

/* One-segment keys (plain buffers), missing keys and bad lists in one batch with segmented keys. */
static void test_mixed_with_single_buffers(void **state)
{
    struct kvt_client_fixture *f = *state;
    uint8_t a[777], b[10000], c1[1], c2[50000];
    fill(a, sizeof(a), 4);
    fill(b, sizeof(b), 5);
    fill(c1, sizeof(c1), 6);
    fill(c2, sizeof(c2), 7);
    struct iovec va[1] = {{a, sizeof(a)}};
    struct iovec vb[1] = {{b, sizeof(b)}};
    struct iovec vc[2] = {{c1, sizeof(c1)}, {c2, sizeof(c2)}};
    struct iovec bad[2] = {{a, 1}, {NULL, 5}};
    const char *keys[] = {"mix-a", "mix-c", "", "mix-bad", "mix-b"};
    const struct iovec *pl[] = {va, vc, va, bad, vb};
    size_t pc[] = {1, 2, 1, 2, 1};
    int st[5];
    assert_int_equal(kvs_batch_putv(f->c, 5, keys, pl, pc, st), 3);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], 0);
    assert_int_equal(st[2], -EINVAL);
    assert_int_equal(st[3], -EINVAL);
    assert_int_equal(st[4], 0);
    assert_int_equal(kvs_get(f->c, "mix-bad", NULL, 0), -ENOENT);

    /* Back: mix-c into one buffer, mix-a into three segments, mix-b as one, one missing. */
    uint8_t *ga = calloc(1, sizeof(a)), *gb = calloc(1, sizeof(b)), *gc = calloc(1, 50001);
    assert_non_null(ga);
    assert_non_null(gb);
    assert_non_null(gc);
    struct iovec ia[3] = {{ga, 100}, {ga + 100, 0}, {ga + 100, sizeof(a) - 100}};
    struct iovec ib[1] = {{gb, sizeof(b)}};
    struct iovec ic[1] = {{gc, 50001}};
    const char *gkeys[] = {"mix-c", "mix-missing", "mix-a", "mix-b"};
    const struct iovec *gl[] = {ic, ib, ia, ib};
    size_t gcnt[] = {1, 1, 3, 1};
    ssize_t res[4];
    assert_int_equal(kvs_batch_getv(f->c, 4, gkeys, gl, gcnt, res), 3);
    assert_int_equal(res[0], 50001);
    assert_memory_equal(gc, c1, 1);
    assert_memory_equal(gc + 1, c2, sizeof(c2));
    assert_int_equal(res[1], -ENOENT);
    assert_int_equal(res[2], (ssize_t)sizeof(a));
    assert_memory_equal(ga, a, sizeof(a));
    assert_int_equal(res[3], (ssize_t)sizeof(b));
    assert_memory_equal(gb, b, sizeof(b));
    free(ga);
    free(gb);
    free(gc);
}

/*
 * Many segments per key (more iovecs than one sendmsg takes) and a batch
 * over several frames (--max-frame 2M): every value lands whole.
 */
static void test_many_segments_many_frames(void **state)
{
    struct kvt_client_fixture *f = *state;
    enum { N = 6, SEGS = 700, SEG = 977 }; /* 683,900 bytes a key, ~4 MB a batch */
    size_t len = (size_t)SEGS * SEG;
    uint8_t *vals = malloc(N * len), *back = malloc(N * len);
    struct iovec *iov = calloc((size_t)N * SEGS, sizeof(*iov));
    assert_non_null(vals);
    assert_non_null(back);
    assert_non_null(iov);
    char names[N][24];
    const char *keys[N];
    const struct iovec *lists[N];
    size_t cnt[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "many-%d", i);
        keys[i] = names[i];
        fill(vals + (size_t)i * len, len, 10u + (unsigned)i);
        for (int j = 0; j < SEGS; j++) /* segments in reverse memory order: not adjacent */
            iov[i * SEGS + j] =
                (struct iovec){vals + (size_t)i * len + (size_t)(SEGS - 1 - j) * SEG, SEG};
        lists[i] = &iov[i * SEGS];
        cnt[i] = SEGS;
    }
    int st[N];
    assert_int_equal(kvs_batch_putv(f->c, N, keys, lists, cnt, st), N);
    for (int i = 0; i < N; i++) {
        uint8_t *one = back + (size_t)i * len;
        assert_int_equal(kvs_get(f->c, keys[i], one, len), (ssize_t)len);
        for (int j = 0; j < SEGS; j++)
            assert_memory_equal(one + (size_t)j * SEG,
                                vals + (size_t)i * len + (size_t)(SEGS - 1 - j) * SEG, SEG);
    }
    /* Scattered back the same way: the original layout again. */
    memset(back, 0, N * len);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < SEGS; j++)
            iov[i * SEGS + j].iov_base = back + (size_t)i * len + (size_t)(SEGS - 1 - j) * SEG;
    ssize_t res[N];
    assert_int_equal(kvs_batch_getv(f->c, N, keys, lists, cnt, res), N);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], (ssize_t)len);
    assert_memory_equal(back, vals, N * len);
    free(vals);
    free(back);
    free(iov);
}

static void count_done(void *arg, ssize_t nok)
{
    *(ssize_t *)arg = nok;
}

/* The async forms: a put with a callback, a get waited on. */
static void test_async_forms(void **state)
{
    struct kvt_client_fixture *f = *state;
    uint8_t v[3][1500];
    for (int i = 0; i < 3; i++)
        fill(v[i], sizeof(v[i]), 20u + (unsigned)i);
    struct iovec pv[3] = {{v[0], 1500}, {v[1], 1500}, {v[2], 1500}};
    const char *keys[] = {"async-iov"};
    const struct iovec *pl[] = {pv};
    size_t pc[] = {3};
    int st[1] = {99};
    volatile ssize_t nok = -1;
    assert_int_equal(
        kvs_batch_putv_async(f->c, 1, keys, pl, pc, st, count_done, (void *)&nok, NULL), 0);
    assert_int_equal(kvs_flush(f->c), 0);
    assert_int_equal(nok, 1);
    assert_int_equal(st[0], 0);

    uint8_t back[4500];
    struct iovec gv[2] = {{back, 2000}, {back + 2000, 2500}};
    const struct iovec *gl[] = {gv};
    size_t gc[] = {2};
    ssize_t res[1];
    kvs_op *op = NULL;
    assert_int_equal(kvs_batch_getv_async(f->c, 1, keys, gl, gc, res, NULL, NULL, &op), 0);
    assert_int_equal(kvs_wait(op), 1);
    assert_int_equal(res[0], 4500);
    assert_memory_equal(back, v, sizeof(v));
}

/* Calls that cannot run, and lists no key may have. */
static void test_bad_calls(void **state)
{
    struct kvt_client_fixture *f = *state;
    const char *keys[] = {"bad-iov"};
    struct iovec one[1] = {{"z", 1}};
    const struct iovec *pl[] = {one};
    size_t pc[] = {1};
    int st[1];
    ssize_t res[1];
    assert_int_equal(kvs_batch_putv(NULL, 1, keys, pl, pc, st), -EINVAL);
    assert_int_equal(kvs_batch_putv(f->c, 1, keys, NULL, pc, st), -EINVAL);
    assert_int_equal(kvs_batch_putv(f->c, 1, keys, pl, NULL, st), -EINVAL);
    assert_int_equal(kvs_batch_getv(f->c, 1, keys, pl, pc, NULL), -EINVAL);
    assert_int_equal(kvs_batch_putv_async(f->c, 1, keys, pl, pc, st, NULL, NULL, NULL), -EINVAL);
    assert_int_equal(kvs_batch_putv(f->c, 0, NULL, NULL, NULL, NULL), 0);

    size_t too_many[] = {KVS_MAX_IOV + 1};
    assert_int_equal(kvs_batch_putv(f->c, 1, keys, pl, too_many, st), 0);
    assert_int_equal(st[0], -EINVAL);
    const struct iovec *nolist[] = {NULL};
    size_t two[] = {2};
    assert_int_equal(kvs_batch_getv(f->c, 1, keys, nolist, two, res), 0);
    assert_int_equal(res[0], -EINVAL);
    struct iovec huge[2] = {{"a", SIZE_MAX}, {"b", 2}};
    const struct iovec *hl[] = {huge};
    assert_int_equal(kvs_batch_putv(f->c, 1, keys, hl, two, st), 0);
    assert_int_equal(st[0], -E2BIG);
    assert_int_equal(kvs_get(f->c, "bad-iov", NULL, 0), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_segments_round_trip),
        cmocka_unit_test(test_empty_segments),
        cmocka_unit_test(test_total_over_max_value),
        cmocka_unit_test(test_get_segments_too_small),
        cmocka_unit_test(test_mixed_with_single_buffers),
        cmocka_unit_test(test_many_segments_many_frames),
        cmocka_unit_test(test_async_forms),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_kvsmc.c - the Mooncake drop-in's own calls (mooncake/kvsmc.h, linked
 * from libkvs_mooncake.a) against a real kvstored: values gathered from and
 * scattered into segment lists (one key and many, empty segments, batches
 * staged in several chunks), the batch length probe, get_into with the
 * length it needed, and the status table. The Python module is built on
 * these; here they also run under the sanitizers.
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

#include "kvsmc.h"
#include "kvtest.h"

static struct kvt_server srv;
static mooncake_store_t store;

static int group_setup(void **state)
{
    (void)state;
    if (kvt_server_start(&srv, 0, "--memory 192M --max-object 2M") < 0) return -1;
    store = mooncake_store_create();
    return mooncake_store_setup(store, "h", NULL, 0, 0, kvt_over_rdma() ? "rdma" : "tcp", NULL,
                                srv.addr) == 0
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    mooncake_store_destroy(store);
    kvt_server_stop(&srv);
    return 0;
}

/* Bytes of a value for key i at offset j: what every segment is checked against. */
static unsigned char byte_at(size_t i, size_t j)
{
    return (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static void test_status_table(void **state)
{
    (void)state;
    static const struct {
        int kvs;
        int64_t mc;
    } table[] = {
        {0, 0},
        {1, 1},
        {4096, 4096},
        {-ENOENT, KVSMC_OBJECT_NOT_FOUND},
        {-ERANGE, KVSMC_INVALID_PARAMS},
        {-E2BIG, KVSMC_INVALID_PARAMS},
        {-EINVAL, KVSMC_INVALID_PARAMS},
        {-ENOSPC, KVSMC_NO_AVAILABLE_HANDLE},
        {-ETIMEDOUT, KVSMC_RPC_TIMEOUT},
        {-EACCES, KVSMC_ILLEGAL_CLIENT},
        {-ENOTSUP, KVSMC_NOT_SUPPORTED},
        {-ECONNREFUSED, KVSMC_RPC_FAIL},
        {-ECONNRESET, KVSMC_RPC_FAIL},
        {-EIO, KVSMC_RPC_FAIL},
        {-EPROTO, KVSMC_RPC_FAIL},
        {-EBADMSG, KVSMC_RPC_FAIL},
        {-EMSGSIZE, KVSMC_RPC_FAIL},
        {-EBUSY, KVSMC_RPC_FAIL},
        {-ENOMEM, KVSMC_INTERNAL_ERROR},
        {-EDOM, KVSMC_INTERNAL_ERROR},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        assert_int_equal(kvsmc_code(table[i].kvs), table[i].mc);
}

/* n keys, key i of segs[i] segments of seglen(i, j) bytes; put gathered, read back whole. */
static void round_trip(size_t n, const size_t *segs, size_t (*seglen)(size_t, size_t))
{
    const char **keys = calloc(n, sizeof(*keys));
    struct iovec **iovs = calloc(n, sizeof(struct iovec *));
    size_t *totals = calloc(n, sizeof(*totals));
    int *res = calloc(n, sizeof(*res));
    int64_t *got = calloc(n, sizeof(*got));
    assert_true(keys && iovs && totals && res && got);
    for (size_t i = 0; i < n; i++) {
        char *k = malloc(80);
        assert_non_null(k);
        snprintf(k, 80, "parts-%zu-%zu-%zu", n, segs[0], i);
        keys[i] = k;
        iovs[i] = calloc(segs[i] + 1, sizeof(struct iovec));
        assert_non_null(iovs[i]);
        for (size_t j = 0, at = 0; j < segs[i]; j++) {
            size_t len = seglen(i, j);
            unsigned char *p = malloc(len + 1);
            assert_non_null(p);
            for (size_t b = 0; b < len; b++)
                p[b] = byte_at(i, at + b);
            iovs[i][j] = (struct iovec){p, len};
            at += len;
            totals[i] = at;
        }
    }
    assert_int_equal(
        kvsmc_batch_put_parts(store, n, keys, (const struct iovec *const *)iovs, segs, NULL, res),
        0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(res[i], 0);
    assert_int_equal(kvsmc_batch_get_size(store, n, keys, got), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], (int64_t)totals[i]);
    /* Scatter back into the same segments, wiped. */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < segs[i]; j++)
            memset(iovs[i][j].iov_base, 0, iovs[i][j].iov_len);
    assert_int_equal(
        kvsmc_batch_get_parts(store, n, keys, (const struct iovec *const *)iovs, segs, got), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(got[i], (int64_t)totals[i]);
        for (size_t j = 0, at = 0; j < segs[i]; j++) {
            const unsigned char *p = iovs[i][j].iov_base;
            for (size_t b = 0; b < iovs[i][j].iov_len; b++)
                if (p[b] != byte_at(i, at + b)) fail_msg("key %zu segment %zu byte %zu", i, j, b);
            at += iovs[i][j].iov_len;
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < segs[i]; j++)
            free(iovs[i][j].iov_base);
        free(iovs[i]);
        free((char *)keys[i]);
    }
    free(got);
    free(res);
    free(totals);
    free(iovs);
    free(keys);
}

static size_t small_segments(size_t i, size_t j)
{
    return j == 1 ? 0 : 100 + 37 * i + 11 * j; /* segment 1 is empty */
}

static size_t megabyte_segments(size_t i, size_t j)
{
    (void)i, (void)j;
    return 512u << 10;
}

static void test_one_key_many_segments(void **state)
{
    (void)state;
    const size_t segs[1] = {9};
    round_trip(1, segs, small_segments);
}

static void test_batch_of_segment_lists(void **state)
{
    (void)state;
    size_t segs[12];
    for (size_t i = 0; i < 12; i++)
        segs[i] = 1 + i % 5;
    round_trip(12, segs, small_segments);
}

/* 80 keys of 1 MiB: more than one 32 MiB staging chunk. */
static void test_batch_staged_in_chunks(void **state)
{
    (void)state;
    size_t segs[80];
    for (size_t i = 0; i < 80; i++)
        segs[i] = 2;
    round_trip(80, segs, megabyte_segments);
}

static void test_get_parts_too_small_missing_and_short_value(void **state)
{
    (void)state;
    char val[300];
    for (size_t b = 0; b < sizeof(val); b++)
        val[b] = (char)byte_at(5, b);
    assert_int_equal(mooncake_store_put(store, "gp-key", val, sizeof(val), NULL), 0);
    char a[100], b[100], c[200];
    const struct iovec small[2] = {{a, sizeof(a)}, {b, sizeof(b)}}; /* 200 < 300 */
    const struct iovec big[3] = {{a, sizeof(a)}, {b, sizeof(b)}, {c, sizeof(c)}};
    const struct iovec *const iovs[3] = {small, big, big};
    const size_t niov[3] = {2, 3, 3};
    const char *keys[3] = {"gp-key", "gp-key", "gp-missing"};
    int64_t got[3];
    memset(c, 0x5a, sizeof(c));
    assert_int_equal(kvsmc_batch_get_parts(store, 3, keys, iovs, niov, got), 0);
    assert_int_equal(got[0], KVSMC_INVALID_PARAMS);
    assert_int_equal(got[1], 300); /* 400 bytes of room: the last segment is half used */
    assert_int_equal(got[2], KVSMC_OBJECT_NOT_FOUND);
    assert_memory_equal(a, val, 100);
    assert_memory_equal(b, val + 100, 100);
    assert_memory_equal(c, val + 200, 100);
    assert_int_equal((unsigned char)c[100], 0x5a); /* nothing past the value */
    /* One key through the single-key path, too small. */
    assert_int_equal(kvsmc_batch_get_parts(store, 1, keys, iovs, niov, got), 0);
    assert_int_equal(got[0], KVSMC_INVALID_PARAMS);
}

static void test_get_into_len_reports_needed(void **state)
{
    (void)state;
    char val[5000], buf[6000];
    memset(val, 'v', sizeof(val));
    assert_int_equal(mooncake_store_put(store, "len-key", val, sizeof(val), NULL), 0);
    size_t needed = 7;
    assert_int_equal(kvsmc_get_into_len(store, "len-key", buf, 100, &needed), KVSMC_INVALID_PARAMS);
    assert_int_equal(needed, sizeof(val));
    assert_int_equal(kvsmc_get_into_len(store, "len-key", NULL, 0, &needed), KVSMC_INVALID_PARAMS);
    assert_int_equal(needed, sizeof(val));
    assert_int_equal(kvsmc_get_into_len(store, "len-key", buf, sizeof(buf), &needed),
                     (int64_t)sizeof(val));
    assert_int_equal(needed, 0);
    assert_int_equal(kvsmc_get_into_len(store, "len-missing", buf, sizeof(buf), &needed),
                     KVSMC_OBJECT_NOT_FOUND);
    assert_int_equal(needed, 0);
}

static void test_null_arguments(void **state)
{
    (void)state;
    char a[8];
    const struct iovec seg[1] = {{a, sizeof(a)}}, nullseg[1] = {{NULL, 4}};
    const struct iovec *const iovs[1] = {seg}, *const nulls[1] = {nullseg}, *const none[1] = {NULL};
    const size_t niov[1] = {1};
    const char *keys[1] = {"nk"}, *nokey[1] = {NULL};
    int res[1];
    int64_t got[1];
    assert_int_equal(kvsmc_batch_put_parts(NULL, 1, keys, iovs, niov, NULL, res),
                     KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_put_parts(store, 1, nokey, iovs, niov, NULL, res),
                     KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_put_parts(store, 1, keys, nulls, niov, NULL, res),
                     KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_put_parts(store, 1, keys, none, niov, NULL, res),
                     KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_put_parts(store, 1, keys, iovs, niov, NULL, NULL),
                     KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_get_parts(store, 1, keys, nulls, niov, got), KVSMC_INTERNAL_ERROR);
    assert_int_equal(kvsmc_batch_get_size(store, 1, nokey, got), KVSMC_INTERNAL_ERROR);
    assert_int_equal(mooncake_store_is_exist(store, "nk"), 0); /* nothing was sent */
    /* A store not set up: every key answers -600. */
    mooncake_store_t idle = mooncake_store_create();
    assert_int_equal(kvsmc_batch_put_parts(idle, 1, keys, iovs, niov, NULL, res), 0);
    assert_int_equal(res[0], KVSMC_INVALID_PARAMS);
    assert_int_equal(kvsmc_batch_get_parts(idle, 1, keys, iovs, niov, got), 0);
    assert_int_equal(got[0], KVSMC_INVALID_PARAMS);
    assert_int_equal(kvsmc_batch_get_size(idle, 1, keys, got), KVSMC_INVALID_PARAMS);
    mooncake_store_destroy(idle);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_one_key_many_segments),
        cmocka_unit_test(test_batch_of_segment_lists),
        cmocka_unit_test(test_batch_staged_in_chunks),
        cmocka_unit_test(test_get_parts_too_small_missing_and_short_value),
        cmocka_unit_test(test_get_into_len_reports_needed),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

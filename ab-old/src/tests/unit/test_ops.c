/*
 * test_ops.c - kvstored's per-key rules (server/ops.h) against a real
 * in-process store: bad keys, values too big, no space, no heap memory, GET
 * outcomes, and the counters each outcome moves (and only those).
 *
 * Linked with -Wl,--wrap=malloc,--wrap=calloc (Makefile:
 * UNIT_LDFLAGS_test_ops): the server archive's malloc and calloc calls come
 * here, and fail_mallocs makes the next ones return NULL.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops.h"
#include "wire.h"

#define MIB (1u << 20)

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);

static int fail_mallocs; /* the next this many malloc calls of the server code fail */

void *__wrap_malloc(size_t n)
{
    if (fail_mallocs > 0) {
        fail_mallocs--;
        return NULL;
    }
    return __real_malloc(n);
}

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

void *__wrap_calloc(size_t n, size_t size)
{
    if (fail_mallocs > 0) {
        fail_mallocs--;
        return NULL;
    }
    return __real_calloc(n, size);
}

#define K(s) ((const uint8_t *)(s)), (uint16_t)(sizeof(s) - 1)

static struct kvsd_server *new_server(size_t memory, uint64_t max_object)
{
    struct kvsd_server *srv = calloc(1, sizeof(*srv));
    assert_non_null(srv);
    struct kvsd_server_limits lim = {.max_object = max_object,
                                     .max_frame = 4 * MIB,
                                     .out_limit = MIB,
                                     .out_heap_limit = MIB,
                                     .rbuf_size = 4096};
    assert_int_equal(kvsd_server_init(srv, memory, &lim), 0);
    return srv;
}

static uint64_t pinned(const struct kvsd_server *srv)
{
    struct kvsd_store_stats st;
    kvsd_store_stats(srv->store, &st);
    return st.pinned;
}

static uint64_t items(const struct kvsd_server *srv)
{
    struct kvsd_store_stats st;
    kvsd_store_stats(srv->store, &st);
    return st.items;
}

static void free_server(struct kvsd_server *srv)
{
    assert_int_equal(pinned(srv), 0);
    kvsd_server_fini(srv);
    free(srv);
}

/* Every counter but those named: they must not move. */
static void assert_counters(const struct kvsd_server *srv, const struct kvsd_server_counters *want)
{
    assert_memory_equal(&srv->counters, want, sizeof(*want));
}

static void put(struct kvsd_server *srv, const uint8_t *key, uint16_t klen, const char *val)
{
    struct kvsd_item *it;
    uint32_t len = (uint32_t)strlen(val);
    assert_int_equal(kvsd_ops_put_reserve(srv, key, klen, len, &it), 0);
    memcpy(kvsd_item_data(srv->store, it), val, len);
    assert_int_equal(kvsd_ops_put_commit(srv, it), 0);
}

/* NULL, empty, one byte too long, a NUL inside: -EINVAL from every op, key_invalid each time. */
static void test_bad_keys_refused_by_every_op(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    static uint8_t long_key[KVS_WIRE_MAX_KEY + 1];
    memset(long_key, 'k', sizeof(long_key));
    const struct {
        const uint8_t *key;
        uint16_t klen;
    } bad[] = {
        {NULL, 3},
        {(const uint8_t *)"abc", 0},
        {long_key, KVS_WIRE_MAX_KEY + 1},
        {(const uint8_t *)"a\0b", 3},
        {(const uint8_t *)"\0", 1},
    };
    const size_t n = sizeof(bad) / sizeof(bad[0]);
    put(srv, K("a"), "x"); /* "a\0b" must not reach "a" */
    struct kvsd_server_counters want = srv->counters;
    for (size_t i = 0; i < n; i++) {
        struct kvsd_item *it = (struct kvsd_item *)&want; /* must be cleared */
        uint32_t len = 99;
        assert_int_equal(kvsd_ops_put_reserve(srv, bad[i].key, bad[i].klen, 1, &it), -EINVAL);
        assert_null(it);
        it = (struct kvsd_item *)&want;
        assert_int_equal(kvsd_ops_get(srv, bad[i].key, bad[i].klen, 100, &it, &len), -EINVAL);
        assert_null(it);
        assert_int_equal(len, 0);
        assert_int_equal(kvsd_ops_exists(srv, bad[i].key, bad[i].klen), -EINVAL);
        assert_int_equal(kvsd_ops_remove(srv, bad[i].key, bad[i].klen), -EINVAL);
    }
    want.key_invalid += 4 * n;
    want.keys[KVS_OP_PUT] += n;
    want.keys[KVS_OP_GET] += n;
    want.keys[KVS_OP_EXISTS] += n;
    want.keys[KVS_OP_REMOVE] += n;
    assert_counters(srv, &want);
    assert_int_equal(items(srv), 1);
    assert_int_equal(kvsd_ops_exists(srv, K("a")), 1);
    free_server(srv);
}

/* The longest key the wire allows is a good key. */
static void test_longest_key_accepted(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    static uint8_t key[KVS_WIRE_MAX_KEY];
    memset(key, 'k', sizeof(key));
    put(srv, key, KVS_WIRE_MAX_KEY, "v");
    assert_int_equal(kvsd_ops_exists(srv, key, KVS_WIRE_MAX_KEY), 1);
    assert_int_equal(srv->counters.key_invalid, 0);
    free_server(srv);
}

/* Over max_object, and over the whole pool (max_object above it): -E2BIG, put_too_big. */
static void test_put_too_big(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    struct kvsd_item *it;
    struct kvsd_server_counters want = srv->counters;
    assert_int_equal(kvsd_ops_put_reserve(srv, K("big"), MIB + 1, &it), -E2BIG);
    assert_null(it);
    assert_int_equal(kvsd_ops_put_reserve(srv, K("max"), MIB, &it), 0);
    kvsd_ops_put_abort(srv, it);
    want.keys[KVS_OP_PUT] += 2;
    want.put_too_big += 1;
    assert_counters(srv, &want);
    free_server(srv);

    srv = new_server(2 * MIB, 64 * MIB); /* the store itself refuses */
    want = srv->counters;
    assert_int_equal(kvsd_ops_put_reserve(srv, K("big"), 3 * MIB, &it), -E2BIG);
    assert_null(it);
    want.keys[KVS_OP_PUT] += 1;
    want.put_too_big += 1;
    assert_counters(srv, &want);
    free_server(srv);
}

/* Everything pinned: -ENOSPC, put_no_space; nothing else moves. */
static void test_put_no_space(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(2 * MIB, MIB);
    struct kvsd_item *held[2], *it;
    assert_int_equal(kvsd_ops_put_reserve(srv, K("a"), MIB, &held[0]), 0);
    assert_int_equal(kvsd_ops_put_reserve(srv, K("b"), MIB, &held[1]), 0);
    struct kvsd_server_counters want = srv->counters;
    assert_int_equal(kvsd_ops_put_reserve(srv, K("c"), MIB, &it), -ENOSPC);
    assert_null(it);
    want.keys[KVS_OP_PUT] += 1;
    want.put_no_space += 1;
    assert_counters(srv, &want);
    kvsd_ops_put_abort(srv, held[0]);
    kvsd_ops_put_abort(srv, held[1]);
    assert_int_equal(items(srv), 0);
    free_server(srv);
}

/* No heap for the item, or for the index at commit: -ENOMEM, errors_nomem; the old value stays. */
static void test_put_no_memory(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    struct kvsd_item *it;
    struct kvsd_server_counters want = srv->counters;
    fail_mallocs = 1;
    assert_int_equal(kvsd_ops_put_reserve(srv, K("k"), 10, &it), -ENOMEM);
    assert_int_equal(fail_mallocs, 0);
    assert_null(it);
    want.keys[KVS_OP_PUT] += 1;
    want.errors_nomem += 1;
    assert_counters(srv, &want);

    /* The first commit builds the index's table: with no heap it fails, nothing is stored. */
    assert_int_equal(kvsd_ops_put_reserve(srv, K("k"), 1, &it), 0);
    fail_mallocs = 1000;
    int rc = kvsd_ops_put_commit(srv, it);
    fail_mallocs = 0;
    assert_int_equal(rc, -ENOMEM);
    want.keys[KVS_OP_PUT] += 1;
    want.errors_nomem += 1;
    assert_counters(srv, &want);
    assert_int_equal(items(srv), 0);
    assert_int_equal(kvsd_ops_exists(srv, K("k")), 0);
    free_server(srv);
}

/* A commit replaces the old value; an abort leaves it. */
static void test_commit_replaces_abort_keeps(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    struct kvsd_item *it;
    uint32_t len;
    put(srv, K("k"), "old");
    assert_int_equal(kvsd_ops_put_reserve(srv, K("k"), 5, &it), 0);
    kvsd_ops_put_abort(srv, it);
    assert_int_equal(kvsd_ops_get(srv, K("k"), 100, &it, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(kvsd_item_data(srv->store, it), "old", 3);
    kvsd_ops_get_done(srv, it);
    put(srv, K("k"), "newer");
    assert_int_equal(kvsd_ops_get(srv, K("k"), 100, &it, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(kvsd_item_data(srv->store, it), "newer", 5);
    kvsd_ops_get_done(srv, it);
    assert_int_equal(items(srv), 1);
    free_server(srv);
}

/*
 * GET: a miss; a hit, pinned until done; a capacity one short: -ERANGE with
 * the length, nothing pinned, counted as a hit and a range; an empty value.
 */
static void test_get_outcomes(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    put(srv, K("k"), "value");
    put(srv, K("empty"), "");
    struct kvsd_server_counters want = srv->counters;
    struct kvsd_item *it;
    uint32_t len;

    assert_int_equal(kvsd_ops_get(srv, K("nope"), 100, &it, &len), -ENOENT);
    assert_null(it);
    assert_int_equal(len, 0);
    want.get_misses++;

    assert_int_equal(kvsd_ops_get(srv, K("k"), 5, &it, &len), 0);
    assert_non_null(it);
    assert_int_equal(len, 5);
    assert_int_equal(pinned(srv), 1);
    kvsd_ops_get_done(srv, it);
    assert_int_equal(pinned(srv), 0);
    want.get_hits++;

    assert_int_equal(kvsd_ops_get(srv, K("k"), 4, &it, &len), -ERANGE);
    assert_null(it);
    assert_int_equal(len, 5);
    assert_int_equal(pinned(srv), 0);
    want.get_hits++;
    want.get_range++;

    assert_int_equal(kvsd_ops_get(srv, K("empty"), 0, &it, &len), 0);
    assert_non_null(it);
    assert_int_equal(len, 0);
    kvsd_ops_get_done(srv, it);
    want.get_hits++;

    want.keys[KVS_OP_GET] += 4;
    assert_counters(srv, &want);
    free_server(srv);
}

/* EXISTS 1/0, REMOVE 0/-ENOENT; a pinned item removed stays readable by its holder. */
static void test_exists_and_remove(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    put(srv, K("k"), "v");
    struct kvsd_server_counters want = srv->counters;
    struct kvsd_item *it;
    uint32_t len;
    assert_int_equal(kvsd_ops_exists(srv, K("k")), 1);
    assert_int_equal(kvsd_ops_exists(srv, K("x")), 0);
    assert_int_equal(kvsd_ops_get(srv, K("k"), 1, &it, &len), 0);
    assert_int_equal(kvsd_ops_remove(srv, K("k")), 0);
    assert_memory_equal(kvsd_item_data(srv->store, it), "v", 1);
    kvsd_ops_get_done(srv, it);
    assert_int_equal(kvsd_ops_remove(srv, K("k")), -ENOENT);
    assert_int_equal(kvsd_ops_exists(srv, K("k")), 0);
    want.keys[KVS_OP_EXISTS] += 3;
    want.keys[KVS_OP_REMOVE] += 2;
    want.keys[KVS_OP_GET] += 1;
    want.get_hits += 1;
    assert_counters(srv, &want);
    assert_int_equal(items(srv), 0);
    free_server(srv);
}

/* A key its path refused counts in keys[] only; opcodes without keys count nothing. */
static void test_refused_counts_the_key_only(void **state)
{
    (void)state;
    struct kvsd_server *srv = new_server(4 * MIB, MIB);
    struct kvsd_server_counters want = srv->counters;
    kvsd_ops_refused(srv, KVS_OP_PUT);
    kvsd_ops_refused(srv, KVS_OP_GET);
    kvsd_ops_refused(srv, KVS_OP_GET);
    kvsd_ops_refused(srv, KVS_OP_STATS);
    kvsd_ops_refused(srv, 0);
    want.keys[KVS_OP_PUT] += 1;
    want.keys[KVS_OP_GET] += 2;
    assert_counters(srv, &want);
    free_server(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_keys_refused_by_every_op),
        cmocka_unit_test(test_longest_key_accepted),
        cmocka_unit_test(test_put_too_big),
        cmocka_unit_test(test_put_no_space),
        cmocka_unit_test(test_put_no_memory),
        cmocka_unit_test(test_commit_replaces_abort_keeps),
        cmocka_unit_test(test_get_outcomes),
        cmocka_unit_test(test_exists_and_remove),
        cmocka_unit_test(test_refused_counts_the_key_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_mooncake_c.c - the Mooncake drop-in (libkvstore_mooncake.so) through
 * Mooncake's own header, store_c.h, against a real kvstored: every call with
 * present and missing keys, buffers too small, batches of mixed keys,
 * removal, bad arguments (each with its Mooncake code), the lifecycle and
 * health check around a server that dies, 16 threads on one store, and that
 * the library exports exactly the header's functions.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtest.h"
#include "store_c.h"

/* Mooncake's ErrorCode values (mooncake-store/include/types.h) the calls return. */
enum {
    MC_NULL_ARG = -1, /* Mooncake's C layer, for a NULL argument */
    MC_NO_HANDLE = -200,
    MC_INVALID_PARAMS = -600,
    MC_NOT_FOUND = -704,
    MC_RPC_FAIL = -900,
    MC_NOT_SUPPORTED = -1012,
};

#define MAX_OBJECT (1u << 20) /* the server's --max-object here */

static struct kvt_server srv;

static const char *protocol(void)
{
    return kvt_over_rdma() ? "rdma" : "tcp";
}

/* A store set up on srv. */
static mooncake_store_t open_store(void)
{
    mooncake_store_t s = mooncake_store_create();
    assert_non_null(s);
    assert_int_equal(mooncake_store_setup(s, "node-a", "P2PHANDSHAKE", 1 << 20, 1 << 20, protocol(),
                                          "", srv.addr),
                     0);
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    return kvt_server_start(&srv, 0, "--memory 64M --max-object 1M");
}

static int group_teardown(void **state)
{
    (void)state;
    kvt_server_stop(&srv);
    return 0;
}

static void test_setup_arguments(void **state)
{
    (void)state;
    assert_int_equal(mooncake_store_setup(NULL, "h", "", 0, 0, "tcp", "", srv.addr), MC_NULL_ARG);
    mooncake_store_t s = mooncake_store_create();
    assert_non_null(s);
    /* Refused before anything is connected; the store stays usable for a good setup. */
    assert_int_equal(mooncake_store_setup(s, "", "", 0, 0, "tcp", "", srv.addr), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_setup(s, NULL, "", 0, 0, "tcp", "", srv.addr),
                     MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_setup(s, "h", "", 0, 0, "nvlink", "", srv.addr),
                     MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_setup(s, "h", "", 0, 0, "tcp", "", "etcd://127.0.0.1:2379"),
                     MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_setup(s, "h", "", 0, 0, "tcp", "", "not-a-host-port"),
                     MC_INVALID_PARAMS);
    /* Nothing listens on port 1: setup checks that every server answers. */
    assert_int_equal(mooncake_store_setup(s, "h", "", 0, 0, "tcp", "", "127.0.0.1:1"), MC_RPC_FAIL);
    assert_int_equal(mooncake_store_health_check(s), 1); /* still not set up */
    assert_int_equal(mooncake_store_setup(s, "h", NULL, 0, 0, protocol(), NULL, srv.addr), 0);
    assert_int_equal(mooncake_store_setup(s, "h", NULL, 0, 0, protocol(), NULL, srv.addr),
                     MC_INVALID_PARAMS); /* twice */
    assert_int_equal(mooncake_store_health_check(s), 0);
    mooncake_store_destroy(s);
    mooncake_store_destroy(NULL);
}

/* NULL (or empty) master_server_addr: $KVSTORE_SERVERS; init_all too; protocol NULL is tcp. */
static void test_setup_from_environment(void **state)
{
    (void)state;
    assert_int_equal(setenv("KVSTORE_SERVERS", srv.addr, 1), 0);
    mooncake_store_t s = mooncake_store_create();
    assert_int_equal(
        mooncake_store_setup(s, "h", NULL, 0, 0, kvt_over_rdma() ? "rdma" : NULL, NULL, NULL), 0);
    assert_int_equal(mooncake_store_put(s, "env-key", "v", 1, NULL), 0);
    mooncake_store_destroy(s);

    s = mooncake_store_create();
    assert_int_equal(mooncake_store_init_all(s, protocol(), "", 1 << 20), 0);
    assert_int_equal(mooncake_store_is_exist(s, "env-key"), 1);
    char host[64];
    assert_int_equal(mooncake_store_get_hostname(s, host, sizeof(host)), 0);
    assert_string_equal(host, "localhost:12345");
    assert_int_equal(mooncake_store_init_all(s, protocol(), "", 1 << 20), MC_INVALID_PARAMS);
    mooncake_store_destroy(s);
    unsetenv("KVSTORE_SERVERS");
}

/* Every call on a store that is not set up: -600 (Mooncake's "client is not initialized"). */
static void test_calls_before_setup(void **state)
{
    (void)state;
    mooncake_store_t s = mooncake_store_create();
    char buf[16];
    const char *keys[2] = {"a", "b"};
    void *bufs[2] = {buf, buf};
    size_t sizes[2] = {1, 1};
    int res[2] = {7, 7};
    int64_t res64[2] = {7, 7};
    assert_int_equal(mooncake_store_put(s, "k", "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_put_from(s, "k", buf, 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_get_into(s, "k", buf, sizeof(buf)), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, "k"), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_get_size(s, "k"), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_remove(s, "k", 0), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_remove_by_regex(s, ".*", 0), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_remove_all(s, 0), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_get_hostname(s, buf, sizeof(buf)), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_register_buffer(s, buf, sizeof(buf)), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_unregister_buffer(s, buf), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_health_check(s), 1);
    assert_int_equal(mooncake_store_batch_put_from(s, keys, bufs, sizes, 2, NULL, res), 0);
    assert_int_equal(res[0], MC_INVALID_PARAMS);
    assert_int_equal(res[1], MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bufs, sizes, 2, res64), 0);
    assert_int_equal(res64[0], MC_INVALID_PARAMS);
    assert_int_equal(res64[1], MC_INVALID_PARAMS);
    res[0] = res[1] = 7;
    assert_int_equal(mooncake_store_batch_is_exist(s, keys, 2, res), 0);
    assert_int_equal(res[0], MC_INVALID_PARAMS);
    assert_int_equal(res[1], MC_INVALID_PARAMS);
    mooncake_store_destroy(s);
}

static void test_put_get_present_missing_too_small(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    char val[3000], buf[4096];
    kvval_fill(val, sizeof(val), "pg-key", 1);
    assert_int_equal(mooncake_store_put(s, "pg-key", val, sizeof(val), NULL), 0);
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(mooncake_store_get_into(s, "pg-key", buf, sizeof(buf)), (int64_t)sizeof(val));
    assert_memory_equal(buf, val, sizeof(val));
    assert_int_equal((unsigned char)buf[sizeof(val)], 0xee); /* nothing past the value */
    assert_int_equal(mooncake_store_get_into(s, "pg-key", buf, sizeof(val)), (int64_t)sizeof(val));
    assert_int_equal(mooncake_store_get_size(s, "pg-key"), (int64_t)sizeof(val));
    assert_int_equal(mooncake_store_is_exist(s, "pg-key"), 1);

    /* Too small: -600 as Mooncake's get_into, and nothing is copied. */
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(mooncake_store_get_into(s, "pg-key", buf, sizeof(val) - 1), MC_INVALID_PARAMS);
    assert_int_equal((unsigned char)buf[0], 0xee);
    assert_int_equal(mooncake_store_get_into(s, "pg-key", NULL, 0), MC_INVALID_PARAMS);

    /* Missing. */
    assert_int_equal(mooncake_store_get_into(s, "pg-missing", buf, sizeof(buf)), MC_NOT_FOUND);
    assert_int_equal(mooncake_store_get_size(s, "pg-missing"), MC_NOT_FOUND);
    assert_int_equal(mooncake_store_is_exist(s, "pg-missing"), 0);

    /* put_from is the same put, from the caller's (registered) buffer; a new value replaces. */
    kvval_fill(val, 100, "pg-key", 2);
    assert_int_equal(mooncake_store_put_from(s, "pg-key", val, 100, NULL), 0);
    assert_int_equal(mooncake_store_get_into(s, "pg-key", buf, sizeof(buf)), 100);
    unsigned version = 0;
    assert_true(kvval_check(buf, 100, "pg-key", &version));
    assert_int_equal(version, 2);
    mooncake_store_destroy(s);
}

static void test_put_config_and_limits(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    const char *segs[] = {"seg-a"};
    mooncake_replicate_config_t two = {.replica_num = 2,
                                       .with_soft_pin = 1,
                                       .preferred_segments = segs,
                                       .preferred_segments_count = 1};
    mooncake_replicate_config_t zero = {.replica_num = 0};
    assert_int_equal(mooncake_store_put(s, "cfg-key", "abc", 3, &two), 0);
    assert_int_equal(mooncake_store_get_size(s, "cfg-key"), 3);
    assert_int_equal(mooncake_store_put(s, "cfg-zero", "abc", 3, &zero), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, "cfg-zero"), 0);
    /* 0 bytes: refused, as Mooncake's master refuses them. */
    assert_int_equal(mooncake_store_put(s, "cfg-empty", "", 0, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_put_from(s, "cfg-empty", NULL, 0, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, "cfg-empty"), 0);
    /* Over the server's maximum object, a key over 512 bytes, an empty key. */
    char *big = calloc(1, MAX_OBJECT + 1);
    assert_non_null(big);
    assert_int_equal(mooncake_store_put(s, "cfg-big", big, MAX_OBJECT + 1, NULL),
                     MC_INVALID_PARAMS);
    char longkey[600];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(mooncake_store_put(s, longkey, "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_put(s, "", "v", 1, NULL), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, ""), MC_INVALID_PARAMS);
    free(big);
    mooncake_store_destroy(s);
}

/* NULL store, key, buffer, arrays: -1 before anything is sent, as Mooncake's C layer. */
static void test_null_arguments(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    char buf[8];
    int res[2];
    int64_t res64[2];
    const char *keys[2] = {"null-a", NULL};
    const char *good[2] = {"null-a", "null-b"};
    void *bufs[2] = {buf, buf}, *nobufs[2] = {buf, NULL};
    size_t sizes[2] = {4, 4};
    assert_int_equal(mooncake_store_put(NULL, "k", "v", 1, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_put(s, NULL, "v", 1, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_put(s, "k", NULL, 1, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_put_from(s, "k", NULL, 1, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_into(NULL, "k", buf, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_into(s, NULL, buf, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_into(s, "k", NULL, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_is_exist(s, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_is_exist(NULL, "k"), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_size(s, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_remove(s, NULL, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_remove_by_regex(s, NULL, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_remove_all(NULL, 1), MC_NULL_ARG);
    assert_int_equal(mooncake_store_health_check(NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_hostname(s, NULL, 8), MC_NULL_ARG);
    assert_int_equal(mooncake_store_get_hostname(s, buf, 0), MC_NULL_ARG);
    assert_int_equal(mooncake_store_register_buffer(s, NULL, 8), MC_NULL_ARG);
    assert_int_equal(mooncake_store_register_buffer(s, buf, 0), MC_NULL_ARG);
    assert_int_equal(mooncake_store_unregister_buffer(s, NULL), MC_NULL_ARG);
    /* A batch with one NULL key or buffer refuses the whole call: nothing is stored. */
    assert_int_equal(mooncake_store_batch_put_from(s, keys, bufs, sizes, 2, NULL, res),
                     MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_put_from(s, good, nobufs, sizes, 2, NULL, res),
                     MC_NULL_ARG);
    assert_int_equal(mooncake_store_is_exist(s, "null-a"), 0);
    assert_int_equal(mooncake_store_batch_put_from(s, good, bufs, sizes, 2, NULL, NULL),
                     MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_put_from(s, good, bufs, NULL, 2, NULL, res), MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bufs, sizes, 2, res64), MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_get_into(s, good, NULL, sizes, 2, res64), MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_is_exist(s, keys, 2, res), MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_is_exist(s, good, 2, NULL), MC_NULL_ARG);
    assert_int_equal(mooncake_store_batch_is_exist(NULL, good, 2, res), MC_NULL_ARG);
    mooncake_store_destroy(s);
}

/* One batch of each kind over present, missing, too small and empty keys. */
static void test_batches_mixed(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    enum { N = 6 };
    const char *keys[N] = {"mix-0", "mix-1", "mix-empty", "mix-3", "mix-4", "mix-5"};
    char vals[N][512], bufs[N][512];
    size_t sizes[N];
    void *vptr[N], *bptr[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = 100u + 50u * (unsigned)i;
        kvval_fill(vals[i], sizes[i], keys[i], 3);
        vptr[i] = vals[i];
        bptr[i] = bufs[i];
    }
    sizes[2] = 0; /* refused per key */
    int res[N];
    /* Keys 0..3 only (4, 5 stay missing). */
    assert_int_equal(mooncake_store_batch_put_from(s, keys, vptr, sizes, 4, NULL, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_int_equal(res[2], MC_INVALID_PARAMS);
    assert_int_equal(res[3], 0);

    assert_int_equal(mooncake_store_batch_is_exist(s, keys, N, res), 0);
    const int exist[N] = {1, 1, 0, 1, 0, 0};
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], exist[i]);

    size_t caps[N] = {512, 512, 512, 10, 512, 0}; /* key 3: too small */
    int64_t got[N];
    memset(bufs, 0xee, sizeof(bufs));
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bptr, caps, N, got), 0);
    assert_int_equal(got[0], (int64_t)sizes[0]);
    assert_int_equal(got[1], (int64_t)sizes[1]);
    assert_int_equal(got[2], MC_NOT_FOUND);
    assert_int_equal(got[3], MC_INVALID_PARAMS);
    assert_int_equal(got[4], MC_NOT_FOUND);
    assert_int_equal(got[5], MC_NOT_FOUND);
    assert_memory_equal(bufs[0], vals[0], sizes[0]);
    assert_memory_equal(bufs[1], vals[1], sizes[1]);
    assert_int_equal((unsigned char)bufs[3][0], 0xee); /* too small: untouched */

    /* A zero capacity for a present key does not fit either (no size probe leaks out). */
    caps[0] = 0;
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bptr, caps, 1, got), 0);
    assert_int_equal(got[0], MC_INVALID_PARAMS);

    /* An empty batch runs and does nothing. */
    assert_int_equal(mooncake_store_batch_put_from(s, keys, vptr, sizes, 0, NULL, res), 0);
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bptr, caps, 0, got), 0);
    assert_int_equal(mooncake_store_batch_is_exist(s, keys, 0, res), 0);

    /* replica_num 0 refuses every key of the batch; the call itself runs. */
    mooncake_replicate_config_t zero = {.replica_num = 0};
    sizes[4] = 10;
    assert_int_equal(mooncake_store_batch_put_from(s, keys + 4, vptr + 4, sizes + 4, 1, &zero, res),
                     0);
    assert_int_equal(res[0], MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, "mix-4"), 0);
    mooncake_store_destroy(s);
}

static void test_remove(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    assert_int_equal(mooncake_store_put(s, "rm-key", "value", 5, NULL), 0);
    assert_int_equal(mooncake_store_remove(s, "rm-key", 0), 0);
    assert_int_equal(mooncake_store_is_exist(s, "rm-key"), 0);
    assert_int_equal(mooncake_store_remove(s, "rm-key", 0), MC_NOT_FOUND);
    assert_int_equal(mooncake_store_put(s, "rm-key", "value", 5, NULL), 0);
    assert_int_equal(mooncake_store_remove(s, "rm-key", 1), 0); /* force: the same here */
    assert_int_equal(mooncake_store_remove(s, "rm-key", 1), MC_NOT_FOUND);
    mooncake_store_destroy(s);
}

static void test_remove_by_regex_and_all(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "rx-%c-%02d", i < 12 ? 'a' : 'b', i);
        assert_int_equal(mooncake_store_put(s, key, "v", 1, NULL), 0);
    }
    assert_int_equal(mooncake_store_remove_by_regex(s, "^rx-a-0[0-4]$", 0), 5);
    assert_int_equal(mooncake_store_is_exist(s, "rx-a-03"), 0);
    assert_int_equal(mooncake_store_is_exist(s, "rx-a-05"), 1);
    assert_int_equal(mooncake_store_remove_by_regex(s, "^rx-a-0[0-4]$", 0), 0); /* gone */
    assert_int_equal(mooncake_store_remove_by_regex(s, "-a-", 1), 7); /* anywhere in the key */
    assert_int_equal(mooncake_store_remove_by_regex(s, "rx-(b", 0), MC_INVALID_PARAMS);
    char long_pattern[600];
    memset(long_pattern, 'x', sizeof(long_pattern) - 1);
    long_pattern[sizeof(long_pattern) - 1] = '\0';
    assert_int_equal(mooncake_store_remove_by_regex(s, long_pattern, 0), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_is_exist(s, "rx-b-12"), 1);
    /* remove_all: every key of the server (the other tests' too), then none. */
    int64_t all = mooncake_store_remove_all(s, 0);
    assert_true(all >= 8);
    assert_int_equal(mooncake_store_is_exist(s, "rx-b-19"), 0);
    assert_int_equal(mooncake_store_remove_all(s, 1), 0);
    /* An empty pattern matches every key, as Mooncake's regex_search of "". */
    assert_int_equal(mooncake_store_put(s, "rx-c", "v", 1, NULL), 0);
    assert_int_equal(mooncake_store_remove_by_regex(s, "", 0), 1);
    mooncake_store_destroy(s);
}

static void test_hostname(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    char buf[64];
    assert_int_equal(mooncake_store_get_hostname(s, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "node-a");
    assert_int_equal(mooncake_store_get_hostname(s, buf, 7), 0); /* exactly fits with its NUL */
    assert_int_equal(mooncake_store_get_hostname(s, buf, 6), MC_NULL_ARG);
    mooncake_store_destroy(s);
}

static void test_register_buffer(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    static char region[1 << 16];
    assert_int_equal(mooncake_store_register_buffer(s, region, sizeof(region)), 0);
    kvval_fill(region, 4096, "reg-key", 1);
    assert_int_equal(mooncake_store_put_from(s, "reg-key", region, 4096, NULL), 0);
    assert_int_equal(mooncake_store_get_into(s, "reg-key", region + 8192, 4096), 4096);
    assert_memory_equal(region, region + 8192, 4096);
    assert_int_equal(mooncake_store_unregister_buffer(s, region), 0);
    assert_int_equal(mooncake_store_unregister_buffer(s, region), MC_INVALID_PARAMS);
    assert_int_equal(mooncake_store_unregister_buffer(s, region + 1), MC_INVALID_PARAMS);
    mooncake_store_destroy(s);
}

/* health_check is a real round trip: a dead server turns it to 2, a restart back to 0. */
static void test_health_check_follows_server(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("kills and restarts the shared server");
    mooncake_store_t s = open_store();
    assert_int_equal(mooncake_store_health_check(s), 0);
    kvt_server_kill(&srv);
    assert_int_equal(mooncake_store_health_check(s), 2);
    assert_true(mooncake_store_put(s, "hc-key", "v", 1, NULL) < 0);
    assert_int_equal(kvt_server_restart(&srv), 0);
    /* The client retries a refused connection after a back-off: healthy again within it. */
    int hc = 2;
    for (int i = 0; i < 200 && hc != 0; i++) {
        hc = mooncake_store_health_check(s);
        if (hc) usleep(10000);
    }
    assert_int_equal(hc, 0);
    assert_int_equal(mooncake_store_put(s, "hc-key", "v", 1, NULL), 0);
    mooncake_store_destroy(s);
}

/* ---- 16 threads on one store ---- */

enum { THREADS = 16, ROUNDS = 150, VLEN = 8192 };

struct worker {
    mooncake_store_t s;
    int id;
    int errors;
};

#define CHECK(w, cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "thread %d: %s failed (line %d)\n", (w)->id, #cond, __LINE__);         \
            (w)->errors++;                                                                         \
        }                                                                                          \
    } while (0)

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char *val = malloc(VLEN), *buf = malloc(VLEN);
    if (!val || !buf) {
        w->errors++;
        free(val);
        free(buf);
        return NULL;
    }
    char key[64], missing[64];
    for (int r = 0; r < ROUNDS; r++) {
        snprintf(key, sizeof(key), "thr-%d-%d", w->id, r);
        snprintf(missing, sizeof(missing), "thr-missing-%d-%d", w->id, r);
        size_t len = VLEN - (size_t)(r % 7) * 100;
        kvval_fill(val, len, key, (unsigned)r);
        CHECK(w, mooncake_store_put_from(w->s, key, val, len, NULL) == 0);
        CHECK(w, mooncake_store_get_into(w->s, key, buf, VLEN) == (int64_t)len);
        CHECK(w, kvval_check(buf, len, key, NULL));
        CHECK(w, mooncake_store_is_exist(w->s, key) == 1);
        CHECK(w, mooncake_store_is_exist(w->s, missing) == 0);
        CHECK(w, mooncake_store_get_size(w->s, key) == (int64_t)len);
        CHECK(w, mooncake_store_get_into(w->s, missing, buf, VLEN) == MC_NOT_FOUND);
        CHECK(w, mooncake_store_get_into(w->s, key, buf, len - 1) == MC_INVALID_PARAMS);
        if (r % 10 == 9) { /* a batch over this round's keys, half of them missing */
            const char *keys[4] = {key, missing, key, missing};
            int ex[4];
            CHECK(w, mooncake_store_batch_is_exist(w->s, keys, 4, ex) == 0);
            CHECK(w, ex[0] == 1 && ex[1] == 0 && ex[2] == 1 && ex[3] == 0);
            void *bufs[4] = {buf, buf, buf, buf};
            size_t caps[4] = {VLEN, VLEN, VLEN, VLEN};
            int64_t got[4];
            CHECK(w, mooncake_store_batch_get_into(w->s, keys, bufs, caps, 4, got) == 0);
            CHECK(w, got[0] == (int64_t)len && got[1] == MC_NOT_FOUND);
            CHECK(w, mooncake_store_remove(w->s, key, 0) == 0);
            CHECK(w, mooncake_store_is_exist(w->s, key) == 0);
        }
    }
    free(val);
    free(buf);
    return NULL;
}

static void test_sixteen_threads(void **state)
{
    (void)state;
    mooncake_store_t s = open_store();
    pthread_t tid[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.s = s, .id = i};
        assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
    }
    int errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(tid[i], NULL);
        errors += w[i].errors;
    }
    assert_int_equal(errors, 0);
    /* What the threads left: every key but the removed ones (round 9, 19, ...). */
    char key[64];
    snprintf(key, sizeof(key), "thr-%d-%d", THREADS - 1, ROUNDS - 2);
    assert_int_equal(mooncake_store_is_exist(s, key), 1);
    snprintf(key, sizeof(key), "thr-%d-%d", 0, 9);
    assert_int_equal(mooncake_store_is_exist(s, key), 0);
    mooncake_store_destroy(s);
}

/* ---- exports ---- */

/* Adds each "mooncake_store_NAME(" of the header to names (a '\n'-separated list). */
static void header_functions(char *names, size_t cap)
{
    FILE *h = fopen("include/mooncake/store_c.h", "r");
    assert_non_null(h);
    char line[512];
    names[0] = '\0';
    while (fgets(line, sizeof(line), h)) {
        for (char *p = strstr(line, "mooncake_store_"); p; p = strstr(p + 1, "mooncake_store_")) {
            size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
            if (p[n] != '(' || (p > line && p[-1] != ' ' && p[-1] != '*')) continue;
            if (strlen(names) + n + 2 >= cap) fail_msg("too many names");
            strncat(names, p, n);
            strcat(names, "\n");
        }
    }
    fclose(h);
}

/* The .so exports exactly the functions the header declares, and nothing else. */
static void test_exports_exactly_the_header(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("transport-independent (make test runs it); the VM image has no nm");
    char declared[4096], cmd[1200], line[512];
    header_functions(declared, sizeof(declared));
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s",
             kvt_build_path("lib/libkvstore_mooncake.so"));
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int exported = 0;
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[400], needle[420];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
        if (strncmp(name, "mooncake_store_", 15) != 0)
            fail_msg("libkvstore_mooncake exports %s", name);
        snprintf(needle, sizeof(needle), "%s\n", name);
        if (!strstr(declared, needle)) fail_msg("%s is exported but not in store_c.h", name);
        exported++;
    }
    assert_int_equal(pclose(p), 0);
    int lines = 0;
    for (const char *q = declared; *q; q++)
        lines += *q == '\n';
    assert_int_equal(exported, lines); /* every declared function is there */
    assert_int_equal(lines, 19);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setup_arguments),
        cmocka_unit_test(test_setup_from_environment),
        cmocka_unit_test(test_calls_before_setup),
        cmocka_unit_test(test_put_get_present_missing_too_small),
        cmocka_unit_test(test_put_config_and_limits),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_batches_mixed),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_remove_by_regex_and_all),
        cmocka_unit_test(test_hostname),
        cmocka_unit_test(test_register_buffer),
        cmocka_unit_test(test_health_check_follows_server),
        cmocka_unit_test(test_sixteen_threads),
        cmocka_unit_test(test_exports_exactly_the_header),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * test_client_basic.c - libkvstore's single-key calls against a real
 * kvstored: sizes up to the maximum object, not found, -ERANGE and the size
 * probe, local validation (oversize, empty and NULL keys), eviction under
 * memory pressure, server stats, the client's own transport counters,
 * server-list parsing, error names, and that
 * the library exports only the API.
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

#define MAX_OBJECT (2u << 20) /* the server's --max-object in this test */

static int setup(void **state)
{
    static struct kvt_client_fixture f;
    if (kvt_client_setup(&f, "--memory 32M --max-object 2M") < 0) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    kvt_client_teardown(*state);
    return 0;
}

static void put_get_size(kvs_client *c, size_t len)
{
    char key[64];
    snprintf(key, sizeof(key), "size-%zu", len);
    unsigned char *val = malloc(len + 1), *buf = malloc(len + 16);
    assert_non_null(val);
    assert_non_null(buf);
    kvval_fill(val, len, key, 7);
    assert_int_equal(kvs_put(c, key, val, len), 0);
    memset(buf, 0xee, len + 16);
    assert_int_equal(kvs_get(c, key, buf, len + 16), (ssize_t)len);
    assert_memory_equal(buf, val, len);
    assert_int_equal(buf[len], 0xee);                         /* nothing written past the value */
    assert_int_equal(kvs_get(c, key, NULL, 0), (ssize_t)len); /* the size probe */
    assert_int_equal(kvs_exists(c, key), 1);
    free(val);
    free(buf);
}

static void test_sizes(void **state)
{
    struct kvt_client_fixture *f = *state;
    const size_t sizes[] = {0, 1, 4096, 1u << 20, MAX_OBJECT};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        put_get_size(f->c, sizes[i]);
}

static void test_exact_capacity_and_overwrite(void **state)
{
    struct kvt_client_fixture *f = *state;
    char buf[8];
    assert_int_equal(kvs_put(f->c, "ow", "first!", 6), 0);
    assert_int_equal(kvs_put(f->c, "ow", "second", 6), 0);
    assert_int_equal(kvs_get(f->c, "ow", buf, 6), 6);
    assert_memory_equal(buf, "second", 6);
}

static void test_not_found(void **state)
{
    struct kvt_client_fixture *f = *state;
    char buf[16];
    assert_int_equal(kvs_get(f->c, "never-put", buf, sizeof(buf)), -ENOENT);
    assert_int_equal(kvs_get(f->c, "never-put", NULL, 0), -ENOENT);
    assert_int_equal(kvs_exists(f->c, "never-put"), 0);
    assert_int_equal(kvs_remove(f->c, "never-put"), -ENOENT);
}

static void test_remove(void **state)
{
    struct kvt_client_fixture *f = *state;
    assert_int_equal(kvs_put(f->c, "doomed", "x", 1), 0);
    assert_int_equal(kvs_remove(f->c, "doomed"), 0);
    assert_int_equal(kvs_exists(f->c, "doomed"), 0);
    assert_int_equal(kvs_remove(f->c, "doomed"), -ENOENT);
}

static void test_erange_untouched_buffer(void **state)
{
    struct kvt_client_fixture *f = *state;
    char buf[8];
    assert_int_equal(kvs_put(f->c, "ten", "0123456789", 10), 0);
    memset(buf, 'z', sizeof(buf));
    assert_int_equal(kvs_get(f->c, "ten", buf, sizeof(buf)), -ERANGE);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 'z'); /* nothing truncated in */
    assert_int_equal(kvs_get(f->c, "ten", NULL, 0), 10);
    /* A real buffer of capacity 0 is not a probe: the value does not fit. */
    assert_int_equal(kvs_get(f->c, "ten", buf, 0), -ERANGE);
}

static void test_bad_keys_and_args(void **state)
{
    struct kvt_client_fixture *f = *state;
    char big[KVS_MAX_KEY + 2];
    memset(big, 'k', sizeof(big));
    big[KVS_MAX_KEY + 1] = '\0'; /* 513 bytes */
    char max[KVS_MAX_KEY + 1];
    memset(max, 'm', sizeof(max));
    max[KVS_MAX_KEY] = '\0'; /* exactly 512: fine */
    char buf[4];

    long long puts_before = kvt_server_counter(f->c, "requests_put");
    assert_int_equal(kvs_put(f->c, big, "v", 1), -E2BIG);
    assert_int_equal(kvs_get(f->c, big, buf, sizeof(buf)), -E2BIG);
    assert_int_equal(kvs_put(f->c, "", "v", 1), -EINVAL);
    assert_int_equal(kvs_put(f->c, NULL, "v", 1), -EINVAL);
    assert_int_equal(kvs_get(f->c, NULL, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(kvs_exists(f->c, ""), -EINVAL);
    assert_int_equal(kvs_remove(f->c, NULL), -EINVAL);
    assert_int_equal(kvs_put(f->c, "k", NULL, 5), -EINVAL);
    assert_int_equal(kvs_get(f->c, "k", NULL, 5), -EINVAL);
    assert_int_equal(kvs_put(NULL, "k", "v", 1), -EINVAL);
    assert_int_equal(kvs_get(NULL, "k", buf, 1), -EINVAL);
    assert_int_equal(kvs_put(f->c, "k", NULL, 0), 0); /* NULL with length 0 is an empty value */

    /* A value over the server's max object is refused without being sent. */
    unsigned char *huge = calloc(1, MAX_OBJECT + 1);
    assert_non_null(huge);
    assert_int_equal(kvs_put(f->c, "huge", huge, MAX_OBJECT + 1), -E2BIG);
    free(huge);
    /* Only the one valid put above reached the server. */
    assert_int_equal(kvt_server_counter(f->c, "requests_put"), puts_before + 1);

    assert_int_equal(kvs_put(f->c, max, "v", 1), 0);
    assert_int_equal(kvs_get(f->c, max, buf, sizeof(buf)), 1);
}

static void test_eviction_under_pressure(void **state)
{
    (void)state;
    struct kvt_server small;
    assert_int_equal(kvt_server_start(&small, 0, "--memory 4M --max-object 1M"), 0);
    kvs_client *c = kvs_open(small.addr);
    assert_non_null(c);
    enum { N = 64, LEN = 256 * 1024 }; /* 16 MiB into a 4 MiB store */
    unsigned char *val = malloc(LEN), *buf = malloc(LEN);
    assert_non_null(val);
    assert_non_null(buf);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "evict-%d", i);
        kvval_fill(val, LEN, key, (unsigned)i);
        assert_int_equal(kvs_put(c, key, val, LEN), 0); /* a cache: old keys make room */
    }
    /* The newest key is there and whole; the oldest was evicted. */
    assert_int_equal(kvs_get(c, "evict-63", buf, LEN), LEN);
    assert_true(kvval_check(buf, LEN, "evict-63", NULL));
    assert_int_equal(kvs_get(c, "evict-0", buf, LEN), -ENOENT);
    assert_true(kvt_server_counter(c, "evictions") > 0);
    int present = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "evict-%d", i);
        ssize_t n = kvs_get(c, key, buf, LEN);
        if (n == LEN) {
            assert_true(kvval_check(buf, LEN, key, NULL));
            present++;
        } else {
            assert_int_equal(n, -ENOENT);
        }
    }
    assert_in_range(present, 1, 16);
    free(val);
    free(buf);
    kvs_close(c);
    kvt_server_stop(&small);
}

static void test_server_stats_text(void **state)
{
    struct kvt_client_fixture *f = *state;
    char text[8192];
    ssize_t len = kvs_server_stats(f->c, text, sizeof(text));
    assert_true(len > 0);
    char head[128];
    snprintf(head, sizeof(head), "# server %s\n", f->srv.name);
    assert_memory_equal(text, head, strlen(head));
    assert_non_null(strstr(text, "\nconnections_current "));
    /* the transport's own counters */
    assert_non_null(
        strstr(text, kvt_over_rdma() ? "\nclient_doorbells " : "\nclient_frames_sent "));
    /* Truncated to cap - 1 and NUL-terminated; the full length is still returned. */
    char small[16];
    assert_int_equal(kvs_server_stats(f->c, small, sizeof(small)), len);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(kvs_server_stats(f->c, NULL, 0), len);
    assert_int_equal(kvs_server_stats(f->c, NULL, 5), -EINVAL);
}

struct counters_seen {
    char server[128];
    int calls;
    long long frames, doorbells;
};

static void note_counter(void *arg, const char *server, const char *name, uint64_t value)
{
    struct counters_seen *seen = arg;
    snprintf(seen->server, sizeof(seen->server), "%s", server);
    seen->calls++;
    if (strcmp(name, "frames_sent") == 0) seen->frames = (long long)value;
    if (strcmp(name, "doorbells") == 0) seen->doorbells = (long long)value;
}

/* The same counters, read locally: one call per counter, named by server, growing with use. */
static void test_client_counters(void **state)
{
    struct kvt_client_fixture *f = *state;
    struct counters_seen before = {0}, after = {0};
    assert_int_equal(kvs_client_counters(f->c, note_counter, &before), 0);
    assert_true(before.calls >= 8);
    assert_string_equal(before.server, f->srv.name);
    for (int i = 0; i < 10; i++)
        assert_int_equal(kvs_put(f->c, "counted", "v", 1), 0);
    assert_int_equal(kvs_client_counters(f->c, note_counter, &after), 0);
    if (kvt_over_rdma())
        assert_true(after.doorbells >= before.doorbells + 10);
    else
        assert_true(after.frames >= before.frames + 10);
    assert_int_equal(kvs_client_counters(NULL, note_counter, &after), -EINVAL);
    assert_int_equal(kvs_client_counters(f->c, NULL, NULL), -EINVAL);
}

static void test_register_is_noop_on_tcp(void **state)
{
    struct kvt_client_fixture *f = *state;
    char buf[64];
    assert_int_equal(kvs_register_buffer(f->c, buf, sizeof(buf)), 0);
    assert_int_equal(kvs_unregister_buffer(f->c, buf), 0);
    assert_int_equal(kvs_register_buffer(f->c, NULL, 1), -EINVAL);
}

static void test_open_server_lists(void **state)
{
    (void)state;
    const char *bad[] = {"",          "localhost",  "host:",        ":7070",
                         "host:0",    "host:65536", "host:12x",     "a:1,,b:2",
                         "ftp://h:1", "h:1,h:1",    "fe80::1:7070", "a b:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        kvs_client *c = kvs_open(bad[i]);
        if (c) fail_msg("kvs_open(\"%s\") accepted a bad list", bad[i]);
        assert_int_equal(errno, EINVAL);
    }
    const char *good[] = {"127.0.0.1:1", "tcp://127.0.0.1:1", " a:1 , tcp://b:2", "[::1]:7070",
                          "host.example:65535"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        kvs_client *c = kvs_open(good[i]); /* lazy: nothing connects yet */
        if (!c) fail_msg("kvs_open(\"%s\") refused a good list", good[i]);
        kvs_close(c);
    }
    errno = 0;
    kvs_client *r = kvs_open("rdma://127.0.0.1:1");
    if (r) /* a build with the rdma transport accepts it */
        kvs_close(r);
    else
        assert_int_equal(errno, ENOTSUP);
}

static void test_open_from_environment(void **state)
{
    struct kvt_client_fixture *f = *state;
    setenv("KVSTORE_SERVERS", f->srv.addr, 1);
    kvs_client *c = kvs_open(NULL);
    unsetenv("KVSTORE_SERVERS");
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "from-env", "1", 1), 0);
    char buf[2];
    assert_int_equal(kvs_get(f->c, "from-env", buf, sizeof(buf)), 1);
    kvs_close(c);
}

static void test_connection_refused(void **state)
{
    struct kvt_client_fixture *f = *state;
    /* A port nothing listens on: take a live server's port, then stop that server. */
    struct kvt_server gone;
    assert_int_equal(kvt_server_start(&gone, 0, "--memory 1M --max-object 64K"), 0);
    kvs_client *c = kvs_open(gone.addr);
    assert_non_null(c);
    kvt_server_stop(&gone);
    char buf[4];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), -ECONNREFUSED);
    assert_int_equal(kvs_put(c, "k", "v", 1), -ECONNREFUSED); /* within the backoff */
    assert_int_equal(kvs_flush(c), -ECONNREFUSED);
    assert_int_equal(kvs_flush(c), 0); /* reported once */
    kvs_close(c);
    (void)f;
}

static void test_strerror_names(void **state)
{
    (void)state;
    const int codes[] = {-ENOENT,       -ERANGE,     -E2BIG,     -ENOSPC, -EINVAL, -ENOMEM,
                         -ECONNREFUSED, -ECONNRESET, -ETIMEDOUT, -EIO,    -EPROTO};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = kvs_strerror(codes[i]);
        assert_non_null(s);
        assert_null(strstr(s, "unknown"));
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, kvs_strerror(codes[j]));
    }
    assert_string_equal(kvs_strerror(0), "success");
    assert_non_null(strstr(kvs_strerror(-9999), "-9999"));
}

/* libkvstore exports the kvs_* API and nothing else (so a shim sees only application calls). */
static void test_exports_only_api(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("transport-independent (make test runs it); the VM image has no nm");
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s", kvt_build_path("lib/libkvstore.so"));
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int apis = 0;
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
        if (strcmp(name, "KVSTORE_1") == 0) continue;
        if (strncmp(name, "kvs_", 4) != 0) fail_msg("libkvstore exports %s", name);
        apis++;
    }
    assert_int_equal(pclose(p), 0);
    assert_true(apis >= 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_exact_capacity_and_overwrite),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_erange_untouched_buffer),
        cmocka_unit_test(test_bad_keys_and_args),
        cmocka_unit_test(test_eviction_under_pressure),
        cmocka_unit_test(test_server_stats_text),
        cmocka_unit_test(test_client_counters),
        cmocka_unit_test(test_register_is_noop_on_tcp),
        cmocka_unit_test(test_open_server_lists),
        cmocka_unit_test(test_open_from_environment),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_strerror_names),
        cmocka_unit_test(test_exports_only_api),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_remove_matching.c - kvs_remove_matching against two real kvstored
 * nodes: the counts of both summed, POSIX extended expressions matched
 * anywhere in the key, "^" for every key, refused patterns, the server's
 * counters, and a call that fails when a server cannot answer.
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

static struct kvt_server srv[2];
static kvs_client *client, *single[2]; /* both servers; each one alone (for its counters) */

/* A STATS counter summed over both servers. */
static long long counter(const char *name)
{
    return kvt_server_counter(single[0], name) + kvt_server_counter(single[1], name);
}

static int group_setup(void **state)
{
    (void)state;
    if (kvt_server_start(&srv[0], 0, "--memory 32M") < 0) return -1;
    if (kvt_server_start(&srv[1], 0, "--memory 32M") < 0) return -1;
    char list[256];
    snprintf(list, sizeof(list), "%s,%s", srv[0].addr, srv[1].addr);
    client = kvs_open(list);
    single[0] = kvs_open(srv[0].addr);
    single[1] = kvs_open(srv[1].addr);
    return client && single[0] && single[1] ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kvs_close(client);
    kvs_close(single[0]);
    kvs_close(single[1]);
    kvt_server_stop(&srv[0]);
    kvt_server_stop(&srv[1]);
    return 0;
}

/* Stores k-0 .. k-(n-1). */
static void put_keys(int n)
{
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k-%d", i);
        assert_int_equal(kvs_put(client, key, "v", 1), 0);
    }
}

static void test_counts_summed_over_servers(void **state)
{
    (void)state;
    put_keys(200);
    long long before = counter("removed_matching"), calls = counter("requests_remove_matching");
    /* k-1, k-10..k-19, k-100..k-199: 111 keys, spread over both servers */
    assert_int_equal(kvs_remove_matching(client, "^k-1"), 111);
    assert_int_equal(kvs_exists(client, "k-150"), 0);
    assert_int_equal(kvs_exists(client, "k-2"), 1);
    assert_int_equal(kvs_remove_matching(client, "^k-1"), 0);
    assert_int_equal(counter("removed_matching"), before + 111);
    assert_int_equal(counter("requests_remove_matching"), calls + 4); /* 2 calls x 2 servers */
    /* Anywhere in the key, ERE syntax; then everything. */
    assert_int_equal(kvs_remove_matching(client, "-(2|3)[0-9]$"), 20);
    assert_int_equal(kvs_remove_matching(client, "^"), 89 - 20);
    assert_int_equal(kvs_exists(client, "k-2"), 0);
    assert_int_equal(kvs_remove_matching(client, "^"), 0);
}

static void test_refused_patterns(void **state)
{
    (void)state;
    put_keys(3);
    char longp[KVS_MAX_KEY + 2];
    memset(longp, 'x', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(kvs_remove_matching(client, "k-(0"), -EINVAL); /* does not compile */
    assert_int_equal(kvs_remove_matching(client, ""), -EINVAL);
    assert_int_equal(kvs_remove_matching(client, NULL), -EINVAL);
    assert_int_equal(kvs_remove_matching(NULL, "^"), -EINVAL);
    assert_int_equal(kvs_remove_matching(client, longp), -EINVAL);
    assert_int_equal(kvs_exists(client, "k-0"), 1); /* nothing removed */
    longp[KVS_MAX_KEY] = '\0';                      /* exactly the limit: fine */
    assert_int_equal(kvs_remove_matching(client, longp), 0);
    assert_int_equal(kvs_remove_matching(client, "^k-"), 3);
}

/* One server down: the call fails (the other one's keys went). */
static void test_server_down_fails_the_call(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("kills a server");
    put_keys(40);
    kvt_server_kill(&srv[1]);
    ssize_t rc = kvs_remove_matching(client, "^k-");
    assert_true(rc < 0);
    assert_int_not_equal(rc, -EINVAL);
    assert_int_equal(kvt_server_restart(&srv[1]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_summed_over_servers),
        cmocka_unit_test(test_refused_patterns),
        cmocka_unit_test(test_server_down_fails_the_call),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * test_client_multiserver.c - one client over two kvstored nodes: a batch is
 * split across both, every key lives on exactly one of them, a client
 * listing the servers in another order finds the same keys, and with one
 * node dead only its keys fail while the other's keep working.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"

enum { N = 200, LEN = 1024 };

static char names[N][32];
static const char *keys[N];
static unsigned char vals[N][LEN], outs[N][LEN];
static const void *vptr[N];
static void *bptr[N];
static size_t lens[N];

static void fill_keys(void)
{
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "multi-%d", i);
        keys[i] = names[i];
        kvval_fill(vals[i], LEN, names[i], 9);
        vptr[i] = vals[i];
        bptr[i] = outs[i];
        lens[i] = LEN;
    }
}

static void test_split_and_one_dead(void **state)
{
    (void)state;
    struct kvt_server a, b;
    assert_int_equal(kvt_server_start(&a, 0, "--memory 16M --max-object 1M"), 0);
    assert_int_equal(kvt_server_start(&b, 0, "--memory 16M --max-object 1M"), 0);
    char list[160], reversed[160];
    snprintf(list, sizeof(list), "%s,%s", a.addr, b.addr);
    snprintf(reversed, sizeof(reversed), "%s, %s", b.url, a.addr); /* one scheme spelled out */
    kvs_client *c = kvs_open(list);
    kvs_client *only_a = kvs_open(a.addr), *only_b = kvs_open(b.addr);
    assert_non_null(c);
    assert_non_null(only_a);
    assert_non_null(only_b);
    fill_keys();

    int st[N];
    assert_int_equal(kvs_batch_put(c, N, keys, vptr, lens, st), N);

    /* Each key on exactly one node, and both nodes hold a fair part. */
    int ex_a[N], ex_b[N], on_b = 0;
    assert_true(kvs_batch_exists(only_a, N, keys, ex_a) == N);
    assert_true(kvs_batch_exists(only_b, N, keys, ex_b) == N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(ex_a[i] + ex_b[i], 1);
        on_b += ex_b[i];
    }
    assert_in_range(on_b, N / 4, N * 3 / 4);

    /* The same servers listed in another order route every key the same way. */
    kvs_client *r = kvs_open(reversed);
    assert_non_null(r);
    ssize_t res[N];
    assert_int_equal(kvs_batch_get(r, N, keys, bptr, lens, res), N);
    for (int i = 0; i < N; i++)
        assert_true(kvval_check(outs[i], LEN, names[i], NULL));
    kvs_close(r);

    /* Stats come from both, one block each. */
    char text[32768];
    assert_true(kvs_server_stats(c, text, sizeof(text)) > 0);
    char head[128];
    snprintf(head, sizeof(head), "# server %s\n", a.name);
    assert_non_null(strstr(text, head));
    snprintf(head, sizeof(head), "# server %s\n", b.name);
    assert_non_null(strstr(text, head));

    /* B dies: exactly B's keys fail, with a transport error; A's come back whole. */
    kvt_server_kill(&b);
    memset(outs, 0, sizeof(outs));
    int nok = kvs_batch_get(c, N, keys, bptr, lens, res);
    assert_int_equal(nok, N - on_b);
    for (int i = 0; i < N; i++) {
        if (ex_b[i]) {
            if (res[i] != -ECONNRESET && res[i] != -ECONNREFUSED && res[i] != -EIO)
                fail_msg("key on the dead node: %zd (%s)", res[i], kvs_strerror((int)res[i]));
        } else {
            assert_int_equal(res[i], LEN);
            assert_true(kvval_check(outs[i], LEN, names[i], NULL));
        }
    }
    /* Stats still answer for the live node and name the dead one's error. */
    ssize_t tl = kvs_server_stats(c, text, sizeof(text));
    assert_true(tl > 0);
    assert_non_null(strstr(text, "# error "));

    /* B is back (empty): its keys can be written again. */
    assert_int_equal(kvt_server_restart(&b), 0);
    int ok = -1;
    for (int i = 0; i < 40 && ok != N; i++) {
        ok = kvs_batch_put(c, N, keys, vptr, lens, st);
        if (ok != N) usleep(100 * 1000);
    }
    assert_int_equal(ok, N);
    assert_int_equal(kvs_batch_get(c, N, keys, bptr, lens, res), N);

    kvs_close(only_a);
    kvs_close(only_b);
    kvs_close(c);
    kvt_server_stop(&a);
    kvt_server_stop(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_one_dead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

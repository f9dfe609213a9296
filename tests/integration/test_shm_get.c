/*
 * test_shm_get.c - a GET through the shared region (docs/shm.md "Copies per
 * value", "The region"): a batch GET that times out while kvstored cannot
 * answer (SIGSTOPped) fails with -ETIMEDOUT; its buffers are not written,
 * neither then nor once kvstored goes on and answers late; and the region's
 * room it held comes back (later GETs of the same size all go through the
 * region). Many threads getting values on one connection: test_shm_threads.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "values.h"

/* ---- a GET timing out while its reply is in flight ---- */

enum { TK = 4, TLEN = 32000, TCAP = 32 * 1024 }; /* 4 x 32 KiB: half of a 256 KiB region */

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void test_timed_out_get_leaves_buffers_and_room(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("SIGSTOPs a local kvstored to hold a shared-memory reply");
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    setenv("KVSTORE_SHM_SIZE", "256K", 1);
    setenv("KVSTORE_TIMEOUT_MS", "400", 1);
    kvs_client *c = kvs_open(s.addr); /* auto: the local socket, with a region */
    unsetenv("KVSTORE_SHM_SIZE");
    unsetenv("KVSTORE_TIMEOUT_MS");
    assert_non_null(c);

    char names[TK][16];
    const char *keys[TK];
    void *vals[TK], *bufs[TK];
    size_t lens[TK], caps[TK];
    int st[TK];
    ssize_t got[TK];
    for (int i = 0; i < TK; i++) {
        snprintf(names[i], sizeof(names[i]), "to-%d", i);
        keys[i] = names[i];
        vals[i] = malloc(TLEN);
        bufs[i] = malloc(TCAP);
        assert_non_null(vals[i]);
        assert_non_null(bufs[i]);
        kvval_fill(vals[i], TLEN, names[i], 1);
        lens[i] = TLEN;
        caps[i] = TCAP;
    }
    assert_int_equal(kvs_batch_put(c, TK, keys, (const void *const *)vals, lens, st), TK);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    long long fallbacks = kvt_server_counter(c, "client_shm_fallbacks");
    long long shm_gets = kvt_server_counter(c, "requests_shm_get");

    for (int i = 0; i < TK; i++)
        memset(bufs[i], 0xab, TCAP);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    uint64_t t0 = kvs_now_ms();
    assert_int_equal(kvs_batch_get(c, TK, keys, bufs, caps, got), 0);
    uint64_t took = kvs_now_ms() - t0;
    for (int i = 0; i < TK; i++)
        assert_int_equal(got[i], -ETIMEDOUT);
    assert_true(took >= 350 && took < 5000);
    for (int i = 0; i < TK; i++)
        assert_true(all_bytes(bufs[i], TCAP, 0xab));

    /* kvstored goes on: it copies the values into the region and answers, late. */
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    usleep(500 * 1000);
    for (int i = 0; i < TK; i++)
        assert_true(all_bytes(bufs[i], TCAP, 0xab)); /* nothing written after the timeout */
    assert_int_equal(kvt_server_counter(c, "requests_shm_get"), shm_gets + 1);

    /*
     * Its room came back: each of these needs half the region, so with the
     * timed-out run still held the second would find none and go through
     * the socket.
     */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < TK; i++)
            memset(bufs[i], 0, TCAP);
        assert_int_equal(kvs_batch_get(c, TK, keys, bufs, caps, got), TK);
        for (int i = 0; i < TK; i++) {
            unsigned version = 0;
            assert_int_equal(got[i], TLEN);
            assert_true(kvval_check(bufs[i], TLEN, names[i], &version));
            assert_int_equal(version, 1);
        }
    }
    assert_int_equal(kvt_server_counter(c, "client_shm_fallbacks"), fallbacks);
    assert_int_equal(kvt_server_counter(c, "requests_shm_get"), shm_gets + 1 + 4);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1); /* the same connection */
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    for (int i = 0; i < TK; i++) {
        free(vals[i]);
        free(bufs[i]);
    }
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_out_get_leaves_buffers_and_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_transport_auto.c - KVSTORE_TRANSPORT=auto on a machine without an
 * RDMA device (transport/auto.c): a bare host:port is served over TCP,
 * with the choice and its reason said once at info level; until a choice
 * can be made (no server), calls fail as TCP's do. On a machine with a
 * device the cases skip (the soft-RoCE VM tests auto over RDMA:
 * tests/rdma/test_rdma_auth.c test_auto_with_secret).
 */
#include <dirent.h>
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

/* 1 if the kernel lists an RDMA device (the cases then skip). */
static int rdma_device_listed(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0;
}

static int setup(void **state)
{
    (void)state;
    /* Read once per process by libkvstore, before its first call. */
    setenv("KVSTORE_TRANSPORT", "auto", 1);
    setenv("KVSTORE_LOG", "info", 1);
    return 0;
}

static char *capture_end(struct kvt_capture *cap)
{
    char *text = kvt_capture_end(cap);
    assert_non_null(text);
    return text;
}

static void test_auto_without_device_takes_tcp(void **state)
{
    (void)state;
    if (rdma_device_listed() || kvt_over_rdma()) {
        fprintf(stderr, "skipped: this machine has an RDMA device\n");
        skip();
        return;
    }
    struct kvt_server srv;
    assert_int_equal(kvt_server_start(&srv, 0, "--memory 8M"), 0);
    struct kvt_capture cap;
    assert_int_equal(kvt_capture_begin(&cap, "/tmp"), 0);
    kvs_client *c = kvs_open(srv.addr); /* bare host:port: KVSTORE_TRANSPORT decides */
    int put = c ? kvs_put(c, "auto-key", "value", 5) : -1;
    char buf[8];
    ssize_t got = c ? kvs_get(c, "auto-key", buf, sizeof(buf)) : -1;
    int again = c ? kvs_put(c, "auto-key-2", "v", 1) : -1;
    char *log = capture_end(&cap);
    assert_non_null(c);
    assert_int_equal(put, 0);
    assert_int_equal(got, 5);
    assert_memory_equal(buf, "value", 5);
    assert_int_equal(again, 0);
    /* the choice is said once, with its reason */
    const char *line = strstr(log, "transport tcp (no local RDMA device)");
    assert_non_null(line);
    assert_null(strstr(line + 1, "transport tcp"));
    assert_null(strstr(log, "transport rdma"));
    free(log);
    /* the server saw TCP requests */
    assert_true(kvt_server_counter(c, "keys_put") >= 2);
    kvs_close(c);
    kvt_server_stop(&srv);
}

static void test_auto_before_a_choice_fails_as_tcp(void **state)
{
    (void)state;
    if (rdma_device_listed() || kvt_over_rdma()) {
        fprintf(stderr, "skipped: this machine has an RDMA device\n");
        skip();
        return;
    }
    /* A port nothing listens on: take a live server's port, then stop that server. */
    struct kvt_server gone;
    assert_int_equal(kvt_server_start(&gone, 0, "--memory 1M"), 0);
    int port = gone.port;
    kvs_client *c = kvs_open(gone.addr);
    assert_non_null(c);
    kvt_server_stop(&gone);
    assert_int_equal(kvs_put(c, "k", "v", 1), -ECONNREFUSED);
    /* The server comes back on the same port: the choice is made then, and TCP serves. */
    assert_int_equal(kvt_server_start(&gone, port, "--memory 1M"), 0);
    int rc = -1;
    for (int i = 0; i < 50 && rc != 0; i++) { /* past the reconnect backoff */
        rc = kvs_put(c, "k", "v", 1);
        if (rc != 0) usleep(20000);
    }
    assert_int_equal(rc, 0);
    char buf[2];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), 1);
    kvs_close(c);
    kvt_server_stop(&gone);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_without_device_takes_tcp),
        cmocka_unit_test(test_auto_before_a_choice_fails_as_tcp),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

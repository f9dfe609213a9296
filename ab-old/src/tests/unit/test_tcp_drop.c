/*
 * test_tcp_drop.c - the TCP transport's two ways for a connection to end:
 * dropped on purpose (disconnect: the auto transport does it when it
 * switches to RDMA) is said at debug level and not counted as lost; lost
 * (the server goes away) is a warning and counted in connections_lost.
 * Against a real kvstored on 127.0.0.1, TCP only (--unix none).
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

#include "kvtest.h"
#include "log.h"
#include "transport.h"

static struct kvt_server srv;
static char dir[] = "/tmp/kvb-tcp-drop-XXXXXX";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir)) return -1;
    return kvt_server_start(&srv, 0, "--memory 16M --unix none");
}

static int teardown(void **state)
{
    (void)state;
    kvt_server_stop(&srv);
    rmdir(dir);
    return 0;
}

static void find_lost(void *arg, const char *name, uint64_t value)
{
    if (strcmp(name, "connections_lost") == 0) *(uint64_t *)arg = value;
}

static uint64_t connections_lost(struct kvs_conn *conn)
{
    uint64_t n = UINT64_MAX;
    kvs_tcp_transport.counters(conn, find_lost, &n);
    assert_true(n != UINT64_MAX);
    return n;
}

static struct kvs_conn *open_conn(void)
{
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct kvs_endpoint ep;
    assert_int_equal(kvs_parse_endpoint(addr, strlen(addr), 0, &ep), 0);
    snprintf(ep.scheme, sizeof(ep.scheme), "tcp");
    struct kvs_transport_config cfg = {.timeout_ms = 5000, .connect_timeout_ms = 5000};
    struct kvs_conn *conn;
    assert_int_equal(kvs_tcp_transport.create(&ep, &cfg, &conn), 0);
    return conn;
}

static void test_disconnect_is_no_loss(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    struct kvs_limits lim;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(kvs_tcp_transport.connect(conn, &lim), 0);
        struct kvt_capture cap;
        assert_int_equal(kvt_capture_begin(&cap, dir), 0);
        kvs_tcp_transport.disconnect(conn);
        kvs_tcp_transport.disconnect(conn); /* idempotent */
        char *said = kvt_capture_end(&cap);
        assert_non_null(said);
        if (strstr(said, "lost")) fail_msg("a disconnect on purpose was reported as: %s", said);
        free(said);
        assert_int_equal(connections_lost(conn), 0);
    }
    kvs_tcp_transport.destroy(conn);
}

/* The server killed under a live connection: one warning, one loss counted. */
static void test_server_gone_is_a_loss(void **state)
{
    (void)state;
    struct kvs_conn *conn = open_conn();
    struct kvs_limits lim;
    assert_int_equal(kvs_tcp_transport.connect(conn, &lim), 0);
    /* a disconnect on purpose first: its mark must not hide the later real loss */
    kvs_tcp_transport.disconnect(conn);
    assert_int_equal(kvs_tcp_transport.connect(conn, &lim), 0);
    struct kvt_capture cap;
    assert_int_equal(kvt_capture_begin(&cap, dir), 0);
    kvt_server_kill(&srv);
    for (int i = 0; i < 500 && connections_lost(conn) == 0; i++)
        usleep(10 * 1000);
    char *said = kvt_capture_end(&cap);
    assert_non_null(said);
    assert_int_equal(connections_lost(conn), 1);
    if (!strstr(said, "connection lost")) fail_msg("no warning for a lost connection: %s", said);
    free(said);
    kvs_tcp_transport.destroy(conn);
    assert_int_equal(kvt_server_restart(&srv), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disconnect_is_no_loss),
        cmocka_unit_test(test_server_gone_is_a_loss),
    };
    return cmocka_run_group_tests_name("tcp_drop", tests, setup, teardown);
}

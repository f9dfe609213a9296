/*
 * test_parse.c - the one grammar (common/parse.c) for counts, sizes,
 * durations and endpoints: every documented form is accepted with its value,
 * junk is refused and leaves the output untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>

#include "parse.h"

static void test_uint(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(kvs_parse_uint("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(kvs_parse_uint("128", &v), 0);
    assert_int_equal(v, 128);
    assert_int_equal(kvs_parse_uint("18446744073709551615", &v), 0);
    assert_true(v == UINT64_MAX);
    const char *bad[] = {"",  "-1", "+1", " 1", "1 ", "0x10", "1e3", "4K", "18446744073709551616",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        v = 7;
        assert_int_equal(kvs_parse_uint(bad[i], &v), -EINVAL);
        assert_int_equal(v, 7);
    }
    assert_int_equal(kvs_parse_uint(NULL, &v), -EINVAL);
}

static void test_sizes_accepted(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"10B", 10},
        {"10b", 10},
        {"4K", 4096},
        {"4k", 4096},
        {"4KB", 4096},
        {"4kb", 4096},
        {"4KiB", 4096},
        {"4kib", 4096},
        {"64KiB", 64 << 10},
        {"1M", 1 << 20},
        {"1MB", 1 << 20},
        {"4MiB", 4 << 20},
        {"2G", 2ull << 30},
        {"2GB", 2ull << 30},
        {"1GiB", 1ull << 30},
        {"17179869183G", 17179869183ull << 30}, /* the largest whole G below 2^64 */
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        assert_int_equal(kvs_parse_size(ok[i].s, &v), 0);
        assert_true(v == ok[i].v);
    }
}

static void test_sizes_refused(void **state)
{
    (void)state;
    const char *bad[] = {"",
                         "K",
                         "B",
                         "4X",
                         "4KX",
                         "4Kjunk",
                         "4KiBB",
                         "4iB",
                         "-1",
                         "+1",
                         " 4K",
                         "4K ",
                         "4 K",
                         "1.5M",
                         "0x10",
                         "4T",
                         "99999999999999999999",
                         "18446744073709551615K",
                         "17179869184G",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        uint64_t v = 7;
        assert_int_equal(kvs_parse_size(bad[i], &v), -EINVAL);
        assert_int_equal(v, 7);
    }
    uint64_t v;
    assert_int_equal(kvs_parse_size(NULL, &v), -EINVAL);
}

static void test_durations_accepted(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t bare, v;
    } ok[] = {
        {"50", 1000, 50000}, /* bare = the caller's unit */
        {"50us", 1000000, 50000},
        {"50US", 1000000, 50000},
        {"2ms", 1000, 2000000},
        {"1s", 1000, 1000000000},
        {"700ns", 1000, 700},
        {"0", 1000, 0},
        {"0.5", 1000000000, 500000000},
        {"1.5ms", 1, 1500000},
        {"2.000000000s", 1, 2000000000},
        {"0.000000001s", 1, 1},
        {"1.25us", 1, 1250},
        {"18446744073709551615ns", 1000, UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        assert_int_equal(kvs_parse_duration(ok[i].s, ok[i].bare, &v), 0);
        assert_true(v == ok[i].v);
    }
}

static void test_durations_refused(void **state)
{
    (void)state;
    const char *bad[] = {"",
                         "ms",
                         "5m",
                         "5 ms",
                         "-5",
                         "+5",
                         " 5",
                         "5msx",
                         "1e3",
                         "0x10",
                         ".5",
                         "5.",
                         "5..0",
                         "1.5ns",
                         "0.1ns",
                         "1.0000000001s",
                         "4X",
                         "18446744073709551615s",
                         "18446744073709551615.5ns",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        uint64_t v = 7;
        assert_int_equal(kvs_parse_duration(bad[i], 1000, &v), -EINVAL);
        assert_int_equal(v, 7);
    }
    uint64_t v;
    assert_int_equal(kvs_parse_duration(NULL, 1000, &v), -EINVAL);
}

static void test_duration_units(void **state)
{
    (void)state;
    uint64_t ms = 0;
    assert_int_equal(kvs_parse_duration_units("2500", 1000000, &ms), 0); /* bare: ms */
    assert_int_equal(ms, 2500);
    assert_int_equal(kvs_parse_duration_units("2s", 1000000, &ms), 0);
    assert_int_equal(ms, 2000);
    assert_int_equal(kvs_parse_duration_units("1.5s", 1000000, &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(kvs_parse_duration_units("3000us", 1000000, &ms), 0);
    assert_int_equal(ms, 3);
    ms = 7;
    assert_int_equal(kvs_parse_duration_units("1500us", 1000000, &ms), -EINVAL); /* 1.5 ms */
    assert_int_equal(kvs_parse_duration_units("10x", 1000000, &ms), -EINVAL);
    assert_int_equal(ms, 7);
}

/* Parses s (whole string) and checks host, port, name and scheme. */
static void endpoint_ok(const char *s, unsigned flags, const char *scheme, const char *host,
                        const char *port, const char *name)
{
    struct kvs_endpoint ep;
    assert_int_equal(kvs_parse_endpoint(s, strlen(s), flags, &ep), 0);
    assert_string_equal(ep.scheme, scheme);
    assert_string_equal(ep.host, host);
    assert_string_equal(ep.port, port);
    assert_string_equal(ep.name, name);
    assert_int_equal(ep.portno, strtoul(port, NULL, 10));
}

static void test_endpoints_accepted(void **state)
{
    (void)state;
    endpoint_ok("127.0.0.1:7070", 0, "", "127.0.0.1", "7070", "127.0.0.1:7070");
    endpoint_ok("localhost:1", 0, "", "localhost", "1", "localhost:1");
    endpoint_ok("[::1]:7070", 0, "", "::1", "7070", "[::1]:7070");
    endpoint_ok("[fe80::1%eth0]:65535", 0, "", "fe80::1%eth0", "65535", "[fe80::1%eth0]:65535");
    endpoint_ok("h:07070", 0, "", "h", "7070", "h:7070"); /* the port's value names it */
    endpoint_ok("tcp://a:1", KVS_EP_SCHEME, "tcp", "a", "1", "a:1");
    endpoint_ok("rdma://10.0.0.1:7071", KVS_EP_SCHEME, "rdma", "10.0.0.1", "7071", "10.0.0.1:7071");
    endpoint_ok("rdma://[::1]:9", KVS_EP_SCHEME, "rdma", "::1", "9", "[::1]:9");
    endpoint_ok("0.0.0.0:0", KVS_EP_PORT0, "", "0.0.0.0", "0", "0.0.0.0:0");

    /* A local socket: its path is the routing name; no host, no port. */
    struct kvs_endpoint ep;
    const unsigned loc = KVS_EP_SCHEME | KVS_EP_LOCAL;
    assert_int_equal(kvs_parse_endpoint("unix:///run/k/7070.sock", 23, loc, &ep), 0);
    assert_string_equal(ep.scheme, "unix");
    assert_string_equal(ep.path, "/run/k/7070.sock");
    assert_string_equal(ep.name, "/run/k/7070.sock");
    assert_string_equal(ep.host, "");
    assert_int_equal(ep.portno, 0);
    assert_int_equal(kvs_parse_endpoint("shm:///s,x", 8, loc, &ep), 0); /* len bounds it */
    assert_string_equal(ep.scheme, "shm");
    assert_string_equal(ep.path, "/s");
    char longpath[120] = "unix:///";
    memset(longpath + 8, 'p', 106); /* a 107-byte path fits a sockaddr_un, 108 does not */
    assert_int_equal(kvs_parse_endpoint(longpath, strlen(longpath), loc, &ep), 0);
    assert_int_equal(strlen(ep.path), 107);
    longpath[114] = 'p';
    assert_int_equal(kvs_parse_endpoint(longpath, strlen(longpath), loc, &ep), -EINVAL);

    /* len bounds the text: the rest of a server list is not read. */
    const char *list = "a:1,b:2";
    assert_int_equal(kvs_parse_endpoint(list, 3, 0, &ep), 0);
    assert_string_equal(ep.name, "a:1");
}

static void test_endpoints_refused(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        unsigned flags;
    } bad[] = {
        {"", KVS_EP_SCHEME},
        {"host", KVS_EP_SCHEME},
        {":7070", KVS_EP_SCHEME},
        {"host:", KVS_EP_SCHEME},
        {"host:0", KVS_EP_SCHEME}, /* port 0 only where listening allows it */
        {"host:65536", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host:070700", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host:-1", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host:+1", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host: 1", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host:1 ", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"host:1x", KVS_EP_SCHEME | KVS_EP_PORT0},
        {"::1:7070", KVS_EP_SCHEME}, /* IPv6 needs brackets */
        {"[::1:7070", KVS_EP_SCHEME},
        {"[]:7070", KVS_EP_SCHEME},
        {"a]:7070", KVS_EP_SCHEME},
        {"a b:7070", KVS_EP_SCHEME},
        {" a:7070", KVS_EP_SCHEME},
        {"a/b:7070", KVS_EP_SCHEME},
        {"a,b:7070", KVS_EP_SCHEME},
        {"udp://a:7070", KVS_EP_SCHEME},
        {"TCP://a:7070", KVS_EP_SCHEME},
        {"://a:7070", KVS_EP_SCHEME},
        {"tcp://a:7070", 0}, /* no scheme where none is allowed (kvstored --listen) */
        {"tcp://", KVS_EP_SCHEME},
        {"unix:///run/k.sock", KVS_EP_SCHEME}, /* local sockets only where allowed */
        {"unix:///run/k.sock", KVS_EP_LOCAL},
        {"unix://run/k.sock", KVS_EP_SCHEME | KVS_EP_LOCAL}, /* relative */
        {"unix://", KVS_EP_SCHEME | KVS_EP_LOCAL},
        {"unix:///", KVS_EP_SCHEME | KVS_EP_LOCAL},
        {"shm:///a b", KVS_EP_SCHEME | KVS_EP_LOCAL},
        {"shm:///a,b", KVS_EP_SCHEME | KVS_EP_LOCAL},
        {"UNIX:///a", KVS_EP_SCHEME | KVS_EP_LOCAL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct kvs_endpoint ep;
        memset(&ep, 0x5a, sizeof(ep));
        assert_int_equal(kvs_parse_endpoint(bad[i].s, strlen(bad[i].s), bad[i].flags, &ep),
                         -EINVAL);
        assert_int_equal(ep.host[0], 0x5a);
    }
    char longhost[300];
    memset(longhost, 'a', 256);
    strcpy(longhost + 256, ":1");
    struct kvs_endpoint ep;
    assert_int_equal(kvs_parse_endpoint(longhost, strlen(longhost), 0, &ep), -EINVAL);
    assert_int_equal(kvs_parse_endpoint(longhost + 1, strlen(longhost + 1), 0, &ep), 0);
    assert_int_equal(strlen(ep.host), 255);
    assert_int_equal(kvs_parse_endpoint(NULL, 0, 0, &ep), -EINVAL);
}

/* The items of list, joined by '|' to compare with want. */
static void list_is(const char *list, const char *want)
{
    char got[128] = "";
    const char *p = list, *item;
    size_t len, n = 0;
    while (kvs_list_next(&p, &item, &len)) {
        size_t at = strlen(got);
        snprintf(got + at, sizeof(got) - at, "%s%.*s", n++ ? "|" : "", (int)len, item);
    }
    assert_null(p);
    assert_string_equal(got, want);
}

static void test_listening_line(void **state)
{
    (void)state;
    struct kvs_endpoint ep;
    assert_int_equal(kvs_parse_listening("listening on 127.0.0.1:41234\n", "listening on ", &ep),
                     0);
    assert_string_equal(ep.host, "127.0.0.1");
    assert_int_equal(ep.portno, 41234);
    assert_int_equal(kvs_parse_listening("rdma listening on [::1]:7071", "rdma listening on ", &ep),
                     0);
    assert_string_equal(ep.host, "::1");
    assert_int_equal(ep.portno, 7071);
    assert_int_equal(kvs_parse_listening("kvstored: starting\n", "listening on ", &ep), -ENOENT);
    assert_int_equal(kvs_parse_listening("listening on 127.0.0.1:\n", "listening on ", &ep),
                     -EINVAL);
    assert_int_equal(kvs_parse_listening("listening on 127.0.0.1:80 x\n", "listening on ", &ep),
                     -EINVAL);
}

static void test_lists(void **state)
{
    (void)state;
    list_is("a:1", "a:1");
    list_is("a:1,b:2", "a:1|b:2");
    list_is(" a:1 ,\tb:2\t", "a:1|b:2");
    list_is("", "");     /* one empty item, for the caller to refuse */
    list_is("a,", "a|"); /* a trailing comma is one more, empty, item */
    list_is(",,", "||");
    const char *p = NULL, *item;
    size_t len;
    assert_int_equal(kvs_list_next(&p, &item, &len), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uint),
        cmocka_unit_test(test_sizes_accepted),
        cmocka_unit_test(test_sizes_refused),
        cmocka_unit_test(test_durations_accepted),
        cmocka_unit_test(test_durations_refused),
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_endpoints_accepted),
        cmocka_unit_test(test_endpoints_refused),
        cmocka_unit_test(test_listening_line),
        cmocka_unit_test(test_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

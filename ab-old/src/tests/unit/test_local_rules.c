/*
 * test_local_rules.c - common/local.c, the rules both kvstored and the
 * client follow for the same-host socket: the default path (which
 * directory wins, the port and network namespace in the name, a path too
 * long for a sockaddr_un refused), which addresses are this host's, and
 * the SO_PEERCRED policy on a socketpair (our own uid is trusted).
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "local.h"

static void test_default_path(void **state)
{
    (void)state;
    char p[108], want[128];
    struct stat st;
    int ns = stat("/proc/self/ns/net", &st) == 0;
    setenv("KVSTORE_RUNTIME_DIR", "/run/kvs", 1);
    setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
    assert_int_equal(kvs_local_default_path(7070, p, sizeof(p)), 0);
    if (ns)
        snprintf(want, sizeof(want), "/run/kvs/kvstored-7070-%llu.sock",
                 (unsigned long long)st.st_ino);
    else
        snprintf(want, sizeof(want), "/run/kvs/kvstored-7070.sock");
    assert_string_equal(p, want);
    unsetenv("KVSTORE_RUNTIME_DIR");
    assert_int_equal(kvs_local_default_path(1, p, sizeof(p)), 0);
    assert_true(strncmp(p, "/run/user/7/kvstored-1", 22) == 0);
    setenv("XDG_RUNTIME_DIR", "", 1); /* empty counts as unset */
    assert_int_equal(kvs_local_default_path(65535, p, sizeof(p)), 0);
    assert_true(strncmp(p, "/tmp/kvstored-65535", 19) == 0);
    char longdir[200];
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    setenv("KVSTORE_RUNTIME_DIR", longdir, 1);
    char big[512];
    assert_int_equal(kvs_local_default_path(7070, big, sizeof(big)), -ENAMETOOLONG);
    unsetenv("KVSTORE_RUNTIME_DIR");
    assert_int_equal(kvs_local_default_path(7070, p, 10), -ENAMETOOLONG);
}

static int here4(const char *a)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
    return kvs_local_addr_is_here((struct sockaddr *)&sa);
}

static void test_addr_is_here(void **state)
{
    (void)state;
    assert_int_equal(here4("127.0.0.1"), 1);
    assert_int_equal(here4("127.1.2.3"), 1);
    assert_int_equal(here4("192.0.2.77"), 0); /* TEST-NET-1: on no interface of a test host */
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    assert_int_equal(kvs_local_addr_is_here((struct sockaddr *)&sa6), 1);
    assert_int_equal(inet_pton(AF_INET6, "2001:db8::1", &sa6.sin6_addr), 1);
    assert_int_equal(kvs_local_addr_is_here((struct sockaddr *)&sa6), 0);
    struct sockaddr un = {.sa_family = AF_UNIX};
    assert_int_equal(kvs_local_addr_is_here(&un), 0);
}

static void test_peer_policy(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    unsigned uid = 12345;
    assert_int_equal(kvs_local_peer_trusted(sv[0], &uid), 1); /* ourselves */
    assert_int_equal(uid, (unsigned)geteuid());
    close(sv[0]);
    close(sv[1]);
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_true(kvs_local_peer_trusted(p[0], NULL) < 0); /* not a socket: cannot be told */
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_path),
        cmocka_unit_test(test_addr_is_here),
        cmocka_unit_test(test_peer_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

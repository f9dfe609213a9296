/*
 * test_wrong_way.c - errors that say what is wrong: each mistake a new user
 * makes gets its own status and a message at the default log level.
 *   - a host name that does not resolve: -EHOSTUNREACH, "cannot resolve";
 *   - rdma:// on a machine with no RDMA device: -ENODEV, "no RDMA device";
 *   - KVSTORE_TRANSPORT=udp: kvs_open fails with EINVAL naming the variable;
 *   - a port that is not a kvstored: a peer sending other bytes gives
 *     -EPROTO "not a kvstored", a silent one -ETIMEDOUT "no HELLO reply".
 * Every peer listens on 127.0.0.1.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

/* One put on a client of servers; returns its status, *log what the library printed. */
static int put_once(const char *servers, char **log)
{
    struct kvt_capture cap;
    assert_int_equal(kvt_capture_begin(&cap, "/tmp"), 0);
    kvs_client *c = kvs_open(servers);
    int rc = c ? kvs_put(c, "k", "v", 1) : -errno;
    if (c) kvs_close(c);
    *log = kvt_capture_end(&cap);
    assert_non_null(*log);
    return rc;
}

static void test_unresolvable_host(void **state)
{
    (void)state;
    char *log;
    int rc = put_once("tcp://no-such-host.invalid:7000", &log);
    assert_int_equal(rc, -EHOSTUNREACH);
    assert_non_null(strstr(log, "cannot resolve"));
    assert_non_null(strstr(log, "no-such-host.invalid"));
    assert_string_equal(kvs_strerror(rc), "cannot resolve or reach the host");
    free(log);
}

/* True if this machine has an RDMA device (then the no-device test has nothing to show). */
static int have_rdma_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0;
}

static void test_rdma_without_device(void **state)
{
    (void)state;
    if (have_rdma_device()) skip();
    char *log;
    int rc = put_once("rdma://127.0.0.1:1", &log);
    int built = rc != -ENOTSUP; /* a build without RDMA says so at kvs_open */
    int said = strstr(log, built ? "no RDMA device" : "no such transport") != NULL;
    free(log);
    assert_int_equal(rc, built ? -ENODEV : -ENOTSUP);
    assert_true(said);
}

static void test_unknown_transport_refused(void **state)
{
    (void)state;
    setenv("KVSTORE_TRANSPORT", "udp", 1);
    char *log;
    int rc = put_once("127.0.0.1:1", &log);
    unsetenv("KVSTORE_TRANSPORT");
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(log, "KVSTORE_TRANSPORT=udp"));
    assert_non_null(strstr(log, "tcp, rdma or auto"));
    free(log);
}

/* A listener on 127.0.0.1; returns its fd, *port its port. */
static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 8), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Accepts one connection and answers like an SSH server, then closes it. */
static void *ssh_like(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) {
        static const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
        ssize_t n = write(fd, banner, sizeof(banner) - 1);
        (void)n;
        char buf[64];
        while (read(fd, buf, sizeof(buf)) > 0) {
        }
        close(fd);
    }
    return NULL;
}

static void test_peer_not_a_kvstored(void **state)
{
    (void)state;
    int port, lfd = listen_loopback(&port);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ssh_like, &lfd), 0);
    char servers[64], *log;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", port);
    setenv("KVSTORE_CONNECT_TIMEOUT_MS", "2000", 1);
    int rc = put_once(servers, &log);
    unsetenv("KVSTORE_CONNECT_TIMEOUT_MS");
    pthread_join(t, NULL);
    close(lfd);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(strstr(log, "not a kvstored"));
    free(log);
}

/* A peer that accepts (the kernel's backlog does) and never speaks. */
static void test_silent_peer(void **state)
{
    (void)state;
    int port, lfd = listen_loopback(&port);
    char servers[64], *log;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", port);
    setenv("KVSTORE_CONNECT_TIMEOUT_MS", "300", 1);
    int rc = put_once(servers, &log);
    unsetenv("KVSTORE_CONNECT_TIMEOUT_MS");
    close(lfd);
    assert_int_equal(rc, -ETIMEDOUT);
    assert_non_null(strstr(log, "no HELLO reply"));
    assert_non_null(strstr(log, "is this a kvstored?"));
    free(log);
}

int main(void)
{
    unsetenv("KVSTORE_TRANSPORT");
    unsetenv("KVSTORE_LOG");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unresolvable_host),
        cmocka_unit_test(test_rdma_without_device),
        cmocka_unit_test(test_unknown_transport_refused),
        cmocka_unit_test(test_peer_not_a_kvstored),
        cmocka_unit_test(test_silent_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

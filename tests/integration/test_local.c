/*
 * test_local.c - kvstored's same-host socket: an explicit unix:// (and
 * shm://) endpoint, KVSTORE_TRANSPORT=auto finding the default socket of a
 * 127.0.0.1 server and KVSTORE_TRANSPORT=tcp not, --unix none, a stale
 * socket left by a SIGKILLed server taken over on restart (the client
 * reconnects over it), a server killed with a batch in flight (every op
 * errors, the client reconnects), a raw local peer sending a bad frame
 * (refused, counted, another client unaffected), --auth-file on the local
 * socket, and (as root) a peer of another uid refused by SO_PEERCRED.
 */
#include <errno.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "rawwire.h"

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    return kvt_private_dir(dir, sizeof(dir), "local");
}

static int group_teardown(void **state)
{
    (void)state;
    return kvt_remove_dir(dir);
}

/* A client on servers (under KVSTORE_TRANSPORT=transport, NULL: unset); puts and gets one key. */
static kvs_client *open_and_use(const char *servers, const char *transport)
{
    if (transport)
        setenv("KVSTORE_TRANSPORT", transport, 1);
    else
        unsetenv("KVSTORE_TRANSPORT");
    kvs_client *c = kvs_open(servers);
    unsetenv("KVSTORE_TRANSPORT");
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "k", "value", 5), 0);
    char buf[8];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), 5);
    assert_memory_equal(buf, "value", 5);
    return c;
}

static void test_explicit_endpoint(void **state)
{
    (void)state;
    struct kvt_server s;
    char args[128], url[128];
    snprintf(args, sizeof(args), "--memory 8M --unix %s/explicit.sock", dir);
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    const char *schemes[] = {"unix", "shm"};
    for (int i = 0; i < 2; i++) {
        snprintf(url, sizeof(url), "%s://%s/explicit.sock", schemes[i], dir);
        kvs_client *c = open_and_use(url, "tcp"); /* an explicit local endpoint ignores it */
        assert_int_equal(kvt_server_counter(c, "connections_local"), i + 1);
        assert_int_equal(kvt_server_counter(c, "client_local_connects"), 1);
        kvs_close(c);
    }
    /* No server at a path: refused, as a TCP port nobody listens on. */
    snprintf(url, sizeof(url), "unix://%s/nobody.sock", dir);
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "k", "v", 1), -ECONNREFUSED);
    kvs_close(c);
    kvt_server_stop(&s);
    struct stat st;
    snprintf(url, sizeof(url), "%s/explicit.sock", dir);
    assert_int_equal(stat(url, &st), -1); /* a clean stop removes the socket */
}

static void test_auto_and_tcp(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 8M"), 0);
    kvs_client *c = open_and_use(s.addr, NULL); /* unset is auto */
    assert_int_equal(kvt_server_counter(c, "connections_local"), 1);
    assert_int_equal(kvt_server_counter(c, "client_local_connects"), 1);
    kvs_close(c);
    c = open_and_use(s.addr, "auto");
    assert_int_equal(kvt_server_counter(c, "connections_local"), 2);
    kvs_close(c);
    c = open_and_use(s.addr, "tcp");
    assert_int_equal(kvt_server_counter(c, "connections_local"), 2);
    assert_int_equal(kvt_server_counter(c, "connections_total"), 3);
    assert_int_equal(kvt_server_counter(c, "client_local_connects"), 0);
    kvs_close(c);
    c = open_and_use(s.url, NULL); /* tcp:// spelled out is TCP */
    assert_int_equal(kvt_server_counter(c, "client_local_connects"), 0);
    kvs_close(c);
    kvt_server_stop(&s);

    /* --unix none: auto finds no socket and uses TCP. */
    assert_int_equal(kvt_server_start(&s, 0, "--memory 8M --unix none"), 0);
    c = open_and_use(s.addr, NULL);
    assert_int_equal(kvt_server_counter(c, "connections_local"), 0);
    assert_int_equal(kvt_server_counter(c, "client_local_connects"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_restart_and_kill_mid_batch(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    kvs_client *c = open_and_use(s.addr, NULL);
    enum { N = 64, LEN = 64 * 1024 };
    char *vals = malloc((size_t)N * LEN);
    assert_non_null(vals);
    memset(vals, 'x', (size_t)N * LEN);
    const char *keys[N];
    char names[N][16];
    const void *vp[N];
    size_t lens[N];
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "b%d", i);
        keys[i] = names[i];
        vp[i] = vals + (size_t)i * LEN;
        lens[i] = LEN;
    }
    /* The server dies with (or before) the batch: every op fails, none hangs. */
    kvs_op *op = NULL;
    for (int i = 0; i < N; i++)
        st[i] = 1; /* no status a put can end with */
    assert_int_equal(kvs_batch_put_async(c, N, keys, vp, lens, st, NULL, NULL, &op), 0);
    kvt_server_kill(&s);
    ssize_t nok = kvs_wait(op);
    int failed = 0;
    for (int i = 0; i < N; i++) {
        assert_true(st[i] == 0 || st[i] < 0); /* done, or an error: never left pending */
        failed += st[i] < 0;
    }
    assert_int_equal(nok + failed, N);
    /* Its socket file stays behind; the restarted server takes it over and the client reconnects.
     */
    assert_int_equal(kvt_server_restart(&s), 0);
    int ok = -1;
    for (int i = 0; i < 50 && ok != 0; i++) {
        ok = kvs_put(c, "after", "v", 1);
        if (ok != 0) usleep(100000);
    }
    assert_int_equal(ok, 0);
    assert_int_equal(kvt_server_counter(c, "connections_local"), 1);
    assert_int_equal(kvt_server_counter(c, "client_local_connects"), 2);
    kvs_close(c);
    free(vals);
    kvt_server_stop(&s);
}

static void test_raw_bad_frame(void **state)
{
    (void)state;
    struct kvt_server s;
    char args[128], path[96];
    snprintf(path, sizeof(path), "%s/raw.sock", dir);
    snprintf(args, sizeof(args), "--memory 8M --unix %s", path);
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    char url[128];
    snprintf(url, sizeof(url), "unix://%s", path);
    kvs_client *c = open_and_use(url, NULL);
    long long before = kvt_server_counter(c, "errors_protocol");
    int fd = kvt_raw_local(path);
    assert_true(fd >= 0);
    uint8_t bad[KVS_WIRE_HDR_LEN];
    memset(bad, 0xee, sizeof(bad)); /* no such magic or opcode */
    kvt_raw_send_all(fd, bad, sizeof(bad));
    uint8_t reply[256];
    while (recv(fd, reply, sizeof(reply), 0) > 0) /* an error reply, then the server closes */
        ;
    close(fd);
    assert_int_equal(kvt_server_counter(c, "errors_protocol"), before + 1);
    char buf[8];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), 5); /* others unaffected */
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_auth_file_applies(void **state)
{
    (void)state;
    char secret[96], args[256], url[128];
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    FILE *f = fopen(secret, "w");
    assert_non_null(f);
    fputs("0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    assert_int_equal(chmod(secret, 0600), 0);
    struct kvt_server s;
    snprintf(args, sizeof(args), "--memory 8M --unix %s/auth.sock --auth-file %s", dir, secret);
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    snprintf(url, sizeof(url), "unix://%s/auth.sock", dir);
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "k", "v", 1), -EACCES); /* no secret: refused */
    kvs_close(c);
    setenv("KVSTORE_AUTH_FILE", secret, 1);
    c = open_and_use(url, NULL);
    unsetenv("KVSTORE_AUTH_FILE");
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_other_uid_refused(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: needs root to run a peer as nobody\n");
        skip();
        return;
    }
    struct passwd *nobody = getpwnam("nobody");
    assert_non_null(nobody);
    struct kvt_server s;
    char args[128], path[96], url[128];
    snprintf(path, sizeof(path), "%s/uid.sock", dir);
    snprintf(args, sizeof(args), "--memory 8M --unix %s", path);
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    assert_int_equal(chmod(dir, 0755), 0); /* nobody may reach the socket: the policy decides */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(nobody->pw_gid) < 0 || setuid(nobody->pw_uid) < 0) _exit(2);
        int fd = kvt_raw_local(path);
        if (fd < 0) _exit(3);
        struct kvt_reqbuf b = {0};
        kvt_req_get(&b, 1, "k", 8);
        send(fd, b.p, b.len, MSG_NOSIGNAL);
        uint8_t reply[64];
        ssize_t n = recv(fd, reply, sizeof(reply), 0);
        _exit(n > 0 ? 4 : 0); /* closed unanswered: refused */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    snprintf(url, sizeof(url), "unix://%s", path);
    kvs_client *c = open_and_use(url, NULL); /* root (our own uid) is served */
    assert_int_equal(kvt_server_counter(c, "connections_refused_peer"), 1);
    assert_int_equal(kvt_server_counter(c, "connections_local"), 1);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explicit_endpoint),          cmocka_unit_test(test_auto_and_tcp),
        cmocka_unit_test(test_restart_and_kill_mid_batch), cmocka_unit_test(test_raw_bad_frame),
        cmocka_unit_test(test_auth_file_applies),          cmocka_unit_test(test_other_uid_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

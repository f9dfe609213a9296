/*
 * test_bad_inputs.c - rows of docs/bad-inputs.md that no other test covered,
 * against a real kvstored on 127.0.0.1:
 *   - bad KVSTORE_* variables: one warning naming the variable, defaults used,
 *     calls still correct; a bad KVSTORE_SERVERS fails kvs_open with EINVAL;
 *   - a client process killed in the middle of a large batch put: other
 *     clients unaffected, nothing stays pinned, no torn value readable;
 *   - a stalled server (SIGSTOP): calls fail with -ETIMEDOUT within the
 *     timeout, and work again once it resumes (SIGCONT);
 *   - more clients than --max-conns: the extra client gets a clear error,
 *     quickly, and the admitted ones keep working.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

/*
 * Runs fn in a child with stderr captured into err (cap bytes); returns the
 * child's exit status. The child sets its own variables, so the parent's
 * environment is untouched.
 */
static int in_child(int (*fn)(const char *addr), const char *addr, char *err, size_t cap)
{
    char path[] = "/tmp/kvb-badin-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        _exit(fn(addr));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    ssize_t n = pread(fd, err, cap - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* With garbage in KVSTORE_TIMEOUT_MS / _CONNECT_TIMEOUT_MS / _LOG, calls still work. */
static int bad_env_child(const char *addr)
{
    setenv("KVSTORE_TIMEOUT_MS", "soon", 1);
    setenv("KVSTORE_CONNECT_TIMEOUT_MS", "-5", 1);
    setenv("KVSTORE_LOG", "loud", 1);
    kvs_client *c = kvs_open(addr);
    if (!c) return 10;
    char buf[16];
    int rc = 0;
    if (kvs_put(c, "env.k", "value", 5) != 0) rc = 11;
    if (!rc && kvs_get(c, "env.k", buf, sizeof(buf)) != 5) rc = 12;
    if (!rc && memcmp(buf, "value", 5) != 0) rc = 13;
    kvs_close(c);
    return rc;
}

static void test_bad_client_variables_warn_and_use_defaults(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 16M"), 0);
    static char err[8192];
    assert_int_equal(in_child(bad_env_child, s.addr, err, sizeof(err)), 0);
    fputs(err, stderr);
    /* Each bad variable is named, with its value, once. */
    const char *names[] = {"KVSTORE_TIMEOUT_MS", "KVSTORE_CONNECT_TIMEOUT_MS", "KVSTORE_LOG"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char pat[64];
        snprintf(pat, sizeof(pat), "%s=", names[i]);
        const char *first = strstr(err, pat);
        if (!first) {
            fail_msg("no warning names %s: %s", names[i], err);
            return;
        }
        assert_null(strstr(first + 1, pat));
    }
    assert_non_null(strstr(err, "soon"));
    assert_non_null(strstr(err, "loud"));
    kvt_server_stop(&s);
}

/* A bad KVSTORE_SERVERS: kvs_open(NULL) fails with EINVAL instead of guessing. */
static void test_bad_servers_variable(void **state)
{
    (void)state;
    const char *bad[] = {"no-port-here", "127.0.0.1:notaport", "127.0.0.1:99999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("KVSTORE_SERVERS", bad[i], 1);
        errno = 0;
        kvs_client *c = kvs_open(NULL);
        unsetenv("KVSTORE_SERVERS");
        if (c) {
            kvs_close(c);
            fail_msg("kvs_open accepted KVSTORE_SERVERS=%s", bad[i]);
            return;
        }
        assert_int_equal(errno, EINVAL);
    }
}

enum { VANISH_KEYS = 64, VANISH_LEN = 256 << 10 };

/* Child: one batch put of 16 MiB; the parent kills it while it is being sent. */
static void vanish_child(const char *addr, int ready_fd)
{
    kvs_client *c = kvs_open(addr);
    if (!c) _exit(1);
    static char names[VANISH_KEYS][32];
    const char *keys[VANISH_KEYS];
    const void *vals[VANISH_KEYS];
    size_t lens[VANISH_KEYS];
    int st[VANISH_KEYS];
    unsigned char *data = malloc((size_t)VANISH_KEYS * VANISH_LEN);
    if (!data) _exit(1);
    for (int i = 0; i < VANISH_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "vanish.%d", i);
        keys[i] = names[i];
        vals[i] = data + (size_t)i * VANISH_LEN;
        lens[i] = VANISH_LEN;
        kvval_fill(data + (size_t)i * VANISH_LEN, VANISH_LEN, names[i], 1);
    }
    kvs_exists(c, "vanish.warmup"); /* connected before the batch starts */
    if (write(ready_fd, "r", 1) != 1) _exit(1);
    for (;;) /* until killed: the parent's SIGKILL lands mid-batch */
        kvs_batch_put(c, VANISH_KEYS, keys, vals, lens, st);
}

static void test_client_vanishing_mid_batch(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    kvs_client *c = kvs_open(s.addr);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "bystander", "still here", 10), 0);

    for (int round = 0; round < 3; round++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            vanish_child(s.addr, pfd[1]);
        }
        close(pfd[1]);
        char r;
        assert_int_equal(read(pfd[0], &r, 1), 1);
        close(pfd[0]);
        usleep(20000 + 15000 * (unsigned)round); /* somewhere inside a 16 MiB batch */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }

    /* The server drops the dead connection's reserved slots: nothing stays pinned. */
    long long pinned = -1;
    for (int i = 0; i < 100 && pinned != 0; i++) {
        pinned = kvt_server_counter(c, "pinned_items");
        if (pinned != 0) usleep(50000);
    }
    assert_int_equal(pinned, 0);
    long long conns = -1;
    for (int i = 0; i < 100 && conns != 1; i++) {
        conns = kvt_server_counter(c, "connections_current");
        if (conns != 1) usleep(50000); /* the server sees the dead peer's close soon */
    }
    assert_int_equal(conns, 1);

    /* Every vanish key is absent or a whole value; the bystander is intact. */
    unsigned char *buf = malloc(VANISH_LEN);
    assert_non_null(buf);
    for (int i = 0; i < VANISH_KEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "vanish.%d", i);
        ssize_t n = kvs_get(c, key, buf, VANISH_LEN);
        if (n == -ENOENT) continue;
        assert_int_equal(n, VANISH_LEN);
        assert_true(kvval_check(buf, (size_t)n, key, NULL));
    }
    char small[16];
    assert_int_equal(kvs_get(c, "bystander", small, sizeof(small)), 10);
    assert_memory_equal(small, "still here", 10);
    free(buf);
    kvs_close(c);
    assert_int_equal(kvt_server_stop(&s), 0);
}

/* A stalled server: -ETIMEDOUT within the timeout (+ the reader's 100 ms tick), then recovery. */
static int stalled_child(const char *addr)
{
    setenv("KVSTORE_TIMEOUT_MS", "300", 1);
    kvs_client *c = kvs_open(addr);
    if (!c) return 10;
    char buf[16];
    if (kvs_put(c, "stall.k", "before", 6) != 0) return 11;
    /* Tell the parent to SIGSTOP the server, wait until it did. */
    if (write(3, "s", 1) != 1 || read(4, buf, 1) != 1) return 12;
    unsigned long long t0 = kvs_now_ns();
    int rc = kvs_put(c, "stall.k", "during", 6);
    unsigned long long ms = (kvs_now_ns() - t0) / 1000000ull;
    if (rc != -ETIMEDOUT) return 13;
    if (ms > 5000) return 14; /* bounded: not the 10 s default, nor forever */
    ssize_t g = kvs_get(c, "stall.k", buf, sizeof(buf));
    if (g != -ETIMEDOUT) return 15;
    /* Resume it; calls work again (after the client's reconnect backoff). */
    if (write(3, "c", 1) != 1 || read(4, buf, 1) != 1) return 16;
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        if (kvs_put(c, "stall.k", "after", 5) == 0)
            ok = 1;
        else
            usleep(20000);
    }
    if (!ok) return 17;
    if (kvs_get(c, "stall.k", buf, sizeof(buf)) != 5 || memcmp(buf, "after", 5)) return 18;
    kvs_close(c);
    return 0;
}

static void test_stalled_server_times_out_then_recovers(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 16M"), 0);
    int to_parent[2], to_child[2];
    assert_int_equal(pipe(to_parent), 0);
    assert_int_equal(pipe(to_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(to_parent[1], 3);
        dup2(to_child[0], 4);
        _exit(stalled_child(s.addr));
    }
    close(to_parent[1]);
    close(to_child[0]);
    char cmd;
    assert_int_equal(read(to_parent[0], &cmd, 1), 1);
    kill(s.pid, SIGSTOP);
    assert_int_equal(write(to_child[1], "k", 1), 1);
    assert_int_equal(read(to_parent[0], &cmd, 1), 1);
    kill(s.pid, SIGCONT);
    assert_int_equal(write(to_child[1], "k", 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(to_parent[0]);
    close(to_child[1]);
    kill(s.pid, SIGCONT); /* in case the child failed early */
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(kvt_server_stop(&s), 0);
}

/* --max-conns 2: a third client gets a clear transport error at once; the two keep working. */
static void test_too_many_connections(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 16M --max-conns 2"), 0);
    kvs_client *a = kvs_open(s.addr), *b = kvs_open(s.addr), *extra = kvs_open(s.addr);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(extra);
    assert_int_equal(kvs_put(a, "a", "1", 1), 0);
    assert_int_equal(kvs_put(b, "b", "2", 1), 0);
    unsigned long long t0 = kvs_now_ns();
    int rc = kvs_put(extra, "x", "3", 1);
    unsigned long long ms = (kvs_now_ns() - t0) / 1000000ull;
    assert_true(rc == -ECONNRESET || rc == -ECONNREFUSED || rc == -EIO || rc == -EPROTO);
    assert_true(ms < 5000); /* refused, not left hanging until a timeout */
    char buf[4];
    assert_int_equal(kvs_get(a, "b", buf, sizeof(buf)), 1);
    assert_int_equal(kvs_get(b, "a", buf, sizeof(buf)), 1);
    assert_true(kvt_server_counter(a, "connections_refused") >= 1);
    kvs_close(extra);
    kvs_close(b);
    kvs_close(a);
    assert_int_equal(kvt_server_stop(&s), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_client_variables_warn_and_use_defaults),
        cmocka_unit_test(test_bad_servers_variable),
        cmocka_unit_test(test_client_vanishing_mid_batch),
        cmocka_unit_test(test_stalled_server_times_out_then_recovers),
        cmocka_unit_test(test_too_many_connections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

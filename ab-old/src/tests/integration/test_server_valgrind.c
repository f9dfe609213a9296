/*
 * test_server_valgrind.c - kvstored under valgrind --leak-check=full: some
 * traffic, then SIGTERM while clients still hold a half-written PUT, unsent
 * GET replies and a malformed frame. Valgrind must report no error and no
 * leak (any would make it exit 9), and kvstored must exit 0.
 *
 * Skipped when valgrind is missing or the build is sanitized (SAN set).
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtest.h"
#include "rawwire.h"
#include "wire.h"

/* One request frame with one entry (value only for PUT) into out; returns its length. */
static size_t frame(uint8_t *out, uint8_t op, uint64_t id, const char *key, const void *val,
                    uint32_t len)
{
    uint16_t klen = (uint16_t)strlen(key);
    size_t vlen = op == KVS_OP_PUT ? len : 0;
    struct kvs_wire_hdr h = {.opcode = op,
                             .count = 1,
                             .body_len = (uint32_t)(KVS_WIRE_ENTRY_LEN + klen + vlen),
                             .id = id};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_entry_encode(out + KVS_WIRE_HDR_LEN, klen, len);
    memcpy(out + KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN, key, klen);
    if (vlen) memcpy(out + KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN + klen, val, vlen);
    return KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN + klen + vlen;
}

/* Reads one reply frame and returns its first status. */
static int32_t read_status(int fd)
{
    uint8_t h[KVS_WIRE_HDR_LEN];
    assert_int_equal(recv(fd, h, sizeof(h), MSG_WAITALL), sizeof(h));
    struct kvs_wire_hdr hdr;
    assert_int_equal(kvs_wire_hdr_decode(h, &hdr, UINT32_MAX), 0);
    uint8_t *body = malloc(hdr.body_len + 1);
    assert_non_null(body);
    assert_int_equal(recv(fd, body, hdr.body_len, MSG_WAITALL), (ssize_t)hdr.body_len);
    int32_t st = (int32_t)kvs_get_u32(body);
    free(body);
    return st;
}

static void test_valgrind_clean_shutdown(void **state)
{
    (void)state;
    const char *san = getenv("SAN");
    if ((san && *san) || system("valgrind --version >/dev/null 2>&1") != 0) skip();

    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execlp("valgrind", "valgrind", "-q", "--leak-check=full", "--show-leak-kinds=all",
               "--errors-for-leak-kinds=all", "--error-exitcode=9", kvt_build_path("bin/kvstored"),
               "--listen", "127.0.0.1:0", "--memory", "16M", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    FILE *out = fdopen(pipefd[0], "r");
    assert_non_null(out);
    char line[256];
    int port = -1;
    alarm(60); /* valgrind starts slowly, but not forever */
    while (fgets(line, sizeof(line), out)) {
        char *p = strstr(line, "listening on ");
        if (!p) continue;
        port = atoi(strrchr(p, ':') + 1);
        break;
    }
    alarm(0);
    fclose(out);
    if (port <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("kvstored under valgrind did not start");
    }

    /* Really under valgrind: the process image is valgrind's tool, not kvstored. */
    char exe_link[64], exe[512];
    snprintf(exe_link, sizeof(exe_link), "/proc/%d/exe", (int)pid);
    ssize_t el = readlink(exe_link, exe, sizeof(exe) - 1);
    assert_true(el > 0);
    exe[el] = '\0';
    assert_non_null(strstr(exe, "memcheck"));

    static uint8_t val[200000], buf[300000];
    kvval_fill(val, sizeof(val), "v", 1);
    int a = kvt_raw_connect(port, 30), b = kvt_raw_connect(port, 30), c = kvt_raw_connect(port, 30),
        d = kvt_raw_connect(port, 30);
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        size_t n = frame(buf, KVS_OP_PUT, (uint64_t)i, key, val, (uint32_t)(1000 + i * 9000));
        kvt_raw_send_all(a, buf, n);
        assert_int_equal(read_status(a), 0);
    }
    size_t n = frame(buf, KVS_OP_GET, 99, "k3", NULL, sizeof(val));
    kvt_raw_send_all(a, buf, n);
    assert_int_equal(read_status(a), 0);
    n = frame(buf, KVS_OP_REMOVE, 100, "k4", NULL, 0);
    kvt_raw_send_all(a, buf, n);
    assert_int_equal(read_status(a), 0);

    /* b: a PUT cut in the middle (reserved slot); c: GET replies never read; d: garbage. */
    n = frame(buf, KVS_OP_PUT, 1, "half", val, sizeof(val));
    kvt_raw_send_all(b, buf, n / 2);
    for (int i = 0; i < 30; i++) {
        n = frame(buf, KVS_OP_GET, (uint64_t)i, "k19", NULL, sizeof(val));
        kvt_raw_send_all(c, buf, n);
    }
    kvt_raw_send_all(d, "not a frame, not at all.", 24);
    usleep(500000);

    kill(pid, SIGTERM);
    int status = -1;
    for (int i = 0; i < 600; i++) { /* 60 s: valgrind's leak check takes a while */
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        usleep(100000);
    }
    if (!WIFEXITED(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("kvstored did not exit after SIGTERM");
    }
    assert_int_equal(WEXITSTATUS(status), 0); /* 9: valgrind found an error or a leak */
    close(a);
    close(b);
    close(c);
    close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valgrind_clean_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

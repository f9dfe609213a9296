/*
 * kvtest.c - start and stop a real kvstored for integration tests, and the
 * client fixture built on it.
 */
#include "kvtest.h"

#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *kvt_build_path(const char *rel)
{
    static __thread char path[1024];
    const char *build = getenv("KVS_TEST_BUILD");
    snprintf(path, sizeof(path), "%s/%s", build && *build ? build : "build", rel);
    return path;
}

int kvt_over_rdma(void)
{
    const char *a = getenv("KVS_TEST_RDMA_ADDR");
    return a && *a;
}

static int spawn(struct kvt_server *s, int port)
{
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);

    char *argv[64];
    int argc = 0;
    char argbuf[sizeof(s->args)];
    snprintf(argbuf, sizeof(argbuf), "%s", s->args);
    argv[argc++] = (char *)kvt_build_path("bin/kvstored");
    argv[argc++] = "--listen";
    argv[argc++] = listen;
    /*
     * Over rdma a reservation is held while its data moves: with a request
     * timeout set for slow links (scripts/rxe-tests.sh), the lease covers it
     * too, unless the test picks its own.
     */
    const char *rdma_addr = getenv("KVS_TEST_RDMA_ADDR"), *timeout = getenv("KVSTORE_TIMEOUT_MS");
    if (rdma_addr && *rdma_addr && timeout && *timeout && !strstr(s->args, "--rdma-lease-ms")) {
        argv[argc++] = "--rdma-lease-ms";
        argv[argc++] = (char *)timeout;
    }
    for (char *save = NULL, *tok = strtok_r(argbuf, " ", &save); tok && argc < 60;
         tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    char rdma_listen[96];
    if (rdma_addr && *rdma_addr) {
        snprintf(rdma_listen, sizeof(rdma_listen), "%s:%d", rdma_addr, s->rdma_port);
        argv[argc++] = "--rdma-listen";
        argv[argc++] = rdma_listen;
    }
    argv[argc] = NULL;

    int pipefd[2];
    if (pipe(pipefd) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        /* A test failing half-way (cmocka longjmps past clean-up) must not leave it running. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "kvtest: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);

    /* Wait (bounded) for "listening on HOST:PORT". */
    FILE *out = fdopen(pipefd[0], "r");
    if (!out) {
        close(pipefd[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    char line[256];
    int got = -1;
    alarm(20); /* a server that never says it is ready fails the test, not hangs it */
    struct kvs_endpoint ep;
    int rc = -ENOENT;
    while (rc == -ENOENT && fgets(line, sizeof(line), out))
        rc = kvs_parse_listening(line, "listening on ", &ep);
    if (rc == 0) got = (int)ep.portno;
    int rdma_got = 0;
    rc = -ENOENT;
    while (got > 0 && rdma_addr && *rdma_addr && rc == -ENOENT && fgets(line, sizeof(line), out))
        rc = kvs_parse_listening(line, "rdma listening on ", &ep);
    if (rc == 0) rdma_got = (int)ep.portno;
    alarm(0);
    /* Keep draining its stdout in the background so that it never blocks on a full pipe. */
    if (got > 0 && fork() == 0) {
        while (fgets(line, sizeof(line), out))
            fputs(line, stderr);
        _exit(0);
    }
    fclose(out);
    if (got <= 0) {
        fprintf(stderr, "kvtest: kvstored did not start (%s)\n", s->args);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    s->pid = pid;
    s->port = got;
    snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%d", got);
    snprintf(s->name, sizeof(s->name), "127.0.0.1:%d", got);
    snprintf(s->url, sizeof(s->url), "tcp://127.0.0.1:%d", got);
    if (rdma_got > 0) {
        s->rdma_port = rdma_got;
        snprintf(s->addr, sizeof(s->addr), "rdma://%s:%d", rdma_addr, rdma_got);
        snprintf(s->name, sizeof(s->name), "%s:%d", rdma_addr, rdma_got);
        snprintf(s->url, sizeof(s->url), "%s", s->addr);
    }
    return 0;
}

int kvt_server_start(struct kvt_server *s, int port, const char *extra_args)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->args, sizeof(s->args), "%s", extra_args ? extra_args : "");
    return spawn(s, port);
}

static int wait_bounded(pid_t pid, int ms)
{
    int status;
    for (int i = 0; i < ms; i += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0) return -1;
        usleep(10000);
    }
    return -2;
}

int kvt_server_stop(struct kvt_server *s)
{
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int status = wait_bounded(s->pid, 10000);
    if (status == -2) {
        fprintf(stderr, "kvtest: kvstored ignored SIGTERM for 10 s\n");
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        status = -1;
    }
    s->pid = 0;
    return status;
}

void kvt_server_kill(struct kvt_server *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

int kvt_server_restart(struct kvt_server *s)
{
    /* The old port may sit in TIME_WAIT briefly; kvstored sets SO_REUSEADDR, retry a little. */
    for (int i = 0; i < 50; i++) {
        if (spawn(s, s->port) == 0) return 0;
        usleep(100000);
    }
    return -1;
}

int kvt_client_setup(struct kvt_client_fixture *f, const char *server_args)
{
    if (kvt_server_start(&f->srv, 0, server_args) < 0) return -1;
    f->c = kvs_open(f->srv.addr);
    if (!f->c) {
        fprintf(stderr, "kvtest: kvs_open(%s) failed\n", f->srv.addr);
        kvt_server_stop(&f->srv);
        return -1;
    }
    return 0;
}

void kvt_client_teardown(struct kvt_client_fixture *f)
{
    kvs_close(f->c);
    f->c = NULL;
    kvt_server_stop(&f->srv);
}

long long kvt_server_counter(kvs_client *c, const char *name)
{
    enum { CAP = 65536 };
    char *text = malloc(CAP);
    if (!text) return -1;
    long long value = -1;
    ssize_t len = kvs_server_stats(c, text, CAP - 1);
    if (len >= 0) {
        text[len < CAP - 1 ? len : CAP - 1] = '\0';
        size_t nlen = strlen(name);
        for (const char *line = text; line && *line;
             line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
            if (strncmp(line, name, nlen) == 0 && line[nlen] == ' ') {
                value = strtoll(line + nlen + 1, NULL, 10);
                break;
            }
    }
    free(text);
    return value;
}

int kvt_capture_begin(struct kvt_capture *cap, const char *dir)
{
    fflush(stderr);
    snprintf(cap->path, sizeof(cap->path), "%s/stderr-XXXXXX", dir);
    int fd = mkstemp(cap->path);
    if (fd < 0) return -1;
    cap->saved = dup(2);
    if (cap->saved < 0 || dup2(fd, 2) != 2) {
        if (cap->saved >= 0) close(cap->saved);
        close(fd);
        unlink(cap->path);
        return -1;
    }
    close(fd);
    return 0;
}

char *kvt_capture_end(struct kvt_capture *cap)
{
    fflush(stderr);
    dup2(cap->saved, 2);
    close(cap->saved);
    char text[8192];
    ssize_t n = -1;
    int fd = open(cap->path, O_RDONLY);
    if (fd >= 0) {
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
    }
    unlink(cap->path);
    if (fd < 0) return NULL;
    text[n > 0 ? n : 0] = '\0';
    fputs(text, stderr);
    return strdup(text);
}

pid_t kvt_spawn_self(const char *const argv[], const char *const env[])
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        char *name = eq ? strndup(env[i], (size_t)(eq - env[i])) : NULL;
        if (!name || setenv(name, eq + 1, 1) != 0) _exit(127);
        free(name);
    }
    /* execv's argv is char *const[] for historical reasons; it does not write to the strings. */
    execv("/proc/self/exe", (char *const *)argv);
    _exit(127);
}

int kvt_private_dir(char *dir, size_t len, const char *tag)
{
    if (snprintf(dir, len, "/tmp/kvs-%s.XXXXXX", tag) >= (int)len) return -1;
    return mkdtemp(dir) ? 0 : -1;
}

int kvt_remove_dir(const char *dir)
{
    char cmd[PATH_MAX + 16];
    if (!dir[0] || snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir) >= (int)sizeof(cmd)) return -1;
    return system(cmd) == 0 ? 0 : -1;
}

int kvt_server_start_local(struct kvt_server *s, const char *dir, const char *name,
                           const char *extra_args, char *path, size_t plen)
{
    char args[512];
    if (snprintf(path, plen, "%s/%s", dir, name) >= (int)plen) return -1;
    snprintf(args, sizeof(args), "--memory 64M --unix %s %s", path, extra_args ? extra_args : "");
    return kvt_server_start(s, 0, args);
}

int kvt_memfd_mappings(pid_t pid, const char *name)
{
    char file[64], line[512], want[96];
    snprintf(file, sizeof(file), "/proc/%d/maps", (int)pid);
    snprintf(want, sizeof(want), "memfd:%s", name);
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, want) != NULL;
    fclose(f);
    return n;
}

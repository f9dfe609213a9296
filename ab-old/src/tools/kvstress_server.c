/*
 * kvstress_server.c - the kvstored kvstress runs: started on --listen
 * (inside --netns, without the shim), SIGKILLed and restarted on the same
 * port, its RSS read from /proc.
 */
#include "kvstress.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "parse.h"

struct server srv = {.out_fd = -1};

int split_hostport(const char *s, char *host, size_t cap, int *port)
{
    struct kvs_endpoint ep;
    if (!s || kvs_parse_endpoint(s, strlen(s), KVS_EP_PORT0, &ep) < 0) return -EINVAL;
    size_t hlen = (size_t)(strrchr(ep.name, ':') - ep.name);
    if (hlen >= cap) return -EINVAL;
    memcpy(host, ep.name, hlen);
    host[hlen] = '\0';
    *port = (int)ep.portno;
    return 0;
}

/* Child side of spawn_server: enter the namespace, drop the shim, exec. */
static void exec_server(int out_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (opt.netns) {
        char path[256];
        snprintf(path, sizeof(path), "/var/run/netns/%s", opt.netns);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
            fprintf(stderr, "kvstress: netns %s: %s\n", opt.netns, strerror(errno));
            _exit(127);
        }
        close(fd);
    }
    /* kvstored must not run with the shim or the stress run's settings. */
    unsetenv("LD_PRELOAD");
    unsetenv("KVBATCH_STATS_FILE");
    char listen[128], memory[32];
    snprintf(listen, sizeof(listen), "%s:%d", srv.host, srv.port);
    snprintf(memory, sizeof(memory), "%llu", (unsigned long long)opt.memory);
    if (!opt.kvstored || dup2(out_fd, STDOUT_FILENO) < 0) _exit(127);
    char *argv[] = {(char *)opt.kvstored, "--listen", listen, "--memory", memory, NULL};
    execv(argv[0], argv);
    fprintf(stderr, "kvstress: exec %s: %s\n", opt.kvstored, strerror(errno));
    _exit(127);
}

int spawn_server(void)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) exec_server(pfd[1]);
    close(pfd[1]);
    char line[256];
    size_t used = 0;
    int port = -1;
    unsigned long long deadline = kvs_now_ns() + 10000000000ull;
    while (port < 0 && kvs_now_ns() < deadline && used < sizeof(line) - 1) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = read(pfd[0], line + used, sizeof(line) - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
        line[used] = '\0';
        const char *at = strstr(line, "listening on ");
        struct kvs_endpoint ep;
        if (at && strchr(at, '\n') && kvs_parse_listening(at, "listening on ", &ep) == 0)
            port = (int)ep.portno;
    }
    if (port <= 0) {
        fprintf(stderr, "kvstress: kvstored did not start\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(pfd[0]);
        return -1;
    }
    if (srv.out_fd >= 0) close(srv.out_fd);
    srv.out_fd = pfd[0];
    srv.pid = pid;
    srv.port = port;
    snprintf(srv.addr, sizeof(srv.addr), "%s:%d", srv.host, port);
    return 0;
}

int restart_server(void)
{
    for (int i = 0; i < 50; i++) {
        if (spawn_server() == 0) return 0;
        usleep(100000);
    }
    return -1;
}

void kill_server(int sig)
{
    if (srv.pid <= 0) return;
    kill(srv.pid, sig);
    /* SIGTERM gets 10 s to exit cleanly; then it is killed. */
    for (int i = 0; sig != SIGKILL && i < 1000; i++) {
        if (waitpid(srv.pid, NULL, WNOHANG) == srv.pid) {
            srv.pid = 0;
            return;
        }
        usleep(10000);
    }
    kill(srv.pid, SIGKILL);
    waitpid(srv.pid, NULL, 0);
    srv.pid = 0;
}

uint64_t rss_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

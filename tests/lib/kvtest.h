/*
 * kvtest.h - helpers for tests that need a real kvstored: start one on
 * 127.0.0.1 (port 0: it picks a free port and prints it), stop, kill and
 * restart it on the same port. Every wait is bounded.
 */
#ifndef KVTEST_H
#define KVTEST_H

#include <stddef.h>
#include <sys/types.h>

#include "clock.h"
#include "kvstore.h"
#include "values.h" /* self-checking values: kvval_fill, kvval_check */

struct kvt_server {
    pid_t pid;
    int port;
    char addr[64];  /* "127.0.0.1:PORT", ready for kvs_open */
    char args[512]; /* extra arguments it was started with */
    int rdma_port;  /* with $KVS_TEST_RDMA_ADDR: its RDMA port (addr is then rdma://) */
    char name[64];  /* "HOST:PORT" as the client names it (STATS "# server NAME") */
    char url[80];   /* addr with its scheme always spelled: "tcp://..." or "rdma://..." */
};

/* 1 when the tests run over rdma ($KVS_TEST_RDMA_ADDR set: make test-rdma), else 0. */
int kvt_over_rdma(void);

/*
 * Skips the running cmocka case under rdma, saying why on stderr: for cases
 * that are TCP-only by nature (fake TCP servers, fork). Use as
 * KVT_SKIP_ON_RDMA("reason"); it returns from the test function.
 */
#define KVT_SKIP_ON_RDMA(why)                                                                      \
    do {                                                                                           \
        if (kvt_over_rdma()) {                                                                     \
            fprintf(stderr, "skipped over rdma: %s\n", why);                                       \
            skip();                                                                                \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Path of a built binary or library: $KVS_TEST_BUILD (default "build") + "/" + rel. */
const char *kvt_build_path(const char *rel);

/*
 * With KVS_TEST_RDMA_ADDR set (inside the soft-RoCE VM, make test-rdma),
 * kvstored also gets --rdma-listen $KVS_TEST_RDMA_ADDR:0 (the same RDMA
 * port again on restart) and addr becomes "rdma://ADDR:RPORT", so the
 * client tests run over the rdma transport.
 *
 * Starts kvstored --listen 127.0.0.1:PORT (port 0 picks one) plus extra
 * args (space-separated, may be NULL) and waits for its "listening on" line.
 * Returns 0 or -1 (with a message on stderr).
 */
int kvt_server_start(struct kvt_server *s, int port, const char *extra_args);
/* SIGTERM, then SIGKILL after a bounded wait; returns the exit status or -1. */
int kvt_server_stop(struct kvt_server *s);
/* SIGKILL, no clean-up: a server dying mid-work. */
void kvt_server_kill(struct kvt_server *s);
/* Starts it again on the same port with the same args. */
int kvt_server_restart(struct kvt_server *s);

/* The usual client-test fixture: one kvstored and one client connected to it. */
struct kvt_client_fixture {
    struct kvt_server srv;
    kvs_client *c;
};

/*
 * Starts kvstored with server_args (as kvt_server_start) and opens a client
 * on it. Returns 0, or -1 with nothing left running.
 */
int kvt_client_setup(struct kvt_client_fixture *f, const char *server_args);
/* Closes the client, then stops the server. */
void kvt_client_teardown(struct kvt_client_fixture *f);

/* A counter from kvs_server_stats' "name value" lines, or -1 if absent or unreadable. */
long long kvt_server_counter(kvs_client *c, const char *name);

/* A new private directory /tmp/kvs-TAG.XXXXXX in dir (len >= 64): 0, or -1. */
int kvt_private_dir(char *dir, size_t len, const char *tag);
/* Removes dir and everything in it: 0, or -1. */
int kvt_remove_dir(const char *dir);
/*
 * kvstored (as kvt_server_start, with extra_args) with its local socket at
 * dir/name, whose path goes to path: 0, or -1 with nothing left running.
 */
int kvt_server_start_local(struct kvt_server *s, const char *dir, const char *name,
                           const char *extra_args, char *path, size_t plen);
/* Lines of /proc/PID/maps naming the memfd "name" (its mappings in pid), or -1. */
int kvt_memfd_mappings(pid_t pid, const char *name);

/*
 * Runs this test program again as a child, argv[0] its name, with env's
 * "NAME=VALUE" strings (NULL-terminated, or NULL) added to the child's
 * environment. An exec, not a bare fork: the child starts with none of the
 * parent's threads and library state (librdmacm does not survive a fork;
 * TSan refuses a fork of a threaded process). The child's pid, or -1 if
 * fork failed; a failed exec exits the child with 127.
 */
pid_t kvt_spawn_self(const char *const argv[], const char *const env[]);

/* stderr sent to a temporary file, to read what a library warned. */
struct kvt_capture {
    int saved; /* the real stderr */
    char path[256];
};
/* Sends stderr to a new file in dir until kvt_capture_end. 0, or -1 with stderr untouched. */
int kvt_capture_begin(struct kvt_capture *cap, const char *dir);
/*
 * Restores stderr and removes the file; returns what was written meanwhile
 * (up to 8 KiB, malloc'ed, NUL-terminated; echoed to stderr so that the test
 * log still shows it), or NULL.
 */
char *kvt_capture_end(struct kvt_capture *cap);

#endif

/*
 * kvstress.h - what the parts of kvstress share. docs/stress.md says what it
 * does and checks; the parts:
 *
 *   kvstress.c         main: options, the run (start, kill schedule, memory samples),
 *                      the verdict and its report (text, JSON)
 *   kvstress_server.c  the kvstored it runs: start, SIGKILL, restart on the same port, RSS
 *   kvstress_ops.c     the workers: self-checking ops, their ids and figures
 *   kvstress_checks.c  the shim's stats file against those figures; the write-behind
 *                      crash check
 */
#ifndef KVSTRESS_H
#define KVSTRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvstore.h"

#define BATCH_KEYS   8
#define SHARED_KEYS  16
#define MAX_THREADS  256
#define MAX_RESTARTS 64
#define NSTATUS      (4096) /* errno values counted per op kind */

enum opkind { OP_PUT, OP_GET, OP_KINDS };
extern const char *const opname[OP_KINDS];

/* Settings from the command line (the defaults are its --help's). */
struct options {
    int threads;
    uint64_t max_ops; /* key-ops, all threads */
    double seconds;
    int kills;
    int down_ms; /* how long the server stays dead */
    int keys;    /* own keys per thread */
    size_t min_len, max_len;
    const char *servers; /* external server: no kills */
    const char *kvstored;
    const char *listen;
    const char *netns;
    uint64_t memory; /* kvstored --memory, bytes */
    const char *json_path;
    int client_growth_mb;
    int writeback_check;
    int corrupt_one; /* self-test: damage one get result; the run must fail */
    int quiet;
};
extern struct options opt;

/* ---- the server kvstress runs (kvstress_server.c) ---- */

struct server {
    pid_t pid;
    int out_fd; /* its stdout, kept open so a late line never hits EPIPE */
    char host[64];
    int port;
    char addr[96];
};
extern struct server srv;

/* Splits "HOST:PORT" ("[v6]:PORT" too, brackets kept in host) into host and port; 0 or -EINVAL. */
int split_hostport(const char *s, char *host, size_t cap, int *port);
/*
 * Starts kvstored on srv.host:srv.port and waits (at most 10 s) for its
 * "listening on HOST:PORT" line; port 0 learns the real port. 0 or -1.
 */
int spawn_server(void);
/* Restart on the same port; retried briefly while the port is still held. 0 or -1. */
int restart_server(void);
/* SIGKILL at once, or SIGTERM with 10 s to exit before SIGKILL; then reaped. */
void kill_server(int sig);
/* VmRSS of a process in bytes, 0 if unknown. */
uint64_t rss_of(pid_t pid);

/* ---- the workers and their figures (kvstress_ops.c) ---- */

struct figures {
    atomic_uint_fast64_t issued[OP_KINDS], ok[OP_KINDS];
    atomic_uint_fast64_t err[OP_KINDS][NSTATUS];  /* by -status */
    atomic_uint_fast64_t single_issued[OP_KINDS]; /* kvs_put/kvs_get + async singles */
    atomic_uint_fast64_t single_err[OP_KINDS][NSTATUS];
    atomic_uint_fast64_t wrong_values, stale_values, missing_after_ok, status_unset;
    atomic_uint_fast64_t unexpected_status, double_callbacks, abandoned_batches;
    atomic_uint_fast64_t batches;
};
extern struct figures fig;
extern _Atomic(uint8_t) *completions; /* per key-op id: how many times it completed */
extern atomic_uint_fast64_t next_id;  /* key-op ids handed out */

/* Restart bookkeeping: when each restart was up, when its first op succeeded after. */
struct restarts {
    int n;
    unsigned long long up_ns[MAX_RESTARTS];
    _Atomic unsigned long long first_ok_ns[MAX_RESTARTS];
};
extern struct restarts rs;
extern atomic_int current_epoch; /* index of the latest restart, -1 before any */
extern atomic_int kills_done;

extern unsigned long long t_start, t_end; /* the run's bounds (kvs_now_ns) */
extern atomic_int corrupt_pending;        /* --corrupt-one: a get result still to damage */
extern int wb_mode;                       /* under the shim with KVBATCH_PUT_MODE=writeback */
extern kvs_client *client;

struct keystate {
    unsigned last_ok;    /* highest version acknowledged */
    unsigned max_issued; /* highest version sent */
    int ok_since_epoch;  /* epoch of last_ok (restart index + 1) */
};

struct batch_slot {
    atomic_int calls;
    atomic_int done;
};

struct worker {
    pthread_t tid;
    int index;
    uint64_t quota; /* key-ops this thread may issue */
    uint64_t rng;
    struct keystate *ks;
    char (*names)[64];
    unsigned char *val, *buf;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    atomic_int finished;
    void *slots; /* freed after the run: a late second callback still finds its slot */
};

extern struct worker workers[MAX_THREADS];
extern char shared_names[SHARED_KEYS][64];

/* Value length for (key, version): varies, so a truncated value fails its checksum. */
size_t value_len(const char *key, unsigned version);
/* A worker thread: its quota of ops, then finished = 1. */
void *worker_main(void *arg);

/* ---- checks against the shim (kvstress_checks.c) ---- */

struct shim_check {
    int used, file_read, ok;
    double ops[OP_KINDS], errors[OP_KINDS], wb_errors;
};

/* Shim counters must equal what kvstress issued through the interposed calls. */
void check_shim_stats(struct shim_check *sc, double closed_at);

struct wb_result {
    int ran, flush_rc, puts, absent, rewritten_ok, wrong, revived, ok;
};

/*
 * Under KVBATCH_PUT_MODE=writeback: puts that are still pending when the
 * server is SIGKILLed must come back as a failure from kvs_flush, never 0.
 * After the restart, a key is absent or holds the value a later successful
 * put wrote; the lost version turning up would mean a "failed" put landed.
 */
void writeback_check(struct wb_result *wr);

#endif /* KVSTRESS_H */

/*
 * kvstress - fault-injection stress for kvbatch.
 *
 * Many threads put and get self-verifying values (values.h: each
 * value encodes its key, a version and a checksum) through libkvstore - or
 * through the shim when run under LD_PRELOAD=libkvbatch.so - with a bounded
 * op count and time, while kvstored (which kvstress starts itself, on
 * 127.0.0.1:0 or inside a network namespace) is killed with SIGKILL and
 * restarted. Every key-op gets an id; its completions are counted, so an op
 * that never ends or ends twice is seen. Gets are checked: a value that is
 * not one kvval_fill wrote for that key (torn, mixed, another key's) is a
 * wrong value; an older version than one already acknowledged is stale.
 * RSS of kvstored and of kvstress itself are sampled. Under the shim the
 * stats file must agree with the ops issued. docs/stress.md has the details.
 *
 * Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or set-up.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvstore.h"
#include "opts.h"
#include "parse.h"
#include "values.h"

#define BATCH_KEYS   8
#define SHARED_KEYS  16
#define MAX_THREADS  256
#define MAX_RESTARTS 64
#define NSTATUS      (4096) /* errno values counted per op kind */

enum opkind { OP_PUT, OP_GET, OP_KINDS };
static const char *const opname[OP_KINDS] = {"put", "get"};

/* Settings from the command line (the defaults are its --help's). */
static struct {
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
} opt = {.threads = 8,
         .max_ops = 200000,
         .seconds = 10,
         .down_ms = 200,
         .keys = 64,
         .min_len = 16,
         .max_len = 16384,
         .listen = "127.0.0.1:0",
         .memory = 64ull << 20,
         .client_growth_mb = 64};

/* ---- the server kvstress runs ---- */

static struct {
    pid_t pid;
    int out_fd; /* its stdout, kept open so a late line never hits EPIPE */
    char host[64];
    int port;
    char addr[96];
} srv = {.out_fd = -1};

/* Splits "HOST:PORT" ("[v6]:PORT" too, brackets kept in host) into host and port. */
static int split_hostport(const char *s, char *host, size_t cap, int *port)
{
    struct kvs_endpoint ep;
    if (!s || kvs_parse_endpoint(s, strlen(s), KVS_EP_PORT0, &ep) < 0) return -EINVAL;
    size_t hlen = (size_t)(strrchr(ep.name, ':') - ep.name);
    if (hlen >= cap) return -EINVAL;
    memcpy(host, ep.name, hlen);
    host[hlen] = '\0';
    uint64_t p;
    if (kvs_parse_uint(ep.port, &p) < 0) return -EINVAL;
    *port = (int)p;
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

/*
 * Starts kvstored on srv.host:srv.port and waits (at most 10 s) for its
 * "listening on HOST:PORT" line; port 0 learns the real port. 0 or -1.
 */
static int spawn_server(void)
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
        char *at = strstr(line, "listening on ");
        char *nl = at ? strchr(at, '\n') : NULL;
        if (nl) {
            *nl = '\0';
            char *colon = strrchr(at, ':');
            if (colon) port = (int)strtol(colon + 1, NULL, 10);
        }
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

/* Restart on the same port; retried briefly while the port is still held. */
static int restart_server(void)
{
    for (int i = 0; i < 50; i++) {
        if (spawn_server() == 0) return 0;
        usleep(100000);
    }
    return -1;
}

static void kill_server(int sig)
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

/* VmRSS of a process in bytes, 0 if unknown. */
static uint64_t rss_of(pid_t pid)
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

/* ---- figures ---- */

static struct {
    atomic_uint_fast64_t issued[OP_KINDS], ok[OP_KINDS];
    atomic_uint_fast64_t err[OP_KINDS][NSTATUS];  /* by -status */
    atomic_uint_fast64_t single_issued[OP_KINDS]; /* kvs_put/kvs_get + async singles */
    atomic_uint_fast64_t single_err[OP_KINDS][NSTATUS];
    atomic_uint_fast64_t wrong_values, stale_values, missing_after_ok, status_unset;
    atomic_uint_fast64_t unexpected_status, double_callbacks, abandoned_batches;
    atomic_uint_fast64_t batches;
} fig;

static _Atomic(uint8_t) *completions; /* per key-op id */
static atomic_uint_fast64_t next_id;

/* Restart bookkeeping: when each restart was up, when its first op succeeded after. */
static struct {
    int n;
    unsigned long long up_ns[MAX_RESTARTS];
    _Atomic unsigned long long first_ok_ns[MAX_RESTARTS];
} rs;
static atomic_int current_epoch = -1; /* index of the latest restart, -1 before any */
static atomic_int kills_done;

static unsigned long long t_start, t_end;
static atomic_int corrupt_pending;
static int wb_mode; /* under the shim with KVBATCH_PUT_MODE=writeback */

static int transport_error(int st)
{
    return st == -ECONNRESET || st == -ECONNREFUSED || st == -ETIMEDOUT || st == -EIO ||
           st == -EPIPE || st == -ENOTCONN;
}

/* Counts a result; an OK after a restart may be that restart's first success. */
static void count_result(enum opkind k, ssize_t r, int single)
{
    /* Recovery = the first op the restarted server answered (a miss counts; a write-behind
     * put returning 0 does not, it never reached the server). */
    int answered = r >= 0 || (k == OP_GET && r == -ENOENT);
    if (answered && !(wb_mode && k == OP_PUT)) {
        int e = atomic_load(&current_epoch);
        if (e >= 0) {
            unsigned long long zero = 0, now = kvs_now_ns();
            atomic_compare_exchange_strong(&rs.first_ok_ns[e], &zero, now);
        }
    }
    if (r >= 0) {
        atomic_fetch_add(&fig.ok[k], 1);
        return;
    }
    long code = -r < NSTATUS ? -r : NSTATUS - 1;
    atomic_fetch_add(&fig.err[k][code], 1);
    if (single) atomic_fetch_add(&fig.single_err[k][code], 1);
    int allowed = r == -ENOENT && k == OP_GET;
    if (!allowed && transport_error((int)r) && (opt.kills > 0 || opt.writeback_check)) allowed = 1;
    if (!allowed) atomic_fetch_add(&fig.unexpected_status, 1);
}

static void complete_id(uint64_t id)
{
    atomic_fetch_add(&completions[id], 1);
}

/* ---- worker threads ---- */

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

static struct worker workers[MAX_THREADS];
static char shared_names[SHARED_KEYS][64];
static atomic_uint shared_version;
static kvs_client *client;

static uint64_t rnd(struct worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

/* Value length for (key, version): varies, so a truncated value fails its checksum. */
static size_t value_len(const char *key, unsigned version)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ version) * 1099511628211ull;
    return opt.min_len + (size_t)(h % (opt.max_len - opt.min_len + 1));
}

static uint64_t new_ids(uint64_t n)
{
    return atomic_fetch_add(&next_id, n);
}

/* Checks a get result for the worker's own key k; shared keys pass ks NULL. */
static void check_get(struct worker *w, const char *key, struct keystate *ks, ssize_t r,
                      const unsigned char *buf)
{
    if (r < 0) {
        if (r == -ENOENT && ks && ks->last_ok &&
            ks->ok_since_epoch == atomic_load(&current_epoch) + 1 && !wb_mode)
            atomic_fetch_add(&fig.missing_after_ok, 1);
        return;
    }
    unsigned v = 0;
    int damaged = 0;
    if (opt.corrupt_one && r >= 8 && atomic_exchange(&corrupt_pending, 0)) damaged = 1;
    if (damaged || !kvval_check(buf, (size_t)r, key, &v) || (size_t)r < 4) {
        atomic_fetch_add(&fig.wrong_values, 1);
        if (!opt.quiet)
            fprintf(stderr, "kvstress: WRONG value for %s (%zd bytes)%s\n", key, r,
                    damaged ? " [self-test corruption]" : "");
        return;
    }
    if (ks && (v < ks->last_ok || v > ks->max_issued)) {
        atomic_fetch_add(&fig.stale_values, 1);
        if (!opt.quiet && !wb_mode)
            fprintf(stderr, "kvstress: STALE %s: version %u, acknowledged %u, issued %u\n", key, v,
                    ks->last_ok, ks->max_issued);
    }
    (void)w;
}

static void note_put(struct keystate *ks, unsigned v, int r)
{
    if (!ks) return;
    if (r == 0) {
        ks->last_ok = v;
        ks->ok_since_epoch = atomic_load(&current_epoch) + 1;
    }
}

/* One synchronous (or async single + kvs_wait) op on key; ks NULL for a shared key. */
static void single_op(struct worker *w, const char *key, struct keystate *ks, int do_put, int async)
{
    enum opkind k = do_put ? OP_PUT : OP_GET;
    uint64_t id = new_ids(1);
    atomic_fetch_add(&fig.issued[k], 1);
    atomic_fetch_add(&fig.single_issued[k], 1);
    ssize_t r;
    if (do_put) {
        unsigned v = ks ? ++ks->max_issued : atomic_fetch_add(&shared_version, 1) + 1;
        size_t len = value_len(key, v);
        kvval_fill(w->val, len, key, v);
        if (async) {
            kvs_op *op = NULL;
            r = kvs_put_async(client, key, w->val, len, &op);
            if (r == 0) r = kvs_wait(op);
        } else {
            r = kvs_put(client, key, w->val, len);
        }
        note_put(ks, v, (int)r);
    } else {
        if (async) {
            kvs_op *op = NULL;
            r = kvs_get_async(client, key, w->buf, opt.max_len, &op);
            if (r == 0) r = kvs_wait(op);
        } else {
            r = kvs_get(client, key, w->buf, opt.max_len);
        }
        check_get(w, key, ks, r, w->buf);
    }
    complete_id(id);
    count_result(k, r, 1);
    /* While the server is down, calls fail at once: pace the retries instead of spinning. */
    if (transport_error((int)r)) usleep(2000);
}

/* The memory one async batch needs until its callback; freed only if it completes. */
struct batch_ctx {
    int do_put;
    uint64_t base;
    size_t n;
    int kidx[BATCH_KEYS];
    unsigned ver[BATCH_KEYS];
    const char *keys[BATCH_KEYS];
    const void *vals[BATCH_KEYS];
    void *bufs[BATCH_KEYS];
    size_t lens[BATCH_KEYS];
    int status[BATCH_KEYS];
    ssize_t results[BATCH_KEYS];
    struct batch_slot *slot;
    struct worker *w;
    unsigned char data[];
};

/*
 * done callback of a batch: counts the call on the slot (never freed during
 * the run, so a second call is counted, not a use-after-free), then the ids.
 */
static void batch_done(void *arg, ssize_t nok)
{
    struct batch_ctx *b = arg;
    (void)nok;
    /* b itself stays allocated while its slot is not done; slot outlives it. */
    struct batch_slot *slot = b->slot;
    if (atomic_fetch_add(&slot->calls, 1) != 0) {
        atomic_fetch_add(&fig.double_callbacks, 1);
        return;
    }
    struct worker *w = b->w;
    for (size_t i = 0; i < b->n; i++)
        complete_id(b->base + i);
    pthread_mutex_lock(&w->lock);
    atomic_store(&slot->done, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->lock);
}

/*
 * A batch of BATCH_KEYS distinct own keys through kvs_batch_*_async with a
 * done callback (never interposed by the shim). Waits for the callback at
 * most the client timeout + 5 s; a batch that never completes is counted and
 * its memory abandoned (the library might still write into it).
 */
/* A batch of n own keys from a random one on: puts get their next version, gets a buffer. */
static struct batch_ctx *batch_new(struct worker *w, struct batch_slot *slot, int do_put)
{
    size_t n = BATCH_KEYS < opt.keys ? BATCH_KEYS : (size_t)opt.keys;
    struct batch_ctx *b = calloc(1, sizeof(*b) + n * opt.max_len);
    if (!b) return NULL;
    b->do_put = do_put;
    b->n = n;
    b->slot = slot;
    b->w = w;
    int first = (int)(rnd(w) % (uint64_t)opt.keys);
    for (size_t i = 0; i < n; i++) {
        int ki = (first + (int)i) % opt.keys;
        b->kidx[i] = ki;
        b->keys[i] = w->names[ki];
        b->status[i] = INT32_MIN; /* must be overwritten */
        b->results[i] = INT32_MIN;
        unsigned char *p = b->data + i * opt.max_len;
        if (do_put) {
            unsigned v = ++w->ks[ki].max_issued;
            b->ver[i] = v;
            b->lens[i] = value_len(b->keys[i], v);
            kvval_fill(p, b->lens[i], b->keys[i], v);
            b->vals[i] = p;
        } else {
            b->bufs[i] = p;
            b->lens[i] = opt.max_len;
        }
    }
    return b;
}

/* How long a batch's callback may take: the client's timeout ($KVSTORE_TIMEOUT_MS) + 5 s. */
static unsigned long long batch_limit_ms(void)
{
    const char *t = getenv("KVSTORE_TIMEOUT_MS");
    long tmo = t ? strtol(t, NULL, 10) : 0;
    return tmo > 0 ? (unsigned long long)tmo + 5000 : 15000;
}

/* Waits for the batch's callback at most limit_ms; 1 if it came. */
static int batch_wait(struct worker *w, struct batch_slot *slot, unsigned long long limit_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(limit_ms / 1000);
    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&slot->done))
        if (pthread_cond_timedwait(&w->cv, &w->lock, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&w->lock);
    return atomic_load(&slot->done);
}

/* Each key's status of a completed batch: checked and counted like a single op's. */
static void batch_account(struct worker *w, const struct batch_ctx *b)
{
    enum opkind k = b->do_put ? OP_PUT : OP_GET;
    for (size_t i = 0; i < b->n; i++) {
        struct keystate *ks = &w->ks[b->kidx[i]];
        ssize_t r = b->do_put ? b->status[i] : b->results[i];
        if (r == INT32_MIN) {
            atomic_fetch_add(&fig.status_unset, 1);
            continue;
        }
        if (b->do_put)
            note_put(ks, b->ver[i], (int)r);
        else
            check_get(w, b->keys[i], ks, r, b->bufs[i]);
        count_result(k, r, 0);
    }
}

static void batch_op(struct worker *w, struct batch_slot *slot, int do_put)
{
    enum opkind k = do_put ? OP_PUT : OP_GET;
    struct batch_ctx *b = batch_new(w, slot, do_put);
    if (!b) return;
    size_t n = b->n;
    b->base = new_ids(n);
    atomic_fetch_add(&fig.issued[k], n);
    atomic_fetch_add(&fig.batches, 1);
    int rc = do_put ? kvs_batch_put_async(client, n, b->keys, b->vals, b->lens, b->status,
                                          batch_done, b, NULL)
                    : kvs_batch_get_async(client, n, b->keys, b->bufs, b->lens, b->results,
                                          batch_done, b, NULL);
    if (rc < 0) {
        /* Refused as a call: nothing in flight, done will not run. */
        for (size_t i = 0; i < n; i++) {
            complete_id(b->base + i);
            count_result(k, rc, 0);
        }
        free(b);
        return;
    }
    unsigned long long limit_ms = batch_limit_ms();
    if (!batch_wait(w, slot, limit_ms)) {
        atomic_fetch_add(&fig.abandoned_batches, 1);
        fprintf(stderr, "kvstress: a %s batch did not complete within %llu ms\n", opname[k],
                limit_ms);
        return; /* b is leaked on purpose: the library might still write into it */
    }
    batch_account(w, b);
    free(b);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    /* Batch slots for this thread: one per batch it may issue. */
    size_t nslots = w->quota / BATCH_KEYS + 1, used = 0;
    struct batch_slot *slots = calloc(nslots, sizeof(*slots));
    w->slots = slots;
    if (!slots) nslots = 0;
    uint64_t done = 0;
    while (done < w->quota && kvs_now_ns() < t_end) {
        uint64_t dice = rnd(w) % 100;
        int ki = (int)(rnd(w) % (uint64_t)opt.keys);
        int do_put = rnd(w) % 2 == 0;
        if (dice < 10) {
            int s = (int)(rnd(w) % SHARED_KEYS);
            single_op(w, shared_names[s], NULL, do_put, 0);
            done++;
        } else if (dice < 20 && used < nslots && done + BATCH_KEYS <= w->quota) {
            batch_op(w, &slots[used++], do_put);
            done += BATCH_KEYS;
        } else {
            single_op(w, w->names[ki], &w->ks[ki], do_put, dice < 35);
            done++;
        }
    }
    atomic_store(&w->finished, 1);
    return NULL;
}

/* ---- shim stats file ---- */

static const char *errno_label(int e)
{
    switch (e) {
    case ENOENT:
        return "ENOENT";
    case ERANGE:
        return "ERANGE";
    case E2BIG:
        return "E2BIG";
    case ENOSPC:
        return "ENOSPC";
    case EINVAL:
        return "EINVAL";
    case ENOMEM:
        return "ENOMEM";
    case ECONNREFUSED:
        return "ECONNREFUSED";
    case ECONNRESET:
        return "ECONNRESET";
    case ETIMEDOUT:
        return "ETIMEDOUT";
    case EIO:
        return "EIO";
    case EPROTO:
        return "EPROTO";
    default:
        return "other";
    }
}

/* Value of the metric line starting with name (labels included) in text, or -1. */
static double metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
    return -1;
}

/* Expands %p in the KVBATCH_STATS_FILE pattern. */
static void stats_path(char *out, size_t cap)
{
    const char *pat = getenv("KVBATCH_STATS_FILE");
    size_t o = 0;
    if (!pat) pat = "";
    for (const char *p = pat; *p && o + 1 < cap; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%d", (int)getpid());
            p++;
        } else {
            out[o++] = *p;
        }
        if (o >= cap) o = cap - 1;
    }
    out[o] = '\0';
}

/* Reads the stats file once it was written after `after` (Unix s); NULL if never. */
static char *read_stats_after(double after)
{
    char path[PATH_MAX];
    stats_path(path, sizeof(path));
    for (int i = 0; i < 300; i++) { /* 3 s */
        FILE *f = fopen(path, "r");
        if (f) {
            char *text = calloc(1, 1 << 20);
            size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
            fclose(f);
            if (text && n && metric(text, "kvbatch_write_time_seconds") >= after) return text;
            free(text);
        }
        usleep(10000);
    }
    return NULL;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct shim_check {
    int used, file_read, ok;
    double ops[OP_KINDS], errors[OP_KINDS], wb_errors;
};

/* Shim counters must equal what kvstress issued through the interposed calls. */
static void check_shim_stats(struct shim_check *sc, double closed_at)
{
    const char *pre = getenv("LD_PRELOAD");
    sc->used = pre && strstr(pre, "libkvbatch") && getenv("KVBATCH_STATS_FILE");
    if (!sc->used) return;
    char *text = read_stats_after(closed_at);
    if (!text) {
        fprintf(stderr, "kvstress: the shim's stats file was not rewritten after kvs_close\n");
        return;
    }
    sc->file_read = 1;
    sc->ok = 1;
    sc->wb_errors = metric(text, "kvbatch_writeback_errors_total");
    for (int k = 0; k < OP_KINDS; k++) {
        char name[128];
        snprintf(name, sizeof(name), "kvbatch_ops_total{op=\"%s\"}", opname[k]);
        sc->ops[k] = metric(text, name);
        if (sc->ops[k] != (double)atomic_load(&fig.single_issued[k])) {
            fprintf(stderr, "kvstress: shim counted %.0f %s ops, kvstress issued %" PRIu64 "\n",
                    sc->ops[k], opname[k], (uint64_t)atomic_load(&fig.single_issued[k]));
            sc->ok = 0;
        }
        /* Per status: the shim's errors = what callers saw (+ write-behind failures). */
        static const int codes[] = {ENOENT,       ERANGE,     E2BIG,     ENOSPC, EINVAL, ENOMEM,
                                    ECONNREFUSED, ECONNRESET, ETIMEDOUT, EIO,    EPROTO};
        double total = 0, mine_total = 0;
        for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
            snprintf(name, sizeof(name), "kvbatch_errors_total{op=\"%s\",status=\"%s\"}", opname[k],
                     errno_label(codes[c]));
            double v = metric(text, name);
            if (v < 0) v = 0;
            total += v;
            double mine = (double)atomic_load(&fig.single_err[k][codes[c]]);
            mine_total += mine;
            if (!wb_mode && v != mine) {
                fprintf(stderr, "kvstress: shim counted %.0f %s %s errors, kvstress saw %.0f\n", v,
                        opname[k], errno_label(codes[c]), mine);
                sc->ok = 0;
            }
        }
        sc->errors[k] = total;
        if (wb_mode && k == OP_PUT &&
            total != mine_total + (sc->wb_errors > 0 ? sc->wb_errors : 0)) {
            fprintf(stderr,
                    "kvstress: shim put errors %.0f != caller-seen %.0f + write-behind %.0f\n",
                    total, mine_total, sc->wb_errors);
            sc->ok = 0;
        }
    }
    free(text);
}

/* ---- write-behind crash check ---- */

struct wb_result {
    int ran, flush_rc, puts, absent, rewritten_ok, wrong, revived, ok;
};

/*
 * Under KVBATCH_PUT_MODE=writeback: puts that are still pending when the
 * server is SIGKILLed must come back as a failure from kvs_flush, never 0.
 * After the restart, a key is absent or holds the value a later successful
 * put wrote; the lost version turning up would mean a "failed" put landed.
 */
enum { WB_KEYS = 32 };

/* Puts version 1 of every key through the shim: each returns 0 while it waits in the batcher. */
static void wb_put_pending(kvs_client *c, const char *const keys[], unsigned char *val,
                           struct wb_result *wr)
{
    /* Connection up first (a batch call is never interposed), so only the puts wait. */
    const char *warm[] = {"wb.warmup"};
    int wres[1];
    kvs_batch_exists(c, 1, warm, wres);
    for (int i = 0; i < WB_KEYS; i++) {
        size_t len = value_len(keys[i], 1);
        kvval_fill(val, len, keys[i], 1);
        atomic_fetch_add(&fig.single_issued[OP_PUT], 1); /* interposed: the shim counts it */
        if (kvs_put(c, keys[i], val, len) == 0) wr->puts++;
    }
}

/* A later, acknowledged put of version 2 of the even keys (direct batch calls, retried). */
static void wb_rewrite_even(kvs_client *c, const char *const keys[], unsigned char *val,
                            struct wb_result *wr)
{
    for (int i = 0; i < WB_KEYS; i += 2) {
        size_t len = value_len(keys[i], 2);
        kvval_fill(val, len, keys[i], 2);
        const void *vp[1] = {val};
        size_t lp[1] = {len};
        int st[1] = {-EIO};
        for (int tries = 0; tries < 100 && st[0] != 0; tries++)
            if (kvs_batch_put(c, 1, &keys[i], vp, lp, st) != 1) usleep(20000);
        if (st[0] == 0) wr->rewritten_ok++;
    }
}

/* Reads every key back: the even ones hold version 2, the odd ones are absent. 0 or -ENOMEM. */
static int wb_read_back(kvs_client *c, const char *const keys[], struct wb_result *wr)
{
    void *bufs[WB_KEYS];
    size_t caps[WB_KEYS];
    ssize_t res[WB_KEYS];
    unsigned char *all = malloc((size_t)WB_KEYS * opt.max_len);
    if (!all) return -ENOMEM;
    for (int i = 0; i < WB_KEYS; i++) {
        bufs[i] = all + (size_t)i * opt.max_len;
        caps[i] = opt.max_len;
    }
    kvs_batch_get(c, WB_KEYS, keys, bufs, caps, res);
    for (int i = 0; i < WB_KEYS; i++) {
        unsigned v = 0;
        if (res[i] == -ENOENT) {
            wr->absent++;
            if (i % 2 == 0) wr->wrong++; /* its later put was acknowledged */
        } else if (res[i] >= 0 && kvval_check(bufs[i], (size_t)res[i], keys[i], &v) && v == 1) {
            wr->revived++;
        } else if (res[i] < 0 || v != 2 || i % 2) {
            wr->wrong++; /* an error, a damaged value, or a version no put wrote */
        }
    }
    free(all);
    return 0;
}

static void writeback_check(struct wb_result *wr)
{
    static char names[WB_KEYS][64];
    const char *keys[WB_KEYS];
    for (int i = 0; i < WB_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "wb.%d.%d", (int)getpid(), i);
        keys[i] = names[i];
    }
    unsigned char *val = malloc(opt.max_len);
    if (!val) return;
    wr->ran = 1;
    kvs_client *c = kvs_open(srv.addr);
    if (c) {
        wb_put_pending(c, keys, val, wr);
        kill_server(SIGKILL);
        wr->flush_rc = kvs_flush(c);
        if (restart_server() == 0) {
            wb_rewrite_even(c, keys, val, wr);
            wr->ok = wb_read_back(c, keys, wr) == 0 && wr->flush_rc < 0 && wr->wrong == 0 &&
                     wr->revived == 0 && wr->rewritten_ok == WB_KEYS / 2;
        }
        kvs_close(c);
    }
    free(val);
}

/* ---- command line ---- */

/* Parses argv into opt; 0, KVOPT_HELP or -EINVAL with a message. */
static int parse_options(int argc, char **argv)
{
    const struct kvopt opts[] = {
        {"threads", 0, KVOPT_COUNT, KVOPT_TO(opt.threads), "N", "worker threads", .lo = 1,
         .hi = MAX_THREADS},
        {"ops", 0, KVOPT_COUNT, KVOPT_TO(opt.max_ops), "N", "key-ops in all, all threads", .lo = 1,
         .hi = 1ll << 32, .accepted = "1..2^32"},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(opt.seconds), "S", "time bound", .lo = 0,
         .hi = 86400},
        {"kills", 0, KVOPT_COUNT, KVOPT_TO(opt.kills), "N",
         "SIGKILL + restart kvstored N times, evenly spaced", .lo = 0, .hi = MAX_RESTARTS - 2},
        {"down-ms", 0, KVOPT_COUNT, KVOPT_TO(opt.down_ms), "MS",
         "how long the killed server stays down", .lo = 0, .hi = 600000},
        {"keys", 0, KVOPT_COUNT, KVOPT_TO(opt.keys), "N", "own keys per thread", .lo = 1,
         .hi = 100000},
        {"min-len", 0, KVOPT_SIZE, KVOPT_TO(opt.min_len), "SIZE", "smallest value", .lo = 12,
         .hi = 64 << 20},
        {"max-len", 0, KVOPT_SIZE, KVOPT_TO(opt.max_len), "SIZE",
         "largest value, at least --min-len", .lo = 12, .hi = 64 << 20},
        {"kvstored", 0, KVOPT_STRING, KVOPT_TO(opt.kvstored), "PATH", "server binary",
         .dflt = "kvstored next to kvstress"},
        {"listen", 0, KVOPT_STRING, KVOPT_TO(opt.listen), "HOST:PORT",
         "where kvstored listens; port 0 picks a free one"},
        {"netns", 0, KVOPT_STRING, KVOPT_TO(opt.netns), "NAME",
         "run kvstored inside network namespace NAME"},
        {"memory", 0, KVOPT_SIZE, KVOPT_TO(opt.memory), "SIZE", "kvstored --memory", .lo = 1 << 20,
         .hi = 1ll << 40},
        {"servers", 0, KVOPT_STRING, KVOPT_TO(opt.servers), "LIST",
         "use running servers instead (no --kills, no --writeback-check)"},
        {"client-growth-mb", 0, KVOPT_COUNT, KVOPT_TO(opt.client_growth_mb), "N",
         "bound on kvstress's RSS growth after warm-up, MiB", .lo = 0, .hi = 1 << 20},
        {"writeback-check", 0, KVOPT_FLAG, KVOPT_TO(opt.writeback_check), NULL,
         "with the shim in writeback mode: pending puts at a crash"},
        {"corrupt-one", 0, KVOPT_FLAG, KVOPT_TO(opt.corrupt_one), NULL,
         "self-test: damage one get result (the run must fail)"},
        {"json", 0, KVOPT_STRING, KVOPT_TO(opt.json_path), "FILE",
         "also write the JSON figures to FILE"},
        {"quiet", 0, KVOPT_FLAG, KVOPT_TO(opt.quiet), NULL, "no per-problem lines"},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvstress",
        .usage = "usage: kvstress [options]\n",
        .footer = "exit status: 0 all checks passed, 1 a check failed, 2 bad usage or set-up\n",
        .opts = opts};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc != 0) return rc;
    if (opt.max_len < opt.min_len)
        return kvopt_bad("kvstress", "--max-len", "(below --min-len)", "at least --min-len");
    if (opt.servers && (opt.kills || opt.writeback_check)) {
        fprintf(stderr, "kvstress: --servers uses running servers: no --kills, no "
                        "--writeback-check\n");
        return -EINVAL;
    }
    return 0;
}

/* What the environment must give a mode: --writeback-check needs the shim in writeback mode. */
static int check_environment(void)
{
    const char *pm = getenv("KVBATCH_PUT_MODE");
    const char *pre = getenv("LD_PRELOAD");
    wb_mode = pm && !strcmp(pm, "writeback") && pre && strstr(pre, "libkvbatch");
    if (opt.writeback_check && !wb_mode) {
        fprintf(stderr, "kvstress: --writeback-check needs LD_PRELOAD=libkvbatch.so and "
                        "KVBATCH_PUT_MODE=writeback\n");
        return -EINVAL;
    }
    const char *pol = getenv("KVBATCH_POLICY");
    if (opt.writeback_check && (!pol || strcmp(pol, "fixed") != 0)) {
        /* Adaptive sends an idle put at once: nothing would be pending at the kill. */
        fprintf(stderr, "kvstress: --writeback-check needs KVBATCH_POLICY=fixed and a window "
                        "(KVBATCH_WINDOW_US) well above a millisecond\n");
        return -EINVAL;
    }
    return 0;
}

/* Path of kvstored next to this binary. */
static const char *default_kvstored(const char *argv0)
{
    static char path[PATH_MAX];
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return argv0;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof(path), "%.*s/kvstored", (int)(sizeof(path) - 10), self);
    return path;
}

/* ---- the run ---- */

/* Where the client connects: --servers, or a kvstored started here. NULL if it cannot start. */
static const char *servers_under_test(void)
{
    if (opt.servers) return opt.servers;
    if (split_hostport(opt.listen, srv.host, sizeof(srv.host), &srv.port) < 0) {
        kvopt_bad("kvstress", "--listen", opt.listen, "HOST:PORT");
        return NULL;
    }
    return spawn_server() < 0 ? NULL : srv.addr;
}

/* All bookkeeping allocated and touched before the run, so later RSS growth is the library's. */
static int prepare_bookkeeping(void)
{
    uint64_t max_ids = opt.max_ops + (uint64_t)opt.threads * BATCH_KEYS;
    completions = calloc(max_ids, 1);
    if (!completions) return -ENOMEM;
    memset((void *)completions, 0, max_ids);
    for (int s = 0; s < SHARED_KEYS; s++)
        snprintf(shared_names[s], sizeof(shared_names[s]), "stress.%d.shared.%d", (int)getpid(), s);
    return 0;
}

/* Sets up worker i (its keys, buffers, quota) and starts it; 0 or -1. */
static int start_worker(int i)
{
    struct worker *w = &workers[i];
    w->index = i;
    w->quota = opt.max_ops / (uint64_t)opt.threads;
    w->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) ^ (uint64_t)getpid();
    w->ks = calloc((size_t)opt.keys, sizeof(*w->ks));
    w->names = calloc((size_t)opt.keys, sizeof(*w->names));
    w->val = malloc(opt.max_len);
    w->buf = malloc(opt.max_len);
    if (!w->ks || !w->names || !w->val || !w->buf) return -1;
    memset(w->val, 0, opt.max_len);
    memset(w->buf, 0, opt.max_len);
    for (int k = 0; k < opt.keys; k++)
        snprintf(w->names[k], sizeof(w->names[k]), "stress.%d.t%d.k%d", (int)getpid(), i, k);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cv, NULL);
    return pthread_create(&w->tid, NULL, worker_main, w) == 0 ? 0 : -1;
}

struct memfig {
    uint64_t server_max, client_warm, client_max, server_bound;
};

/* Kills kvstored, keeps it down --down-ms, restarts it and opens the next epoch; 0 or -1. */
static int kill_and_restart(void)
{
    kill_server(SIGKILL);
    usleep((useconds_t)opt.down_ms * 1000);
    if (restart_server() < 0) {
        fprintf(stderr, "kvstress: kvstored did not restart\n");
        return -1;
    }
    int e = rs.n++;
    rs.up_ns[e] = kvs_now_ns();
    atomic_store(&current_epoch, e);
    atomic_fetch_add(&kills_done, 1);
    return 0;
}

/*
 * The controller, every 20 ms until the started workers finish (at most two
 * minutes past the end): the kill schedule and the memory samples. 0, or -1
 * when kvstored did not restart.
 */
static int control(int started, struct memfig *mem)
{
    unsigned long long interval = (t_end - t_start) / (unsigned long long)(opt.kills + 1);
    unsigned long long next_kill = t_start + interval, warm_at = t_start + 1000000000ull;
    int running = started;
    while (running > 0) {
        unsigned long long now = kvs_now_ns();
        if (now > t_end + 120000000000ull) break; /* two minutes over: stop waiting */
        if (opt.kills && atomic_load(&kills_done) < opt.kills && now >= next_kill && now < t_end) {
            if (kill_and_restart() < 0) return -1;
            next_kill += interval;
        }
        uint64_t s = srv.pid > 0 ? rss_of(srv.pid) : 0, c = rss_of(getpid());
        if (s > mem->server_max) mem->server_max = s;
        if (c > mem->client_max) mem->client_max = c;
        if (!mem->client_warm && now >= warm_at) mem->client_warm = c;
        usleep(20000);
        running = 0;
        for (int i = 0; i < started; i++)
            if (!atomic_load(&workers[i].finished)) running++;
    }
    return 0;
}

/*
 * Joins the workers. One still in a call two minutes after the end never
 * returns: that is reported and the process leaves at once, without
 * touching the client.
 */
static void join_workers(int started)
{
    int stuck = 0;
    for (int i = 0; i < started; i++) {
        if (atomic_load(&workers[i].finished))
            pthread_join(workers[i].tid, NULL);
        else
            stuck++;
    }
    if (!stuck) return;
    fprintf(stderr, "kvstress: %d threads stuck in a call 2 minutes after the end\n", stuck);
    printf("{\"pass\":0,\"stuck_threads\":%d}\n", stuck);
    fflush(stdout);
    kill_server(SIGKILL);
    _exit(1);
}

/* ---- the verdict ---- */

/* Everything a run is judged and reported on. */
struct outcome {
    double secs;
    uint64_t never, twice; /* key-ops completed 0 times, or more than once */
    uint64_t total_issued, total_ok;
    int restarts_without_ok;
    double worst_recovery_ms;
    struct memfig mem;
    uint64_t client_growth;
    struct shim_check sc;
    struct wb_result wr;
    int fail;
    const char *why[16];
    int nwhy;
};

/* Completions per key-op id, and the batches whose status or callback went wrong. */
static void count_completions(struct outcome *o)
{
    uint64_t issued_ids = atomic_load(&next_id);
    for (uint64_t i = 0; i < issued_ids; i++) {
        if (completions[i] == 0) o->never++;
        if (completions[i] > 1) o->twice++;
    }
    o->twice += atomic_load(&fig.double_callbacks);
    o->never += atomic_load(&fig.status_unset);
}

/*
 * kvstored's memory bound: pool + item metadata (~200 B + key per item) +
 * per-conn buffers (64 KiB read, 4 MiB reply back-pressure cap) for up to 4
 * connections (stress client, write-behind check, slack), + 32 MiB for
 * code, heap, stacks. And how much kvstress itself grew after warm-up.
 */
static void memory_bounds(struct outcome *o)
{
    struct memfig *mem = &o->mem;
    uint64_t items = (uint64_t)opt.threads * (uint64_t)opt.keys + SHARED_KEYS + 64;
    mem->server_bound =
        opt.memory + items * (200 + 64) + 4 * ((4u << 20) + (64u << 10)) + (32ull << 20);
    if (!mem->client_warm) mem->client_warm = mem->client_max;
    o->client_growth = mem->client_max - mem->client_warm;
}

/* For each restart, the time from its start to the first op it answered. */
static void recovery(struct outcome *o)
{
    for (int e = 0; e < rs.n; e++) {
        unsigned long long f = atomic_load(&rs.first_ok_ns[e]);
        double ms = (double)(f - rs.up_ns[e]) / 1e6;
        if (!f)
            o->restarts_without_ok++;
        else if (ms > o->worst_recovery_ms)
            o->worst_recovery_ms = ms;
    }
}

static void check(struct outcome *o, int ok, const char *what)
{
    if (ok) return;
    o->fail = 1;
    if (o->nwhy < (int)(sizeof(o->why) / sizeof(o->why[0]))) o->why[o->nwhy++] = what;
}

/* The rules of docs/stress.md, each one a reason to fail. */
static void judge(struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    check(o, fig.wrong_values == 0, "wrong values");
    check(o, wb_mode || fig.stale_values == 0, "stale values");
    check(o, o->never == 0, "ops never completed");
    check(o, o->twice == 0, "ops completed twice");
    check(o, fig.abandoned_batches == 0, "batches abandoned");
    check(o, fig.unexpected_status == 0, "unexpected statuses");
    /* Only a store kvstress sized itself is known not to evict. */
    check(o, opt.kills > 0 || wb_mode || opt.servers || fig.missing_after_ok == 0,
          "acknowledged puts missing");
    check(o, o->restarts_without_ok == 0, "a restart never saw a successful op");
    check(o, atomic_load(&kills_done) == opt.kills, "fewer kills than asked");
    check(o, o->total_ok > 0, "no op succeeded");
    check(o, opt.servers || mem->server_max <= mem->server_bound, "kvstored RSS over bound");
    check(o, o->client_growth <= (uint64_t)opt.client_growth_mb << 20,
          "kvstress RSS grew over bound");
    check(o, !o->sc.used || (o->sc.file_read && o->sc.ok), "shim stats disagree");
    check(o, !opt.writeback_check || o->wr.ok, "write-behind crash check");
}

/* The table of ops: issued, ok, errors by status. */
static void print_ops(void)
{
    printf("  %-6s %10s %10s %10s\n", "op", "issued", "ok", "errors");
    for (int k = 0; k < OP_KINDS; k++) {
        uint64_t is = atomic_load(&fig.issued[k]), ok = atomic_load(&fig.ok[k]);
        printf("  %-6s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "  ", opname[k], is, ok, is - ok);
        for (int e = 1; e < NSTATUS; e++)
            if (fig.err[k][e])
                printf(" %s=%" PRIu64, e == NSTATUS - 1 ? "other" : errno_label(e),
                       (uint64_t)atomic_load(&fig.err[k][e]));
        printf("\n");
    }
}

/* What the memory, shim-stats and write-behind checks saw. */
static void print_checks(const struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    const struct shim_check *sc = &o->sc;
    const struct wb_result *wr = &o->wr;
    if (opt.servers)
        printf("  RSS max: kvstored not measured (--servers)");
    else
        printf("  RSS max: kvstored %.1f MiB (bound %.1f)", (double)mem->server_max / 1048576,
               (double)mem->server_bound / 1048576);
    printf(", kvstress %.1f MiB (grew %.1f after warm-up, bound %d)\n",
           (double)mem->client_max / 1048576, (double)o->client_growth / 1048576,
           opt.client_growth_mb);
    if (sc->used)
        printf("  shim stats: ops put %.0f get %.0f, errors put %.0f get %.0f, writeback "
               "errors %.0f: %s\n",
               sc->ops[OP_PUT], sc->ops[OP_GET], sc->errors[OP_PUT], sc->errors[OP_GET],
               sc->wb_errors, sc->ok ? "agree" : "DISAGREE");
    if (wr->ran)
        printf("  write-behind crash: %d puts pending, kvs_flush %d (%s), absent %d, "
               "rewritten %d, revived %d, wrong %d: %s\n",
               wr->puts, wr->flush_rc, kvs_strerror(wr->flush_rc), wr->absent, wr->rewritten_ok,
               wr->revived, wr->wrong, wr->ok ? "ok" : "FAILED");
}

/* The human summary on stdout. */
static void print_summary(const struct outcome *o)
{
    printf("kvstress: %d threads, %.1f s, %s%s, %d kills\n", opt.threads, o->secs,
           o->sc.used || wb_mode ? "through the shim" : "direct", wb_mode ? " (writeback)" : "",
           atomic_load(&kills_done));
    print_ops();
    printf("  throughput %.0f key-ops/s, %" PRIu64 " async batches\n",
           (double)o->total_issued / o->secs, (uint64_t)fig.batches);
    printf("  wrong values %" PRIu64 ", stale %" PRIu64 ", missing after ok %" PRIu64
           ", never completed %" PRIu64 ", completed twice %" PRIu64 ", unexpected %" PRIu64 "\n",
           (uint64_t)fig.wrong_values, (uint64_t)fig.stale_values, (uint64_t)fig.missing_after_ok,
           o->never, o->twice, (uint64_t)fig.unexpected_status);
    for (int e = 0; e < rs.n; e++) {
        unsigned long long f = atomic_load(&rs.first_ok_ns[e]);
        printf("  restart %d: first op answered after %.1f ms\n", e + 1,
               f ? (double)(f - rs.up_ns[e]) / 1e6 : -1.0);
    }
    print_checks(o);
    for (int i = 0; i < o->nwhy; i++)
        printf("  FAILED: %s\n", o->why[i]);
    printf("  result: %s\n", o->fail ? "FAIL" : "PASS");
}

/*
 * Replaces the closing brace of the JSON object in json[0..len) with
 * ,"errors":{"put":{"ENAME":n,...},"get":{...}}} and returns the new length.
 */
static int append_error_counts(char *json, size_t cap, int len)
{
    if (len <= 0 || (size_t)len >= cap) return len;
    size_t at = (size_t)len - 1; /* over the final '}' */
    at += (size_t)snprintf(json + at, cap - at, ",\"errors\":{");
    for (int k = 0; k < OP_KINDS && at < cap; k++) {
        at += (size_t)snprintf(json + at, cap - at, "%s\"%s\":{", k ? "," : "", opname[k]);
        int first = 1;
        for (int e = 1; e < NSTATUS && at < cap; e++) {
            uint64_t v = atomic_load(&fig.err[k][e]);
            if (!v) continue;
            const char *name = e < NSTATUS - 1 ? strerrorname_np(e) : NULL;
            char num[16];
            snprintf(num, sizeof(num), "E%d", e);
            at += (size_t)snprintf(json + at, cap - at, "%s\"%s\":%" PRIu64, first ? "" : ",",
                                   name ? name : num, v);
            first = 0;
        }
        if (at < cap) at += (size_t)snprintf(json + at, cap - at, "}");
    }
    if (at < cap) at += (size_t)snprintf(json + at, cap - at, "}}");
    return at < cap ? (int)at : (int)cap - 1;
}

/* The JSON line on stdout (and in --json FILE): the figures tests and scripts read. */
static void print_json(const struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    const struct shim_check *sc = &o->sc;
    const struct wb_result *wr = &o->wr;
    char json[4096];
    int jn = snprintf(
        json, sizeof(json),
        "{\"threads\":%d,\"seconds\":%.3f,\"shim\":%d,\"writeback\":%d,\"kills\":%d,"
        "\"put_issued\":%" PRIu64 ",\"put_ok\":%" PRIu64 ",\"get_issued\":%" PRIu64
        ",\"get_ok\":%" PRIu64 ",\"batches\":%" PRIu64 ",\"wrong_values\":%" PRIu64
        ",\"stale_values\":%" PRIu64 ",\"missing_after_ok\":%" PRIu64
        ",\"never_completed\":%" PRIu64 ",\"completed_twice\":%" PRIu64
        ",\"unexpected_status\":%" PRIu64
        ",\"restarts\":%d,\"restarts_without_ok\":%d,\"worst_recovery_ms\":%.1f"
        ",\"server_rss_max\":%" PRIu64 ",\"server_rss_bound\":%" PRIu64
        ",\"client_rss_max\":%" PRIu64 ",\"client_rss_growth\":%" PRIu64
        ",\"shim_stats_ok\":%d,\"writeback_flush_rc\":%d,\"writeback_ok\":%d,\"pass\":%d}",
        opt.threads, o->secs, sc->used, wb_mode, atomic_load(&kills_done),
        (uint64_t)fig.issued[OP_PUT], (uint64_t)fig.ok[OP_PUT], (uint64_t)fig.issued[OP_GET],
        (uint64_t)fig.ok[OP_GET], (uint64_t)fig.batches, (uint64_t)fig.wrong_values,
        (uint64_t)fig.stale_values, (uint64_t)fig.missing_after_ok, o->never, o->twice,
        (uint64_t)fig.unexpected_status, rs.n, o->restarts_without_ok, o->worst_recovery_ms,
        mem->server_max, mem->server_bound, mem->client_max, o->client_growth,
        sc->used ? sc->ok && sc->file_read : -1, wr->ran ? wr->flush_rc : 0, wr->ran ? wr->ok : -1,
        !o->fail);
    jn = append_error_counts(json, sizeof(json), jn);
    printf("%s\n", json);
    if (opt.json_path) {
        FILE *f = fopen(opt.json_path, "w");
        if (f) {
            fprintf(f, "%.*s\n", jn, json);
            fclose(f);
        }
    }
}

int main(int argc, char **argv)
{
    int rc = parse_options(argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0 || check_environment() < 0) return KVOPT_EXIT_USAGE;
    if (!opt.kvstored) opt.kvstored = default_kvstored(argv[0]);
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&corrupt_pending, opt.corrupt_one);
    const char *addr = servers_under_test();
    if (!addr || prepare_bookkeeping() < 0) return KVOPT_EXIT_USAGE;
    client = kvs_open(addr);
    if (!client) {
        fprintf(stderr, "kvstress: kvs_open(%s): %s\n", addr, strerror(errno));
        kill_server(SIGKILL);
        return KVOPT_EXIT_USAGE;
    }

    struct outcome o = {0};
    t_start = kvs_now_ns();
    t_end = t_start + (unsigned long long)(opt.seconds * 1e9);
    int started = 0;
    while (started < opt.threads && start_worker(started) == 0)
        started++;
    o.fail = started < opt.threads;
    if (control(started, &o.mem) < 0) o.fail = 1;
    unsigned long long t_stop = kvs_now_ns();
    join_workers(started);

    if (opt.writeback_check && !o.fail) writeback_check(&o.wr);
    kvs_close(client);
    check_shim_stats(&o.sc, wall_now());
    if (!opt.servers) kill_server(SIGTERM);

    o.secs = (double)(t_stop - t_start) / 1e9;
    o.total_issued = atomic_load(&fig.issued[OP_PUT]) + atomic_load(&fig.issued[OP_GET]);
    o.total_ok = atomic_load(&fig.ok[OP_PUT]) + atomic_load(&fig.ok[OP_GET]);
    count_completions(&o);
    memory_bounds(&o);
    recovery(&o);
    judge(&o);
    if (!opt.quiet) print_summary(&o);
    print_json(&o);
    return o.fail ? 1 : 0;
}

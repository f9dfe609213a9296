/*
 * preload.c - libkvbatch.so's interposed entry points (LD_PRELOAD).
 *
 * Modelled on rdma-core's librdmacm/preload.c: the real functions live in
 * one struct filled once with dlsym(RTLD_NEXT) under a once-guard; a
 * thread-local recursion guard; and every call falls through to the real
 * function whenever the shim cannot do its job (policy off, bad config,
 * init failure, arguments the batch path must not see).
 *
 * kvs_open returns the REAL client; a side table maps client -> batcher.
 * Async ops made by the shim are tagged (low pointer bit set) so kvs_wait
 * tells them from the library's ops without dereferencing those.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../batcher/backend_kvs.h"
#include "../batcher/batcher.h"
#include "clock.h"
#include "config.h"
#include "kvstore.h"
#include "../batcher/stats.h"
#include "statsfile.h"

#define EXPORT __attribute__((visibility("default")))

static struct real_calls {
    kvs_client *(*kvs_open)(const char *);
    void (*kvs_close)(kvs_client *);
    int (*kvs_put)(kvs_client *, const char *, const void *, size_t);
    ssize_t (*kvs_get)(kvs_client *, const char *, void *, size_t);
    int (*kvs_exists)(kvs_client *, const char *);
    int (*kvs_put_async)(kvs_client *, const char *, const void *, size_t, kvs_op **);
    int (*kvs_get_async)(kvs_client *, const char *, void *, size_t, kvs_op **);
    ssize_t (*kvs_wait)(kvs_op *);
    int (*kvs_flush)(kvs_client *);
    int (*kvs_batch_put_async)(kvs_client *, size_t, const char *const[], const void *const[],
                               const size_t[], int[], kvs_done_fn, void *, kvs_op **);
    int (*kvs_batch_get_async)(kvs_client *, size_t, const char *const[], void *const[],
                               const size_t[], ssize_t[], kvs_done_fn, void *, kvs_op **);
    int (*kvs_batch_exists_async)(kvs_client *, size_t, const char *const[], int[], kvs_done_fn,
                                  void *, kvs_op **);
    int (*kvs_client_counters)(kvs_client *, kvs_counter_cb, void *); /* optional */
} real;

/* The real calls the batcher's kvs backend makes (a view of `real`, filled at init). */
static struct kvb_kvs_calls kvs_calls;

enum { INIT_NONE, INIT_DONE };
static _Atomic int init_state;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int batching; /* 1 when the shim batches; 0 = pass-through */
static struct kvb_config cfg;
static struct kvb_stats stats;
static double start_time;
static __thread int recursive;

/* Side table: client -> batcher, for the process (fork generation) that made it. */
#define MAX_CLIENTS 64
struct slot {
    _Atomic(kvs_client *) client; /* NULL once kvs_close starts: calls stop finding it */
    struct kvb_batcher *b;
    unsigned gen;
    kvs_client *counted; /* until the real kvs_close: its transport counters; table_lock */
};
static struct slot slots[MAX_CLIENTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned fork_gen;      /* bumped in every forked child */
static _Atomic unsigned table_version; /* bumped on every close: invalidates thread caches */
static __thread struct {
    kvs_client *c;
    struct kvb_batcher *b;
    unsigned gen, version;
} cache;

/* Stats writer. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stats_cv;
static unsigned stats_gen = ~0u; /* fork generation whose writer thread runs */
static int stats_stop;
static char stats_text[65536];

static void log_line(enum kvb_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One line on stderr, if KVBATCH_LOG lets this level through. */
static void log_line(enum kvb_log_level lvl, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (lvl > cfg.log_level) return;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

static struct kvb_batcher *make_batcher(kvs_client *c)
{
    struct kvb_params p = {
        .policy = cfg.policy == KVB_POLICY_FIXED ? KVB_BATCH_FIXED : KVB_BATCH_ADAPTIVE,
        .window_ns = cfg.window_ns,
        .max_ops = cfg.max_ops,
        .max_bytes = cfg.max_bytes,
        .max_inflight = cfg.max_inflight,
        .writeback = cfg.put_mode == KVB_PUT_WRITEBACK,
        .writeback_bytes = cfg.writeback_bytes,
    };
    struct kvb_backend be;
    struct kvb_batcher *b = NULL;
    int rc = kvb_backend_kvs(&kvs_calls, c, &be);
    if (rc == 0 && !(b = kvb_batcher_create(&p, &be, &stats))) {
        rc = -errno;
        kvb_backend_release(&be);
    }
    if (!b)
        log_line(KVB_LOG_WARN, "kvbatch: cannot create a batcher (%s); this client is not batched",
                 strerror(-rc));
    return b;
}

/* ---- stats file ---- */

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* The transport counters of clients already closed, so that the totals never go down. */
static struct kvb_transport_totals retired; /* table_lock */

/*
 * Sums libkvstore's transport counters over the clients opened through the
 * shim, closed ones included. table_lock keeps kvs_close from freeing a
 * client meanwhile (it retires the client's counters under that lock before
 * the real close). stats_lock held.
 */
static void transport_totals_locked(struct kvb_transport_totals *t)
{
    pthread_mutex_lock(&table_lock);
    *t = retired;
    for (int i = 0; i < MAX_CLIENTS && real.kvs_client_counters; i++)
        if (slots[i].counted) real.kvs_client_counters(slots[i].counted, kvb_transport_add, t);
    pthread_mutex_unlock(&table_lock);
}

/* Moves c's transport counters into the retired totals, just before the real close. */
static void retire_counters(kvs_client *c)
{
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (slots[i].counted != c) continue;
        if (real.kvs_client_counters) real.kvs_client_counters(c, kvb_transport_add, &retired);
        slots[i].counted = NULL;
        break;
    }
    pthread_mutex_unlock(&table_lock);
}

/* Renders and writes the stats file; stats_lock held. */
static void write_stats_locked(void)
{
    static struct kvb_transport_totals transport;
    size_t n = kvb_settings_render(&cfg, !batching, start_time, wall_now(), stats_text,
                                   sizeof(stats_text));
    if (n >= sizeof(stats_text)) return;
    n += kvb_stats_render(&stats, stats_text + n, sizeof(stats_text) - n);
    if (n < sizeof(stats_text)) {
        transport_totals_locked(&transport);
        n += kvb_transport_render(&transport, stats_text + n, sizeof(stats_text) - n);
    }
    if (n >= sizeof(stats_text)) {
        log_line(KVB_LOG_WARN, "kvbatch: stats text too long; %s not written", cfg.stats_file);
        return;
    }
    int rc = kvb_write_file_atomic(cfg.stats_file, stats_text, n);
    if (rc < 0) log_line(KVB_LOG_DEBUG, "kvbatch: writing %s: %s", cfg.stats_file, strerror(-rc));
}

static void *stats_main(void *arg)
{
    (void)arg;
    recursive = 1;
    pthread_mutex_lock(&stats_lock);
    while (!stats_stop) {
        struct timespec ts = kvs_ns_to_timespec(kvs_now_ns() + cfg.stats_interval_ns);
        if (pthread_cond_timedwait(&stats_cv, &stats_lock, &ts) == ETIMEDOUT && !stats_stop)
            write_stats_locked();
    }
    pthread_mutex_unlock(&stats_lock);
    return NULL;
}

/* Starts the writer thread for this process (after fork too); stats_lock held. */
static void start_stats_locked(void)
{
    pthread_t t;
    pthread_attr_t a;
    unsigned gen = atomic_load(&fork_gen);
    if (!cfg.stats_file[0] || stats_gen == gen || stats_stop) return;
    stats_gen = gen;
    if (pthread_attr_init(&a)) return;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, stats_main, NULL))
        log_line(KVB_LOG_WARN, "kvbatch: cannot start the stats writer");
    pthread_attr_destroy(&a);
    write_stats_locked();
}

/* ---- process life ---- */

/* At exit: flush every batcher of this process (bounded), then the last stats file. */
static void at_exit(void)
{
    unsigned gen = atomic_load(&fork_gen);
    recursive = 1;
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (!atomic_load(&slots[i].client) || slots[i].gen != gen || !slots[i].b) continue;
        int rc = kvb_flush(slots[i].b, KVB_FLUSH_EXIT, cfg.exit_timeout_ns);
        if (rc == -ETIMEDOUT)
            log_line(KVB_LOG_WARN, "kvbatch: exit: pending ops not acknowledged within %llums",
                     (unsigned long long)(cfg.exit_timeout_ns / 1000000));
        else if (rc < 0)
            log_line(KVB_LOG_WARN, "kvbatch: exit: a write-behind put failed: %s",
                     real.kvs_flush ? strerror(-rc) : "?");
    }
    if (cfg.stats_file[0]) {
        pthread_mutex_lock(&stats_lock);
        stats_stop = 1;
        pthread_cond_broadcast(&stats_cv);
        write_stats_locked();
        pthread_mutex_unlock(&stats_lock);
    }
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&stats_lock);
    pthread_mutex_lock(&table_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&table_lock);
    pthread_mutex_unlock(&stats_lock);
}

/*
 * The child keeps none of the parent's batchers: their queued ops are the
 * parent's to send. It gets fresh counters, its own stats file (%p) and,
 * lazily, its own batchers and writer thread.
 */
static void fork_child(void)
{
    atomic_fetch_add(&fork_gen, 1);
    atomic_fetch_add(&table_version, 1);
    kvb_stats_init(&stats);
    start_time = wall_now();
    const char *pattern = getenv("KVBATCH_STATS_FILE");
    if (pattern && *pattern &&
        kvb_expand_path(pattern, (long)getpid(), cfg.stats_file, sizeof(cfg.stats_file)) < 0)
        cfg.stats_file[0] = '\0';
    pthread_mutex_unlock(&table_lock);
    pthread_mutex_unlock(&stats_lock);
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

#define LOAD(name)                                                                                 \
    do {                                                                                           \
        *(void **)&real.name = dlsym(RTLD_NEXT, #name);                                            \
        if (!real.name) ok = 0;                                                                    \
    } while (0)

/* Once per process: real functions, configuration, stats writer, exit/fork hooks. */
static void init_preload(void)
{
    char err[512];
    int ok = 1;
    if (atomic_load_explicit(&init_state, memory_order_acquire) == INIT_DONE) return;
    pthread_mutex_lock(&init_lock);
    if (atomic_load_explicit(&init_state, memory_order_relaxed) == INIT_DONE) goto out;
    recursive++;
    LOAD(kvs_open);
    LOAD(kvs_close);
    LOAD(kvs_put);
    LOAD(kvs_get);
    LOAD(kvs_exists);
    LOAD(kvs_put_async);
    LOAD(kvs_get_async);
    LOAD(kvs_wait);
    LOAD(kvs_flush);
    LOAD(kvs_batch_put_async);
    LOAD(kvs_batch_get_async);
    LOAD(kvs_batch_exists_async);
    kvs_calls = (struct kvb_kvs_calls){real.kvs_batch_put_async,
                                       real.kvs_batch_get_async,
                                       real.kvs_batch_exists_async,
                                       real.kvs_put,
                                       real.kvs_get,
                                       real.kvs_exists};
    /* Newer than the rest: a libkvstore without it only leaves its counters out. */
    *(void **)&real.kvs_client_counters = dlsym(RTLD_NEXT, "kvs_client_counters");
    kvb_stats_init(&stats);
    start_time = wall_now();
    int rc = kvb_config_load(&cfg, env_get, (long)getpid(), err, sizeof(err));
    if (rc < 0) {
        ssize_t w = write(STDERR_FILENO, err, strlen(err));
        w = write(STDERR_FILENO, "\n", 1);
        (void)w;
    }
    if (!ok) {
        log_line(KVB_LOG_ERROR, "kvbatch: libkvstore not found (%s); pass-through", dlerror());
        cfg.policy = KVB_POLICY_OFF;
    }
    batching = ok && cfg.policy != KVB_POLICY_OFF;
    if (cfg.log_level >= KVB_LOG_INFO) {
        char text[2048];
        kvb_config_describe(&cfg, text, sizeof(text));
        for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
             l = strtok_r(NULL, "\n", &save))
            log_line(KVB_LOG_INFO, "kvbatch: %s", l);
    }
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&stats_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
    pthread_mutex_lock(&stats_lock);
    start_stats_locked();
    pthread_mutex_unlock(&stats_lock);
    recursive--;
    atomic_store_explicit(&init_state, INIT_DONE, memory_order_release);
out:
    pthread_mutex_unlock(&init_lock);
}

/*
 * The batcher of c for this process, or NULL (pass through). A forked child
 * gets a new batcher for a client its parent opened, on first use.
 */
static struct kvb_batcher *batcher_for(kvs_client *c)
{
    unsigned gen = atomic_load_explicit(&fork_gen, memory_order_relaxed);
    unsigned version = atomic_load_explicit(&table_version, memory_order_acquire);
    if (!c || !batching) return NULL;
    if (cache.c == c && cache.gen == gen && cache.version == version) return cache.b;
    struct kvb_batcher *b = NULL;
    int found = -1;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (atomic_load_explicit(&slots[i].client, memory_order_acquire) == c) {
            found = i;
            break;
        }
    if (found < 0) return NULL; /* not opened through the shim, or the table was full */
    if (slots[found].gen != gen) {
        pthread_mutex_lock(&table_lock);
        if (slots[found].gen != gen) {
            slots[found].b = make_batcher(c); /* the parent's stays with the parent */
            slots[found].gen = gen;
        }
        pthread_mutex_unlock(&table_lock);
        pthread_mutex_lock(&stats_lock);
        start_stats_locked();
        pthread_mutex_unlock(&stats_lock);
    }
    b = slots[found].b;
    cache.c = c;
    cache.b = b;
    cache.gen = gen;
    cache.version = version;
    return b;
}

/* ---- interposed API ---- */

EXPORT kvs_client *kvs_open(const char *servers)
{
    init_preload();
    if (!real.kvs_open) {
        errno = ENOSYS;
        return NULL;
    }
    kvs_client *c = real.kvs_open(servers);
    if (!c || recursive) return c;
    recursive++;
    /* Passing through, a client is still listed: the stats file shows its transport counters. */
    struct kvb_batcher *b = batching ? make_batcher(c) : NULL;
    if (b || !batching) {
        pthread_mutex_lock(&table_lock);
        int i;
        for (i = 0; i < MAX_CLIENTS; i++)
            if (!atomic_load(&slots[i].client) && !slots[i].counted) break;
        if (i < MAX_CLIENTS) {
            slots[i].b = b;
            slots[i].gen = atomic_load(&fork_gen);
            slots[i].counted = c;
            atomic_store_explicit(&slots[i].client, c, memory_order_release);
            b = NULL;
        } else if (batching) {
            log_line(KVB_LOG_WARN, "kvbatch: more than %d clients open; this one is not batched",
                     MAX_CLIENTS);
        }
        pthread_mutex_unlock(&table_lock);
        if (b) kvb_batcher_destroy(b, 0);
    }
    recursive--;
    return c;
}

EXPORT void kvs_close(kvs_client *c)
{
    init_preload();
    if (!real.kvs_close) return;
    struct kvb_batcher *b = NULL;
    int owned = 0;
    if (c && !recursive) {
        unsigned gen = atomic_load(&fork_gen);
        pthread_mutex_lock(&table_lock);
        for (int i = 0; i < MAX_CLIENTS; i++) {
            if (atomic_load(&slots[i].client) != c) continue;
            b = slots[i].b;
            owned = slots[i].gen == gen;
            atomic_store(&slots[i].client, NULL);
            slots[i].b = NULL;
            atomic_fetch_add(&table_version, 1);
            break;
        }
        pthread_mutex_unlock(&table_lock);
    }
    if (b && owned) {
        recursive++;
        int rc = kvb_batcher_destroy(b, 60ull * 1000000000ull);
        retire_counters(c);
        real.kvs_close(c); /* completes whatever is still in flight */
        if (rc == -EBUSY) kvb_batcher_destroy(b, 0);
        recursive--;
        return;
    }
    if (c && !recursive) retire_counters(c);
    real.kvs_close(c);
}

/* Counts a call that went straight to the real function. */
static void count_direct(enum kvb_opkind k, ssize_t r, size_t bytes)
{
    kvb_count(&stats.direct_ops[k], 1);
    kvb_count(&stats.ops[k], 1);
    if (r >= 0) kvb_count(&stats.bytes[k], bytes);
    kvb_count_result(&stats, k, r);
}

EXPORT int kvs_put(kvs_client *c, const char *key, const void *val, size_t len)
{
    init_preload();
    if (!real.kvs_put) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    if (!b || !kvb_args_batchable(key, val, len)) {
        int r = real.kvs_put(c, key, val, len);
        if (!recursive) count_direct(KVB_OP_PUT, r, len);
        return r;
    }
    return kvb_put(b, key, val, len);
}

EXPORT ssize_t kvs_get(kvs_client *c, const char *key, void *buf, size_t cap)
{
    init_preload();
    if (!real.kvs_get) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    if (!b || !kvb_args_batchable(key, buf, cap)) {
        ssize_t r = real.kvs_get(c, key, buf, cap);
        if (!recursive) count_direct(KVB_OP_GET, r, r > 0 ? (size_t)r : 0);
        return r;
    }
    return kvb_get(b, key, buf, cap);
}

EXPORT int kvs_exists(kvs_client *c, const char *key)
{
    init_preload();
    if (!real.kvs_exists) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    if (!b || !kvb_args_batchable(key, NULL, 0)) {
        int r = real.kvs_exists(c, key);
        if (!recursive) count_direct(KVB_OP_EXISTS, r, 0);
        return r;
    }
    return kvb_exists(b, key);
}

/*
 * An async op handed to the caller is one of three things, told apart by the
 * low bits of the pointer (all three are malloc'ed, so 16-byte aligned):
 * a batcher op (SHIM_TAG), a pass-through op wrapped so that kvs_wait can
 * count its result like a synchronous call's (DIRECT_TAG), or the library's
 * own op, untouched (calls the batcher itself makes, or no memory for a
 * wrapper).
 */
#define SHIM_TAG   ((uintptr_t)1)
#define DIRECT_TAG ((uintptr_t)2)
#define TAG_MASK   ((uintptr_t)3)

struct direct_op {
    kvs_op *op;
    enum kvb_opkind kind;
    size_t len; /* a put's value length: its bytes count once it succeeds */
};

/* A wrapper for a pass-through async op, or NULL: then the op goes unwrapped. */
static struct direct_op *direct_new(kvs_op **caller)
{
    return caller ? malloc(sizeof(struct direct_op)) : NULL;
}

/*
 * Finishes a pass-through async call issued into d (or, when d is NULL,
 * straight into *caller): counts a call that failed at once like a
 * synchronous one, and hands out the wrapped op so that kvs_wait counts its
 * result. Without a wrapper (no memory) the op is counted as issued only.
 */
static int direct_async(enum kvb_opkind kind, size_t len, kvs_op **caller, struct direct_op *d,
                        int rc)
{
    if (rc < 0 || !d) {
        if (rc < 0) {
            count_direct(kind, rc, 0);
        } else {
            kvb_count(&stats.direct_ops[kind], 1);
            kvb_count(&stats.ops[kind], 1);
        }
        free(d);
        if (rc < 0 && caller) *caller = NULL;
        return rc;
    }
    d->kind = kind;
    d->len = len;
    *caller = (kvs_op *)((uintptr_t)d | DIRECT_TAG);
    return rc;
}

EXPORT int kvs_put_async(kvs_client *c, const char *key, const void *val, size_t len, kvs_op **op)
{
    init_preload();
    if (!real.kvs_put_async) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    struct kvb_op *kop;
    if (!b || !op || !kvb_args_batchable(key, val, len)) {
        if (recursive) return real.kvs_put_async(c, key, val, len, op);
        struct direct_op *d = direct_new(op);
        return direct_async(KVB_OP_PUT, len, op, d,
                            real.kvs_put_async(c, key, val, len, d ? &d->op : op));
    }
    int rc = kvb_put_async(b, key, val, len, &kop);
    *op = rc == 0 ? (kvs_op *)((uintptr_t)kop | SHIM_TAG) : NULL;
    return rc;
}

EXPORT int kvs_get_async(kvs_client *c, const char *key, void *buf, size_t cap, kvs_op **op)
{
    init_preload();
    if (!real.kvs_get_async) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    struct kvb_op *kop;
    /* A size probe (NULL, 0) has no batch form: the real call answers it. */
    if (!b || !op || !buf || !kvb_args_batchable(key, buf, cap)) {
        if (recursive) return real.kvs_get_async(c, key, buf, cap, op);
        struct direct_op *d = direct_new(op);
        return direct_async(KVB_OP_GET, 0, op, d,
                            real.kvs_get_async(c, key, buf, cap, d ? &d->op : op));
    }
    int rc = kvb_get_async(b, key, buf, cap, &kop);
    *op = rc == 0 ? (kvs_op *)((uintptr_t)kop | SHIM_TAG) : NULL;
    return rc;
}

EXPORT ssize_t kvs_wait(kvs_op *op)
{
    init_preload();
    uintptr_t tag = (uintptr_t)op & TAG_MASK;
    if (tag == SHIM_TAG) return kvb_wait((struct kvb_op *)((uintptr_t)op & ~TAG_MASK));
    if (!real.kvs_wait) return -ENOSYS;
    if (tag != DIRECT_TAG) return real.kvs_wait(op);
    struct direct_op *d = (struct direct_op *)((uintptr_t)op & ~TAG_MASK);
    ssize_t r = real.kvs_wait(d->op);
    count_direct(d->kind, r, d->kind == KVB_OP_PUT ? d->len : r > 0 ? (size_t)r : 0);
    free(d);
    return r;
}

EXPORT int kvs_flush(kvs_client *c)
{
    init_preload();
    if (!real.kvs_flush) return -ENOSYS;
    struct kvb_batcher *b = recursive ? NULL : batcher_for(c);
    int mine = b ? kvb_flush(b, KVB_FLUSH_EXPLICIT, UINT64_MAX) : 0;
    int theirs = real.kvs_flush(c);
    return mine < 0 ? mine : theirs;
}

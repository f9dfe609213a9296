/*
 * kvb_order - per-key order within one process, for calls the shim batches
 * and calls it does not: a plain libkvstore program (it knows nothing of the
 * shim), run by tests/integration/test_preload.c with and without
 * LD_PRELOAD=libkvbatch.so (KVBATCH_PUT_MODE=writeback is where it broke).
 *
 *   kvb_order SERVERS CASE THREADS ROUNDS
 *
 * Each of THREADS threads runs CASE ROUNDS times, each round on keys of its
 * own (named after the process id, so that runs never share one), and checks
 * what a program without the shim gets: a call that touches a key sees the
 * puts this thread made to it before, and does not reach the store before
 * this thread's earlier (async) gets of it. Then, after kvs_flush,
 * it reads every key back and checks the final values. CASE is one of the
 * names in `cases` below, or "all". Prints "CASE failed F of N" per case;
 * exit status 0 when nothing failed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

#define VLEN        512
#define ANY_VERSION (~0u) /* a final value not checked: absent or any version */

static kvs_client *client;

/* The value of (key, version), checked: 1 if key holds exactly that version now. */
static int holds(const char *key, unsigned version)
{
    char buf[VLEN];
    unsigned v = 0;
    ssize_t r = kvs_get(client, key, buf, sizeof(buf));
    return r == VLEN && kvval_check(buf, VLEN, key, &v) && v == version;
}

static int put_version(const char *key, unsigned version)
{
    char val[VLEN];
    kvval_fill(val, sizeof(val), key, version);
    return kvs_put(client, key, val, sizeof(val));
}

/*
 * One round of a case on key: the calls, checked as they return (0 = as
 * without the shim). `final` is then the version key must hold once
 * everything is flushed (0: absent).
 */
struct order_case {
    const char *name;
    int (*run)(const char *key, unsigned *final);
};

/* kvs_put, then kvs_remove: the remove finds the key, and it stays removed. */
static int case_remove(const char *key, unsigned *final)
{
    *final = 0;
    if (put_version(key, 1) != 0) return 1;
    return kvs_remove(client, key) != 0;
}

/* kvs_put v1, then kvs_batch_put v2: v2 is what is stored. */
static int case_batch_put(const char *key, unsigned *final)
{
    char val[VLEN];
    const char *keys[1] = {key};
    const void *vals[1] = {val};
    size_t lens[1] = {VLEN};
    int st[1] = {-1};
    *final = 2;
    if (put_version(key, 1) != 0) return 1;
    kvval_fill(val, sizeof(val), key, 2);
    if (kvs_batch_put(client, 1, keys, vals, lens, st) != 1 || st[0] != 0) return 1;
    return !holds(key, 2);
}

/* kvs_put, then kvs_batch_get: it sees the put. */
static int case_batch_get(const char *key, unsigned *final)
{
    char buf[VLEN];
    const char *keys[1] = {key};
    void *bufs[1] = {buf};
    size_t caps[1] = {VLEN};
    ssize_t res[1] = {-1};
    unsigned v = 0;
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_batch_get(client, 1, keys, bufs, caps, res) != 1 || res[0] != VLEN) return 1;
    return !kvval_check(buf, VLEN, key, &v) || v != 1;
}

/* kvs_put v1, then kvs_batch_putv v2 in two segments: v2 is what is stored. */
static int case_batch_putv(const char *key, unsigned *final)
{
    char val[VLEN];
    const char *keys[1] = {key};
    struct iovec iov[2] = {{val, 100}, {val + 100, VLEN - 100}};
    const struct iovec *iovs[1] = {iov};
    size_t cnt[1] = {2};
    int st[1] = {-1};
    *final = 2;
    if (put_version(key, 1) != 0) return 1;
    kvval_fill(val, sizeof(val), key, 2);
    if (kvs_batch_putv(client, 1, keys, iovs, cnt, st) != 1 || st[0] != 0) return 1;
    return !holds(key, 2);
}

/* kvs_put, then kvs_batch_getv into two segments: it sees the put. */
static int case_batch_getv(const char *key, unsigned *final)
{
    char buf[VLEN];
    const char *keys[1] = {key};
    struct iovec iov[2] = {{buf, 300}, {buf + 300, VLEN - 300}};
    const struct iovec *iovs[1] = {iov};
    size_t cnt[1] = {2};
    ssize_t res[1] = {-1};
    unsigned v = 0;
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_batch_getv(client, 1, keys, iovs, cnt, res) != 1 || res[0] != VLEN) return 1;
    return !kvval_check(buf, VLEN, key, &v) || v != 1;
}

/* kvs_put, then kvs_batch_exists: 1. */
static int case_batch_exists(const char *key, unsigned *final)
{
    const char *keys[1] = {key};
    int res[1] = {-1};
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    return kvs_batch_exists(client, 1, keys, res) != 1 || res[0] != 1;
}

/* kvs_put v1, then kvs_batch_put_async v2 (waited for): v2 is stored. */
static int case_batch_put_async(const char *key, unsigned *final)
{
    char val[VLEN];
    const char *keys[1] = {key};
    const void *vals[1] = {val};
    size_t lens[1] = {VLEN};
    int st[1] = {-1};
    kvs_op *op = NULL;
    *final = 2;
    if (put_version(key, 1) != 0) return 1;
    kvval_fill(val, sizeof(val), key, 2);
    if (kvs_batch_put_async(client, 1, keys, vals, lens, st, NULL, NULL, &op) != 0) return 1;
    if (kvs_wait(op) != 1 || st[0] != 0) return 1;
    return !holds(key, 2);
}

/* kvs_put, then kvs_batch_get_async (waited for): it sees the put. */
static int case_batch_get_async(const char *key, unsigned *final)
{
    char buf[VLEN];
    const char *keys[1] = {key};
    void *bufs[1] = {buf};
    size_t caps[1] = {VLEN};
    ssize_t res[1] = {-1};
    kvs_op *op = NULL;
    unsigned v = 0;
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_batch_get_async(client, 1, keys, bufs, caps, res, NULL, NULL, &op) != 0) return 1;
    if (kvs_wait(op) != 1 || res[0] != VLEN) return 1;
    return !kvval_check(buf, VLEN, key, &v) || v != 1;
}

/* kvs_put, then kvs_batch_exists_async (waited for): 1. */
static int case_batch_exists_async(const char *key, unsigned *final)
{
    const char *keys[1] = {key};
    int res[1] = {-1};
    kvs_op *op = NULL;
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_batch_exists_async(client, 1, keys, res, NULL, NULL, &op) != 0) return 1;
    return kvs_wait(op) != 1 || res[0] != 1;
}

/* kvs_put, then kvs_remove_matching of exactly that key: one removed, and it stays removed. */
static int case_remove_matching(const char *key, unsigned *final)
{
    char pattern[128];
    *final = 0;
    snprintf(pattern, sizeof(pattern), "^%s$", key);
    if (put_version(key, 1) != 0) return 1;
    return kvs_remove_matching(client, pattern) != 1;
}

/* kvs_put_async v1 (not yet waited for), then kvs_batch_put v2: v2 is stored. */
static int case_async_put_batch_put(const char *key, unsigned *final)
{
    char v1[VLEN], v2[VLEN];
    const char *keys[1] = {key};
    const void *vals[1] = {v2};
    size_t lens[1] = {VLEN};
    int st[1] = {-1};
    kvs_op *op = NULL;
    *final = 2;
    kvval_fill(v1, sizeof(v1), key, 1);
    kvval_fill(v2, sizeof(v2), key, 2);
    if (kvs_put_async(client, key, v1, sizeof(v1), &op) != 0) return 1;
    int bad = kvs_batch_put(client, 1, keys, vals, lens, st) != 1 || st[0] != 0;
    bad |= kvs_wait(op) != 0;
    return bad || !holds(key, 2);
}

/* kvs_put, then kvs_get_async(key, NULL, 0) - the size probe, which the shim passes through. */
static int case_async_probe(const char *key, unsigned *final)
{
    kvs_op *op = NULL;
    *final = 1;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_get_async(client, key, NULL, 0, &op) != 0) return 1;
    return kvs_wait(op) != VLEN;
}

/* Stores version of key at once: kvs_batch_put is passed through, after the key's pending puts. */
static int store_now(const char *key, unsigned version)
{
    char val[VLEN];
    const char *keys[1] = {key};
    const void *vals[1] = {val};
    size_t lens[1] = {VLEN};
    int st[1] = {-1};
    kvval_fill(val, sizeof(val), key, version);
    return kvs_batch_put(client, 1, keys, vals, lens, st) != 1 || st[0] != 0;
}

/* An async get started before the next call: buf holds what it read once op is waited for. */
struct early_get {
    kvs_op *op;
    char buf[VLEN];
    const char *keys[1];
    void *bufs[1];
    size_t caps[1];
    ssize_t res[1];
};

/*
 * Starts the get of key: kvs_get_async (batched by the shim) or, batch set,
 * a kvs_batch_get_async of the one key (passed through). 0 or 1 (failed).
 */
static int early_get_start(struct early_get *g, const char *key, int batch)
{
    if (!batch) return kvs_get_async(client, key, g->buf, sizeof(g->buf), &g->op) != 0;
    g->keys[0] = key;
    g->bufs[0] = g->buf;
    g->caps[0] = VLEN;
    g->res[0] = -1;
    return kvs_batch_get_async(client, 1, g->keys, g->bufs, g->caps, g->res, NULL, NULL, &g->op) !=
           0;
}

/* Waits for the get: 0 if it read version 1 of key, as it was when the get was made. */
static int early_get_saw_v1(struct early_get *g, const char *key, int batch)
{
    ssize_t r = kvs_wait(g->op);
    unsigned v = 0;
    if (batch) r = r == 1 ? g->res[0] : -1;
    return r != VLEN || !kvval_check(g->buf, VLEN, key, &v) || v != 1;
}

/*
 * Key holds v1; an async get of it, not yet waited for; then a call that
 * changes it (what, below). The get was made first, so it reads v1: the
 * later call must not reach the store before it.
 */
enum { LATER_REMOVE, LATER_REMOVE_MATCHING, LATER_PUT, LATER_BATCH_PUT };
static int get_then(const char *key, unsigned *final, int batch, int what)
{
    static __thread struct early_get g;
    char pattern[160], val[VLEN];
    const char *keys[1] = {key};
    const void *vals[1] = {val};
    size_t lens[1] = {VLEN};
    int st[1] = {-1};
    *final = what == LATER_PUT || what == LATER_BATCH_PUT ? 2 : 0;
    if (store_now(key, 1) != 0 || early_get_start(&g, key, batch) != 0) return 1;
    kvval_fill(val, sizeof(val), key, 2);
    snprintf(pattern, sizeof(pattern), "^%s$", key);
    int bad = what == LATER_REMOVE            ? kvs_remove(client, key) != 0
              : what == LATER_REMOVE_MATCHING ? kvs_remove_matching(client, pattern) != 1
              : what == LATER_PUT             ? put_version(key, 2) != 0
                                  : kvs_batch_put(client, 1, keys, vals, lens, st) != 1 || st[0];
    return early_get_saw_v1(&g, key, batch) | bad;
}

static int case_async_get_remove(const char *key, unsigned *final)
{
    return get_then(key, final, 0, LATER_REMOVE);
}

static int case_async_get_remove_matching(const char *key, unsigned *final)
{
    return get_then(key, final, 0, LATER_REMOVE_MATCHING);
}

static int case_async_get_put(const char *key, unsigned *final)
{
    return get_then(key, final, 0, LATER_PUT);
}

static int case_async_get_batch_put(const char *key, unsigned *final)
{
    return get_then(key, final, 0, LATER_BATCH_PUT);
}

static int case_batch_get_async_remove(const char *key, unsigned *final)
{
    return get_then(key, final, 1, LATER_REMOVE);
}

static int case_batch_get_async_put(const char *key, unsigned *final)
{
    return get_then(key, final, 1, LATER_PUT);
}

/* A callback chain: the get's done callback starts the put; the put's tells the round. */
struct chain {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    const char *key;
    char val[VLEN], buf[VLEN];
    const char *keys[1], *other[1];
    const void *vals[1];
    void *bufs[1];
    size_t lens[1];
    int st[1];
    ssize_t res[1];
    int done, failed;
};

static void chain_put_done(void *arg, ssize_t nok)
{
    struct chain *ch = arg;
    pthread_mutex_lock(&ch->lock);
    ch->failed |= nok != 1 || ch->st[0] != 0;
    ch->done = 1;
    pthread_cond_signal(&ch->cv);
    pthread_mutex_unlock(&ch->lock);
}

static void chain_get_done(void *arg, ssize_t nok)
{
    struct chain *ch = arg;
    (void)nok; /* a miss: the other key was never written */
    if (kvs_batch_put_async(client, 1, ch->keys, ch->vals, ch->lens, ch->st, chain_put_done, ch,
                            NULL) != 0) {
        ch->failed = 1;
        chain_put_done(ch, 1);
    }
}

/*
 * kvs_put v1, then a batch get of another key whose done callback - on the
 * library's reader thread - starts kvs_batch_put_async of v2 on the same
 * key: the chain must end (within 10 s). Waiting there for the pending put
 * would wait for the very thread that delivers its completion. The order
 * of v1 and v2 is not checked: a call from a callback is not ordered.
 */
static int case_callback_chain(const char *key, unsigned *final)
{
    static __thread struct chain ch;
    char other[160];
    *final = ANY_VERSION;
    snprintf(other, sizeof(other), "%s-other", key);
    pthread_mutex_init(&ch.lock, NULL);
    pthread_cond_init(&ch.cv, NULL);
    ch.done = ch.failed = 0;
    ch.key = ch.keys[0] = key;
    ch.other[0] = other;
    kvval_fill(ch.val, sizeof(ch.val), key, 2);
    ch.vals[0] = ch.val;
    ch.bufs[0] = ch.buf;
    ch.lens[0] = VLEN;
    if (put_version(key, 1) != 0) return 1;
    if (kvs_batch_get_async(client, 1, ch.other, ch.bufs, ch.lens, ch.res, chain_get_done, &ch,
                            NULL) != 0)
        return 1; /* nothing in flight */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&ch.lock);
    while (!ch.done)
        if (pthread_cond_timedwait(&ch.cv, &ch.lock, &ts) != 0) break;
    int finished = ch.done, failed = ch.failed;
    pthread_mutex_unlock(&ch.lock);
    if (!finished) {
        fprintf(stderr, "kvb_order: a callback chain did not end within 10 s\n");
        fflush(NULL);
        _exit(3); /* its callback may still run: nothing here can be freed */
    }
    pthread_cond_destroy(&ch.cv);
    pthread_mutex_destroy(&ch.lock);
    return failed;
}

static const struct order_case cases[] = {
    {"remove", case_remove},
    {"batch_put", case_batch_put},
    {"batch_get", case_batch_get},
    {"batch_exists", case_batch_exists},
    {"batch_putv", case_batch_putv},
    {"batch_getv", case_batch_getv},
    {"batch_put_async", case_batch_put_async},
    {"batch_get_async", case_batch_get_async},
    {"batch_exists_async", case_batch_exists_async},
    {"remove_matching", case_remove_matching},
    {"async_put_batch_put", case_async_put_batch_put},
    {"callback_chain", case_callback_chain},
    {"async_probe", case_async_probe},
    {"async_get_remove", case_async_get_remove},
    {"async_get_remove_matching", case_async_get_remove_matching},
    {"async_get_put", case_async_get_put},
    {"async_get_batch_put", case_async_get_batch_put},
    {"batch_get_async_remove", case_batch_get_async_remove},
    {"batch_get_async_put", case_batch_get_async_put},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

struct worker {
    pthread_t tid;
    int id, rounds;
    const struct order_case *c;
    int failures;
    unsigned *final; /* per round */
};

static void key_of(char *key, size_t cap, const struct worker *w, int round)
{
    snprintf(key, cap, "ord-%ld-%s-%d-%d", (long)getpid(), w->c->name, w->id, round);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[128];
    for (int r = 0; r < w->rounds; r++) {
        key_of(key, sizeof(key), w, r);
        w->failures += w->c->run(key, &w->final[r]);
    }
    return NULL;
}

/* After the flush: every key holds its final version, or is absent if that is 0. */
static int final_failures(const struct worker *w)
{
    char key[128];
    int bad = 0;
    for (int r = 0; r < w->rounds; r++) {
        key_of(key, sizeof(key), w, r);
        if (w->final[r] == ANY_VERSION)
            continue;
        else if (w->final[r])
            bad += !holds(key, w->final[r]);
        else
            bad += kvs_exists(client, key) != 0;
    }
    return bad;
}

/* Runs case c on n threads; returns how many rounds failed (as they ran, or after the flush). */
static int run_case(const struct order_case *c, int n, int rounds)
{
    struct worker w[64];
    int failed = 0, started = 0;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){.id = i, .rounds = rounds, .c = c};
        w[i].final = calloc((size_t)rounds, sizeof(unsigned));
        if (!w[i].final || pthread_create(&w[i].tid, NULL, worker_main, &w[i])) break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(w[i].tid, NULL);
    int flush = kvs_flush(client);
    for (int i = 0; i < started; i++) {
        /* A round counts once, whether it failed at once, after the flush, or both. */
        int now = w[i].failures, later = final_failures(&w[i]);
        failed += now > later ? now : later;
        free(w[i].final);
    }
    if (started < n) failed += (n - started) * rounds;
    printf("%s failed %d of %d (kvs_flush %d)\n", c->name, failed, n * rounds, flush);
    return failed + (flush != 0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = argc == 5 ? atoi(argv[3]) : 0, rounds = argc == 5 ? atoi(argv[4]) : 0;
    if (n < 1 || n > 64 || rounds < 1 || rounds > 10000) {
        fprintf(stderr, "usage: kvb_order SERVERS CASE|all THREADS(1..64) ROUNDS(1..10000)\n");
        return 2;
    }
    client = kvs_open(argv[1]);
    if (!client) {
        perror("kvs_open");
        return 2;
    }
    int failed = 0, found = 0;
    for (size_t i = 0; i < NCASES; i++) {
        if (strcmp(argv[2], "all") != 0 && strcmp(argv[2], cases[i].name) != 0) continue;
        found = 1;
        failed += run_case(&cases[i], n, rounds);
    }
    kvs_close(client);
    if (!found) fprintf(stderr, "kvb_order: no case %s\n", argv[2]);
    return !found ? 2 : failed ? 1 : 0;
}

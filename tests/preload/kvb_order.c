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
 * what a program without the shim gets: a call that touches
 * a key sees the puts this thread made to it before. Then, after kvs_flush,
 * it reads every key back and checks the final values. CASE is one of the
 * names in `cases` below, or "all". Prints "CASE failed F of N" per case;
 * exit status 0 when nothing failed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

#define VLEN 512

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

static const struct order_case cases[] = {
    {"remove", case_remove},
    {"batch_put", case_batch_put},
    {"batch_get", case_batch_get},
    {"batch_exists", case_batch_exists},
    {"batch_put_async", case_batch_put_async},
    {"batch_get_async", case_batch_get_async},
    {"batch_exists_async", case_batch_exists_async},
    {"remove_matching", case_remove_matching},
    {"async_put_batch_put", case_async_put_batch_put},
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
        if (w->final[r])
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

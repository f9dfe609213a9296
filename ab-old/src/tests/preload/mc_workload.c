/*
 * mc_workload - a program written against Mooncake Store's C API only
 * (store_c.h: it knows nothing of libkvstore or of the shim), run by
 * tests/integration/test_preload_mooncake.c with and without
 * LD_PRELOAD=libkvbatch.so. Built twice: mc_workload over kvbatch's drop-in
 * (libkvstore_mooncake), mc_workload_double over a library that is not
 * libkvstore (tests/preload/libmc_double.c).
 *
 *   mc_workload MASTER semantics [writeback]
 *                                      every call's result, one per line (writeback: without
 *                                      the puts the library refuses, which a write-behind put
 *                                      returns 0 for before the store answers)
 *   mc_workload MASTER threads N OPS   N threads put_from / get_into / is_exist / remove
 *                                      their own keys, and count every result
 *   mc_workload MASTER batches N OPS   N threads of SGLang's shape: batch_is_exist, then
 *                                      batch_put_from of 2 keys, batch_get_into of 3 (one
 *                                      missing), and count every result
 *   mc_workload MASTER fork            parent and a forked child both use the store
 *   mc_workload MASTER order N ROUNDS  N threads: a put, then at once a call the shim passes
 *                                      through on the same key (remove, batch put / get /
 *                                      exists, remove_by_regex); what each returns and what
 *                                      the keys hold at the end are as without the shim
 *   mc_workload MASTER write PREFIX N  puts N values and exits without destroying the store
 *                                      (write-behind puts then rest on the shim's exit flush)
 *   mc_workload MASTER read PREFIX N   checks those N values
 *
 * MASTER is mooncake_store_setup's master_server_addr. Exit status 0 when
 * every check passed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store_c.h"

static mooncake_store_t store;

#define SHOW(expr) printf("%-72s -> %lld\n", #expr, (long long)(expr))

/* A fixed sequence of calls; the driver diffs this output with and without the shim. */
static int semantics(int writeback)
{
    char buf[64], small[3] = {'s', 's', 's'}, va[] = "hello", vb[] = "world!";
    static char big[8192], huge_key[1024];
    memset(big, 'b', sizeof(big));
    memset(huge_key, 'k', sizeof(huge_key) - 1);
    const char *segs[] = {"segment-0", "segment-1"};
    mooncake_replicate_config_t two = {2, 0, 0, segs, 2}, pinned = {1, 1, 1, NULL, 0};
    mooncake_replicate_config_t zero = {0, 0, 0, NULL, 0};

    SHOW(mooncake_store_put_from(store, "mc.a", va, 5, NULL));
    SHOW(mooncake_store_get_into(store, "mc.a", buf, sizeof(buf)));
    SHOW(memcmp(buf, "hello", 5));
    SHOW(mooncake_store_get_into(store, "mc.a", small, sizeof(small))); /* too small */
    SHOW(memcmp(small, "sss", 3));                                      /* nothing copied */
    SHOW(mooncake_store_get_into(store, "mc.a", buf, 5));               /* exactly */
    SHOW(mooncake_store_get_into(store, "mc.missing", buf, sizeof(buf)));
    SHOW(mooncake_store_get_into(store, "mc.a", NULL, 0));
    SHOW(mooncake_store_get_size(store, "mc.a"));
    SHOW(mooncake_store_get_size(store, "mc.missing"));
    SHOW(mooncake_store_is_exist(store, "mc.a"));
    SHOW(mooncake_store_is_exist(store, "mc.missing"));

    /* put copies; configs by value; a config Mooncake refuses. */
    SHOW(mooncake_store_put(store, "mc.b", vb, 6, NULL));
    SHOW(mooncake_store_put(store, "mc.c", big, sizeof(big), &two));
    SHOW(mooncake_store_put_from(store, "mc.d", vb, 6, &pinned));
    if (!writeback) SHOW(mooncake_store_put_from(store, "mc.e", vb, 6, &zero));
    SHOW(mooncake_store_get_into(store, "mc.b", buf, sizeof(buf)));
    SHOW(memcmp(buf, "world!", 6));
    SHOW(mooncake_store_get_size(store, "mc.c"));
    SHOW(mooncake_store_is_exist(store, "mc.d"));
    if (!writeback) SHOW(mooncake_store_is_exist(store, "mc.e"));

    /* The same key twice in a row: the second value wins. */
    SHOW(mooncake_store_put_from(store, "mc.twice", va, 5, NULL));
    SHOW(mooncake_store_put_from(store, "mc.twice", vb, 6, NULL));
    SHOW(mooncake_store_get_into(store, "mc.twice", buf, sizeof(buf)));
    SHOW(memcmp(buf, "world!", 6));

    /* Arguments the batch path must not see: the library answers them. */
    SHOW(mooncake_store_put_from(store, "mc.empty", va, 0, NULL));
    SHOW(mooncake_store_is_exist(store, "mc.empty"));
    SHOW(mooncake_store_put_from(store, NULL, va, 5, NULL));
    SHOW(mooncake_store_put_from(store, "mc.null", NULL, 5, NULL));
    SHOW(mooncake_store_get_into(store, NULL, buf, sizeof(buf)));
    SHOW(mooncake_store_get_into(store, "mc.a", NULL, 5));
    SHOW(mooncake_store_is_exist(store, NULL));
    SHOW(mooncake_store_get_size(store, NULL));
    SHOW(mooncake_store_put_from(store, huge_key, va, 5, NULL));
    SHOW(mooncake_store_is_exist(store, huge_key) > 0);
    SHOW(mooncake_store_put_from(NULL, "mc.a", va, 5, NULL));
    SHOW(mooncake_store_get_into(NULL, "mc.a", buf, sizeof(buf)));

    /* The program's own batches, mixed keys. */
    const char *bk[] = {"mc.b1", "mc.b2", "mc.b3"};
    void *bv[] = {va, vb, big};
    size_t bs[] = {5, 6, 100};
    int br[3] = {1, 1, 1};
    SHOW(mooncake_store_batch_put_from(store, bk, bv, bs, 3, NULL, br));
    SHOW(br[0]);
    SHOW(br[1]);
    SHOW(br[2]);
    const char *gk[] = {"mc.b1", "mc.missing", "mc.b3", "mc.a"};
    char g0[8], g1[8], g2[8], g3[8];
    void *gb[] = {g0, g1, g2, g3};
    size_t gs[] = {8, 8, 8, 8};
    int64_t gr[4];
    SHOW(mooncake_store_batch_get_into(store, gk, gb, gs, 4, gr));
    SHOW(gr[0]);
    SHOW(gr[1]);
    SHOW(gr[2]); /* 100 bytes into 8: too small */
    SHOW(gr[3]);
    int er[4];
    SHOW(mooncake_store_batch_is_exist(store, gk, 4, er));
    SHOW(er[0]);
    SHOW(er[1]);
    SHOW(er[2]);
    SHOW(er[3]);

    /* Remove, then the key is gone. */
    SHOW(mooncake_store_remove(store, "mc.a", 0));
    SHOW(mooncake_store_remove(store, "mc.a", 0));
    SHOW(mooncake_store_get_into(store, "mc.a", buf, sizeof(buf)));
    SHOW(mooncake_store_is_exist(store, "mc.a"));
    SHOW(mooncake_store_put_from(store, "mc.a", vb, 6, NULL));
    SHOW(mooncake_store_get_into(store, "mc.a", buf, sizeof(buf)));
    SHOW(mooncake_store_remove_by_regex(store, "^mc\\.b[0-9]$", 0));
    SHOW(mooncake_store_is_exist(store, "mc.b1"));
    SHOW(mooncake_store_is_exist(store, "mc.b"));
    SHOW(mooncake_store_remove_all(store, 0) > 0);
    SHOW(mooncake_store_is_exist(store, "mc.b"));
    return 0;
}

struct worker {
    int id, ops;
    long counts[8]; /* see names below */
    int failures;
};

static const char *const names[] = {"put_from ok",        "get_into ok",      "get_into too small",
                                    "get_into missing",   "is_exist present", "is_exist missing",
                                    "removed, then gone", "get_size ok"};

/* Thread t's value number i: 1 KiB that tells whose and which it is. */
static void value_of(int t, int i, char *v, size_t len)
{
    for (size_t j = 0; j < len; j++)
        v[j] = (char)('a' + (t * 7 + i * 13 + (int)j) % 26);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[64], miss[64], val[1024], buf[1024], tiny[16];
    for (int i = 0; i < w->ops; i++) {
        snprintf(key, sizeof(key), "mt.%d.%d", w->id, i % 50);
        snprintf(miss, sizeof(miss), "mt.%d.missing.%d", w->id, i);
        value_of(w->id, i, val, sizeof(val));
        int p = mooncake_store_put_from(store, key, val, sizeof(val), NULL);
        w->counts[0] += p == 0;
        int64_t g = mooncake_store_get_into(store, key, buf, sizeof(buf));
        w->counts[1] += g == (int64_t)sizeof(val) && memcmp(buf, val, sizeof(val)) == 0;
        w->counts[2] += mooncake_store_get_into(store, key, tiny, sizeof(tiny)) < 0;
        w->counts[3] += mooncake_store_get_into(store, miss, buf, sizeof(buf)) < 0;
        w->counts[4] += mooncake_store_is_exist(store, key) == 1;
        w->counts[5] += mooncake_store_is_exist(store, miss) == 0;
        if (i % 10 == 9) {
            w->counts[6] += mooncake_store_remove(store, key, 0) == 0 &&
                            mooncake_store_get_into(store, key, buf, sizeof(buf)) < 0 &&
                            mooncake_store_is_exist(store, key) == 0;
        }
        if (i % 10 == 5)
            w->counts[7] += mooncake_store_get_size(store, key) == (int64_t)sizeof(val);
    }
    return NULL;
}

static int threads(int n, int ops)
{
    pthread_t t[256];
    struct worker w[256];
    long total[8] = {0};
    if (n < 1 || n > 256) return 1;
    for (int i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i;
        w[i].ops = ops;
        if (pthread_create(&t[i], NULL, worker_main, &w[i]) != 0) return 1;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        for (int k = 0; k < 8; k++)
            total[k] += w[i].counts[k];
    }
    int bad = 0;
    long want[8] = {(long)n * ops, (long)n * ops, (long)n * ops,        (long)n * ops,
                    (long)n * ops, (long)n * ops, (long)n * (ops / 10), (long)n * ((ops + 4) / 10)};
    for (int k = 0; k < 8; k++) {
        printf("%-20s %ld\n", names[k], total[k]);
        bad += total[k] != want[k];
    }
    return bad != 0;
}

/*
 * Per-key order (the shim's write-behind puts before the calls it passes
 * through): each round of thread t puts version 1 of five keys of its own,
 * each followed at once by one call on it - remove, batch_put_from of
 * version 2, batch_get_into, batch_is_exist, remove_by_regex of exactly the
 * key - checked as it returns; once every thread is done, the keys must
 * hold what those calls left (a put that landed after its remove would
 * bring its key back).
 */
enum { ORDER_LEN = 64, ORDER_KEYS = 5 };

struct order_worker {
    int id, rounds, failures;
};

static void order_key(char *key, size_t cap, int t, int round, int which)
{
    snprintf(key, cap, "mo.%d.%d.%d", t, round, which);
}

static void order_value(char *v, const char *key, int version)
{
    memset(v, 0, ORDER_LEN);
    snprintf(v, ORDER_LEN, "%.40s=%d", key, version);
}

/* One round's five calls; how many returned what they return without the shim. */
static int order_round(int t, int round)
{
    char key[ORDER_KEYS][48], v1[ORDER_KEYS][ORDER_LEN], v2[ORDER_LEN], buf[ORDER_LEN], pattern[64];
    int bad = 0;
    for (int k = 0; k < ORDER_KEYS; k++) {
        order_key(key[k], sizeof(key[k]), t, round, k);
        order_value(v1[k], key[k], 1);
        bad += mooncake_store_put_from(store, key[k], v1[k], ORDER_LEN, NULL) != 0;
        const char *keys[1] = {key[k]};
        void *bufs[1] = {buf};
        size_t sizes[1] = {ORDER_LEN};
        int res[1] = {-1};
        int64_t got[1] = {-1};
        switch (k) {
        case 0:
            bad += mooncake_store_remove(store, key[k], 0) != 0;
            break;
        case 1:
            order_value(v2, key[k], 2);
            bufs[0] = v2;
            bad += mooncake_store_batch_put_from(store, keys, bufs, sizes, 1, NULL, res) != 0 ||
                   res[0] != 0;
            break;
        case 2:
            bad += mooncake_store_batch_get_into(store, keys, bufs, sizes, 1, got) != 0 ||
                   got[0] != ORDER_LEN || memcmp(buf, v1[k], ORDER_LEN) != 0;
            break;
        case 3:
            bad += mooncake_store_batch_is_exist(store, keys, 1, res) != 0 || res[0] != 1;
            break;
        default:
            snprintf(pattern, sizeof(pattern), "^mo\\.%d\\.%d\\.%d$", t, round, k);
            bad += mooncake_store_remove_by_regex(store, pattern, 0) != 1;
        }
    }
    return bad;
}

/* What the round's keys must hold at the end: 0 if they do. */
static int order_final(int t, int round)
{
    char key[48], want[ORDER_LEN], buf[ORDER_LEN];
    int bad = 0;
    for (int k = 0; k < ORDER_KEYS; k++) {
        order_key(key, sizeof(key), t, round, k);
        if (k == 0 || k == ORDER_KEYS - 1) {
            bad += mooncake_store_is_exist(store, key) != 0;
            continue;
        }
        order_value(want, key, k == 1 ? 2 : 1);
        bad += mooncake_store_get_into(store, key, buf, sizeof(buf)) != ORDER_LEN ||
               memcmp(buf, want, ORDER_LEN) != 0;
    }
    return bad;
}

static void *order_main(void *arg)
{
    struct order_worker *w = arg;
    for (int r = 0; r < w->rounds; r++)
        w->failures += order_round(w->id, r);
    return NULL;
}

static int order(int n, int rounds)
{
    pthread_t t[64];
    struct order_worker w[64];
    int now = 0, later = 0, started = 0;
    if (n < 1 || n > 64 || rounds < 1) return 1;
    for (int i = 0; i < n; i++) {
        w[i] = (struct order_worker){.id = i, .rounds = rounds};
        if (pthread_create(&t[i], NULL, order_main, &w[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        now += w[i].failures;
    }
    for (int i = 0; i < started; i++)
        for (int r = 0; r < rounds; r++)
            later += order_final(i, r);
    printf("order: %d of %d calls failed as they returned, %d of %d keys wrong at the end\n", now,
           started * rounds * ORDER_KEYS, later, started * rounds * ORDER_KEYS);
    return now || later || started < n;
}

/* Says on stderr which step of fork_check failed, with its result and the time since t0. */
static int fork_failed(const char *who, const char *what, long long r, struct timespec t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "mc_workload fork: %s: %s -> %lld after %.3f s\n", who, what, r,
            (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9);
    return 1;
}

/* One thread's rounds of small batch calls (SGLang HiCache's backup and prefetch threads). */
static void *batch_worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < w->ops; i++) {
        char k0[64], k1[64], miss[64], v0[1024], v1[512], b0[1024], b1[512], b2[64];
        snprintf(k0, sizeof(k0), "mb.%d.%d_0_k", w->id, i);
        snprintf(k1, sizeof(k1), "mb.%d.%d_0_v", w->id, i);
        snprintf(miss, sizeof(miss), "mb.%d.%d.missing", w->id, i);
        value_of(w->id, i, v0, sizeof(v0));
        value_of(w->id, i + 1, v1, sizeof(v1));
        const char *keys[3] = {k0, k1, miss};
        int ex[3] = {9, 9, 9}, st[2] = {9, 9};
        w->counts[0] +=
            mooncake_store_batch_is_exist(store, keys, 2, ex) == 0 && ex[0] == 0 && ex[1] == 0;
        void *vals[2] = {v0, v1};
        size_t lens[2] = {sizeof(v0), sizeof(v1)};
        w->counts[1] += mooncake_store_batch_put_from(store, keys, vals, lens, 2, NULL, st) == 0 &&
                        st[0] == 0 && st[1] == 0;
        void *bufs[3] = {b0, b1, b2};
        size_t caps[3] = {sizeof(b0), sizeof(b1), sizeof(b2)};
        int64_t res[3] = {9, 9, 9};
        w->counts[2] += mooncake_store_batch_get_into(store, keys, bufs, caps, 3, res) == 0 &&
                        res[0] == (int64_t)sizeof(v0) && memcmp(b0, v0, sizeof(v0)) == 0 &&
                        res[1] == (int64_t)sizeof(v1) && memcmp(b1, v1, sizeof(v1)) == 0;
        w->counts[3] += res[2] < 0;
        w->counts[4] += mooncake_store_batch_is_exist(store, keys, 3, ex) == 0 && ex[0] == 1 &&
                        ex[1] == 1 && ex[2] == 0;
    }
    return NULL;
}

static int batches(int n, int ops)
{
    static const char *const what[] = {"batch_is_exist none", "batch_put_from ok",
                                       "batch_get_into ok", "batch_get_into missing",
                                       "batch_is_exist both"};
    pthread_t t[64];
    struct worker w[64];
    long total[5] = {0};
    if (n < 1 || n > 64) return 1;
    for (int i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i;
        w[i].ops = ops;
        if (pthread_create(&t[i], NULL, batch_worker_main, &w[i]) != 0) return 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        for (int k = 0; k < 5; k++)
            total[k] += w[i].counts[k];
    }
    for (int k = 0; k < 5; k++) {
        printf("%-24s %ld\n", what[k], total[k]);
        bad += total[k] != (long)n * ops;
    }
    return bad != 0;
}

/* The parent puts, a forked child reads it and puts its own, the parent reads that. */
static int fork_check(void)
{
    char buf[16];
    struct timespec t0;
    long long r;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((r = mooncake_store_put_from(store, "mf.parent", "parent", 6, NULL)) != 0)
        return fork_failed("parent", "put_from mf.parent", r, t0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        /* A write-behind put is the parent's to send: it may land a moment after the fork. */
        for (int i = 0; i < 500 && (r = mooncake_store_is_exist(store, "mf.parent")) != 1; i++)
            usleep(10000);
        int bad = r != 1 ? fork_failed("child", "is_exist mf.parent", r, t0)
                  : (r = mooncake_store_get_into(store, "mf.parent", buf, sizeof(buf))) != 6
                      ? fork_failed("child", "get_into mf.parent", r, t0)
                  : (r = mooncake_store_put_from(store, "mf.child", "child", 5, NULL)) != 0
                      ? fork_failed("child", "put_from mf.child", r, t0)
                  : (r = mooncake_store_is_exist(store, "mf.child")) != 1
                      ? fork_failed("child", "is_exist mf.child", r, t0)
                      : 0;
        mooncake_store_destroy(store);
        fflush(NULL);
        _exit(bad);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fork_failed("parent", "the child's exit status", (long long)st, t0);
    if ((r = mooncake_store_get_into(store, "mf.child", buf, sizeof(buf))) != 5)
        return fork_failed("parent", "get_into mf.child", r, t0);
    return 0;
}

/* write: N put_from of 4 KiB, then exit(0) with the store left as it is. read: checks them. */
static int write_or_read(int write, const char *prefix, int n)
{
    static char val[4096], buf[4096];
    char key[96];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s.%d", prefix, i);
        memset(val, 'a' + i % 26, sizeof(val));
        if (write)
            bad += mooncake_store_put_from(store, key, val, sizeof(val), NULL) != 0;
        else
            bad += mooncake_store_get_into(store, key, buf, sizeof(buf)) != (int64_t)sizeof(buf) ||
                   memcmp(buf, val, sizeof(val)) != 0;
    }
    printf("%s %d: %d bad\n", write ? "write" : "read", n, bad);
    fflush(stdout);
    if (write) exit(bad != 0); /* no destroy: the exit flush sends what is pending */
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: mc_workload MASTER semantics|threads N OPS|fork|order N ROUNDS\n");
        return 2;
    }
    store = mooncake_store_create();
    if (!store || mooncake_store_setup(store, "mc-workload:12345", "P2PHANDSHAKE", 64 << 20,
                                       16 << 20, "tcp", "", argv[1]) != 0) {
        fprintf(stderr, "mc_workload: setup on %s failed\n", argv[1]);
        return 1;
    }
    int rc = 2;
    int wr = strcmp(argv[2], "write") == 0;
    if ((wr || strcmp(argv[2], "read") == 0) && argc == 5) {
        rc = write_or_read(wr, argv[3], atoi(argv[4]));
        mooncake_store_destroy(store);
        return rc;
    }
    mooncake_store_remove_all(store, 1); /* what an earlier run left */
    if (strcmp(argv[2], "semantics") == 0)
        rc = semantics(argc > 3 && strcmp(argv[3], "writeback") == 0);
    else if (strcmp(argv[2], "threads") == 0 && argc == 5)
        rc = threads(atoi(argv[3]), atoi(argv[4]));
    else if (strcmp(argv[2], "batches") == 0 && argc == 5)
        rc = batches(atoi(argv[3]), atoi(argv[4]));
    else if (strcmp(argv[2], "fork") == 0)
        rc = fork_check();
    else if (strcmp(argv[2], "order") == 0 && argc == 5)
        rc = order(atoi(argv[3]), atoi(argv[4]));
    fflush(stdout);
    mooncake_store_destroy(store);
    return rc;
}

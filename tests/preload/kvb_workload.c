/*
 * kvb_workload - a plain libkvstore program (it knows nothing of the shim),
 * run by tests/integration/test_preload.c with and without LD_PRELOAD.
 *
 *   kvb_workload SERVERS semantics          every call's result, one per line
 *   kvb_workload SERVERS threads N OPS      N threads put+get their own 4K values
 *   kvb_workload SERVERS shared N OPS       the same, each thread's values in a buffer of
 *                                           kvs_alloc_buffer (allocated and freed by it)
 *   kvb_workload SERVERS batches N OPS      N threads, OPS rounds each of a kvs_batch_put of
 *                                           3 keys (every 4th round the second one ""),
 *                                           kvs_batch_get and kvs_batch_exists, checked
 *   kvb_workload SERVERS write PREFIX N     puts N values and exits (no flush)
 *   kvb_workload SERVERS read PREFIX N      checks those N values
 *   kvb_workload SERVERS fork               parent and forked child both use the client
 *   kvb_workload SERVERS late PREFIX N      puts N values from an atexit handler that runs
 *                                           after the shim's exit flush
 *   kvb_workload SERVERS async PREFIX N     N async puts, then waits for them and reads them
 *   kvb_workload SERVERS lost PREFIX N      N puts, kvs_close, then a new client's kvs_flush
 *                                           must fail once (the server is down: write-behind
 *                                           puts acknowledged, then lost) and then return 0
 *
 * Exit status 0 when every check passed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

static kvs_client *client;

#define SHOW(expr) printf("%-48s -> %ld\n", #expr, (long)(expr))

/* A fixed sequence of calls; the driver diffs this output with and without the shim. */
static int semantics(void)
{
    char buf[64], big[8192];
    static char huge[KVS_MAX_KEY + 8];
    kvs_op *op = NULL;
    memset(huge, 'k', sizeof(huge) - 1);
    memset(big, 'b', sizeof(big));
    size_t hugelen = 3u << 20;
    char *hugeval = calloc(1, hugelen);
    if (!hugeval) return 1;
    SHOW(kvs_put(client, "sem.a", "hello", 5));
    SHOW(kvs_get(client, "sem.a", buf, sizeof(buf)));
    SHOW(memcmp(buf, "hello", 5));
    SHOW(kvs_get(client, "sem.a", NULL, 0));
    SHOW(kvs_get(client, "sem.a", buf, 3));
    SHOW(kvs_get(client, "sem.missing", buf, sizeof(buf)));
    SHOW(kvs_get(client, "sem.missing", NULL, 0));
    SHOW(kvs_exists(client, "sem.a"));
    SHOW(kvs_exists(client, "sem.missing"));
    SHOW(kvs_put(client, "sem.empty", "", 0));
    SHOW(kvs_get(client, "sem.empty", buf, sizeof(buf)));
    SHOW(kvs_put(client, NULL, "x", 1));
    SHOW(kvs_put(client, "", "x", 1));
    SHOW(kvs_get(client, NULL, buf, sizeof(buf)));
    SHOW(kvs_get(client, "", buf, sizeof(buf)));
    SHOW(kvs_exists(client, ""));
    SHOW(kvs_put(client, huge, "x", 1));
    SHOW(kvs_get(client, huge, buf, sizeof(buf)));
    SHOW(kvs_put(client, "sem.nullval", NULL, 4));
    SHOW(kvs_get(client, "sem.a", NULL, 4));
    SHOW(kvs_put(client, "sem.big", big, sizeof(big)));
    SHOW(kvs_get(client, "sem.big", big, sizeof(big)));
    SHOW(kvs_put(NULL, "sem.a", "x", 1));
    SHOW(kvs_put(client, "sem.huge", hugeval, hugelen)); /* over kvstored --max-object */
    SHOW(kvs_get(client, "sem.huge", hugeval, hugelen));
    free(hugeval);
    SHOW(kvs_put_async(client, "sem.async", "async!", 6, &op));
    SHOW(kvs_wait(op));
    SHOW(kvs_get_async(client, "sem.async", buf, sizeof(buf), &op));
    SHOW(kvs_wait(op));
    SHOW(memcmp(buf, "async!", 6));
    SHOW(kvs_get_async(client, "sem.missing", buf, sizeof(buf), &op));
    SHOW(kvs_wait(op));
    SHOW(kvs_put_async(client, "sem.order", "one", 3, &op) == 0 && kvs_wait(op) == 0);
    kvs_op *op2 = NULL;
    SHOW(kvs_put_async(client, "sem.order", "second", 6, &op2));
    SHOW(kvs_get(client, "sem.order", buf, sizeof(buf)));
    SHOW(kvs_wait(op2));
    SHOW(kvs_flush(client));
    return 0;
}

struct worker {
    int id, ops, failures;
    int shared; /* values in a buffer of kvs_alloc_buffer */
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[64], own[2][4096];
    char *val = own[0], *buf = own[1], *mem = NULL;
    if (w->shared) {
        if (kvs_alloc_buffer(client, 2 * 4096, (void **)&mem) < 0) {
            w->failures++;
            return NULL;
        }
        val = mem;
        buf = mem + 4096;
    }
    for (int i = 0; i < w->ops; i++) {
        snprintf(key, sizeof(key), "thr-%d-%d", w->id, i % 64);
        kvval_fill(val, 4096, key, (unsigned)i);
        if (kvs_put(client, key, val, 4096) != 0) w->failures++;
        if (i % 4 == 0) {
            unsigned version;
            ssize_t n = kvs_get(client, key, buf, 4096);
            if (n != 4096 || !kvval_check(buf, 4096, key, &version) || version != (unsigned)i)
                w->failures++;
        }
    }
    if (mem && kvs_free_buffer(client, mem) != 0) w->failures++;
    return NULL;
}

static int threads(int n, int ops, int shared)
{
    pthread_t t[256];
    struct worker w[256];
    int failures = 0;
    if (n < 1 || n > 256) return 2;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){i, ops, 0, shared};
        if (pthread_create(&t[i], NULL, worker_main, &w[i])) return 1;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    printf("threads=%d ops=%d failures=%d\n", n, ops, failures);
    return failures ? 1 : 0;
}

static int write_keys(const char *prefix, int n)
{
    char key[128], val[1024];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        kvval_fill(val, sizeof(val), key, 7);
        bad += kvs_put(client, key, val, sizeof(val)) != 0;
    }
    printf("wrote %d, %d failed\n", n, bad);
    return bad ? 1 : 0; /* no kvs_flush, no kvs_close: exit must flush */
}

static int read_keys(const char *prefix, int n)
{
    char key[128], buf[1024];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        unsigned version = 0;
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        ssize_t r = kvs_get(client, key, buf, sizeof(buf));
        bad += r != (ssize_t)sizeof(buf) || !kvval_check(buf, sizeof(buf), key, &version) ||
               version != 7;
    }
    printf("read %d, %d bad\n", n, bad);
    return bad ? 1 : 0;
}

/*
 * A fixed mix of calls whose counts the stats file must show exactly, whether
 * each call was batched or passed through: 23 puts (3 fail: two over
 * kvstored's --max-object, one with no op pointer) and 18 gets (8 of missing
 * keys). The two oversize puts and the two 100 KiB gets exceed the
 * KVBATCH_MAX_BYTES the test sets, so each goes alone, as a batch of one.
 */
static int counted(void)
{
    static char val[1024], buf[1024], big[100 * 1024];
    size_t huge_len = 2u << 20;
    char *huge = calloc(1, huge_len);
    char key[64];
    kvs_op *op;
    int bad = 0;
    if (!huge) return 1;
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "cnt-%d", i);
        bad |= kvs_put(client, key, val, sizeof(val)) != 0;
        snprintf(key, sizeof(key), "cnt-async-%d", i);
        bad |= kvs_put_async(client, key, val, sizeof(val), &op) != 0 || kvs_wait(op) != 0;
    }
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "cnt-%d", i);
        bad |= kvs_get(client, key, buf, sizeof(buf)) != (ssize_t)sizeof(buf);
        bad |= kvs_get_async(client, key, buf, sizeof(buf), &op) != 0 ||
               kvs_wait(op) != (ssize_t)sizeof(buf);
    }
    for (int i = 0; i < 3; i++) {
        bad |= kvs_get(client, "cnt-missing", buf, sizeof(buf)) != -ENOENT;
        bad |= kvs_get_async(client, "cnt-missing", buf, sizeof(buf), &op) != 0 ||
               kvs_wait(op) != -ENOENT;
    }
    for (int i = 0; i < 2; i++) {
        ssize_t r = kvs_put_async(client, "cnt-huge", huge, huge_len, &op);
        bad |= r == 0 ? kvs_wait(op) >= 0 : r >= 0;
        bad |= kvs_get_async(client, "cnt-missing", big, sizeof(big), &op) != 0 ||
               kvs_wait(op) != -ENOENT;
    }
    bad |= kvs_put_async(client, "cnt-noop", val, sizeof(val), NULL) != -EINVAL;
    free(huge);
    printf("counted %s\n", bad ? "FAILED" : "ok");
    return bad;
}

static const char *late_prefix;
static int late_n;

/*
 * Registered before the first kvs_* call, so it runs after the shim's own
 * atexit handler (handlers run in reverse order): its puts come after the
 * exit flush. It exits 3 if one fails.
 */
static void late_puts(void)
{
    if (write_keys(late_prefix, late_n) != 0) _exit(3);
}

/* N async puts in flight at once, then each waited for and read back. */
static int async_keys(const char *prefix, int n)
{
    static kvs_op *ops[1024];
    static char vals[1024][256];
    char key[128], buf[256];
    int bad = 0;
    if (n < 1 || n > 1024) return 2;
    alarm(60); /* a call that waits on itself ends here, killed by SIGALRM */
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        kvval_fill(vals[i], sizeof(vals[i]), key, 9);
        bad += kvs_put_async(client, key, vals[i], sizeof(vals[i]), &ops[i]) != 0;
    }
    for (int i = 0; i < n; i++)
        bad += kvs_wait(ops[i]) != 0;
    for (int i = 0; i < n; i++) {
        unsigned version = 0;
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        bad += kvs_get(client, key, buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
               !kvval_check(buf, sizeof(buf), key, &version) || version != 9;
    }
    printf("async %d, %d bad\n", n, bad);
    return bad ? 1 : 0;
}

/*
 * With the server down: puts that kvs_put acknowledged (write-behind) are
 * lost; kvs_close cannot return that, so the next kvs_flush - here of a new
 * client - must, once.
 */
static int lost_at_close(const char *servers, const char *prefix, int n)
{
    if (write_keys(prefix, n) == 0) printf("puts acknowledged\n");
    kvs_close(client);
    kvs_client *c2 = kvs_open(servers);
    if (!c2) return 1;
    int first = kvs_flush(c2), second = kvs_flush(c2);
    printf("after kvs_close: kvs_flush %d, then %d\n", first, second);
    kvs_close(c2);
    return first < 0 && second == 0 ? 0 : 1;
}

static int forking(void)
{
    char buf[16];
    int status;
    if (kvs_put(client, "fork.parent", "P", 1) != 0) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        int bad = kvs_get(client, "fork.parent", buf, sizeof(buf)) != 1;
        bad |= kvs_put(client, "fork.child", "C", 1) != 0;
        bad |= kvs_get(client, "fork.child", buf, sizeof(buf)) != 1 || buf[0] != 'C';
        _exit(bad);
    }
    int bad = kvs_put(client, "fork.parent2", "Q", 1) != 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) bad = 1;
    bad |= kvs_get(client, "fork.child", buf, sizeof(buf)) != 1 || buf[0] != 'C';
    bad |= kvs_get(client, "fork.parent2", buf, sizeof(buf)) != 1 || buf[0] != 'Q';
    printf("fork %s\n", bad ? "FAILED" : "ok");
    return bad;
}

/* One thread's rounds of small batch calls on keys of its own; counts what is not as expected. */
static void *batch_worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < w->ops; i++) {
        char k0[64], k1[64], kx[64], v0[1000], v1[3000], b0[1000], b1[3000], b2[8];
        int bad = i % 4 == 3; /* a key no call may carry: the call passes through */
        snprintf(k0, sizeof(k0), "bat-%d-%d-a", w->id, i % 32);
        snprintf(kx, sizeof(kx), "bat-%d-%d-x", w->id, i % 32);
        snprintf(k1, sizeof(k1), "bat-%d-%d-b", w->id, i % 32);
        kvval_fill(v0, sizeof(v0), k0, (unsigned)i);
        kvval_fill(v1, sizeof(v1), k1, (unsigned)i);
        const char *keys[3] = {k0, bad ? "" : kx, k1};
        const void *vals[3] = {v0, "x", v1};
        size_t lens[3] = {sizeof(v0), 1, sizeof(v1)};
        int st[3] = {1, 1, 1};
        if (kvs_batch_put(client, 3, keys, vals, lens, st) != 3 - bad || st[0] != 0 ||
            st[1] != (bad ? -EINVAL : 0) || st[2] != 0)
            w->failures++;
        void *bufs[3] = {b0, b2, b1};
        size_t caps[3] = {sizeof(b0), sizeof(b2), sizeof(b1) - 1};
        const char *gkeys[3] = {k0, "bat-never-put", k1};
        ssize_t res[3];
        unsigned v = 0;
        if (kvs_batch_get(client, 3, gkeys, bufs, caps, res) != 1 || res[0] != sizeof(v0) ||
            !kvval_check(b0, sizeof(b0), k0, &v) || v != (unsigned)i || res[1] != -ENOENT ||
            res[2] != -ERANGE)
            w->failures++;
        int ex[3];
        if (kvs_batch_exists(client, 3, gkeys, ex) != 3 || ex[0] != 1 || ex[1] != 0 || ex[2] != 1)
            w->failures++;
    }
    return NULL;
}

static int batches(int n, int ops)
{
    pthread_t t[64];
    struct worker w[64];
    int failures = 0;
    if (n < 1 || n > 64) return 2;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){i, ops, 0};
        if (pthread_create(&t[i], NULL, batch_worker_main, &w[i])) return 1;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    printf("batches: %d failures\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int rc = 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: kvb_workload SERVERS "
                        "semantics|threads|write|read|fork|counted|late|async|lost ...\n");
        return 2;
    }
    if (strcmp(argv[2], "late") == 0 && argc == 5) {
        late_prefix = argv[3];
        late_n = atoi(argv[4]);
        if (atexit(late_puts) != 0) return 1;
    }
    client = kvs_open(argv[1]);
    if (!client) {
        perror("kvs_open");
        return 1;
    }
    if (strcmp(argv[2], "semantics") == 0)
        rc = semantics();
    else if (strcmp(argv[2], "batches") == 0 && argc == 5)
        rc = batches(atoi(argv[3]), atoi(argv[4]));
    else if (strcmp(argv[2], "threads") == 0 && argc == 5)
        rc = threads(atoi(argv[3]), atoi(argv[4]), 0);
    else if (strcmp(argv[2], "shared") == 0 && argc == 5)
        rc = threads(atoi(argv[3]), atoi(argv[4]), 1);
    else if (strcmp(argv[2], "write") == 0 && argc == 5)
        return write_keys(argv[3], atoi(argv[4]));
    else if (strcmp(argv[2], "read") == 0 && argc == 5)
        rc = read_keys(argv[3], atoi(argv[4]));
    else if (strcmp(argv[2], "fork") == 0)
        rc = forking();
    else if (strcmp(argv[2], "counted") == 0)
        rc = counted();
    else if (strcmp(argv[2], "late") == 0 && argc == 5)
        return 0; /* the puts happen at exit; no kvs_close */
    else if (strcmp(argv[2], "lost") == 0 && argc == 5)
        return lost_at_close(argv[1], argv[3], atoi(argv[4])); /* closes client itself */
    else if (strcmp(argv[2], "async") == 0 && argc == 5)
        rc = async_keys(argv[3], atoi(argv[4]));
    kvs_close(client);
    return rc;
}

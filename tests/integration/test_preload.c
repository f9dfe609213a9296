/*
 * test_preload.c - runs tests/preload/kvb_workload (a plain libkvstore
 * program) against a real kvstored with and without
 * LD_PRELOAD=libkvbatch.so and compares: identical results for every call,
 * batching visible in the stats file (which passes promtool), a bad variable
 * reported once with correct results, write-behind data readable by a new
 * process after exit (puts after the exit flush included), a library under
 * the shim calling back into it, fork, a bounded exit when the server is
 * gone, and per-key order between write-behind puts and the calls the shim
 * does not batch (tests/preload/kvb_order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtest.h"

static struct kvt_server server;
static char tmpdir[64];

/* Absolute path of a built file (LD_PRELOAD needs one). */
static const char *abs_build(const char *rel, char *out, size_t cap)
{
    char *p = realpath(kvt_build_path(rel), NULL);
    assert_non_null(p);
    snprintf(out, cap, "%s", p);
    free(p);
    return out;
}

/*
 * Runs the built program rel (tests/preload/...) with the server's address
 * and args, the environment extended by env (NULL-ended "NAME=value" list),
 * stdout into out_path and stderr into err_path. Returns the exit status
 * (or -1).
 */
static int run_prog(const char *rel, const char *const env[], const char *out_path,
                    const char *err_path, const char *const args[])
{
    char prog[PATH_MAX];
    const char *argv[16];
    int argc = 0;
    abs_build(rel, prog, sizeof(prog));
    argv[argc++] = prog;
    argv[argc++] = server.addr;
    for (int i = 0; args[i] && argc < 15; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* run_prog of kvb_workload. */
static int run(const char *const env[], const char *out_path, const char *err_path,
               const char *const args[])
{
    return run_prog("tests/preload/kvb_workload", env, out_path, err_path, args);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *tmp(const char *name)
{
    static __thread char bufs[4][PATH_MAX];
    static __thread int next;
    char *p = bufs[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", tmpdir, name);
    return p;
}

/* The value of one sample line "name value" in a stats file text, or -1. */
static double metric(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += len)
        if ((p == text || p[-1] == '\n') && p[len] == ' ') return strtod(p + len + 1, NULL);
    return -1;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kvb-preload-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return kvt_server_start(&server, 0, "--max-object 1M");
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    kvt_server_stop(&server);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char shim_env[2 * PATH_MAX + 16];

/*
 * Path of the sanitizer runtime this test runs with ("" if none): under
 * ASan/TSan it must come first in LD_PRELOAD, before the shim.
 */
static void sanitizer_runtime(char *out, size_t cap)
{
    char line[PATH_MAX + 128];
    FILE *f = fopen("/proc/self/maps", "r");
    out[0] = '\0';
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        if (p && (strstr(p, "/libasan.so") || strstr(p, "/libtsan.so"))) {
            p[strcspn(p, "\n")] = '\0';
            snprintf(out, cap, "%s ", p);
            break;
        }
    }
    fclose(f);
}

static const char *preload(void)
{
    char lib[PATH_MAX], san[PATH_MAX];
    abs_build("lib/libkvbatch.so", lib, sizeof(lib));
    sanitizer_runtime(san, sizeof(san));
    snprintf(shim_env, sizeof(shim_env), "LD_PRELOAD=%s%s", san, lib);
    return shim_env;
}

static void test_same_results_with_and_without_shim(void **state)
{
    static const char *const args[] = {"semantics", NULL};
    (void)state;
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(plain_env, tmp("plain.out"), tmp("plain.err"), args), 0);
    const char *policies[] = {"KVBATCH_POLICY=adaptive", "KVBATCH_POLICY=fixed",
                              "KVBATCH_POLICY=off"};
    char *plain = slurp(tmp("plain.out"));
    assert_non_null(strstr(plain, "kvs_flush(client)"));
    for (int i = 0; i < 3; i++) {
        const char *const env[] = {preload(), policies[i], "KVBATCH_WINDOW_US=200", NULL};
        assert_int_equal(run(env, tmp("shim.out"), tmp("shim.err"), args), 0);
        char *shim = slurp(tmp("shim.out"));
        if (strcmp(plain, shim) != 0)
            fprintf(stderr, "%s:\n%s\nvs plain:\n%s\n", policies[i], shim, plain);
        assert_string_equal(plain, shim);
        free(shim);
    }
    free(plain);
}

static void test_16_threads_batch_and_stats_pass_promtool(void **state)
{
    static const char *const args[] = {"threads", "16", "400", NULL};
    char stats_env[PATH_MAX + 32], cmd[PATH_MAX + 64];
    (void)state;
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp("stats-%p.prom"));
    /* fixed + 1ms window: merging does not depend on how fast this machine is (sanitizers). */
    const char *const env[] = {preload(), stats_env, "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=1ms", NULL};
    assert_int_equal(run(env, tmp("thr.out"), tmp("thr.err"), args), 0);
    /* %p expanded: exactly one stats file for the one process. */
    snprintf(cmd, sizeof(cmd), "cat %s/stats-*.prom > %s", tmpdir, tmp("stats.prom"));
    assert_int_equal(system(cmd), 0);
    char *text = slurp(tmp("stats.prom"));
    double ops = metric(text, "kvbatch_ops_total{op=\"put\"}");
    double batches = metric(text, "kvbatch_batches_total{op=\"put\"}");
    double gets = metric(text, "kvbatch_ops_total{op=\"get\"}");
    fprintf(stderr, "16 threads: %.0f puts in %.0f batches, %.0f gets\n", ops, batches, gets);
    assert_true(ops == 16 * 400);
    assert_true(gets == 16 * 100);
    assert_true(batches > 0 && ops >= 4 * batches);
    assert_true(metric(text, "kvbatch_queued_ops") == 0);
    /* libkvstore's own counters, through the shim: a frame per batch, not per op. */
    char name[256];
    snprintf(name, sizeof(name), "kvbatch_transport_total{server=\"%s\",counter=\"frames_sent\"}",
             server.addr);
    double frames = metric(text, name);
    fprintf(stderr, "16 threads: %.0f frames sent for %.0f ops\n", frames, ops + gets);
    assert_true(frames > 0 && frames < (ops + gets) / 2);
    free(text);
    if (access("/usr/bin/promtool", X_OK) != 0) {
        fprintf(stderr, "SKIP promtool check: /usr/bin/promtool is not installed\n");
        return;
    }
    snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s", tmp("stats.prom"));
    assert_int_equal(system(cmd), 0);
}

/*
 * Every call is counted once, with its error, whether it went through a batch
 * or straight to libkvstore (policy off, a call refused at once), async or
 * not: the "counted" workload's fixed mix against the stats file, per policy.
 */
static void test_stats_count_every_call_once(void **state)
{
    static const char *const args[] = {"counted", NULL};
    const char *policies[] = {"KVBATCH_POLICY=adaptive", "KVBATCH_POLICY=fixed",
                              "KVBATCH_POLICY=off"};
    char stats_env[PATH_MAX + 32];
    (void)state;
    for (int i = 0; i < 3; i++) {
        snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp("counted.prom"));
        const char *const env[] = {preload(), stats_env, policies[i], "KVBATCH_MAX_BYTES=64K",
                                   NULL};
        assert_int_equal(run(env, tmp("c.out"), tmp("c.err"), args), 0);
        char *text = slurp(tmp("counted.prom"));
        double puts = metric(text, "kvbatch_ops_total{op=\"put\"}");
        double gets = metric(text, "kvbatch_ops_total{op=\"get\"}");
        double enoent = metric(text, "kvbatch_errors_total{op=\"get\",status=\"ENOENT\"}");
        double einval = metric(text, "kvbatch_errors_total{op=\"put\",status=\"EINVAL\"}");
        double big = metric(text, "kvbatch_errors_total{op=\"put\",status=\"E2BIG\"}");
        double put_bytes = metric(text, "kvbatch_bytes_total{op=\"put\"}");
        double direct_gets = metric(text, "kvbatch_direct_ops_total{op=\"get\"}");
        fprintf(stderr, "%s: puts %.0f gets %.0f ENOENT %.0f EINVAL %.0f E2BIG %.0f bytes %.0f\n",
                policies[i], puts, gets, enoent, einval, big, put_bytes);
        assert_true(puts == 23 && gets == 18);
        assert_true(enoent == 8 && einval == 1 && big == 2);
        assert_true(put_bytes == 20 * 1024); /* failed puts move no bytes */
        /* over KVBATCH_MAX_BYTES an op goes alone, as a batch of one; policy off: all direct */
        assert_true(direct_gets == (i == 2 ? 18 : 0));
        free(text);
    }
}

static void test_bad_variable_reports_once_and_passes_through(void **state)
{
    static const char *const args[] = {"semantics", NULL};
    (void)state;
    const char *const plain_env[] = {NULL};
    const char *const env[] = {preload(), "KVBATCH_WINDOW_US=fast", NULL};
    assert_int_equal(run(plain_env, tmp("p.out"), tmp("p.err"), args), 0);
    assert_int_equal(run(env, tmp("bad.out"), tmp("bad.err"), args), 0);
    char *plain = slurp(tmp("p.out")), *out = slurp(tmp("bad.out")), *err = slurp(tmp("bad.err"));
    assert_string_equal(plain, out);
    char *first = strstr(err, "KVBATCH_WINDOW_US='fast'");
    assert_non_null(first);
    assert_null(strstr(first + 1, "KVBATCH_WINDOW_US"));
    assert_non_null(strstr(err, "accepted"));
    free(plain);
    free(out);
    free(err);
}

static void test_writeback_data_survives_exit(void **state)
{
    static const char *const wargs[] = {"write", "wb", "300", NULL};
    static const char *const rargs[] = {"read", "wb", "300", NULL};
    (void)state;
    const char *const env[] = {preload(), "KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=100ms", NULL};
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(env, tmp("w.out"), tmp("w.err"), wargs), 0);
    assert_int_equal(run(plain_env, tmp("r.out"), tmp("r.err"), rargs), 0);
}

/*
 * The program's own atexit handler, which runs after the shim's exit flush,
 * puts write-behind values: they go straight to libkvstore (nothing would
 * flush a batcher again) and a new process reads them all.
 */
static void test_puts_after_the_exit_flush_are_stored(void **state)
{
    static const char *const wargs[] = {"late", "late", "200", NULL};
    static const char *const rargs[] = {"read", "late", "200", NULL};
    (void)state;
    const char *const env[] = {preload(), "KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=1s", NULL};
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(env, tmp("l.out"), tmp("l.err"), wargs), 0);
    assert_int_equal(run(plain_env, tmp("lr.out"), tmp("lr.err"), rargs), 0);
}

/*
 * A library under the shim whose batch call reaches a call the shim
 * interposes (tests/preload/libkvs_reenter.c: its kvs_batch_put_async calls
 * kvs_put, as the Mooncake drop-in's batch calls reach libkvstore's): the
 * inner calls go straight to libkvstore, never into a batch of their own
 * (with one batch in flight that would wait on itself) and are not counted
 * twice.
 */
static void test_backend_call_reentering_the_shim_passes_through(void **state)
{
    static const char *const args[] = {"async", "reenter", "64", NULL};
    char lib[PATH_MAX], san[PATH_MAX], reenter[PATH_MAX], env_preload[3 * PATH_MAX + 16];
    char stats_env[PATH_MAX + 32];
    (void)state;
    abs_build("lib/libkvbatch.so", lib, sizeof(lib));
    abs_build("tests/preload/libkvs_reenter.so", reenter, sizeof(reenter));
    sanitizer_runtime(san, sizeof(san));
    snprintf(env_preload, sizeof(env_preload), "LD_PRELOAD=%s%s %s", san, lib, reenter);
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp("reenter.prom"));
    const char *const env[] = {env_preload, stats_env, "KVBATCH_MAX_INFLIGHT=1", NULL};
    assert_int_equal(run(env, tmp("re.out"), tmp("re.err"), args), 0);
    char *text = slurp(tmp("reenter.prom"));
    double puts = metric(text, "kvbatch_ops_total{op=\"put\"}");
    double batches = metric(text, "kvbatch_batches_total{op=\"put\"}");
    double direct = metric(text, "kvbatch_direct_ops_total{op=\"put\"}");
    fprintf(stderr, "re-entered: %.0f puts in %.0f batches, %.0f direct\n", puts, batches, direct);
    assert_true(puts == 64 && direct == 0 && batches >= 1);
    free(text);
}

static void test_fork(void **state)
{
    static const char *const args[] = {"fork", NULL};
    (void)state;
#ifdef __SANITIZE_ADDRESS__
    /*
     * gcc 12's ASan allocator takes no lock around fork(): when a library
     * thread of the parent is inside malloc at that moment, the child's first
     * allocation waits forever on the inherited allocator mutex (seen here: 1
     * run in ~20, child threads in SizeClassAllocator64::GetFromAllocator).
     * glibc's malloc is fork-safe, so the plain build runs this test.
     */
    skip();
#endif
    const char *const env[] = {preload(), NULL};
    const char *const wb_env[] = {preload(), "KVBATCH_PUT_MODE=writeback", NULL};
    assert_int_equal(run(env, tmp("f.out"), tmp("f.err"), args), 0);
    assert_int_equal(run(wb_env, tmp("f2.out"), tmp("f2.err"), args), 0);
}

static void test_exit_is_bounded_when_server_is_gone(void **state)
{
    static const char *const wargs[] = {"write", "gone", "50", NULL};
    (void)state;
    const char *const env[] = {preload(), "KVBATCH_PUT_MODE=writeback",
                               "KVBATCH_EXIT_TIMEOUT_MS=300", NULL};
    kvt_server_kill(&server);
    unsigned long long t0 = kvs_now_ns();
    int rc = run(env, tmp("g.out"), tmp("g.err"), wargs);
    unsigned long long secs = (kvs_now_ns() - t0) / 1000000000ull;
    assert_int_equal(kvt_server_restart(&server), 0);
    assert_true(rc >= 0); /* it exited by itself (puts were accepted: write-behind) */
    assert_true(secs < 60);
}

/*
 * Per-key order (tests/preload/kvb_order.c): 4 threads x 25 rounds of one
 * case, each a put followed by a call the shim does not batch on the same
 * key; every round must see what it sees without the shim, at once and
 * after kvs_flush. Under write-behind, adaptive and fixed (a 1 ms window,
 * so that the put still waits in its batch), without the ordering the put
 * lands after the call: the remove finds nothing and the key comes back,
 * the batch put's value is overwritten by the older one, the batch get
 * misses.
 */
static void order_case(const char *name)
{
    const char *const args[] = {name, "4", "25", NULL};
    const char *const plain_env[] = {NULL};
    const char *const adaptive[] = {preload(), "KVBATCH_PUT_MODE=writeback", NULL};
    const char *const fixed[] = {preload(), "KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed",
                                 "KVBATCH_WINDOW_US=1ms", NULL};
    const char *const *envs[] = {plain_env, adaptive, fixed};
    const char *what[] = {"without the shim", "write-behind adaptive", "write-behind fixed"};
    for (int i = 0; i < 3; i++) {
        int rc = run_prog("tests/preload/kvb_order", envs[i], tmp("o.out"), tmp("o.err"), args);
        if (rc != 0) {
            char *out = slurp(tmp("o.out"));
            fprintf(stderr, "%s, %s: %s", name, what[i], out);
            free(out);
        }
        assert_int_equal(rc, 0);
    }
}

static void test_writeback_order_put_then_remove(void **state)
{
    (void)state;
    order_case("remove");
}

static void test_writeback_order_put_then_batch_put(void **state)
{
    (void)state;
    order_case("batch_put");
}

static void test_writeback_order_put_then_batch_get(void **state)
{
    (void)state;
    order_case("batch_get");
}

static void test_writeback_order_put_then_batch_exists(void **state)
{
    (void)state;
    order_case("batch_exists");
}

static void test_writeback_order_put_then_batch_put_async(void **state)
{
    (void)state;
    order_case("batch_put_async");
}

static void test_writeback_order_put_then_batch_get_async(void **state)
{
    (void)state;
    order_case("batch_get_async");
}

static void test_writeback_order_put_then_batch_exists_async(void **state)
{
    (void)state;
    order_case("batch_exists_async");
}

static void test_writeback_order_put_then_remove_matching(void **state)
{
    (void)state;
    order_case("remove_matching");
}

static void test_order_async_put_then_batch_put(void **state)
{
    (void)state;
    order_case("async_put_batch_put");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_results_with_and_without_shim),
        cmocka_unit_test(test_16_threads_batch_and_stats_pass_promtool),
        cmocka_unit_test(test_stats_count_every_call_once),
        cmocka_unit_test(test_bad_variable_reports_once_and_passes_through),
        cmocka_unit_test(test_writeback_data_survives_exit),
        cmocka_unit_test(test_puts_after_the_exit_flush_are_stored),
        cmocka_unit_test(test_backend_call_reentering_the_shim_passes_through),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_exit_is_bounded_when_server_is_gone),
        cmocka_unit_test(test_writeback_order_put_then_remove),
        cmocka_unit_test(test_writeback_order_put_then_batch_put),
        cmocka_unit_test(test_writeback_order_put_then_batch_get),
        cmocka_unit_test(test_writeback_order_put_then_batch_exists),
        cmocka_unit_test(test_writeback_order_put_then_batch_put_async),
        cmocka_unit_test(test_writeback_order_put_then_batch_get_async),
        cmocka_unit_test(test_writeback_order_put_then_batch_exists_async),
        cmocka_unit_test(test_writeback_order_put_then_remove_matching),
        cmocka_unit_test(test_order_async_put_then_batch_put),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_preload_mooncake.c - the shim under a program that knows only
 * Mooncake's C API (tests/preload/mc_workload), with and without
 * LD_PRELOAD=libkvbatch.so, over kvbatch's drop-in against a real kvstored
 * and over a library that is not libkvstore (tests/preload/libmc_double.c):
 * identical results for every call (present, missing, buffer too small,
 * configs, the program's own mixed batches, remove) under each policy and
 * write-behind; 16 threads with a stats file showing batching under the
 * mooncake backend label (and nothing batched a second time under kvs);
 * per-key order of the calls passed through after write-behind puts; fork;
 * a process with no Mooncake library; a library loaded RTLD_LOCAL;
 * one that never calls the API,
 * which shows no trace of it; and libkvbatch's exports (nm -D).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpreload.h"
#include "kvtest.h"

static struct kvt_server server;
static char tmpdir[64];
static char shim_env[3 * PATH_MAX + 16];

static const char *tmp(const char *name)
{
    static __thread char bufs[4][PATH_MAX];
    static __thread int next;
    char *p = bufs[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", tmpdir, name);
    return p;
}

static const char *preload(void)
{
    return kvt_preload_env(NULL, shim_env, sizeof(shim_env));
}

/* Runs prog MASTER args... (prog: mc_workload or mc_workload_double) with env added. */
static int run(const char *prog, const char *const env[], const char *out, const char *err,
               const char *const args[])
{
    char path[64];
    const char *argv[16];
    int argc = 0;
    snprintf(path, sizeof(path), "tests/preload/%s", prog);
    argv[argc++] = server.addr; /* the double takes it and does not use it */
    for (int i = 0; args[i] && argc < 15; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    int rc = kvt_run(path, argv, env, out, err);
    if (rc != 0) { /* what the program said is the failure's only trace: show it */
        char *said = kvt_slurp(err);
        fprintf(stderr, "%s exited %d; its stderr:\n%s\n", prog, rc, said ? said : "(none)");
        free(said);
    }
    return rc;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kvb-mcpre-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return kvt_server_start(&server, 0, "--memory 256M --max-object 1M");
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    kvt_server_stop(&server);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* prog's semantics output with the shim (each setting in turn) is the one without. */
static void same_results(const char *prog)
{
    static const char *const args[] = {"semantics", NULL};
    static const char *const wb_args[] = {"semantics", "writeback", NULL};
    static const char *const settings[][3] = {
        {"KVBATCH_POLICY=adaptive", NULL},
        {"KVBATCH_POLICY=fixed", "KVBATCH_WINDOW_US=200"},
        {"KVBATCH_POLICY=off", NULL},
        {"KVBATCH_PUT_MODE=writeback", NULL},
        {"KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed"}, /* puts of one key in a batch */
    };
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(prog, plain_env, tmp("plain.out"), tmp("plain.err"), args), 0);
    assert_int_equal(run(prog, plain_env, tmp("plainwb.out"), tmp("plain.err"), wb_args), 0);
    char *plain = kvt_slurp(tmp("plain.out")), *plain_wb = kvt_slurp(tmp("plainwb.out"));
    assert_non_null(strstr(plain, "mooncake_store_batch_get_into"));
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        bool wb = strcmp(settings[i][0], "KVBATCH_PUT_MODE=writeback") == 0;
        const char *const env[] = {preload(), settings[i][0], settings[i][1], NULL};
        assert_int_equal(run(prog, env, tmp("shim.out"), tmp("shim.err"), wb ? wb_args : args), 0);
        char *shim = kvt_slurp(tmp("shim.out"));
        const char *want = wb ? plain_wb : plain;
        if (strcmp(want, shim) != 0)
            fprintf(stderr, "%s %s %s:\n%s\nvs plain:\n%s\n", prog, settings[i][0],
                    settings[i][1] ? settings[i][1] : "", shim, want);
        assert_string_equal(want, shim);
        free(shim);
    }
    free(plain);
    free(plain_wb);
}

static void test_same_results_over_the_drop_in(void **state)
{
    (void)state;
    same_results("mc_workload");
}

/* The same program over a library that is not libkvstore: the shim does not care which. */
static void test_same_results_over_another_library(void **state)
{
    (void)state;
    same_results("mc_workload_double");
}

/*
 * 16 threads: the same counts with and without the shim, and a stats file
 * (promtool-clean) whose mooncake backend shows batches of more than one op
 * per call, and whose kvs backend shows nothing: the drop-in's libkvstore
 * calls under the shim's backend calls passed through, batched once.
 */
static void sixteen_threads(const char *prog, const char *mode, const char *name)
{
    static const char *const args[] = {"threads", "16", "200", NULL};
    char stats_env[PATH_MAX + 32], file[64], cmd[PATH_MAX + 64];
    snprintf(file, sizeof(file), "%s.prom", name);
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp(file));
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(prog, plain_env, tmp("tplain.out"), tmp("tplain.err"), args), 0);
    /* fixed + 1ms window: merging does not depend on how fast this machine is (sanitizers). */
    const char *const env[] = {
        preload(), stats_env, "KVBATCH_POLICY=fixed", "KVBATCH_WINDOW_US=1ms", mode, NULL};
    assert_int_equal(run(prog, env, tmp("tshim.out"), tmp("tshim.err"), args), 0);
    char *plain = kvt_slurp(tmp("tplain.out")), *shim = kvt_slurp(tmp("tshim.out"));
    assert_string_equal(plain, shim);
    char *text = kvt_slurp(tmp(file));
    double puts = kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"put\"}");
    double put_batches = kvt_metric(text, "kvbatch_batches_total{backend=\"mooncake\",op=\"put\"}");
    double gets = kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"get\"}");
    double get_batches = kvt_metric(text, "kvbatch_batches_total{backend=\"mooncake\",op=\"get\"}");
    double get_direct =
        kvt_metric(text, "kvbatch_direct_ops_total{backend=\"mooncake\",op=\"get\"}");
    double kvs_ops = kvt_metric(text, "kvbatch_ops_total{backend=\"kvs\",op=\"put\"}") +
                     kvt_metric(text, "kvbatch_ops_total{backend=\"kvs\",op=\"get\"}") +
                     kvt_metric(text, "kvbatch_ops_total{backend=\"kvs\",op=\"exists\"}");
    fprintf(stderr, "%s %s: %.0f puts in %.0f batches, %.0f gets in %.0f batches, %.0f kvs ops\n",
            prog, mode ? mode : "", puts, put_batches, gets, get_batches, kvs_ops);
    assert_true(puts == 16 * 200);
    assert_true(gets ==
                16 * 200 * 3 +
                    16 * 20 * 2); /* get_into x3, and every 10th op once more, get_size too */
    /* Write-behind: each thread's too-small get right after its put sends that put on (it waits
     * for the store's answer), so only the gets are sure to merge. */
    assert_true(put_batches > 0 && (mode || puts / put_batches > 1));
    assert_true(get_batches > 0 && (gets - get_direct) / get_batches > 1);
    assert_true(kvs_ops == 0);
    /* Mooncake's codes under their meaning: every miss an ENOENT, every buffer too small EINVAL. */
    assert_true(kvt_metric(text, "kvbatch_errors_total{backend=\"mooncake\",op=\"get\",status="
                                 "\"ENOENT\"}") == 16 * 200 + 16 * 20);
    assert_true(kvt_metric(text, "kvbatch_errors_total{backend=\"mooncake\",op=\"get\",status="
                                 "\"EINVAL\"}") == 16 * 200);
    assert_true(kvt_metric(text, "kvbatch_queued_ops{backend=\"mooncake\"}") == 0);
    free(text);
    free(plain);
    free(shim);
    if (access("/usr/bin/promtool", X_OK) != 0) {
        fprintf(stderr, "SKIP promtool check: /usr/bin/promtool is not installed\n");
        return;
    }
    snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s", tmp(file));
    assert_int_equal(system(cmd), 0);
}

/*
 * SGLang's shape: 8 threads of small Mooncake batch calls join the forming
 * batches (fixed + 1 ms window), with the same results as without the shim,
 * in fewer batches than calls - over the drop-in and over a library that is
 * not libkvstore.
 */
static void small_batch_calls(const char *prog, const char *name)
{
    static const char *const args[] = {"batches", "8", "60", NULL};
    char stats_env[PATH_MAX + 32], file[64];
    snprintf(file, sizeof(file), "%s.prom", name);
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp(file));
    const char *const plain_env[] = {NULL};
    assert_int_equal(run(prog, plain_env, tmp("bplain.out"), tmp("bplain.err"), args), 0);
    const char *const env[] = {preload(), stats_env, "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=1ms", NULL};
    assert_int_equal(run(prog, env, tmp("bshim.out"), tmp("bshim.err"), args), 0);
    char *plain = kvt_slurp(tmp("bplain.out")), *shim = kvt_slurp(tmp("bshim.out"));
    assert_string_equal(plain, shim);
    char *text = kvt_slurp(tmp(file));
    double puts = kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"put\"}");
    double pbat = kvt_metric(text, "kvbatch_batches_total{backend=\"mooncake\",op=\"put\"}");
    double gets = kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"get\"}");
    double gbat = kvt_metric(text, "kvbatch_batches_total{backend=\"mooncake\",op=\"get\"}");
    double ex = kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"exists\"}");
    fprintf(stderr, "%s: %.0f puts in %.0f batches, %.0f gets in %.0f batches, %.0f exists\n", prog,
            puts, pbat, gets, gbat, ex);
    assert_true(puts == 8 * 60 * 2 && gets == 8 * 60 * 3 && ex == 8 * 60 * 5);
    assert_true(pbat > 0 && puts >= 2 * 2 * pbat); /* two calls a batch at least */
    assert_true(gbat > 0 && gets >= 2 * 3 * gbat);
    free(text);
    free(plain);
    free(shim);
}

static void test_small_batch_calls_merged(void **state)
{
    (void)state;
    small_batch_calls("mc_workload", "bdropin");
    small_batch_calls("mc_workload_double", "bdouble");
}

static void test_16_threads_over_the_drop_in(void **state)
{
    (void)state;
    sixteen_threads("mc_workload", NULL, "dropin");
    sixteen_threads("mc_workload", "KVBATCH_PUT_MODE=writeback", "dropin-wb");
}

static void test_16_threads_over_another_library(void **state)
{
    (void)state;
    sixteen_threads("mc_workload_double", NULL, "double");
    /* The double's own count: the shim made its batch calls, more than one key each. */
    char *err = kvt_slurp(tmp("tshim.err"));
    unsigned long calls = 0, keys = 0, singles = 0;
    const char *p = strstr(err, "mc_double: ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "mc_double: %lu batch calls with %lu keys, %lu single-key calls",
                            &calls, &keys, &singles),
                     3);
    fprintf(stderr, "double: %lu batch calls with %lu keys, %lu single-key calls\n", calls, keys,
            singles);
    assert_true(calls > 0 && keys > 2 * calls);
    free(err);
}

/*
 * Per-key order under write-behind: 4 threads x 25 rounds of a put then at
 * once a call the shim passes through on the same key (remove, batch put /
 * get / exists, remove_by_regex), over the drop-in and over the double;
 * every call returns, and every key ends, as without the shim. Without the
 * order the remove or batch call went first in 3 of 4 rounds.
 */
static void test_writeback_order_of_passed_through_calls(void **state)
{
    static const char *const args[] = {"order", "4", "25", NULL};
    static const char *const progs[] = {"mc_workload", "mc_workload_double"};
    (void)state;
    const char *const plain_env[] = {NULL};
    const char *const adaptive[] = {preload(), "KVBATCH_PUT_MODE=writeback", NULL};
    const char *const fixed[] = {preload(), "KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed",
                                 "KVBATCH_WINDOW_US=1ms", NULL};
    const char *const *envs[] = {plain_env, adaptive, fixed};
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < 3; i++) {
            int rc = run(progs[p], envs[i], tmp("o.out"), tmp("o.err"), args);
            if (rc != 0) {
                char *out = kvt_slurp(tmp("o.out"));
                fprintf(stderr, "%s, setting %d: %s", progs[p], i, out);
                free(out);
            }
            assert_int_equal(rc, 0);
        }
    }
}

/* Parent and forked child on one store (the drop-in: the double's store lives in the process). */
static void test_fork(void **state)
{
    static const char *const args[] = {"fork", NULL};
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* gcc 12's ASan allocator and fork: see test_preload.c:test_fork; TSan refuses to start
     * threads in the child of a multi-threaded fork (die_after_fork). */
    skip();
#endif
    const char *const env[] = {preload(), NULL};
    const char *const wb_env[] = {preload(), "KVBATCH_PUT_MODE=writeback", NULL};
    const char *const *envs[] = {env, wb_env};
    for (int i = 0; i < 2; i++) {
        int rc = run("mc_workload", envs[i], tmp("f.out"), tmp("f.err"), args);
        if (rc != 0) {
            char *err = kvt_slurp(tmp("f.err"));
            fprintf(stderr, "%s: %s", i ? "write-behind" : "synchronous puts", err);
            free(err);
        }
        assert_int_equal(rc, 0);
    }
}

/* Write-behind puts of a process that exits without destroying its store are flushed at exit. */
static void test_writeback_puts_survive_exit(void **state)
{
    static const char *const wargs[] = {"write", "mcexit", "300", NULL};
    static const char *const rargs[] = {"read", "mcexit", "300", NULL};
    (void)state;
    const char *const env[] = {preload(), "KVBATCH_PUT_MODE=writeback", "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=20ms", NULL};
    const char *const plain_env[] = {NULL};
    assert_int_equal(run("mc_workload", env, tmp("w.out"), tmp("w.err"), wargs), 0);
    assert_int_equal(run("mc_workload", plain_env, tmp("r.out"), tmp("r.err"), rargs), 0);
}

/* No library under the shim provides the API: each call returns -1, said once on stderr. */
static void test_no_mooncake_library(void **state)
{
    static const char *const args[] = {NULL};
    (void)state;
    const char *const env[] = {NULL};
    assert_int_equal(kvt_run("tests/preload/mc_nolib", args, env, tmp("n.out"), tmp("n.err")), 0);
    char *err = kvt_slurp(tmp("n.err"));
    const char *p = strstr(err, "no library under the shim provides it");
    assert_non_null(p);
    assert_null(strstr(p + 1, "no library under the shim provides it"));
    free(err);
}

/* A process that never calls mooncake_store_*: no Mooncake samples, its libkvstore work as before.
 */
static void test_a_kvs_program_shows_no_mooncake(void **state)
{
    char stats_env[PATH_MAX + 32];
    (void)state;
    const char *const args[] = {server.addr, "threads", "4", "50", NULL};
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp("kvs.prom"));
    const char *const env[] = {preload(), stats_env, NULL};
    assert_int_equal(kvt_run("tests/preload/kvb_workload", args, env, tmp("k.out"), tmp("k.err")),
                     0);
    char *text = kvt_slurp(tmp("kvs.prom"));
    assert_true(kvt_metric(text, "kvbatch_ops_total{backend=\"kvs\",op=\"put\"}") == 200);
    assert_null(strstr(text, "backend=\"mooncake\""));
    free(text);
}

/*
 * A library on Mooncake's API loaded RTLD_LOCAL (as CPython loads extension
 * modules; tests/preload/libmc_local.c over the double): its calls reach
 * the shim, dlsym(RTLD_NEXT) cannot see the Mooncake library, and the shim
 * finds it among the loaded objects. Without that every call returns -1.
 */
static void test_a_library_loaded_rtld_local(void **state)
{
    char stats_env[PATH_MAX + 32], lib[PATH_MAX];
    (void)state;
    const char *const args[] = {kvt_abs_build("tests/preload/libmc_local.so", lib, sizeof(lib)),
                                NULL};
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s", tmp("local.prom"));
    const char *const plain_env[] = {NULL};
    const char *const env[] = {preload(), stats_env, NULL};
    assert_int_equal(
        kvt_run("tests/preload/mc_dlopen", args, plain_env, tmp("l.out"), tmp("l.err")), 0);
    assert_int_equal(kvt_run("tests/preload/mc_dlopen", args, env, tmp("l.out"), tmp("l.err")), 0);
    char *text = kvt_slurp(tmp("local.prom"));
    assert_true(kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"put\"}") == 20);
    assert_true(kvt_metric(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"exists\"}") == 40);
    free(text);
}

/* libkvbatch exports exactly the calls it interposes: libkvstore's and Mooncake's. */
static void test_exports_exactly_the_interposed_calls(void **state)
{
    static const char *const want[] = {
        "kvs_batch_exists@@KVSTORE_1",
        "kvs_batch_exists_async@@KVSTORE_1",
        "kvs_batch_get@@KVSTORE_1",
        "kvs_batch_get_async@@KVSTORE_1",
        "kvs_batch_getv@@KVSTORE_1",
        "kvs_batch_getv_async@@KVSTORE_1",
        "kvs_batch_put@@KVSTORE_1",
        "kvs_batch_put_async@@KVSTORE_1",
        "kvs_batch_putv@@KVSTORE_1",
        "kvs_batch_putv_async@@KVSTORE_1",
        "kvs_close@@KVSTORE_1",
        "kvs_exists@@KVSTORE_1",
        "kvs_flush@@KVSTORE_1",
        "kvs_get@@KVSTORE_1",
        "kvs_get_async@@KVSTORE_1",
        "kvs_open@@KVSTORE_1",
        "kvs_put@@KVSTORE_1",
        "kvs_put_async@@KVSTORE_1",
        "kvs_remove@@KVSTORE_1",
        "kvs_remove_matching@@KVSTORE_1",
        "kvs_wait@@KVSTORE_1",
        "mooncake_store_batch_get_into@@KVBATCH_MOONCAKE_1",
        "mooncake_store_batch_is_exist@@KVBATCH_MOONCAKE_1",
        "mooncake_store_batch_put_from@@KVBATCH_MOONCAKE_1",
        "mooncake_store_destroy@@KVBATCH_MOONCAKE_1",
        "mooncake_store_get_into@@KVBATCH_MOONCAKE_1",
        "mooncake_store_get_size@@KVBATCH_MOONCAKE_1",
        "mooncake_store_is_exist@@KVBATCH_MOONCAKE_1",
        "mooncake_store_put@@KVBATCH_MOONCAKE_1",
        "mooncake_store_put_from@@KVBATCH_MOONCAKE_1",
        "mooncake_store_remove@@KVBATCH_MOONCAKE_1",
        "mooncake_store_remove_all@@KVBATCH_MOONCAKE_1",
        "mooncake_store_remove_by_regex@@KVBATCH_MOONCAKE_1",
    };
    (void)state;
    KVT_SKIP_ON_RDMA("transport-independent (make test runs it); the VM image has no nm");
    char cmd[PATH_MAX + 64], line[512];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s | LC_ALL=C sort -k3",
             kvt_build_path("lib/libkvbatch.so"));
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0;
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3 || strcmp(type, "A") == 0)
            continue; /* the version nodes themselves */
        if (n >= sizeof(want) / sizeof(want[0]) || strcmp(name, want[n]) != 0)
            fail_msg("libkvbatch exports %s (expected %s)", name,
                     n < sizeof(want) / sizeof(want[0]) ? want[n] : "nothing more");
        n++;
    }
    assert_int_equal(pclose(p), 0);
    assert_int_equal(n, sizeof(want) / sizeof(want[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_results_over_the_drop_in),
        cmocka_unit_test(test_same_results_over_another_library),
        cmocka_unit_test(test_16_threads_over_the_drop_in),
        cmocka_unit_test(test_small_batch_calls_merged),
        cmocka_unit_test(test_16_threads_over_another_library),
        cmocka_unit_test(test_writeback_order_of_passed_through_calls),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_writeback_puts_survive_exit),
        cmocka_unit_test(test_no_mooncake_library),
        cmocka_unit_test(test_a_kvs_program_shows_no_mooncake),
        cmocka_unit_test(test_a_library_loaded_rtld_local),
        cmocka_unit_test(test_exports_exactly_the_interposed_calls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

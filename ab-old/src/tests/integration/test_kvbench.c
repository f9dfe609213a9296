/*
 * test_kvbench.c - kvbench and the Python example against a real kvstored:
 * bad arguments exit 2; put/get/exists/layerwise/micro runs complete without
 * errors and write their JSON/CSV; the same kvbench binary and the same
 * examples/engine.py run unmodified under LD_PRELOAD=libkvbatch.so, give the
 * same results, and the shim's stats file shows that batching happened.
 *
 * Child processes run under `timeout`, so no test can hang; all servers bind
 * 127.0.0.1.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvpreload.h"
#include "kvtest.h"

#define OUT_CAP   (256 * 1024)
#define CHILD_MAX "180" /* seconds any child may run */

static struct kvt_server server;
static char tmpdir[64];
static char out_buf[OUT_CAP]; /* children's stdout; static: a failed assert leaks nothing */

/*
 * Runs argv (NULL-terminated) under timeout with extra "NAME=value" env
 * entries, capturing stdout into out. Returns the exit status, or -1.
 */
static int run(const char *const argv[], const char *const env[], char *out, size_t cap)
{
    const char *full[64] = {"timeout", "-k", "5", CHILD_MAX};
    int n = 4;
    for (int i = 0; argv[i] && n < 63; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    int fds[2];
    if (pipe(fds) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++)
            putenv(strdup(env[i]));
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(full[0], (char *const *)full);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t got;
    while ((got = read(fds[0], out + len, cap - 1 - len)) > 0 && len + (size_t)got < cap - 1)
        len += (size_t)got;
    if (got > 0) len += (size_t)got;
    out[len] = '\0';
    /* drain whatever does not fit so that the child never blocks on a full pipe */
    char sink[4096];
    while (read(fds[0], sink, sizeof(sink)) > 0) {
    }
    close(fds[0]);
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    fputs(out, stderr); /* the child's output belongs in the test log */
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, OUT_CAP);
    if (buf) buf[fread(buf, 1, OUT_CAP - 1, f)] = '\0';
    fclose(f);
    return buf;
}

static const char *kvbench(void)
{
    static char path[1024];
    snprintf(path, sizeof(path), "%s", kvt_build_path("bin/kvbench"));
    return path;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kvbench-test.XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return kvt_server_start(&server, 0, NULL);
}

static int teardown(void **state)
{
    (void)state;
    kvt_server_stop(&server);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void bad_arguments_exit_2(void **state)
{
    (void)state;
    char *out = out_buf;
    const char *cases[][6] = {
        {"put", "--threads", "0", NULL},
        {"put", "--size", "4Q", NULL},
        {"get", "--mode", "sideways", NULL},
        {"exists", "--mode", "async", NULL},
        {"put", "--ops", "-5", NULL},
        {"frobnicate", NULL},
        {"layerwise", "--model", "gpt2", NULL},
        {"layerwise", "--tp", "3", NULL},
        {"micro", "--paths", "single,nope", NULL},
        {"put", "--no-such-option", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[8] = {kvbench()};
        for (int j = 0; cases[i][j]; j++)
            argv[j + 1] = cases[i][j];
        assert_int_equal(run(argv, NULL, out, OUT_CAP), 2);
    }
    const char *none[] = {kvbench(), NULL};
    assert_int_equal(run(none, NULL, out, OUT_CAP), 2);
}

static void put_get_exists_write_results(void **state)
{
    (void)state;
    char *out = out_buf, json[128], csv[128];
    snprintf(json, sizeof(json), "%s/put.json", tmpdir);
    snprintf(csv, sizeof(csv), "%s/get.csv", tmpdir);

    const char *put[] = {kvbench(),  "put",       "--servers", server.addr, "--ops",
                         "3000",     "--threads", "2",         "--mode",    "single,batch,async",
                         "--repeat", "2",         "--json",    json,        "--quiet",
                         NULL};
    assert_int_equal(run(put, NULL, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "side by side"));
    char *text = read_file(json);
    assert_non_null(text);
    /* 3 modes x (2 runs + median), every run error-free */
    int rows = 0;
    for (char *p = text; (p = strstr(p, "\"workload\": \"put\"")); p++)
        rows++;
    assert_int_equal(rows, 9);
    assert_null(strstr(text, "\"errors\": 1"));
    assert_non_null(strstr(text, "\"ops\": 3000"));
    free(text);

    const char *get[] = {kvbench(), "get", "--servers", server.addr, "--ops",  "2000",
                         "--keys",  "500", "--size",    "1K",        "--mode", "single,batch",
                         "--csv",   csv,   "--quiet",   NULL};
    assert_int_equal(run(get, NULL, out, OUT_CAP), 0);
    text = read_file(csv);
    assert_non_null(text);
    assert_non_null(strstr(text, "get,single,\"\",1,1024,1,1,2000,0,"));
    assert_non_null(strstr(text, "get,batch,\"\",1,1024,1,64,2000,0,"));
    free(text);

    const char *exists[] = {kvbench(), "exists", "--servers", server.addr,    "--ops",   "1000",
                            "--keys",  "100",    "--mode",    "single,batch", "--quiet", NULL};
    assert_int_equal(run(exists, NULL, out, OUT_CAP), 0);

    const char *stats[] = {kvbench(), "--server-stats", "--servers", server.addr, NULL};
    assert_int_equal(run(stats, NULL, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "# server"));
}

static void get_of_missing_server_fails_cleanly(void **state)
{
    (void)state;
    char *out = out_buf;
    /* a port nobody listens on: errors are reported, exit 1, no crash or hang */
    const char *put[] = {kvbench(), "put",       "--servers", "127.0.0.1:1", "--ops",
                         "10",      "--seconds", "20",        "--quiet",     NULL};
    assert_int_equal(run(put, NULL, out, OUT_CAP), 1);
    assert_non_null(strstr(out, "first error"));
    /* failed ops are no throughput and have no latency: a line says all failed, and why */
    assert_non_null(strstr(out, ": 0 ops/s"));
    assert_null(strstr(out, "lat/op"));
    assert_non_null(strstr(out, "(0 ops ok, "));
    const char *all = strstr(out, "kvbench: all ");
    assert_non_null(all);
    assert_non_null(strstr(all, " ops failed: connection refused"));
}

static void layerwise_and_micro_run(void **state)
{
    (void)state;
    char *out = out_buf, csv[128];
    snprintf(csv, sizeof(csv), "%s/micro.csv", tmpdir);
    const char *modes[] = {"single", "batch", "async"};
    for (int m = 0; m < 3; m++) {
        const char *lw[] = {kvbench(),  "layerwise", "--servers", server.addr, "--requests",   "3",
                            "--prompt", "48",        "--rounds",  "2",         "--compute-us", "20",
                            "--mode",   modes[m],    "--quiet",   NULL};
        assert_int_equal(run(lw, NULL, out, OUT_CAP), 0);
        assert_non_null(strstr(out, "layerwise-save"));
        assert_non_null(strstr(out, "layerwise-load"));
        assert_non_null(strstr(out, ", 0 errors"));
    }
    const char *micro[] = {kvbench(),   "micro",     "--servers", server.addr, "--sizes",
                           "1K,64K",    "--threads", "1,3",       "--paths",   "single,batch,async",
                           "--seconds", "0.2",       "--max-ops", "300",       "--csv",
                           csv,         "--quiet",   NULL};
    assert_int_equal(run(micro, NULL, out, OUT_CAP), 0);
    char *text = read_file(csv);
    assert_non_null(text);
    int rows = 0;
    for (char *p = text; (p = strchr(p, '\n')); p++)
        rows++;
    /* header + sizes(2) x threads(2) x (put 3 paths + get 3 + exists 2) */
    assert_int_equal(rows, 1 + 2 * 2 * 8);
    free(text);
}

/*
 * A load whose slices were evicted (a store far smaller than the save): each
 * missing slice is one error, not two (a failed get is not checked again as a
 * wrong value), so errors never exceed ops and ops/s stays a real rate.
 */
static void layerwise_load_misses_count_once(void **state)
{
    (void)state;
    char *out = out_buf;
    struct kvt_server small;
    assert_int_equal(kvt_server_start(&small, 0, "--memory 8M"), 0);
    const char *lw[] = {kvbench(),  "layerwise", "--servers",    small.addr, "--requests", "2",
                        "--rounds", "1",         "--compute-us", "0",        "--mode",     "async",
                        "--quiet",  NULL};
    int rc = run(lw, NULL, out, OUT_CAP);
    kvt_server_stop(&small);
    assert_int_equal(rc, 1); /* some ops failed */
    const char *load = strstr(out, "layerwise-load");
    assert_non_null(load);
    const char *counts = strstr(load, "(");
    assert_non_null(counts);
    unsigned long ok = 0, errors = 0; /* the ops that worked, the ones that failed */
    assert_int_equal(sscanf(counts, "(%lu ops ok, %lu errors", &ok, &errors), 2);
    assert_true(errors > 0);
    assert_true(ok > 0);
    const char *rate = strstr(load, ": ");
    assert_non_null(rate);
    double ops_per_s = strtod(rate + 2, NULL);
    assert_true(ops_per_s >= 0 && ops_per_s < 1e9);
}

/* "LD_PRELOAD=<sanitizer runtime> <shim>" in buf (kvt_preload_env). */
static const char *shim_env(char *buf, size_t cap)
{
    return kvt_preload_env(NULL, buf, cap);
}

static void kvbench_single_path_is_batched_by_shim(void **state)
{
    (void)state;
    char preload[1700], statsenv[256], stats[128];
    shim_env(preload, sizeof(preload));
    char *out = out_buf;
    snprintf(stats, sizeof(stats), "%s/kvbench.prom", tmpdir);
    snprintf(statsenv, sizeof(statsenv), "KVBATCH_STATS_FILE=%s", stats);
    const char *env[] = {preload, statsenv, NULL};
    const char *put[] = {kvbench(), "put",       "--servers", server.addr, "--ops",
                         "4000",    "--threads", "8",         "--quiet",   NULL};
    assert_int_equal(run(put, env, out, OUT_CAP), 0);
    assert_non_null(strstr(out, " shim "));
    char *text = read_file(stats);
    assert_non_null(text);
    double ops = kvt_metric_sum(text, "kvbatch_ops_total");
    double batches = kvt_metric_sum(text, "kvbatch_batches_total");
    fprintf(stderr, "shim stats: %.0f ops in %.0f batches\n", ops, batches);
    assert_true(ops >= 4000);
    assert_true(batches > 0 && batches < ops);
    free(text);
}

/*
 * kvbench mooncake: threads on Mooncake's C API over the drop-in, without the
 * shim (path "single") and under it ("shim"), where the stats file shows
 * the put_from and get_into calls batched under backend="mooncake".
 */
static void kvbench_mooncake_with_and_without_shim(void **state)
{
    (void)state;
    char preload[1700], statsenv[256], stats[128];
    char *out = out_buf;
    const char *args[] = {kvbench(),   "mooncake",  "--master", server.addr, "--max-ops",
                          "4000",      "--threads", "8",        "--size",    "4K",
                          "--seconds", "60",        "--quiet",  NULL};
    const char *plain[] = {NULL};
    assert_int_equal(run(args, plain, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "mc-put_from    single"));
    assert_non_null(strstr(out, "mc-get         single"));
    snprintf(stats, sizeof(stats), "%s/mooncake.prom", tmpdir);
    snprintf(statsenv, sizeof(statsenv), "KVBATCH_STATS_FILE=%s", stats);
    const char *env[] = {shim_env(preload, sizeof(preload)), statsenv, "KVBATCH_POLICY=fixed",
                         "KVBATCH_WINDOW_US=1ms", NULL};
    assert_int_equal(run(args, env, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "mc-put_from    shim"));
    assert_non_null(strstr(out, "mc-get         shim"));
    char *text = read_file(stats);
    assert_non_null(text);
    double puts = kvt_metric_sum(text, "kvbatch_ops_total{backend=\"mooncake\",op=\"put\"}");
    double batches = kvt_metric_sum(text, "kvbatch_batches_total{backend=\"mooncake\",op=\"put\"}");
    fprintf(stderr, "kvbench mooncake under the shim: %.0f puts in %.0f batches\n", puts, batches);
    assert_true(puts >= 4000); /* and the prefill's */
    assert_true(batches > 0 && batches < puts);
    free(text);
}

/* The Python module, or NULL (skip) when this build has none (sanitizer builds). */
static int python_module_built(void)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "ls %s/kvstore*.so >/dev/null 2>&1", kvt_build_path("python"));
    return system(cmd) == 0;
}

static void python_binding_unit_tests(void **state)
{
    (void)state;
    if (!python_module_built()) {
        fprintf(stderr, "python module not built: skipped\n");
        skip();
    }
    char pypath[1100], servers[128];
    snprintf(pypath, sizeof(pypath), "PYTHONPATH=%s", kvt_build_path("python"));
    snprintf(servers, sizeof(servers), "KVSTORE_SERVERS=%s", server.addr);
    const char *env[] = {pypath, servers, NULL};
    const char *argv[] = {"/usr/bin/python3", "tests/python/test_kvstore.py", NULL};
    assert_int_equal(run(argv, env, out_buf, OUT_CAP), 0);
}

static void python_engine_same_results_with_shim(void **state)
{
    (void)state;
    if (!python_module_built()) {
        fprintf(stderr, "python module not built: skipped\n");
        skip();
    }
    char *out = out_buf, pypath[1100], checksum[80] = "";
    snprintf(pypath, sizeof(pypath), "PYTHONPATH=%s", kvt_build_path("python"));
    const char *engine[] = {"/usr/bin/python3",
                            "examples/engine.py",
                            "--servers",
                            server.addr,
                            "--requests",
                            "8",
                            "--layers",
                            "16",
                            "--blocks",
                            "4",
                            "--slice",
                            "8192",
                            "--rounds",
                            "2",
                            "--compute-us",
                            "100",
                            "--prefix",
                            "pytest",
                            NULL};
    const char *env_plain[] = {pypath, NULL};
    assert_int_equal(run(engine, env_plain, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "\nOK"));
    char *cs = strstr(out, "checksum ");
    assert_non_null(cs);
    snprintf(checksum, sizeof(checksum), "%.41s", cs);

    char preload[1700], statsenv[256], stats[128];
    shim_env(preload, sizeof(preload));
    snprintf(stats, sizeof(stats), "%s/engine.prom", tmpdir);
    snprintf(statsenv, sizeof(statsenv), "KVBATCH_STATS_FILE=%s", stats);
    const char *env_shim[] = {pypath, preload, statsenv, NULL};
    assert_int_equal(run(engine, env_shim, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "\nOK"));
    assert_non_null(strstr(out, "shim=True"));
    assert_non_null(strstr(out, checksum)); /* same bytes loaded, with and without the shim */
    char *text = read_file(stats);
    assert_non_null(text);
    double ops = kvt_metric_sum(text, "kvbatch_ops_total");
    double batches = kvt_metric_sum(text, "kvbatch_batches_total");
    fprintf(stderr, "engine under shim: %.0f ops in %.0f batches\n", ops, batches);
    /* 8 requests x 16 layers x 4 blocks x 2 rounds, put and get */
    assert_true(ops >= 2 * 8 * 16 * 4 * 2);
    assert_true(batches > 0 && ops > batches);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_arguments_exit_2),
        cmocka_unit_test(put_get_exists_write_results),
        cmocka_unit_test(get_of_missing_server_fails_cleanly),
        cmocka_unit_test(layerwise_and_micro_run),
        cmocka_unit_test(layerwise_load_misses_count_once),
        cmocka_unit_test(kvbench_single_path_is_batched_by_shim),
        cmocka_unit_test(kvbench_mooncake_with_and_without_shim),
        cmocka_unit_test(python_binding_unit_tests),
        cmocka_unit_test(python_engine_same_results_with_shim),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_mooncake_py.c - the `mooncake.store` Python module against a real
 * kvstored: its unit tests (tests/python/test_mooncake_store.py), with and
 * without LD_PRELOAD=libkvbatch.so, and two connectors in LMCache's and
 * SGLang's shape (tests/python/mooncake_connectors.py) whose every result
 * must be the same with the shim as without; the LMCache-shaped save must
 * show the shim batching its concurrent put_from calls (more than one op per
 * batch, which also shows the module releases the GIL around them).
 *
 * Skipped where the module is not built (sanitizer builds) or Python is
 * missing; the shim halves skip without libkvbatch.so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvpreload.h"
#include "kvtest.h"

static struct kvt_server srv;
static char tmpdir[64] = "/tmp/kvs-mcpy-XXXXXX";

#define PYTHON "/usr/bin/python3"

/* The module and the interpreter, or skip. */
static int module_or_skip(void)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "ls %s/mooncake/store*.so >/dev/null 2>&1",
             kvt_build_path("python"));
    if (access(PYTHON, X_OK) != 0 || system(cmd) != 0) {
        fprintf(stderr, "mooncake.store not built (or no %s): skipped\n", PYTHON);
        return 0;
    }
    return 1;
}

/* "LD_PRELOAD=<abs path of libkvbatch.so> " or "" when it is not built. */
static const char *shim_env(void)
{
    static char env[1200];
    char *abs = realpath(kvt_build_path("lib/libkvbatch.so"), NULL);
    if (!abs) return "";
    snprintf(env, sizeof(env), "LD_PRELOAD=%s ", abs);
    free(abs);
    return env;
}

/*
 * Runs a Python script of tests/python with PYTHONPATH at the build's
 * python/, KVSTORE_SERVERS at srv and extra environment `env` (may be ""),
 * stdout into out_path (stderr to the test log). Returns its exit status.
 */
static int run_python(const char *env, const char *args, const char *out_path)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "env %s PYTHONPATH=%s KVSTORE_SERVERS=%s timeout -k 5 240 " PYTHON
             " tests/python/%s > %s",
             env, kvt_build_path("python"), srv.addr, args, out_path);
    fprintf(stderr, "+ %s\n", cmd);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole file, malloc'ed and NUL-terminated. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = malloc(1 << 22);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 22) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int group_setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmpdir)) return -1;
    return kvt_server_start(&srv, 0, "--memory 256M");
}

static int group_teardown(void **state)
{
    (void)state;
    kvt_server_stop(&srv);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void python_unit_tests(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the Python tests set up over tcp");
    if (!module_or_skip()) skip();
    char out[128];
    snprintf(out, sizeof(out), "%s/unit.txt", tmpdir);
    assert_int_equal(run_python("", "test_mooncake_store.py", out), 0);
}

static void python_unit_tests_under_the_shim(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the Python tests set up over tcp");
    if (!module_or_skip()) skip();
    if (!*shim_env()) {
        fprintf(stderr, "libkvbatch.so not built: skipped\n");
        skip();
    }
    char out[128];
    snprintf(out, sizeof(out), "%s/unit-shim.txt", tmpdir);
    assert_int_equal(run_python(shim_env(), "test_mooncake_store.py", out), 0);
}

/*
 * Runs one connector shape without and with the shim (distinct key
 * prefixes, so that the second run starts from the same empty keys) and
 * checks the two outputs are identical; returns the shim run's stats file
 * text (malloc'ed), or NULL when the shim is not built.
 */
static char *same_with_and_without_shim(const char *shape)
{
    char plain[128], shimmed[128], stats[128], args[256], env[1400];
    snprintf(plain, sizeof(plain), "%s/%s-plain.txt", tmpdir, shape);
    snprintf(shimmed, sizeof(shimmed), "%s/%s-shim.txt", tmpdir, shape);
    snprintf(stats, sizeof(stats), "%s/%s.prom", tmpdir, shape);
    snprintf(args, sizeof(args), "mooncake_connectors.py %s --servers %s --prefix %s-plain.", shape,
             srv.addr, shape);
    assert_int_equal(run_python("", args, plain), 0);
    char *a = slurp(plain);
    assert_non_null(strstr(a, "close 0"));
    if (!*shim_env()) {
        fprintf(stderr, "libkvbatch.so not built: shim half skipped\n");
        free(a);
        return NULL;
    }
    snprintf(args, sizeof(args), "mooncake_connectors.py %s --servers %s --prefix %s-shim.", shape,
             srv.addr, shape);
    snprintf(env, sizeof(env), "%sKVBATCH_STATS_FILE=%s", shim_env(), stats);
    assert_int_equal(run_python(env, args, shimmed), 0);
    char *b = slurp(shimmed);
    assert_string_equal(a, b);
    free(a);
    free(b);
    return slurp(stats);
}

static void lmcache_shape_same_with_shim_and_batched(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the connectors set up over tcp");
    if (!module_or_skip()) skip();
    char *stats = same_with_and_without_shim("lmcache");
    if (!stats) skip();
    /* 224 chunks saved through asyncio.to_thread: the shim saw them side by side. */
    const char *put_ops = "kvbatch_ops_total{backend=\"kvs\",op=\"put\"}",
               *put_batches = "kvbatch_batches_total{backend=\"kvs\",op=\"put\"}";
    double ops = kvt_metric_sum(stats, put_ops), batches = kvt_metric_sum(stats, put_batches);
    fprintf(stderr, "shim: %.0f put_from in %.0f batches\n", ops, batches);
    assert_true(ops >= 224);
    assert_true(batches > 0 && ops / batches > 1.0);
    free(stats);
}

static void sglang_shape_same_with_shim(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the connectors set up over tcp");
    if (!module_or_skip()) skip();
    free(same_with_and_without_shim("sglang"));
}

/* vLLM's shape: multi_buffers saves and loads, the same with and without the shim. */
static void vllm_shape_same_with_shim(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the connectors set up over tcp");
    if (!module_or_skip()) skip();
    char *stats = same_with_and_without_shim("vllm");
    if (stats) {
        char path[128];
        snprintf(path, sizeof(path), "%s/vllm-plain.txt", tmpdir);
        char *plain = slurp(path);
        assert_non_null(strstr(plain, "loaded_correct True 248"));
        free(plain);
    }
    free(stats);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(python_unit_tests),
        cmocka_unit_test(vllm_shape_same_with_shim),
        cmocka_unit_test(python_unit_tests_under_the_shim),
        cmocka_unit_test(lmcache_shape_same_with_shim_and_batched),
        cmocka_unit_test(sglang_shape_same_with_shim),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

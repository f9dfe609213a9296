/*
 * test_scripts.c - the measurement scripts meet bad input with one clear line
 * and exit status 2, before they start anything; layerwise-ab.sh rejects a
 * shape kvbench refuses, and on a tiny shape prints its table; kvbatch-tune
 * over a workload of known figures. Run from the
 * source tree's root (as `make test` does); $KVS_TEST_BUILD names the build.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* Runs `BUILD=<build> cmd 2>&1` (bounded by timeout); returns its exit status, output in out. */
static int run(const char *cmd, char *out, size_t cap)
{
    const char *build = getenv("KVS_TEST_BUILD");
    char line[1024];
    snprintf(line, sizeof(line), "BUILD='%s' timeout 120 %s 2>&1", build ? build : "build", cmd);
    FILE *p = popen(line, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void expect_refused(const char *cmd, const char *message)
{
    char out[8192];
    int rc = run(cmd, out, sizeof(out));
    if (rc != 2 || !strstr(out, message))
        fail_msg("%s: exit %d, output:\n%s\n(wanted exit 2 and \"%s\")", cmd, rc, out, message);
}

static void test_sync_bound_bad_arguments(void **state)
{
    (void)state;
    expect_refused("scripts/sync-bound.sh --rounds x", "'x' is not a count from 1 to 99");
    expect_refused("scripts/sync-bound.sh --threads 0", "'0' is not a count from 1 to 1024");
    expect_refused("scripts/sync-bound.sh --threads 4,2000",
                   "'2000' is not a count from 1 to 1024");
    expect_refused("scripts/sync-bound.sh --place cpu1", "--place 'cpu1' (accepted: free, pinned");
    expect_refused("scripts/sync-bound.sh --ops del", "--ops 'del' (accepted: put, get)");
    expect_refused("scripts/sync-bound.sh --variant fast",
                   "--variant 'fast' is not NAME=KVBATCH_X=V");
    expect_refused("scripts/sync-bound.sh --variant a=LD_PRELOAD=x",
                   "--variant 'a=LD_PRELOAD=x' is not NAME=KVBATCH_X=V");
    expect_refused("scripts/sync-bound.sh --variant shim=KVBATCH_LOG=info",
                   "--variant name 'shim' is taken");
    expect_refused("scripts/sync-bound.sh --seconds soon", "--seconds 'soon' is not a number");
    expect_refused("scripts/sync-bound.sh --bogus", "unknown argument '--bogus'");
}

static void test_layerwise_ab_bad_arguments(void **state)
{
    (void)state;
    expect_refused("scripts/layerwise-ab.sh --phase both", "--phase 'both' is not save or load");
    expect_refused("scripts/layerwise-ab.sh --modes single,fast",
                   "mode 'fast' is not single, batch or async");
    expect_refused("scripts/layerwise-ab.sh --rounds 100",
                   "--rounds '100' is not a count from 1 to 99");
    expect_refused("scripts/layerwise-ab.sh --model llama3-8b", "unknown argument '--model'");
}

/* A shape kvbench refuses is reported with kvbench's own words, before any round runs. */
static void test_layerwise_ab_bad_shape(void **state)
{
    (void)state;
    expect_refused("scripts/layerwise-ab.sh -- --model gpt-9", "bad --model 'gpt-9'");
}

static void test_bench_compare_bad_arguments(void **state)
{
    (void)state;
    expect_refused("scripts/bench-compare.sh --only lfl,nope", "unknown part 'nope'");
    expect_refused("scripts/bench-compare.sh --fast", "unknown argument '--fast'");
}

static void test_bench_ab_bad_arguments(void **state)
{
    (void)state;
    expect_refused("scripts/bench-ab.sh only-one", "usage: bench-ab.sh");
}

/* The whole path on a tiny shape: a table with a row per mode, without and with the shim. */
static void test_layerwise_ab_tiny_shape(void **state)
{
    char out[16384];
    (void)state;
    if (SANITIZED) skip(); /* the script preloads the shim without the sanitizer runtime first */
    int rc = run("scripts/layerwise-ab.sh --rounds 1 --modes single,async -- --model llama3-8b "
                 "--requests 2 --prompt 32 --rounds 1 --compute-us 10",
                 out, sizeof(out));
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "| single | no |"));
    assert_non_null(strstr(out, "| single | yes |"));
    assert_non_null(strstr(out, "| async | yes |"));
    assert_null(strstr(out, "kvbench failed"));
    /* the no-shim single-key row is its own baseline */
    assert_non_null(strstr(out, "| 1.00 | 1.00 |"));
}

/* Runs `ENV scripts/kvbatch-tune ARGS -- tests/preload/tune_workload.py`; exit status, output. */
static int tune(const char *env, const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "env %s scripts/kvbatch-tune %s -- tests/preload/tune_workload.py",
             env, args);
    return run(cmd, out, cap);
}

/* The N of "best within p99 <= 1000 us: N ops/s". */
static double best_rate(const char *out)
{
    const char *p = strstr(out, "best within p99 <= 1000 us: ");
    assert_non_null(p);
    return strtod(p + strlen("best within p99 <= 1000 us: "), NULL);
}

/*
 * kvbatch-tune over a workload whose every figure is known
 * (tests/preload/tune_workload.py: a warm-up at a tenth of its rate, then
 * a steady rate per window): it measures the steady state (the whole run
 * would say 2333 ops/s, not 3000), shows each setting's spread, uses the
 * shim's default in-flight limit (4), refuses to pick among settings whose
 * spreads overlap (exit 3), and says that every run failed rather than
 * blaming the bound.
 */
static void test_kvbatch_tune(void **state)
{
    char out[16384];
    (void)state;
    if (SANITIZED) skip(); /* the workload runs with the shim preloaded, without the runtime */
    int rc =
        tune("FAKE_RATES=0:1000,50:3000",
             "--p99-us 1000 --policies adaptive --windows 0,50 --max-ops 64", out, sizeof(out));
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    double best = best_rate(out);
    if (best < 2850 || best > 3150) fail_msg("steady rate %.0f, not 3000:\n%s", best, out);
    assert_non_null(strstr(out, "spread"));
    assert_non_null(strstr(out, "\nKVBATCH_POLICY=adaptive KVBATCH_WINDOW_US=50 KVBATCH_MAX_OPS=64 "
                                "KVBATCH_MAX_INFLIGHT=4\n"));
    assert_non_null(strstr(out, "inflight  4:"));
    assert_null(strstr(out, "inflight  1:"));

    rc = tune("FAKE_RATES=0:2000,50:2000",
              "--p99-us 1000 --policies adaptive --windows 0,50 --max-ops 64", out, sizeof(out));
    if (rc != 3 || !strstr(out, "no clear best within p99 <= 1000 us: 2 settings"))
        fail_msg("a tie: exit %d:\n%s", rc, out);
    assert_null(strstr(out, "\nKVBATCH_POLICY=adaptive KVBATCH_WINDOW_US=0 KVBATCH_MAX_OPS=64 "
                            "KVBATCH_MAX_INFLIGHT=4\n"));

    rc = tune("FAKE_FAIL=1", "--p99-us 1000 --policies adaptive --windows 0,50 --max-ops 64", out,
              sizeof(out));
    if (rc != 1 || !strstr(out, "every run failed (exit 1)")) fail_msg("exit %d:\n%s", rc, out);
    assert_null(strstr(out, "no setting kept"));

    rc = tune("FAKE_RATES=0:1000", "--p99-us 10 --policies adaptive --windows 0 --max-ops 64", out,
              sizeof(out));
    if (rc != 1 || !strstr(out, "no setting kept op p99 within 10 us (the lowest: 99.0 us)"))
        fail_msg("exit %d:\n%s", rc, out);
    expect_refused("scripts/kvbatch-tune --p99-us 100 --warmup 1 -- true",
                   "--warmup: expected a fraction in [0, 1)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_bound_bad_arguments),
        cmocka_unit_test(test_layerwise_ab_bad_arguments),
        cmocka_unit_test(test_layerwise_ab_bad_shape),
        cmocka_unit_test(test_bench_compare_bad_arguments),
        cmocka_unit_test(test_bench_ab_bad_arguments),
        cmocka_unit_test(test_layerwise_ab_tiny_shape),
        cmocka_unit_test(test_kvbatch_tune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

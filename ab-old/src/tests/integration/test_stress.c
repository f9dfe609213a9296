/*
 * test_stress.c - the bounded stress run of make test (~20 s): kvstress
 * (tools/kvstress*.c) with several threads of self-verifying puts and gets
 * while it SIGKILLs and restarts its own kvstored on 127.0.0.1:0, without
 * the shim and through it (sync and write-behind), plus the write-behind
 * crash check. Each run must report 0 wrong values, 0 ops never completed
 * or completed twice, a successful op after every restart, bounded memory,
 * and (under the shim) stats that add up. A last run damages one value on
 * purpose and must fail: the checker itself can fail.
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
#include <sys/wait.h>
#include <unistd.h>

#include "kvtest.h"

static char tmpdir[64];

/* Absolute path of a built file (LD_PRELOAD needs one). */
static void abs_build(const char *rel, char *out, size_t cap)
{
    char *p = realpath(kvt_build_path(rel), NULL);
    assert_non_null(p);
    snprintf(out, cap, "%s", p);
    free(p);
}

/*
 * Runs kvstress with args and env (NULL-ended "NAME=value" lists); its
 * stdout and stderr go to out (cap bytes, NUL-terminated). Returns the exit
 * status.
 */
static int run_kvstress(const char *const env[], const char *const args[], char *out, size_t cap)
{
    char prog[PATH_MAX], path[128];
    const char *argv[32];
    int argc = 0;
    abs_build("bin/kvstress", prog, sizeof(prog));
    argv[argc++] = prog;
    /* Sanitizer builds hold freed memory in quarantine: the client RSS bound does not apply. */
    const char *san = getenv("SAN");
    if (san && *san) {
        argv[argc++] = "--client-growth-mb";
        argv[argc++] = "4096";
    }
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    snprintf(path, sizeof(path), "%s/out", tmpdir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        putenv("KVSTORE_LOG=error");
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        int o = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0) _exit(127);
        dup2(o, 1);
        dup2(o, 2);
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
    fputs(out, stderr); /* the figures, for whoever reads the test log */
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Integer field of kvstress's JSON line ("name":N); fails the test if absent. */
static long long field(const char *out, const char *name)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *p = strstr(out, pat);
    if (!p) {
        fail_msg("kvstress output has no %s", name);
        return -1;
    }
    return strtoll(p + strlen(pat), NULL, 10);
}

/* What every run must show, whatever the mode. */
static void assert_clean(const char *out, int kills)
{
    assert_int_equal(field(out, "wrong_values"), 0);
    assert_int_equal(field(out, "never_completed"), 0);
    assert_int_equal(field(out, "completed_twice"), 0);
    assert_int_equal(field(out, "unexpected_status"), 0);
    assert_int_equal(field(out, "kills"), kills);
    assert_int_equal(field(out, "restarts_without_ok"), 0);
    assert_true(field(out, "put_ok") > 0);
    assert_true(field(out, "get_ok") > 0);
    assert_true(field(out, "server_rss_max") > 0);
    assert_true(field(out, "server_rss_max") <= field(out, "server_rss_bound"));
    assert_int_equal(field(out, "pass"), 1);
}

static char shim_env[2 * PATH_MAX + 16], stats_env[128];

/*
 * Path of the sanitizer runtime this test runs with, plus ":" ("" if none):
 * under ASan/TSan it must come first in LD_PRELOAD, before the shim.
 */
static void sanitizer_runtime(char *out, size_t cap)
{
    char line[PATH_MAX + 128];
    out[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        if (p && (strstr(p, "/libasan.so") || strstr(p, "/libtsan.so"))) {
            p[strcspn(p, "\n")] = '\0';
            snprintf(out, cap, "%s:", p);
            break;
        }
    }
    fclose(f);
}

static void shim_paths(void)
{
    char lib[PATH_MAX], rt[PATH_MAX + 1];
    abs_build("lib/libkvbatch.so", lib, sizeof(lib));
    sanitizer_runtime(rt, sizeof(rt));
    snprintf(shim_env, sizeof(shim_env), "LD_PRELOAD=%s%s", rt, lib);
    snprintf(stats_env, sizeof(stats_env), "KVBATCH_STATS_FILE=%s/stats-%%p.prom", tmpdir);
}

static void test_kills_without_shim(void **state)
{
    (void)state;
    static char out[8192];
    const char *const args[] = {"--threads", "6",     "--seconds", "5",       "--kills",
                                "2",         "--ops", "10000000",  "--quiet", NULL};
    assert_int_equal(run_kvstress(NULL, args, out, sizeof(out)), 0);
    assert_clean(out, 2);
    assert_int_equal(field(out, "shim"), 0);
    assert_int_equal(field(out, "stale_values"), 0);
}

static void test_kills_through_shim(void **state)
{
    (void)state;
    static char out[8192];
    shim_paths();
    const char *const env[] = {shim_env, stats_env, "KVBATCH_STATS_INTERVAL_MS=20", NULL};
    const char *const args[] = {"--threads", "8",     "--seconds", "5",       "--kills",
                                "2",         "--ops", "10000000",  "--quiet", NULL};
    assert_int_equal(run_kvstress(env, args, out, sizeof(out)), 0);
    assert_clean(out, 2);
    assert_int_equal(field(out, "shim"), 1);
    assert_int_equal(field(out, "shim_stats_ok"), 1);
    assert_int_equal(field(out, "stale_values"), 0);
}

/* Write-behind under kills: nothing wrong or lost track of (stale is allowed: acked, then lost). */
static void test_kills_through_shim_writeback(void **state)
{
    (void)state;
    static char out[8192];
    shim_paths();
    const char *const env[] = {shim_env, stats_env, "KVBATCH_STATS_INTERVAL_MS=20",
                               "KVBATCH_PUT_MODE=writeback", NULL};
    const char *const args[] = {"--threads", "4",     "--seconds", "4",       "--kills",
                                "2",         "--ops", "10000000",  "--quiet", NULL};
    assert_int_equal(run_kvstress(env, args, out, sizeof(out)), 0);
    assert_clean(out, 2);
    assert_int_equal(field(out, "writeback"), 1);
    assert_int_equal(field(out, "shim_stats_ok"), 1);
}

/*
 * Write-behind without kills: no put can fail, so a stale or missing own key
 * can only be a call overtaking the process's own pending put (the async
 * batch calls, which the shim passes through, must be ordered after them).
 * A 1 ms fixed window keeps every put waiting in its batch for a while.
 */
static void test_writeback_without_kills_reads_its_own_writes(void **state)
{
    (void)state;
    static char out[8192];
    shim_paths();
    const char *const env[] = {shim_env,
                               stats_env,
                               "KVBATCH_STATS_INTERVAL_MS=20",
                               "KVBATCH_PUT_MODE=writeback",
                               "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=1ms",
                               NULL};
    const char *const args[] = {"--threads", "4",        "--seconds", "3",
                                "--ops",     "10000000", "--quiet",   NULL};
    assert_int_equal(run_kvstress(env, args, out, sizeof(out)), 0);
    assert_clean(out, 0);
    assert_int_equal(field(out, "writeback"), 1);
    assert_int_equal(field(out, "stale_values"), 0);
    assert_int_equal(field(out, "missing_after_ok"), 0);
    assert_int_equal(field(out, "run_flush_rc"), 0);
    assert_int_equal(field(out, "shim_stats_ok"), 1);
}

/* Pending write-behind puts at a SIGKILL: kvs_flush reports failure; nothing revives. */
static void test_writeback_crash_flush_fails(void **state)
{
    (void)state;
    static char out[8192];
    shim_paths();
    const char *const env[] = {shim_env,
                               stats_env,
                               "KVBATCH_STATS_INTERVAL_MS=20",
                               "KVBATCH_PUT_MODE=writeback",
                               "KVBATCH_POLICY=fixed",
                               "KVBATCH_WINDOW_US=300ms",
                               "KVBATCH_BATCH_CALLS=pass", /* its checks are batch calls */
                               NULL};
    const char *const args[] = {"--threads",         "2",       "--seconds", "1",
                                "--writeback-check", "--quiet", NULL};
    assert_int_equal(run_kvstress(env, args, out, sizeof(out)), 0);
    assert_true(field(out, "writeback_flush_rc") < 0);
    assert_int_equal(field(out, "writeback_ok"), 1);
    assert_int_equal(field(out, "shim_stats_ok"), 1);
    assert_int_equal(field(out, "pass"), 1);
}

/* The checker catches a wrong value: one get result is damaged on purpose. */
static void test_checker_catches_a_wrong_value(void **state)
{
    (void)state;
    static char out[8192];
    const char *const args[] = {"--threads",     "2",       "--seconds", "1",
                                "--corrupt-one", "--quiet", NULL};
    assert_int_equal(run_kvstress(NULL, args, out, sizeof(out)), 1);
    assert_int_equal(field(out, "wrong_values"), 1);
    assert_int_equal(field(out, "pass"), 0);
}

/* A bad command line exits 2 with one line naming the option, its value and what is accepted. */
static void test_bad_options_exit_2(void **state)
{
    (void)state;
    static char out[8192];
    const struct {
        const char *args[6];
        const char *says;
    } cases[] = {
        {{"--memory", "4X"}, "kvstress: bad --memory '4X' (accepted: 1M..16T"},
        {{"--threads", "0"}, "kvstress: bad --threads '0' (accepted: 1..256)"},
        {{"--seconds", "1x"}, "kvstress: bad --seconds '1x' (accepted: seconds in (0, 86400])"},
        {{"--min-len", "64", "--max-len", "32"}, "kvstress: bad --max-len"},
        {{"--listen", "nohost"}, "kvstress: bad --listen 'nohost' (accepted: HOST:PORT)"},
        {{"--servers", "127.0.0.1:1", "--kills", "1"}, "--servers uses running servers"},
        {{"--frobnicate"}, "kvstress: unknown option '--frobnicate'"},
        {{"--threads"}, "kvstress: --threads needs a value (N: 1..256)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(run_kvstress(NULL, cases[i].args, out, sizeof(out)), 2);
        if (!strstr(out, cases[i].says)) fail_msg("'%s' not in: %s", cases[i].says, out);
    }
    const char *const help[] = {"--help", NULL};
    assert_int_equal(run_kvstress(NULL, help, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--writeback-check"));
    assert_non_null(strstr(out, "(1..256; default 8)"));
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kvb-stress-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kills_without_shim),
        cmocka_unit_test(test_kills_through_shim),
        cmocka_unit_test(test_kills_through_shim_writeback),
        cmocka_unit_test(test_writeback_without_kills_reads_its_own_writes),
        cmocka_unit_test(test_writeback_crash_flush_fails),
        cmocka_unit_test(test_checker_catches_a_wrong_value),
        cmocka_unit_test(test_bad_options_exit_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

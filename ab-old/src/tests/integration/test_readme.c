/*
 * test_readme.c - the README's Quick start runs as written:
 * scripts/readme-check.sh runs its by-hand commands (kvstored, kvs-cli,
 * examples/engine.py without and with the shim, kvbatch-stat) on a free
 * loopback port in a temporary directory, and both engine.py runs print the
 * same checksum. Run from the source tree's root; needs the Python module
 * (skipped in builds without it, as under SAN=).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_quick_start_runs_as_written(void **state)
{
    (void)state;
    const char *build = getenv("KVS_TEST_BUILD");
    if ((build && *build && strcmp(build, "build") != 0) || access("build/python", F_OK) != 0) {
        fprintf(stderr, "no Python modules in this build: skipped\n");
        skip();
    }
    int st = system("timeout 300 scripts/readme-check.sh");
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick_start_runs_as_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_install.c - make install puts the Python modules where the
 * interpreter finds them, with a run path that finds the installed
 * libkvstore.so.1: from a temporary PREFIX, `import kvstore` and
 * `import mooncake.store` work in a clean environment (no PYTHONPATH into
 * the tree, no LD_LIBRARY_PATH) and load the installed library;
 * kvbatch-tune is installed and finds the installed shim; make
 * uninstall removes every file again. (The Python modules are not built
 * under SAN=: skipped there.) scripts/install-check.sh: the installed file
 * list is exactly what a user needs (programs, libraries, headers, .pc files
 * naming the shim, man pages, docs), every program's man page renders
 * without a groff warning and names each option of its --help, and
 * uninstall leaves nothing. scripts/wheel-check.sh: `pip wheel .`
 * (pyproject.toml) builds both modules offline, and the wheel imports, loads
 * the library it carries and serves, with and without the shim (skipped
 * without pip/setuptools/wheel, and under SAN=).
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

#include "kvstore.h"
#include "kvtest.h"

/* Runs a shell command; its exit status (128 + signal, or -1). */
static int sh(const char *cmd)
{
    int st = system(cmd);
    if (st < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_install_import_uninstall(void **state)
{
    (void)state;
    const char *build = getenv("KVS_TEST_BUILD");
    if ((build && *build && strcmp(build, "build") != 0) || access("build/python", F_OK) != 0) {
        fprintf(stderr, "no Python modules in this build: skipped\n");
        skip();
    }
    char dir[] = "/tmp/kvb-install-XXXXXX", cmd[2048];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "timeout 120 make -s --no-print-directory install PREFIX=%s/usr >%s/log 2>&1", dir,
             dir);
    int rc = sh(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof(cmd), "cat %s/log >&2", dir);
        sh(cmd);
        fail_msg("make install: status %d", rc);
    }
    /* A clean environment: only the installed site directory on the path. */
    snprintf(cmd, sizeof(cmd),
             "cd / && env -i PYTHONPATH=\"$(ls -d %s/usr/lib/python3*/site-packages)\" "
             "/usr/bin/python3 -c '"
             "import kvstore, mooncake.store, sys\n"
             "assert kvstore.__file__.startswith(\"%s/usr/\"), kvstore.__file__\n"
             "assert mooncake.store.__file__.startswith(\"%s/usr/\"), mooncake.store.__file__\n"
             "maps = open(\"/proc/self/maps\").read()\n"
             "libs = set(l.split()[-1] for l in maps.splitlines() if \"libkvstore.so\" in l)\n"
             "assert libs == {\"%s/usr/lib/libkvstore.so.1\"}, libs\n"
             "assert kvstore.__version__ == \"%s\", kvstore.__version__\n"
             "' >&2",
             dir, dir, dir, dir, kvs_version());
    assert_int_equal(sh(cmd), 0);
    /* kvbatch-tune is installed and finds the installed shim: a run that fails is measured. */
    snprintf(cmd, sizeof(cmd),
             "cd / && env -i %s/usr/bin/kvbatch-tune --p99-us 100 --windows 0 --max-ops 64 "
             "--policies adaptive -- /bin/false 2>&1 | grep -q 'every run failed (exit 1)'",
             dir);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "timeout 120 make -s --no-print-directory uninstall PREFIX=%s/usr >%s/log 2>&1", dir,
             dir);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof(cmd), "test -z \"$(find %s/usr -type f -o -type l)\"", dir);
    rc = sh(cmd);
    snprintf(cmd, sizeof(cmd), "find %s/usr -type f -o -type l >&2; rm -rf %s", dir, dir);
    sh(cmd);
    assert_int_equal(rc, 0);
}

static void test_install_layout(void **state)
{
    (void)state;
    const char *build = getenv("KVS_TEST_BUILD");
    const char *san = getenv("SAN");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "BUILD='%s' SAN='%s' timeout 300 scripts/install-check.sh",
             build && *build ? build : "build", san ? san : "");
    assert_int_equal(sh(cmd), 0);
}

static void test_pip_wheel_builds_and_imports(void **state)
{
    (void)state;
    const char *build = getenv("KVS_TEST_BUILD");
    if ((build && *build && strcmp(build, "build") != 0) || access("build/python", F_OK) != 0) {
        fprintf(stderr, "no Python modules in this build: skipped\n");
        skip();
    }
    int rc = sh("BUILD=build timeout 900 scripts/wheel-check.sh");
    if (rc == 77) skip();
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_import_uninstall),
        cmocka_unit_test(test_install_layout),
        cmocka_unit_test(test_pip_wheel_builds_and_imports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_version.c - one version string everywhere: kvs_version() and the
 * --version of kvstored, kvbench, kvstress and kvbatch-stat print the same
 * "NAME VERSION" line and exit 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvstore.h"
#include "kvtest.h"

static void test_kvs_version(void **state)
{
    (void)state;
    const char *v = kvs_version();
    assert_non_null(v);
    assert_string_equal(v, KVS_VERSION_STRING);
    assert_true(v[0] >= '0' && v[0] <= '9');
    assert_non_null(strchr(v, '.'));
}

static void test_every_binary_prints_it(void **state)
{
    (void)state;
    static const char *const bins[] = {"kvstored", "kvbench", "kvstress", "kvbatch-stat"};
    for (size_t i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
        char rel[64], cmd[512], want[128], got[256] = "";
        snprintf(rel, sizeof(rel), "bin/%s", bins[i]);
        const char *path = kvt_build_path(rel);
        if (access(path, X_OK) != 0) {
            fail_msg("%s not built", path);
            return;
        }
        snprintf(cmd, sizeof(cmd), "%s --version", path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t n = fread(got, 1, sizeof(got) - 1, p);
        got[n] = '\0';
        int st = pclose(p);
        snprintf(want, sizeof(want), "%s %s\n", bins[i], kvs_version());
        if (strcmp(got, want) != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fail_msg("%s --version: '%s' (status %d), expected '%s'", bins[i], got, st, want);
            return;
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvs_version),
        cmocka_unit_test(test_every_binary_prints_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

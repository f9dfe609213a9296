/*
 * test_release_hooks.c - the shipped binaries carry no test hook.
 *
 * Test hooks (KVS_RDMA_TEST_STALL_MS, KVS_RDMA_TEST_TOKEN_XOR, ...) are
 * environment variables that make the RDMA code misbehave on purpose; they
 * are compiled only into the KVS_TEST_HOOKS objects the RDMA tests link
 * (mk/rdma.mk). This test reads every release library and program of the
 * build (the .so files in $KVS_TEST_BUILD/lib, everything in
 * $KVS_TEST_BUILD/bin) as `strings` would and fails on any
 * KVS_<something>_TEST_ name in them.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtest.h"

static int name_char(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/*
 * The first test-hook name in buf[0..len) (KVS_, at least one name
 * character, then _TEST_), copied to out; 1 if there is one, else 0.
 */
static int find_hook_name(const unsigned char *buf, size_t len, char *out, size_t outlen)
{
    for (size_t i = 0; i + 4 <= len; i++) {
        if (memcmp(buf + i, "KVS_", 4) != 0 || (i > 0 && name_char(buf[i - 1]))) continue;
        size_t end = i + 4;
        while (end < len && name_char(buf[end]))
            end++;
        /* "_TEST_" somewhere after the first name character past "KVS_" */
        for (size_t j = i + 5; j + 6 <= end; j++) {
            if (memcmp(buf + j, "_TEST_", 6) != 0) continue;
            size_t n = end - i < outlen - 1 ? end - i : outlen - 1;
            memcpy(out, buf + i, n);
            out[n] = '\0';
            return 1;
        }
        i = end;
    }
    return 0;
}

/* Reads a whole file; NULL (with errno) on failure. */
static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            unsigned char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Checks every regular file of dir whose name ends in suffix (or any, NULL); returns the count. */
static int check_dir(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) {
        fail_msg("cannot open %s: %s", dir, strerror(errno));
        return 0;
    }
    int checked = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (suffix && (nl < strlen(suffix) || strcmp(e->d_name + nl - strlen(suffix), suffix)))
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t len = 0;
        unsigned char *buf = read_file(path, &len);
        if (!buf) {
            fail_msg("cannot read %s: %s", path, strerror(errno));
            break;
        }
        char name[128];
        if (find_hook_name(buf, len, name, sizeof(name)))
            fail_msg("%s carries the test hook %s: test hooks belong in KVS_TEST_HOOKS builds "
                     "only (mk/rdma.mk)",
                     path, name);
        free(buf);
        checked++;
    }
    closedir(d);
    return checked;
}

/* The scanner itself: finds a planted name, ignores names that are not hooks. */
static void test_scanner_finds_hook_names(void **state)
{
    (void)state;
    char name[64];
    static const unsigned char hook[] = "\x7f"
                                        "ELF..\0KVS_RDMA_TEST_STALL_MS\0tail";
    assert_int_equal(find_hook_name(hook, sizeof(hook), name, sizeof(name)), 1);
    assert_string_equal(name, "KVS_RDMA_TEST_STALL_MS");
    static const unsigned char server[] = "abc KVS_SRV_TEST_X=1";
    assert_int_equal(find_hook_name(server, sizeof(server) - 1, name, sizeof(name)), 1);
    assert_string_equal(name, "KVS_SRV_TEST_X");
    /* not hooks: the test harness's own variables, settings, a name inside a longer one */
    static const unsigned char plain[] = "KVS_TEST_BUILD\0KVSTORE_RDMA_PULL_MAX\0KVS_RDMA_TESTS\0"
                                         "XKVS_A_TEST_B\0KVS__TEST";
    assert_int_equal(find_hook_name(plain, sizeof(plain), name, sizeof(name)), 0);
}

static void test_release_libraries_have_no_hooks(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", kvt_build_path("lib"));
    assert_true(check_dir(dir, ".so") >= 1); /* libkvstore.so at least */
}

static void test_release_programs_have_no_hooks(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", kvt_build_path("bin"));
    char kvstored[1100];
    snprintf(kvstored, sizeof(kvstored), "%s/kvstored", dir);
    assert_int_equal(access(kvstored, X_OK), 0);
    assert_true(check_dir(dir, NULL) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scanner_finds_hook_names),
        cmocka_unit_test(test_release_libraries_have_no_hooks),
        cmocka_unit_test(test_release_programs_have_no_hooks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_file.c - common/file.c: kvs_file_read's bound (a file of cap - 1
 * bytes is read whole, one of cap bytes is -EFBIG) and its refusal of what
 * is not a regular file; kvs_file_replace's mode (less the umask), no
 * temporary left behind, and its refusal to replace a directory. (The stats
 * file's hostile cases are in test_stats; kvbatch-stat's in
 * test_kvbatch_stat.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

static char dir[] = "/tmp/kvb-file-XXXXXX";

static void write_bytes(const char *path, size_t n)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        fputc('a' + (int)(i % 26), f);
    assert_int_equal(fclose(f), 0);
}

static void test_read_is_bounded_and_regular_only(void **state)
{
    char path[128], buf[16];
    (void)state;
    snprintf(path, sizeof(path), "%s/r", dir);
    write_bytes(path, sizeof(buf) - 1);
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), sizeof(buf) - 1);
    assert_string_equal(buf, "abcdefghijklmno");
    write_bytes(path, sizeof(buf));
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), -EFBIG);
    write_bytes(path, 0);
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    assert_int_equal(kvs_file_read("/dev/zero", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(kvs_file_read(dir, buf, sizeof(buf)), -EINVAL);
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), -EINVAL); /* no writer: no wait */
    unlink(path);
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), -ENOENT);
}

static void test_replace_mode_and_refusals(void **state)
{
    char path[128], cmd[192], buf[16];
    struct stat st;
    (void)state;
    snprintf(path, sizeof(path), "%s/w", dir);
    mode_t old = umask(022);
    assert_int_equal(kvs_file_replace(path, "one", 3, 0666), 0);
    umask(old);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(kvs_file_replace(path, "two", 3, 0600), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* a new file, not the old one rewritten */
    assert_int_equal(kvs_file_read(path, buf, sizeof(buf)), 3);
    assert_string_equal(buf, "two");
    snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l | grep -qx 1", dir); /* no temporary left */
    assert_int_equal(system(cmd), 0);
    unlink(path);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(kvs_file_replace(path, "x", 1, 0644), -EEXIST);
    assert_int_equal(rmdir(path), 0);
    snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l | grep -qx 0", dir);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_is_bounded_and_regular_only),
        cmocka_unit_test(test_replace_mode_and_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

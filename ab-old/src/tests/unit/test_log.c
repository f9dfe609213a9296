/*
 * test_log.c - common/log.c: kvs_log's line format and threshold, and the
 * line writer the shim shares (one line, newline-terminated, 1 KiB at most).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

static int saved_fd = -1, pipe_fd[2];

/* Sends stderr into a pipe until captured() reads it back. */
static void capture(void)
{
    assert_int_equal(pipe(pipe_fd), 0);
    saved_fd = dup(STDERR_FILENO);
    assert_true(saved_fd >= 0);
    assert_true(dup2(pipe_fd[1], STDERR_FILENO) >= 0);
    close(pipe_fd[1]);
}

/* Restores stderr; returns what was written meanwhile (NUL-terminated, static). */
static const char *captured(void)
{
    static char buf[4096];
    assert_true(dup2(saved_fd, STDERR_FILENO) >= 0);
    close(saved_fd);
    ssize_t n = read(pipe_fd[0], buf, sizeof(buf) - 1);
    close(pipe_fd[0]);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void vline(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void vline(const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvs_log_vline(prefix, fmt, ap);
    va_end(ap);
}

static void test_kvs_log_format_and_threshold(void **state)
{
    (void)state;
    capture();
    kvs_log(KVS_LOG_WARN, "server %s:%d gone", "a", 7070);
    kvs_log(KVS_LOG_DEBUG, "not shown at the default level");
    assert_string_equal(captured(), "libkvstore[warn]: server a:7070 gone\n");
    assert_true(kvs_log_enabled(KVS_LOG_ERROR));
    assert_false(kvs_log_enabled(KVS_LOG_INFO));
}

static void test_vline_truncates_to_one_line(void **state)
{
    (void)state;
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture();
    vline("kvbatch: ", "%s", big);
    const char *out = captured();
    assert_int_equal(strlen(out), 1023);
    assert_memory_equal(out, "kvbatch: xxx", 12);
    assert_int_equal(out[1022], '\n');
    capture();
    vline("", "no prefix %d", 1);
    assert_string_equal(captured(), "no prefix 1\n");
}

static void test_level_names(void **state)
{
    (void)state;
    assert_string_equal(kvs_log_level_names[KVS_LOG_ERROR], "error");
    assert_string_equal(kvs_log_level_names[KVS_LOG_WARN], "warn");
    assert_string_equal(kvs_log_level_names[KVS_LOG_INFO], "info");
    assert_string_equal(kvs_log_level_names[KVS_LOG_DEBUG], "debug");
}

int main(void)
{
    unsetenv("KVSTORE_LOG");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvs_log_format_and_threshold),
        cmocka_unit_test(test_vline_truncates_to_one_line),
        cmocka_unit_test(test_level_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

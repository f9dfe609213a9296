/*
 * test_clock.c - common/clock.h: the timespec conversion is exact, the
 * monotonic clock does not go back, and a wall-clock deadline lies ahead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "clock.h"

static void test_ns_to_timespec(void **state)
{
    (void)state;
    struct timespec ts = kvs_ns_to_timespec(0);
    assert_true(ts.tv_sec == 0 && ts.tv_nsec == 0);
    ts = kvs_ns_to_timespec(3 * KVS_NS_PER_S + 999999999);
    assert_true(ts.tv_sec == 3 && ts.tv_nsec == 999999999);
    ts = kvs_ns_to_timespec(KVS_NS_PER_S);
    assert_true(ts.tv_sec == 1 && ts.tv_nsec == 0);
}

static void test_monotonic(void **state)
{
    (void)state;
    uint64_t a = kvs_now_ns(), ms = kvs_now_ms(), b = kvs_now_ns();
    assert_true(a <= b);
    assert_true(a / KVS_NS_PER_MS <= ms && ms <= b / KVS_NS_PER_MS);
}

static void test_realtime_deadline(void **state)
{
    (void)state;
    double now = kvs_wall_s();
    assert_true(now > 1.5e9); /* after 2017: the wall clock, not a monotonic one */
    struct timespec ts = kvs_realtime_in(2 * KVS_NS_PER_S);
    double at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    assert_true(at >= now + 2.0 && ts.tv_nsec < (long)KVS_NS_PER_S);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ns_to_timespec),
        cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_realtime_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

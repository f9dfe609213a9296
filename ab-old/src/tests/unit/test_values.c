/*
 * test_values.c - the self-checking values of tools/values.c: a value
 * passes its check and gives back its version; one changed byte anywhere,
 * another key, a truncated or a mixed value fails; the ends-only check sees
 * the ends and only the ends; short values hold a prefix of the layout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "values.h"

#define LEN 4096

static unsigned char a[LEN], b[LEN];

static void test_whole_value(void **state)
{
    (void)state;
    unsigned v = 0;
    kvval_fill(a, LEN, "key", 7);
    assert_true(kvval_check(a, LEN, "key", &v));
    assert_int_equal(v, 7);
    assert_false(kvval_check(a, LEN, "kez", NULL));     /* another key's value */
    assert_false(kvval_check(a, LEN - 1, "key", NULL)); /* truncated: the length is in the tag */
    for (size_t i = 0; i < LEN; i += 97) {
        memcpy(b, a, LEN);
        b[i] ^= 1;
        v = 0;
        assert_false(kvval_check(b, LEN, "key", &v));
        assert_int_equal(v, 0); /* written only when the value passes */
    }
    /* two versions of one key mixed (a torn write) */
    kvval_fill(b, LEN, "key", 8);
    memcpy(b, a, LEN / 2);
    assert_false(kvval_check(b, LEN, "key", NULL));
    /* too short to carry a version: nothing to check */
    assert_true(kvval_check(a, 3, "key", NULL));
}

static void test_values_differ(void **state)
{
    (void)state;
    kvval_fill(a, LEN, "key", 1);
    kvval_fill(b, LEN, "key", 2);
    assert_memory_not_equal(a + 12, b + 12, LEN - 12);
    kvval_fill(b, LEN, "other", 1);
    assert_memory_not_equal(a + 12, b + 12, LEN - 12);
    /* a short value is a prefix of the long one's layout but for its length tag */
    unsigned char s[8];
    kvval_fill(s, sizeof(s), "key", 1);
    assert_memory_equal(s, a, 4);
}

static void test_ends(void **state)
{
    (void)state;
    memset(a, 0, LEN);
    kvval_stamp_ends(a, LEN, "key", 0);
    assert_true(kvval_check_ends(a, LEN, "key", 0));
    kvval_fill(b, LEN, "key", 0);
    assert_true(kvval_check_ends(b, LEN, "key", 0)); /* stamped ends = the full value's */
    assert_memory_equal(a, b, KVVAL_ENDS);
    assert_memory_equal(a + LEN - KVVAL_ENDS, b + LEN - KVVAL_ENDS, KVVAL_ENDS);
    assert_false(kvval_check_ends(a, LEN, "key", 1));
    assert_false(kvval_check_ends(a, LEN, "kez", 0));
    a[0] ^= 1;
    assert_false(kvval_check_ends(a, LEN, "key", 0));
    a[0] ^= 1;
    a[LEN - 1] ^= 1;
    assert_false(kvval_check_ends(a, LEN, "key", 0));
    a[LEN - 1] ^= 1;
    a[LEN / 2] ^= 1; /* the middle is not looked at */
    assert_true(kvval_check_ends(a, LEN, "key", 0));
    /* a short value is written and checked whole */
    memset(a, 0, LEN);
    kvval_stamp_ends(a, 100, "key", 0);
    kvval_fill(b, 100, "key", 0);
    assert_memory_equal(a, b, 100);
    a[50] ^= 1;
    assert_false(kvval_check_ends(a, 100, "key", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_value),
        cmocka_unit_test(test_values_differ),
        cmocka_unit_test(test_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

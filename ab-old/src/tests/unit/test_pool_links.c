/*
 * test_pool_links.c - the pool's free-list links live in pool memory, which
 * an RDMA peer holding the pool's rkey can overwrite (docs/SECURITY.md). A
 * corrupted link must never place a slot outside its page or the pool.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pool.h"

#define MIB (1u << 20)

static void assert_inside(const struct kvsd_pool *p, uint64_t off, size_t slot)
{
    assert_true(off + slot <= kvsd_pool_size(p));
    assert_int_equal(kvsd_pool_page_of(off), kvsd_pool_page_of(off + slot - 1));
}

static void test_corrupted_link_not_followed(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(4 * MIB, &p), 0);
    const size_t len = 100, slot = kvsd_pool_slot_size(p, len);
    uint64_t a, b, c, d;
    assert_int_equal(kvsd_pool_alloc(p, len, &a), 0);
    assert_int_equal(kvsd_pool_alloc(p, len, &b), 0);
    assert_int_equal(kvsd_pool_alloc(p, len, &c), 0);
    assert_int_equal(kvsd_pool_alloc(p, len, &d), 0);
    uint32_t page = kvsd_pool_page_of(a);
    assert_int_equal(kvsd_pool_page_of(d), page);
    kvsd_pool_free(p, b, len);
    kvsd_pool_free(p, c, len); /* free list: c -> b */

    /* What a remote WRITE into the free chunk c could do: a link far past the page. */
    const uint32_t evil = 0xfffff000u;
    memcpy(kvsd_pool_base(p) + c, &evil, sizeof(evil));

    uint64_t x;
    assert_int_equal(kvsd_pool_alloc(p, len, &x), 0);
    assert_int_equal(x, c); /* the head itself was sound */
    for (int i = 0; i < 64; i++) {
        assert_int_equal(kvsd_pool_alloc(p, len, &x), 0);
        assert_inside(p, x, slot);
        assert_int_not_equal(kvsd_pool_page_of(x), page); /* the rest of that page is written off */
    }
    /* A chunk freed on the written-off page is reused, inside it. */
    kvsd_pool_free(p, a, len);
    assert_int_equal(kvsd_pool_alloc(p, len, &x), 0);
    assert_int_equal(x, a);
    kvsd_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupted_link_not_followed),
    };
    return cmocka_run_group_tests_name("pool_links", tests, NULL, NULL);
}

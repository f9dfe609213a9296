/*
 * test_pool_links.c - the pool's memory is writable by an RDMA peer holding
 * the pool's rkey (docs/SECURITY.md); the slab free list must not depend on
 * it. Whatever a peer writes into free chunks, the allocator hands out each
 * chunk once, inside its page, and loses no room.
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

/* Every free chunk overwritten (what remote WRITEs into freed slots could do): no effect. */
static void test_writes_into_free_chunks_change_nothing(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(4 * MIB, &p), 0);
    const size_t len = 100, slot = kvsd_pool_slot_size(p, len);
    enum { N = 64 };
    uint64_t off[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(kvsd_pool_alloc(p, len, &off[i]), 0);
    uint32_t page = kvsd_pool_page_of(off[0]);
    assert_int_equal(kvsd_pool_page_of(off[N - 1]), page);
    /* free every other chunk, then scribble over each: a link past the page, then 0xff */
    for (int i = 1; i < N; i += 2)
        kvsd_pool_free(p, off[i], len);
    for (int i = 1; i < N; i += 2) {
        uint32_t evil[2] = {0xfffff000u, 0};
        memcpy(kvsd_pool_base(p) + off[i], evil, sizeof(evil));
        memset(kvsd_pool_base(p) + off[i] + sizeof(evil), 0xff, slot - sizeof(evil));
    }
    /* the freed chunks come back, each once (last freed first), on their page */
    for (int i = N - 1; i >= 1; i -= 2) {
        uint64_t x;
        assert_int_equal(kvsd_pool_alloc(p, len, &x), 0);
        assert_int_equal(x, off[i]);
    }
    /* then the page's untouched room, not another page: nothing was written off */
    size_t per_page = KVSD_POOL_PAGE / slot;
    uint64_t prev = off[N - 1];
    for (size_t i = N; i < per_page; i++) {
        uint64_t x;
        assert_int_equal(kvsd_pool_alloc(p, len, &x), 0);
        assert_inside(p, x, slot);
        assert_int_equal(kvsd_pool_page_of(x), page);
        assert_true(x > prev);
        prev = x;
    }
    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.bytes_used, per_page * slot);
    kvsd_pool_destroy(p);
}

/* A page emptied and taken again (by another class) starts a fresh free list. */
static void test_page_reused_by_another_class(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(1 * MIB, &p), 0);
    uint64_t a, b, c;
    assert_int_equal(kvsd_pool_alloc(p, 100, &a), 0);
    assert_int_equal(kvsd_pool_alloc(p, 100, &b), 0);
    kvsd_pool_free(p, a, 100);
    kvsd_pool_free(p, b, 100); /* the page is empty: back to the pool */
    assert_int_equal(kvsd_pool_alloc(p, 5000, &c), 0);
    assert_int_equal(c, 0); /* the one page, carved from its start for the new class */
    size_t slot = kvsd_pool_slot_size(p, 5000);
    uint64_t prev = c;
    for (size_t i = 1; i < KVSD_POOL_PAGE / slot; i++) {
        uint64_t x;
        assert_int_equal(kvsd_pool_alloc(p, 5000, &x), 0);
        assert_inside(p, x, slot);
        assert_true(x > prev);
        prev = x;
    }
    uint64_t x;
    assert_int_equal(kvsd_pool_alloc(p, 5000, &x), -ENOSPC);
    kvsd_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_into_free_chunks_change_nothing),
        cmocka_unit_test(test_page_reused_by_another_class),
    };
    return cmocka_run_group_tests_name("pool_links", tests, NULL, NULL);
}

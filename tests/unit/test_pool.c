/*
 * test_pool.c - the slab allocator: classes, chunk reuse, page runs, no
 * overlap, bounds, pages moving between classes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool.h"

#define MIB (1u << 20)

static void test_create_bounds(void **state)
{
    (void)state;
    struct kvsd_pool *p = NULL;
    assert_int_equal(kvsd_pool_create(MIB - 1, &p), -EINVAL);
    assert_int_equal(kvsd_pool_create(0, &p), -EINVAL);
    /* Rounded down to whole pages. */
    assert_int_equal(kvsd_pool_create(3 * MIB + 12345, &p), 0);
    assert_int_equal(kvsd_pool_size(p), 3 * MIB);
    assert_non_null(kvsd_pool_base(p));
    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_total, 3);
    assert_int_equal(st.pages_free, 3);
    assert_int_equal(st.bytes_used, 0);
    kvsd_pool_destroy(p);
}

static void test_classes_grow_by_factor(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(4 * MIB, &p), 0);
    int n = kvsd_pool_nclasses(p);
    assert_true(n > 30 && n < 64);

    struct kvsd_pool_class_stats prev, cs;
    kvsd_pool_class_stats(p, 0, &prev);
    assert_int_equal(prev.chunk_size, KVSD_POOL_MIN_CHUNK);
    for (int i = 1; i < n; i++) {
        kvsd_pool_class_stats(p, i, &cs);
        assert_int_equal(cs.chunk_size % 8, 0);
        assert_true(cs.chunk_size > prev.chunk_size);
        /* About 1.25 each step (8-byte rounding aside); the last one is half a page. */
        if (i < n - 1) assert_true(cs.chunk_size <= prev.chunk_size + prev.chunk_size / 4 + 8);
        assert_int_equal(cs.chunks_per_page, KVSD_POOL_PAGE / cs.chunk_size);
        prev = cs;
    }
    assert_int_equal(prev.chunk_size, KVSD_POOL_PAGE / 2);

    assert_int_equal(kvsd_pool_class_of(p, 0), 0);
    assert_int_equal(kvsd_pool_class_of(p, 64), 0);
    assert_int_equal(kvsd_pool_class_of(p, 65), 1);
    assert_int_equal(kvsd_pool_class_of(p, KVSD_POOL_PAGE / 2), n - 1);
    assert_int_equal(kvsd_pool_class_of(p, KVSD_POOL_PAGE / 2 + 1), KVSD_POOL_LARGE);
    /* Every length lands in the smallest class that holds it. */
    for (size_t len = 1; len < KVSD_POOL_PAGE / 2; len = len * 3 / 2 + 1) {
        int cls = kvsd_pool_class_of(p, len);
        kvsd_pool_class_stats(p, cls, &cs);
        assert_true(len <= cs.chunk_size);
        if (cls > 0) {
            kvsd_pool_class_stats(p, cls - 1, &prev);
            assert_true(len > prev.chunk_size);
        }
    }
    assert_int_equal(kvsd_pool_slot_size(p, 3 * MIB / 2), 2 * MIB);
    kvsd_pool_destroy(p);
}

static void test_chunk_reuse(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(2 * MIB, &p), 0);
    uint64_t a, b, c;
    assert_int_equal(kvsd_pool_alloc(p, 4096, &a), 0);
    assert_int_equal(kvsd_pool_alloc(p, 4096, &b), 0);
    assert_int_not_equal(a, b);
    kvsd_pool_free(p, b, 4096);
    assert_int_equal(kvsd_pool_alloc(p, 4096, &c), 0);
    assert_int_equal(c, b); /* the freed chunk is used again, no new carving */

    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, 1);
    assert_int_equal(st.bytes_used, 2 * kvsd_pool_slot_size(p, 4096));
    kvsd_pool_free(p, a, 4096);
    kvsd_pool_free(p, c, 4096);
    /* An empty slab page goes back to the free pages. */
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, 2);
    assert_int_equal(st.bytes_used, 0);
    kvsd_pool_destroy(p);
}

static void test_page_runs(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(8 * MIB, &p), 0);
    uint64_t small, big, big2;
    assert_int_equal(kvsd_pool_alloc(p, 100, &small), 0); /* takes page 0 */
    assert_int_equal(kvsd_pool_alloc(p, 3 * MIB - 5, &big), 0);
    assert_int_equal(big % KVSD_POOL_PAGE, 0);
    assert_true(big >= KVSD_POOL_PAGE);
    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, 8 - 1 - 3);
    /* 4 pages left, contiguous: 4 MiB fits, 4 MiB + 1 does not. */
    assert_int_equal(kvsd_pool_alloc(p, 4 * MIB + 1, &big2), -ENOSPC);
    assert_int_equal(kvsd_pool_alloc(p, 4 * MIB, &big2), 0);
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, 0);
    assert_int_equal(kvsd_pool_alloc(p, 100000, &small), -ENOSPC);

    kvsd_pool_free(p, big, 3 * MIB - 5);
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, 3);
    assert_int_equal(kvsd_pool_alloc(p, 8 * MIB + 1, &big), -E2BIG);
    kvsd_pool_destroy(p);
}

/* A run of pages is found only where the free pages are contiguous. */
static void test_run_needs_contiguous_pages(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(4 * MIB, &p), 0);
    uint64_t off[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(kvsd_pool_alloc(p, MIB, &off[i]), 0);
    kvsd_pool_free(p, off[0], MIB);
    kvsd_pool_free(p, off[2], MIB);
    uint64_t two;
    assert_int_equal(kvsd_pool_alloc(p, 2 * MIB, &two), -ENOSPC); /* 2 free, not adjacent */
    kvsd_pool_free(p, off[1], MIB);
    assert_int_equal(kvsd_pool_alloc(p, 2 * MIB, &two), 0);
    assert_int_equal(two, off[0]);
    kvsd_pool_destroy(p);
}

struct slot {
    uint64_t off;
    size_t len;
};

/* Fills the pool with mixed sizes until it is full: no two slots overlap, all are inside. */
static void test_no_overlap_until_full(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(6 * MIB, &p), 0);
    size_t max = 20000;
    struct slot *slots = calloc(max, sizeof(*slots));
    assert_non_null(slots);
    uint8_t *base = kvsd_pool_base(p);
    size_t n = 0;
    unsigned seed = 7;
    static const size_t sizes[] = {0, 1, 64, 65, 700, 4096, 4097, 60000, 600000, 1500000};
    for (int misses = 0; n < max && misses < 50;) {
        seed = seed * 1103515245u + 12345u;
        size_t len = sizes[(seed >> 16) % (sizeof(sizes) / sizeof(sizes[0]))];
        uint64_t off;
        int rc = kvsd_pool_alloc(p, len, &off);
        if (rc == -ENOSPC) {
            misses++;
            continue;
        }
        assert_int_equal(rc, 0);
        assert_true(off + kvsd_pool_slot_size(p, len) <= kvsd_pool_size(p));
        memset(base + off, (int)(n & 0xff), len);
        slots[n++] = (struct slot){off, len};
    }
    assert_true(n > 10);
    for (size_t i = 0; i < n; i++) {
        size_t si = kvsd_pool_slot_size(p, slots[i].len);
        for (size_t j = i + 1; j < n; j++) {
            size_t sj = kvsd_pool_slot_size(p, slots[j].len);
            int disjoint = slots[i].off + si <= slots[j].off || slots[j].off + sj <= slots[i].off;
            assert_true(disjoint);
        }
        /* Each slot still holds what was written to it: nobody else wrote there. */
        for (size_t b = 0; b < slots[i].len; b += 512)
            assert_int_equal(base[slots[i].off + b], i & 0xff);
    }
    for (size_t i = 0; i < n; i++)
        kvsd_pool_free(p, slots[i].off, slots[i].len);
    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, st.pages_total);
    assert_int_equal(st.bytes_used, 0);
    free(slots);
    kvsd_pool_destroy(p);
}

/* A class fills exactly its pages' chunks, then needs a new page. */
static void test_class_fills_pages(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(2 * MIB, &p), 0);
    int cls = kvsd_pool_class_of(p, 4000);
    struct kvsd_pool_class_stats cs;
    kvsd_pool_class_stats(p, cls, &cs);
    uint32_t total = 2 * cs.chunks_per_page;
    uint64_t *offs = calloc(total, sizeof(*offs));
    assert_non_null(offs);
    for (uint32_t i = 0; i < total; i++)
        assert_int_equal(kvsd_pool_alloc(p, 4000, &offs[i]), 0);
    uint64_t extra;
    assert_int_equal(kvsd_pool_alloc(p, 4000, &extra), -ENOSPC);
    assert_int_equal(kvsd_pool_alloc(p, 64, &extra), -ENOSPC); /* no page for another class */
    kvsd_pool_class_stats(p, cls, &cs);
    assert_int_equal(cs.pages, 2);
    assert_int_equal(cs.chunks_used, total);
    /* Freeing a whole page's chunks returns the page; another class can then use it. */
    for (uint32_t i = 0; i < total; i++)
        if (kvsd_pool_page_of(offs[i]) == 0) kvsd_pool_free(p, offs[i], 4000);
    assert_int_equal(kvsd_pool_alloc(p, 64, &extra), 0);
    assert_int_equal(kvsd_pool_page_of(extra), 0);
    free(offs);
    kvsd_pool_destroy(p);
}

/* Fills a 64 MiB pool with len-byte values (noting each to the pool if learn): value bytes / pool.
 */
static double uniform_fill(size_t len, int learn)
{
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(64 * MIB, &p), 0);
    uint64_t n = 0, off;
    for (;;) {
        if (learn) kvsd_pool_learn(p, len);
        if (kvsd_pool_alloc(p, len, &off) != 0) break;
        n++;
        assert_true(n <= 64 * MIB / len);
    }
    double fill = (double)(n * len) / (double)kvsd_pool_size(p);
    kvsd_pool_destroy(p);
    return fill;
}

/*
 * Any uniform slice size fills >= 0.9 of the pool once its class is learned
 * (without eviction the first page, filled before, stays in the growth class).
 */
static void test_learned_classes_fill_the_pool(void **state)
{
    (void)state;
    static const size_t sizes[] = {4096, 8192, 16384, 20480, 24576, 32768, 65536, 100000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        double before = uniform_fill(sizes[i], 0), after = uniform_fill(sizes[i], 1);
        printf("uniform %6zu-byte values: value bytes / pool %.3f growth classes only, %.3f "
               "learned\n",
               sizes[i], before, after);
        assert_true(after >= 0.9);
    }
}

static void test_learning_rules(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(4 * MIB, &p), 0);
    int n = kvsd_pool_nclasses(p);
    struct kvsd_pool_class_stats cs;

    /* 15 notes of a size make nothing; the 16th makes its exact class (8-byte rounded). */
    uint64_t old;
    assert_int_equal(kvsd_pool_alloc(p, 20475, &old), 0);
    int old_cls = kvsd_pool_class_of(p, 20475);
    for (int i = 0; i < 15; i++)
        assert_int_equal(kvsd_pool_learn(p, 20475), 0);
    assert_int_equal(kvsd_pool_learn(p, 20475), 1);
    assert_int_equal(kvsd_pool_nclasses(p), n + 1);
    assert_int_equal(kvsd_pool_class_of(p, 20475), n);
    assert_int_equal(kvsd_pool_slot_size(p, 20475), 20480);
    kvsd_pool_class_stats(p, n, &cs);
    assert_int_equal(cs.chunk_size, 20480);
    assert_int_equal(cs.chunks_per_page, KVSD_POOL_PAGE / 20480);
    /* Growth classes keep their ids; a length the new class does not hold keeps its class. */
    assert_int_equal(kvsd_pool_class_of(p, 20481), old_cls);
    assert_int_equal(kvsd_pool_class_of(p, 64), 0);

    /* A slot taken before the class existed goes back to its own class and page. */
    uint64_t fresh;
    assert_int_equal(kvsd_pool_alloc(p, 20475, &fresh), 0);
    assert_int_not_equal(kvsd_pool_page_of(fresh), kvsd_pool_page_of(old));
    kvsd_pool_free(p, old, 20475);
    kvsd_pool_class_stats(p, old_cls, &cs);
    assert_int_equal(cs.pages, 0);
    assert_int_equal(cs.chunks_used, 0);
    kvsd_pool_free(p, fresh, 20475);
    struct kvsd_pool_stats st;
    kvsd_pool_stats(p, &st);
    assert_int_equal(st.pages_free, st.pages_total);
    assert_int_equal(st.bytes_used, 0);

    /* Sizes their class already holds well, and large values, make no class. */
    for (int i = 0; i < 100; i++) {
        assert_int_equal(kvsd_pool_learn(p, 8192), 0);
        assert_int_equal(kvsd_pool_learn(p, 20480), 0);
        assert_int_equal(kvsd_pool_learn(p, KVSD_POOL_PAGE / 2 + 1), 0);
    }
    assert_int_equal(kvsd_pool_nclasses(p), n + 1);

    /* Classes stop at the maximum; every length still lands in one that holds it. */
    for (size_t len = 30000; kvsd_pool_nclasses(p) < KVSD_POOL_MAX_CLASSES; len += 3000) {
        assert_true(len < KVSD_POOL_PAGE / 2);
        for (int i = 0; i < 16; i++)
            kvsd_pool_learn(p, len);
    }
    for (int i = 0; i < 16; i++)
        assert_int_equal(kvsd_pool_learn(p, 17000), 0);
    for (size_t len = 1; len <= KVSD_POOL_PAGE / 2; len = len * 5 / 4 + 1) {
        int cls = kvsd_pool_class_of(p, len);
        kvsd_pool_class_stats(p, cls, &cs);
        assert_true(len <= cs.chunk_size);
        for (int i = 0; i < kvsd_pool_nclasses(p); i++) {
            struct kvsd_pool_class_stats other;
            kvsd_pool_class_stats(p, i, &other);
            assert_true(len > other.chunk_size || other.chunk_size >= cs.chunk_size);
        }
    }
    kvsd_pool_destroy(p);
}

/* The smallest class whose chunk holds len, found the slow way. */
static int smallest_class(const struct kvsd_pool *p, size_t len)
{
    int best = KVSD_POOL_LARGE;
    uint32_t best_size = 0;
    for (int i = 0; i < kvsd_pool_nclasses(p); i++) {
        struct kvsd_pool_class_stats cs;
        kvsd_pool_class_stats(p, i, &cs);
        if (len <= cs.chunk_size && (best == KVSD_POOL_LARGE || cs.chunk_size < best_size)) {
            best = i;
            best_size = cs.chunk_size;
        }
    }
    return best;
}

/* Lengths repeated (memoised), interleaved and learned in turn: always the smallest class. */
static void test_class_of_after_learning(void **state)
{
    (void)state;
    struct kvsd_pool *p;
    assert_int_equal(kvsd_pool_create(64 * MIB, &p), 0);
    for (int i = 0; i < 40; i++) { /* one length in a row: its class is learned mid-run */
        kvsd_pool_learn(p, 12000);
        assert_int_equal(kvsd_pool_class_of(p, 12000), smallest_class(p, 12000));
    }
    static const size_t lens[] = {20480, 20480, 100, 20480, 5000, 5000, 0, 20480, 333000, 5000};
    for (int round = 0; round < 40; round++) {
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            size_t len = lens[i];
            kvsd_pool_learn(p, len);
            assert_int_equal(kvsd_pool_class_of(p, len), smallest_class(p, len));
            /* a lookup of another length between learns is not answered by the memo */
            assert_int_equal(kvsd_pool_class_of(p, len + 8), smallest_class(p, len + 8));
        }
    }
    assert_true(kvsd_pool_nclasses(p) > 42); /* 12000, 20480 and 5000 were learned meanwhile */
    assert_int_equal(kvsd_pool_class_of(p, KVSD_POOL_PAGE / 2 + 1), KVSD_POOL_LARGE);
    kvsd_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bounds),
        cmocka_unit_test(test_classes_grow_by_factor),
        cmocka_unit_test(test_chunk_reuse),
        cmocka_unit_test(test_page_runs),
        cmocka_unit_test(test_run_needs_contiguous_pages),
        cmocka_unit_test(test_no_overlap_until_full),
        cmocka_unit_test(test_class_fills_pages),
        cmocka_unit_test(test_learned_classes_fill_the_pool),
        cmocka_unit_test(test_learning_rules),
        cmocka_unit_test(test_class_of_after_learning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

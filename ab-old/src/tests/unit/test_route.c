/*
 * test_route.c - rendezvous routing (client/route.c): stable across runs and
 * server-list orders, balanced, and minimally disruptive when a server leaves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "route.h"

static const char *const names[] = {"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070",
                                    "10.0.0.4:7070"};
#define NSERVERS 4

/* The owner's name of key among servers[0..n) given by name. */
static const char *owner(const char *const *list, size_t n, const char *key)
{
    uint64_t hashes[NSERVERS];
    for (size_t i = 0; i < n; i++)
        hashes[i] = kvs_route_server_hash(list[i]);
    return list[kvs_route_pick(hashes, n, kvs_route_key_hash(key, strlen(key)))];
}

static void key_name(char *buf, size_t cap, unsigned i)
{
    snprintf(buf, cap, "req-%u/layer-%u/block-%u", i / 640, (i / 16) % 40, i % 16);
}

/* Recorded once: a change here moves every client's data, so it must be deliberate. */
static void test_known_assignments(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        unsigned server;
    } expect[] = {
        {"a", 2},
        {"b", 3},
        {"hello", 2},
        {"req-0/layer-0/block-0", 0},
        {"req-7/layer-31/block-3", 0},
        {"x", 1},
    };
    uint64_t hashes[NSERVERS];
    for (size_t i = 0; i < NSERVERS; i++)
        hashes[i] = kvs_route_server_hash(names[i]);
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        size_t got = kvs_route_pick(hashes, NSERVERS,
                                    kvs_route_key_hash(expect[i].key, strlen(expect[i].key)));
        assert_int_equal(got, expect[i].server);
    }
}

static void test_order_independent(void **state)
{
    (void)state;
    const char *reversed[NSERVERS] = {names[3], names[2], names[1], names[0]};
    const char *rotated[NSERVERS] = {names[2], names[3], names[0], names[1]};
    char key[64];
    for (unsigned i = 0; i < 5000; i++) {
        key_name(key, sizeof(key), i);
        const char *a = owner(names, NSERVERS, key);
        assert_string_equal(a, owner(reversed, NSERVERS, key));
        assert_string_equal(a, owner(rotated, NSERVERS, key));
    }
}

static void test_balanced(void **state)
{
    (void)state;
    enum { NKEYS = 40000 };
    unsigned count[NSERVERS] = {0};
    uint64_t hashes[NSERVERS];
    for (size_t i = 0; i < NSERVERS; i++)
        hashes[i] = kvs_route_server_hash(names[i]);
    char key[64];
    for (unsigned i = 0; i < NKEYS; i++) {
        key_name(key, sizeof(key), i);
        count[kvs_route_pick(hashes, NSERVERS, kvs_route_key_hash(key, strlen(key)))]++;
    }
    for (size_t s = 0; s < NSERVERS; s++) {
        printf("    %s: %u keys\n", names[s], count[s]);
        /* Each server within 10% of its fair share (binomial sd is ~0.9% here). */
        assert_in_range(count[s], NKEYS / NSERVERS * 9 / 10, NKEYS / NSERVERS * 11 / 10);
    }
}

static void test_removal_moves_only_its_keys(void **state)
{
    (void)state;
    const char *three[3] = {names[0], names[1], names[3]}; /* names[2] left */
    char key[64];
    unsigned moved = 0;
    for (unsigned i = 0; i < 8000; i++) {
        key_name(key, sizeof(key), i);
        const char *before = owner(names, NSERVERS, key);
        const char *after = owner(three, 3, key);
        if (strcmp(before, names[2]) != 0)
            assert_string_equal(before, after);
        else
            moved++;
    }
    assert_true(moved > 0);
}

static void test_single_server(void **state)
{
    (void)state;
    uint64_t h = kvs_route_server_hash("127.0.0.1:7070");
    assert_int_equal(kvs_route_pick(&h, 1, kvs_route_key_hash("k", 1)), 0);
    assert_int_equal(kvs_route_pick(NULL, 0, kvs_route_key_hash("k", 1)), 0);
}

static void test_hash_depends_on_every_byte(void **state)
{
    (void)state;
    assert_int_not_equal(kvs_route_key_hash("abc", 3), kvs_route_key_hash("abd", 3));
    assert_int_not_equal(kvs_route_key_hash("abc", 3), kvs_route_key_hash("abc", 2));
    assert_int_not_equal(kvs_route_server_hash("h:1"), kvs_route_server_hash("h:2"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_assignments),
        cmocka_unit_test(test_order_independent),
        cmocka_unit_test(test_balanced),
        cmocka_unit_test(test_removal_moves_only_its_keys),
        cmocka_unit_test(test_single_server),
        cmocka_unit_test(test_hash_depends_on_every_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_rdma_lanes.c - the RDMA transport's lanes without a device: claiming
 * them (at most as many requests in flight as there are lanes) and handing
 * each reply to the lane that waits for its id, in any order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rdma_int.h"

static void free_lanes(struct kvs_rdma_lane *l, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        l[i] = (struct kvs_rdma_lane){.reply_idx = -1};
}

/* KVS_RDMA_LANES requests at once, each on its own lane; the next waits for one to leave. */
static void test_claim_bounds_requests_in_flight(void **state)
{
    (void)state;
    struct kvs_rdma_lane lanes[KVS_RDMA_LANES];
    struct kvs_rdma_lane *got[KVS_RDMA_LANES];
    free_lanes(lanes, KVS_RDMA_LANES);
    for (uint32_t i = 0; i < KVS_RDMA_LANES; i++) {
        got[i] = kvs_rdma_lane_claim(lanes, KVS_RDMA_LANES);
        assert_non_null(got[i]);
        for (uint32_t j = 0; j < i; j++)
            assert_ptr_not_equal(got[i], got[j]);
    }
    assert_null(kvs_rdma_lane_claim(lanes, KVS_RDMA_LANES));
    got[3]->busy = 0; /* its request is done */
    assert_ptr_equal(kvs_rdma_lane_claim(lanes, KVS_RDMA_LANES), got[3]);
    assert_null(kvs_rdma_lane_claim(lanes, KVS_RDMA_LANES));
    /* A server without KVS_FEAT_PIPELINE: one lane, requests take turns. */
    free_lanes(lanes, KVS_RDMA_LANES);
    assert_ptr_equal(kvs_rdma_lane_claim(lanes, 1), &lanes[0]);
    assert_null(kvs_rdma_lane_claim(lanes, 1));
}

/* Replies arriving in another order than their messages each reach their own lane. */
static void test_replies_matched_by_id(void **state)
{
    (void)state;
    struct kvs_rdma_lane lanes[KVS_RDMA_LANES];
    free_lanes(lanes, KVS_RDMA_LANES);
    for (uint32_t i = 0; i < 4; i++)
        kvs_rdma_lane_expect(&lanes[i], 100 + i);
    static const uint64_t order[] = {102, 100, 103, 101};
    for (int r = 0; r < 4; r++) {
        struct kvs_rdma_lane *l =
            kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, order[r], r, 64 + (uint32_t)r);
        assert_ptr_equal(l, &lanes[order[r] - 100]);
        assert_int_equal(l->reply_idx, r);
        assert_int_equal(l->reply_len, 64 + r);
        assert_int_equal(l->want_id, 0);
    }
    for (uint32_t i = 4; i < KVS_RDMA_LANES; i++)
        assert_int_equal(lanes[i].reply_idx, -1); /* lanes that sent nothing got nothing */
}

/* A reply no lane waits for: unknown, answered already, or id 0. */
static void test_reply_for_no_lane(void **state)
{
    (void)state;
    struct kvs_rdma_lane lanes[KVS_RDMA_LANES];
    free_lanes(lanes, KVS_RDMA_LANES);
    kvs_rdma_lane_expect(&lanes[2], 7);
    assert_null(kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, 8, 0, 24));
    assert_null(kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, 0, 0, 24));
    assert_int_equal(lanes[2].reply_idx, -1);
    assert_ptr_equal(kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, 7, 5, 24), &lanes[2]);
    assert_null(kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, 7, 6, 24)); /* a second reply */
    assert_int_equal(lanes[2].reply_idx, 5);
    /* The lane's next message waits afresh. */
    kvs_rdma_lane_expect(&lanes[2], 9);
    assert_int_equal(lanes[2].reply_idx, -1);
    assert_ptr_equal(kvs_rdma_lane_answer(lanes, KVS_RDMA_LANES, 9, 1, 24), &lanes[2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_bounds_requests_in_flight),
        cmocka_unit_test(test_replies_matched_by_id),
        cmocka_unit_test(test_reply_for_no_lane),
    };
    return cmocka_run_group_tests_name("rdma_lanes", tests, NULL, NULL);
}

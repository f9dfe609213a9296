/*
 * rdma_lanes.c - a connection's lanes (RDMA transport): which request holds
 * which lane, and which lane a reply answers. Pure bookkeeping, no verbs:
 * the callers (rdma.c, rdma_chain.c) hold the connection's mutex.
 *
 * A lane has at most one control message awaiting its reply, named by the
 * fresh id in its header; a reply goes to the lane that waits for its id,
 * in whatever order replies arrive.
 */
#include "rdma_int.h"

struct kvs_rdma_lane *kvs_rdma_lane_claim(struct kvs_rdma_lane *lanes, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!lanes[i].busy) {
            lanes[i].busy = 1;
            return &lanes[i];
        }
    return NULL;
}

void kvs_rdma_lane_expect(struct kvs_rdma_lane *l, uint64_t id)
{
    l->want_id = id;
    l->reply_idx = -1;
}

struct kvs_rdma_lane *kvs_rdma_lane_answer(struct kvs_rdma_lane *lanes, uint32_t n, uint64_t id,
                                           int idx, uint32_t len)
{
    if (id == 0) return NULL; /* no message carries id 0: no lane waits for it */
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_rdma_lane *l = &lanes[i];
        if (l->want_id != id) continue;
        l->want_id = 0;
        l->reply_idx = idx;
        l->reply_len = len;
        return l;
    }
    return NULL;
}

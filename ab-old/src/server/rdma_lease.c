/*
 * rdma_lease.c - a connection's lease table (kvstored's RDMA side).
 *
 * A token names an entry: its index and a 16-bit generation that moves on
 * each reuse. An entry holds a reservation (RESERVE, PULL: an item being
 * written, aborted unless committed) or a read lease (LEASE, PUSH: a pinned
 * item). COMMIT and RELEASE find the entry by index, generation and kind,
 * so a client can only commit or release what it was given; an entry older
 * than --rdma-lease-ms cuts its connection (rdma.c's lease tick), and a cut
 * connection drops everything its table holds: a reservation past its
 * deadline through kvsd_ops_put_expire (put_expired, like a TCP PUT slot
 * past --put-timeout), any other through kvsd_ops_put_abort.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdlib.h>

#include "clock.h"
#include "ops.h"

int kvsd_rdma_leases_init(struct kvsd_rdma_conn *c)
{
    c->leases = calloc(KVSD_RDMA_LEASES_PER_CONN, sizeof(*c->leases));
    if (!c->leases) return -ENOMEM;
    for (uint32_t i = 0; i < KVSD_RDMA_LEASES_PER_CONN; i++)
        c->leases[i].next_free = i + 1 < KVSD_RDMA_LEASES_PER_CONN ? i + 1 : KVSD_RDMA_TOKEN_FREE;
    c->free_head = 0;
    return 0;
}

uint32_t kvsd_rdma_lease_take(struct kvsd_rdma_conn *c, struct kvsd_item *it,
                              enum kvsd_rdma_lease_kind kind)
{
    uint32_t idx = c->free_head;
    if (idx == KVSD_RDMA_TOKEN_FREE) return KVSD_RDMA_TOKEN_FREE;
    struct kvsd_rdma_lease *l = &c->leases[idx];
    c->free_head = l->next_free;
    l->it = it;
    l->kind = (uint8_t)kind;
    l->deadline_ns = kvs_now_ns() + (uint64_t)c->r->cfg.lease_ms * 1000000ull;
    c->nused++;
    return ((uint32_t)l->gen << 16) | idx;
}

struct kvsd_rdma_lease *kvsd_rdma_lease_find(struct kvsd_rdma_conn *c, uint32_t token,
                                             enum kvsd_rdma_lease_kind kind)
{
    uint32_t idx = token & KVSD_RDMA_TOKEN_IDX_MASK;
    if (idx >= KVSD_RDMA_LEASES_PER_CONN) return NULL;
    struct kvsd_rdma_lease *l = &c->leases[idx];
    if (l->kind != kind || l->gen != (uint16_t)(token >> 16)) return NULL;
    return l;
}

void kvsd_rdma_lease_put(struct kvsd_rdma_conn *c, struct kvsd_rdma_lease *l)
{
    l->it = NULL;
    l->kind = KVSD_LEASE_FREE;
    l->gen++;
    uint32_t idx = (uint32_t)(l - c->leases);
    l->next_free = c->free_head;
    c->free_head = idx;
    c->nused--;
}

void kvsd_rdma_leases_drop_all(struct kvsd_rdma_conn *c, uint64_t expired_before_ns)
{
    struct kvsd_server *srv = c->r->srv;
    for (uint32_t i = 0; c->leases && c->nused && i < KVSD_RDMA_LEASES_PER_CONN; i++) {
        struct kvsd_rdma_lease *l = &c->leases[i];
        if (l->kind == KVSD_LEASE_RESERVE && l->deadline_ns < expired_before_ns)
            kvsd_ops_put_expire(srv, l->it); /* counted in put_expired, as TCP's --put-timeout */
        else if (l->kind == KVSD_LEASE_RESERVE)
            kvsd_ops_put_abort(srv, l->it);
        else if (l->kind == KVSD_LEASE_READ)
            kvsd_ops_get_done(srv, l->it);
        else
            continue;
        kvsd_rdma_lease_put(c, l);
    }
}

int kvsd_rdma_leases_expired(const struct kvsd_rdma_conn *c, uint64_t now_ns)
{
    for (uint32_t i = 0; c->nused && i < KVSD_RDMA_LEASES_PER_CONN; i++)
        if (c->leases[i].kind != KVSD_LEASE_FREE && c->leases[i].deadline_ns < now_ns) return 1;
    return 0;
}

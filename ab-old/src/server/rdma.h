/*
 * rdma.h - kvstored's RDMA side (librdmacm + libibverbs): listens next to
 * TCP, registers the store's pool once, and serves the one-sided protocol
 * (RESERVE/COMMIT and PULL for puts, LEASE/RELEASE and PUSH for gets;
 * docs/rdma.md). Every
 * other opcode arriving on an RDMA connection goes through the same proto
 * state machine as TCP.
 *
 * Single-threaded like the rest of kvstored: the event loop watches the one
 * fd kvsd_rdma_fd() returns and calls kvsd_rdma_service() when it is readable.
 */
#ifndef KVSD_RDMA_H
#define KVSD_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct kvsd_rdma;

struct kvsd_rdma_config {
    const char *host; /* address to bind (an address of an RDMA device's netdev) */
    const char *port;
    unsigned lease_ms; /* a reservation or lease older than this kills its connection */
    int verbose;
};

/* RDMA side counters (STATS, docs/rdma.md). */
struct kvsd_rdma_counters {
    uint64_t conns_current, conns_total;
    uint64_t reserves, commits, aborts, leases, releases;
    uint64_t bad_tokens;     /* COMMIT/RELEASE naming no live reservation/lease of the conn */
    uint64_t lease_expiries; /* connections cut because a lease outlived lease_ms */
    uint64_t messages_in, messages_out;
    uint64_t pulls;  /* PULL messages (puts whose values the server READ) */
    uint64_t pushes; /* PUSH messages (gets whose values the server WROTE) */
};

/*
 * Binds and listens, opens the device's protection domain and registers the
 * pool. Returns 0; -ENODEV when there is no RDMA device (err says so); or
 * another negative errno with the reason in err.
 */
int kvsd_rdma_create(struct kvsd_server *srv, const struct kvsd_rdma_config *cfg,
                     struct kvsd_rdma **out, char *err, size_t errlen);
/* "HOST:PORT" actually bound. */
int kvsd_rdma_local_addr(const struct kvsd_rdma *r, char *buf, size_t len);
/* One pollable fd: readable when kvsd_rdma_service() has work. */
int kvsd_rdma_fd(const struct kvsd_rdma *r);
/* Handles every pending connection event, completion and lease expiry; never blocks. */
void kvsd_rdma_service(void *r);
const struct kvsd_rdma_counters *kvsd_rdma_counters(const struct kvsd_rdma *r);
/* The KVS_FEAT_* bits HELLO announces for this RDMA side, besides KVS_FEAT_RDMA (PULL, PUSH). */
uint32_t kvsd_rdma_features(const struct kvsd_rdma *r);
/* STATS lines "rdma_* value" (struct kvsd_server's stats_extra hook; arg is the kvsd_rdma). */
void kvsd_rdma_stats(void *arg, void (*line)(void *text, const char *name, uint64_t value),
                     void *text);
/* Closes every connection (dropping their reservations and leases), then the listener. */
void kvsd_rdma_destroy(struct kvsd_rdma *r);

#endif /* KVSD_RDMA_H */

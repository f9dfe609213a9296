/*
 * server.h - what every connection of one kvstored shares, TCP and RDMA:
 * the store, the limits in force, the STATS counters, HELLO's feature bits
 * and the AUTH secret; and its start and stop.
 */
#ifndef KVSD_SERVER_H
#define KVSD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define KVSD_NOPCODES 20 /* counters are indexed by request opcode (1..19) */

struct kvsd_server_limits {
    uint64_t max_object;   /* value bytes */
    uint32_t max_frame;    /* request (and reply) body bytes */
    size_t out_limit;      /* queued reply bytes (pool values included) above which input pauses */
    size_t out_heap_limit; /* heap held by queued replies above which input pauses */
    size_t rbuf_size;      /* per-connection read buffer */
    uint64_t shm_max;      /* the largest shared region a local connection may map */
};

/* Counters shared by all connections; STATS reports them (docs/server.md). */
struct kvsd_server_counters {
    uint64_t requests[KVSD_NOPCODES]; /* frames per opcode */
    uint64_t keys[KVSD_NOPCODES];     /* per-key operations per opcode */
    uint64_t bytes_in, bytes_out;
    uint64_t get_hits, get_misses, get_range;
    uint64_t put_too_big, put_no_space, put_expired, key_invalid;
    uint64_t removed_matching; /* keys removed by REMOVE_MATCHING */
    uint64_t errors_protocol, errors_unsupported, errors_nomem;
    uint64_t conns_current, conns_total, conns_refused, conns_stalled;
    uint64_t conns_local;        /* of conns_total: over the local socket */
    uint64_t conns_refused_peer; /* of conns_refused: a local peer of another uid (SO_PEERCRED) */
    uint64_t auth_ok;            /* connections that passed AUTH */
    uint64_t auth_failures;      /* closed for a wrong MAC or a request before AUTH */
    uint64_t shm_maps;           /* shared regions mapped or unmapped (SHM_MAP, SHM_BUF accepted) */
    uint64_t shm_refused;        /* SHM_MAP/SHM_BUFs refused, and descriptors closed unused */
    uint64_t shm_bad_ranges;     /* SHM_PUT/SHM_GET keys naming a range outside the region */
};

/* What every connection of one kvstored shares. */
struct kvsd_server {
    struct kvsd_store *store;
    struct kvsd_server_limits limits;
    struct kvsd_server_counters counters;
    uint64_t started_ns;
    uint32_t features; /* KVS_FEAT_* announced in HELLO (main sets KVS_FEAT_RDMA) */
    /* More STATS lines, "name value" (kvstored's RDMA side sets it); NULL: none. */
    void (*stats_extra)(void *arg, void (*line)(void *text, const char *name, uint64_t value),
                        void *text);
    void *stats_extra_arg;
    /*
     * The shared secret (kvstored --auth-file), or NULL: no authentication.
     * With a secret, main also sets KVS_FEAT_AUTH and a connection serves
     * only HELLO and AUTH until it has authenticated (docs/SECURITY.md).
     */
    const uint8_t *auth_secret;
    size_t auth_secret_len;
    /*
     * Heap the TCP connections hold now (their state, read buffers and
     * queued replies, at what the allocator spends on them; proto.c), and
     * its peak since net.c last gave freed heap back to the kernel.
     */
    size_t conn_memory, conn_memory_peak;
    /* Every connection, newest first (proto.c links them; CLIENTS lists them). */
    struct kvsd_proto_conn *conns;
    uint64_t conns_made; /* the last connection id given */
    /*
     * When the event loop last woke (kvs_now_ms, net.c): what a request is
     * stamped with for CLIENTS' idle time, one clock read per wake-up.
     */
    uint64_t loop_ms;
};

/* Creates the store (memory_bytes of pool) and fills srv. 0 or a negative errno. */
int kvsd_server_init(struct kvsd_server *srv, size_t memory_bytes,
                     const struct kvsd_server_limits *limits);
void kvsd_server_fini(struct kvsd_server *srv);

#endif /* KVSD_SERVER_H */

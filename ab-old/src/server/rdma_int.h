/*
 * rdma_int.h - what the files of kvstored's RDMA side share (rdma.h is what
 * the rest of kvstored sees). The files, by job:
 *
 *   rdma.c        set-up (device, pool registration, CQ, lease timer, epoll),
 *                 the event loop (CM events, completions, lease ticks), STATS
 *   rdma_conn.c   one connection: accept (QP, buffers, receives), remote
 *                 access on and off, sending, cutting it, freeing it
 *   rdma_lease.c  a connection's lease table: tokens for reservations and
 *                 read leases, checked on COMMIT/RELEASE, dropped on a cut
 *   rdma_ops.c    the control messages: RESERVE/LEASE, COMMIT/RELEASE, PULL,
 *                 PUSH, and every other frame through the TCP state machine
 *
 * Per-key rules (which keys and values are refused, and the counters) are
 * server/ops.c's: these files only move bytes and hold tokens.
 */
#ifndef KVSD_RDMA_INT_H
#define KVSD_RDMA_INT_H

#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>

#include "rdma.h"
#include "wire.h"

#define KVSD_RDMA_NRECV      8 /* receive buffers per connection */
#define KVSD_RDMA_SEND_DEPTH 16
#define KVSD_RDMA_PULL_MAX   KVS_WIRE_PULL_MAX_KEYS /* READs one PULL may post */
#define KVSD_RDMA_PULL_WR_ID (UINT64_MAX - 1)       /* wr_id of a PULL's signaled last READ */
#define KVSD_RDMA_PUSH_MAX   KVS_WIRE_PUSH_MAX_KEYS /* WRITEs one PUSH may post */
/* wr_id of a PUSH's reply SEND: the tag, then the PUSH's sequence number (32 bits). */
#define KVSD_RDMA_PUSH_WR_TAG     0x5055534800000000ull
#define KVSD_RDMA_PUSH_WR_MASK    0xffffffff00000000ull
#define KVSD_RDMA_LEASES_PER_CONN 16384u
#define KVSD_RDMA_MAX_CONNS       128
#define KVSD_RDMA_CQ_DEPTH        (KVSD_RDMA_MAX_CONNS * (KVSD_RDMA_NRECV + KVSD_RDMA_SEND_DEPTH))
#define KVSD_RDMA_INLINE_WANT     256
#define KVSD_RDMA_TOKEN_IDX_MASK  0xffffu
#define KVSD_RDMA_TOKEN_FREE      UINT32_MAX /* no entry (end of the free list; a key without one) */

enum kvsd_rdma_lease_kind { KVSD_LEASE_FREE = 0, KVSD_LEASE_RESERVE, KVSD_LEASE_READ };

/* One entry of a connection's lease table. */
struct kvsd_rdma_lease {
    struct kvsd_item *it;
    uint64_t deadline_ns;
    uint32_t next_free;
    uint16_t gen;
    uint8_t kind;
};

/* One RDMA connection. */
struct kvsd_rdma_conn {
    struct kvsd_rdma *r;
    struct rdma_cm_id *id;
    uint8_t *bufs; /* KVSD_RDMA_NRECV receive buffers, then the send buffer */
    struct ibv_mr *mr;
    struct kvsd_proto_conn *proto;
    struct kvsd_rdma_lease *leases;
    uint32_t free_head, nused;
    uint32_t max_inline;
    int dead;
    int remote_access;    /* the QP accepts remote READ/WRITE (only once authenticated) */
    const char *closing;  /* why it is cut once its last reply has left, or NULL */
    uint64_t close_by_ns; /* cut then at the latest (lease tick) */
    /* The PULL in flight (at most one: the client waits for its reply). */
    struct {
        int pending;
        uint64_t id;
        uint32_t count;
        uint32_t *tokens; /* KVSD_RDMA_PULL_MAX: the reservation per key, or TOKEN_FREE */
        int32_t *status;  /* KVSD_RDMA_PULL_MAX: the key's status when it has no token */
        struct ibv_send_wr *wrs;
        struct ibv_sge *sges;
    } pull;
    /* The PUSH whose reply SEND has not completed yet: its items stay pinned until it has. */
    struct {
        int pending;
        uint32_t seq; /* names its reply SEND's completion */
        uint32_t count;
        uint32_t *tokens; /* KVSD_RDMA_PUSH_MAX: the read lease pinning each key's item, or
                             TOKEN_FREE */
        struct ibv_send_wr *wrs;
        struct ibv_sge *sges;
    } push;
    struct kvsd_rdma_conn *prev, *next;
};

struct kvsd_rdma {
    struct kvsd_server *srv;
    struct kvsd_rdma_config cfg;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *lid;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_mr *pool_mr;
    struct ibv_comp_channel *comp;
    struct ibv_cq *cq;
    int tfd, epfd;
    uint32_t max_rd_atom, max_init_rd_atom;
    int push_on; /* serves PUSH and announces KVS_FEAT_PUSH (a test hook turns it off) */
    struct kvsd_rdma_conn *conns;
    struct kvsd_rdma_counters ctr;
};

/* ---- rdma_lease.c ---- */

/* Allocates c's table, every entry free. 0 or -ENOMEM. */
int kvsd_rdma_leases_init(struct kvsd_rdma_conn *c);
/* Takes a free entry for it; returns its token, or KVSD_RDMA_TOKEN_FREE when the table is full. */
uint32_t kvsd_rdma_lease_take(struct kvsd_rdma_conn *c, struct kvsd_item *it,
                              enum kvsd_rdma_lease_kind kind);
/* The live entry a client's token names, if it is of that kind; else NULL. */
struct kvsd_rdma_lease *kvsd_rdma_lease_find(struct kvsd_rdma_conn *c, uint32_t token,
                                             enum kvsd_rdma_lease_kind kind);
/* Frees an entry (its item is the caller's to commit, abort or unpin first). */
void kvsd_rdma_lease_put(struct kvsd_rdma_conn *c, struct kvsd_rdma_lease *l);
/*
 * Drops every reservation of c (those whose deadline is before
 * expired_before_ns as expired, kvsd_ops_put_expire; the others aborted) and
 * unpins every lease. Its QP must be dead. 0: nothing counts as expired.
 */
void kvsd_rdma_leases_drop_all(struct kvsd_rdma_conn *c, uint64_t expired_before_ns);
/* 1 if an entry of c is older than its deadline at now, else 0. */
int kvsd_rdma_leases_expired(const struct kvsd_rdma_conn *c, uint64_t now_ns);

/* ---- rdma_conn.c ---- */

/* The peer of id as "HOST:PORT" (the log's name for it); buf is left as it is if unknown. */
void kvsd_rdma_peer_name(struct rdma_cm_id *id, char *buf, size_t len);

/* Accepts a connect request (see rdma_conn.c). 0, or a negative code: the caller rejects it. */
int kvsd_rdma_conn_accept(struct kvsd_rdma *r, struct rdma_cm_id *cid,
                          const struct rdma_conn_param *req);
/* Posts receive buffer idx again. 0 or a negative code. */
int kvsd_rdma_post_recv(struct kvsd_rdma_conn *c, uint32_t idx);
/* The QP to the error state, leases dropped, disconnect; freed on DISCONNECTED. */
void kvsd_rdma_conn_kill(struct kvsd_rdma_conn *c, const char *why);
/* The same for a connection whose reservations or leases outlived lease_ms at now_ns. */
void kvsd_rdma_conn_expire(struct kvsd_rdma_conn *c, uint64_t now_ns);
/* Cuts c once the reply just posted has left (see rdma_conn.c). */
void kvsd_rdma_conn_close_after_reply(struct kvsd_rdma_conn *c, const char *why);
/* Turns remote READ/WRITE on the QP on or off. 0 or -errno. */
int kvsd_rdma_qp_remote_access(struct kvsd_rdma_conn *c, int on);
void kvsd_rdma_conn_free(struct kvsd_rdma_conn *c);
struct kvsd_rdma_conn *kvsd_rdma_conn_by_qp(struct kvsd_rdma *r, uint32_t qp_num);
/* The send buffer (one control message, KVS_WIRE_CTRL_MAX bytes). */
uint8_t *kvsd_rdma_send_buf(struct kvsd_rdma_conn *c);
/* Posts the len bytes of the send buffer as one SEND (a failure cuts c). */
void kvsd_rdma_send_reply(struct kvsd_rdma_conn *c, size_t len);

/* ---- rdma_ops.c ---- */

/* Serves one control message received whole. */
void kvsd_rdma_handle_message(struct kvsd_rdma_conn *c, const uint8_t *msg, size_t len);
/* A PULL's READs have completed: commits and answers. */
void kvsd_rdma_pull_finish(struct kvsd_rdma_conn *c);
/* A PUSH's reply has left (or the client's next message shows it arrived): unpins. */
void kvsd_rdma_push_finish(struct kvsd_rdma_conn *c);

#endif /* KVSD_RDMA_INT_H */

/*
 * rdma_int.h - what the files of the RDMA transport share; internal to
 * libkvstore. docs/rdma.md describes the protocol, transport/rdma.c the
 * paths a batch takes. The files, by job:
 *
 *   rdma.c        the transport's ops: create, submit (one request, chunk by
 *                 chunk), disconnect, destroy, registrations, counters, fork;
 *                 test hooks (KVS_TEST_HOOKS builds only)
 *   rdma_conn.c   a connection's life: rdma_cm set-up, QP and buffers,
 *                 HELLO and AUTH, teardown; registered memory, bounce buffer
 *   rdma_chain.c  posting and waiting: control receives, a chain of WRs
 *                 behind one control SEND, completions, the reply; the chain
 *                 builder that merges adjacent slices
 *   rdma_ops.c    one chunk of keys: PULL, PUSH, RESERVE + WRITEs + COMMIT,
 *                 LEASE + READs + RELEASE, plain frames (EXISTS, REMOVE, STATS)
 *
 * Everything here runs with kvs_rdma_conn.mu held (one request at a time per
 * connection), except create/destroy and the fork hooks.
 */
#ifndef KVS_TRANSPORT_RDMA_INT_H
#define KVS_TRANSPORT_RDMA_INT_H

#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define KVS_RDMA_NRECV        4 /* control receive buffers (KVS_WIRE_CTRL_MAX each) */
#define KVS_RDMA_SQ_DEPTH     1024
#define KVS_RDMA_MAX_SGE      16
#define KVS_RDMA_INLINE_WANT  256
#define KVS_RDMA_RD_ATOM_MAX  16
#define KVS_RDMA_CHUNK_KEYS   2048        /* keys per RESERVE/LEASE message */
#define KVS_RDMA_BOUNCE_CHUNK (16u << 20) /* bounce bytes per chunk (one value may exceed it) */
#define KVS_RDMA_BACKOFF_MS   200

/* A kvs_register_buffer region; registered again after each reconnect. */
struct kvs_rdma_ureg {
    void *ptr;
    size_t len;
    struct ibv_mr *mr; /* NULL while disconnected */
    struct kvs_rdma_ureg *next;
};

/* Where one key's slice comes from / goes to, for the chain builder. */
struct kvs_rdma_slice {
    uint64_t laddr;
    uint32_t lkey;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t len;
};

/* A chain of data WRs being built (arrays sized by the caller: one WR and SGE per slice). */
struct kvs_rdma_chain {
    struct ibv_send_wr *wrs;
    struct ibv_sge *sges;
    uint32_t nwr, nsge;
    uint64_t rnext; /* remote address just past the last slice */
};

/* Test hooks: set only in KVS_TEST_HOOKS builds (rdma.c), else all 0. */
struct kvs_rdma_hooks {
    uint32_t stall_ms;  /* KVS_RDMA_TEST_STALL_MS: sleep between the two round trips */
    uint32_t token_xor; /* KVS_RDMA_TEST_TOKEN_XOR: xors the tokens (PULL/PUSH: rkeys) it names */
    uint32_t max_wr;    /* KVS_RDMA_TEST_MAX_WR: send queue depth (0: the default) */
    uint32_t max_sge;   /* KVS_RDMA_TEST_MAX_SGE: SGEs per WR (0: the default) */
};

/* One server's RDMA connection: the transport's struct kvs_conn, by another name. */
struct kvs_rdma_conn {
    struct kvs_endpoint ep;
    struct kvs_transport_config cfg;
    pthread_mutex_t mu;
    int up;
    int last_err;
    uint64_t retry_at_ms;
    struct kvs_limits lim;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_cq *cq;
    uint8_t *ctrl; /* KVS_RDMA_NRECV receive buffers, then the send buffer */
    struct ibv_mr *ctrl_mr;
    uint8_t *bounce;
    size_t bounce_size;
    struct ibv_mr *bounce_mr;
    struct kvs_rdma_ureg *regs;
    uint32_t sq_depth, max_sge, max_inline;
    uint64_t next_id;
    uint64_t sig_posted, sig_done; /* signaled WRs (wr_id = sequence) */
    int reply_idx;                 /* receive buffer holding the reply, or -1 */
    uint32_t reply_len;
    uint32_t pull_max; /* KVSTORE_RDMA_PULL_MAX: larger put chunks take RESERVE + WRITEs/COMMIT */
    uint32_t push_max; /* KVSTORE_RDMA_PUSH_MAX: larger get chunks take LEASE + READs/RELEASE */
    struct kvs_rdma_hooks hooks;
    atomic_uint_fast64_t doorbells, wrs, cqes, round_trips, bounce_bytes, zero_copy_bytes,
        reconnects, split_chains;
    /* Where a put/get batch's time goes (microseconds, summed over chunks). */
    atomic_uint_fast64_t slot_wait_us, chain_wait_us, copy_us;
};

/* The transport's opaque handle is a struct kvs_rdma_conn. */
static inline struct kvs_rdma_conn *kvs_rdma_of(struct kvs_conn *c)
{
    return (struct kvs_rdma_conn *)(void *)c;
}

static inline uint8_t *kvs_rdma_send_buf(struct kvs_rdma_conn *c)
{
    return c->ctrl + (size_t)KVS_RDMA_NRECV * KVS_WIRE_CTRL_MAX;
}

/* Milliseconds left until deadline (0 once it has passed). */
static inline int kvs_rdma_remaining_ms(uint64_t deadline)
{
    uint64_t now = kvs_now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

static inline uint64_t kvs_rdma_elapsed_us(uint64_t since_ns)
{
    return (kvs_now_ns() - since_ns) / 1000u;
}

/*
 * PULL is used only when both ends want it: KVSTORE_RDMA_PULL_MAX > 0 here
 * and the server's HELLO announced KVS_FEAT_PULL (an older kvstored would cut
 * the connection on opcode 12). Without it no memory is remotely readable.
 */
static inline int kvs_rdma_pull_on(const struct kvs_rdma_conn *c)
{
    return c->pull_max && (c->lim.features & KVS_FEAT_PULL);
}

/*
 * PUSH likewise: KVSTORE_RDMA_PUSH_MAX > 0 here and KVS_FEAT_PUSH in the
 * server's HELLO. Without it no memory is remotely writable.
 */
static inline int kvs_rdma_push_on(const struct kvs_rdma_conn *c)
{
    return c->push_max && (c->lim.features & KVS_FEAT_PUSH);
}

/* ---- rdma_conn.c ---- */

/* Connects if needed (with a backoff after a failure). 0 or a negative code. */
int kvs_rdma_ensure_up(struct kvs_rdma_conn *c);
/* Tears the connection down; registrations are kept, to be registered again. */
void kvs_rdma_conn_down(struct kvs_rdma_conn *c);
/* Access flags of memory registered for transfers (remote READ with PULL, WRITE with PUSH). */
int kvs_rdma_mr_access(const struct kvs_rdma_conn *c);
/* Makes the bounce buffer at least need bytes (registered again when it grows). */
int kvs_rdma_bounce_reserve(struct kvs_rdma_conn *c, size_t need);
/* The registration covering [p, p+len), if any. */
struct ibv_mr *kvs_rdma_find_reg(struct kvs_rdma_conn *c, const void *p, size_t len);

/* ---- rdma_chain.c ---- */

/* Posts receive buffer idx again. 0 or -EIO. */
int kvs_rdma_post_recv(struct kvs_rdma_conn *c, int idx);
/* Writes a request header at out; returns KVS_WIRE_HDR_LEN. */
size_t kvs_rdma_put_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len,
                        uint64_t id);
/*
 * Posts ch's WRs (may be NULL: none) followed by the control SEND of msg_len
 * bytes from the send buffer, in as few ibv_post_send calls as the send
 * queue allows (one when the chain fits); fence: the SEND waits for the
 * READs before it. kvs_rdma_wait_reply then waits for the last post and the reply.
 */
int kvs_rdma_post_chain(struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch, size_t msg_len,
                        int fence, uint64_t deadline);
int kvs_rdma_wait_reply(struct kvs_rdma_conn *c, uint64_t deadline);
/* kvs_rdma_post_chain, then kvs_rdma_wait_reply. */
int kvs_rdma_call(struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch, size_t msg_len, int fence,
                  uint64_t deadline);
/*
 * Checks the reply kvs_rdma_wait_reply received against the request (opcode, id,
 * count; with entry_len, a body of count entries of that size) and posts its
 * buffer again. Returns its body (valid until the next wait), or NULL with
 * *err set (-EPROTO; an ERROR reply is logged).
 */
const uint8_t *kvs_rdma_take_reply(struct kvs_rdma_conn *c, uint8_t opcode, uint64_t id,
                                   uint32_t count, uint32_t entry_len, uint32_t *body_len,
                                   int *err);
/* The reply just received, if it is an ERROR frame: 1 and its status, else 0. */
int kvs_rdma_reply_error(const struct kvs_rdma_conn *c, int32_t *status);
/*
 * Appends one slice: extends the last SGE when adjacent to it on both sides,
 * adds an SGE to the last WR when only the remote side is adjacent (up to
 * max_sge), else starts a new WR of opcode op.
 */
void kvs_rdma_chain_add(const struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch,
                        enum ibv_wr_opcode op, const struct kvs_rdma_slice *s);

/* ---- rdma_ops.c ---- */

/*
 * Runs req's keys from *done on, chunk by chunk, each by the path its size
 * picks (docs/rdma.md), advancing *done past every finished chunk. 0, or the
 * transport error that stopped it (the connection is then unusable).
 */
int kvs_rdma_run_keys(struct kvs_rdma_conn *c, struct kvs_req *req, uint32_t *done,
                      uint64_t deadline);
/* STATS: one plain frame; fills req's text. 0 or a transport error. */
int kvs_rdma_run_stats(struct kvs_rdma_conn *c, struct kvs_req *req, uint64_t deadline);

#endif /* KVS_TRANSPORT_RDMA_INT_H */

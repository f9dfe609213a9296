/*
 * rdma.c - the RDMA transport (librdmacm + libibverbs): one RC queue pair
 * per (client, server); values move one-sided (docs/rdma.md).
 *
 *   put batch: a chunk of at most KVSTORE_RDMA_PULL_MAX value bytes (default
 *              256 KiB, e.g. 32 x 4 KiB) as PULL: ONE SEND naming, per key,
 *              where its value lies in the client's registered memory
 *              (bounce buffer or a kvs_register_buffer region); the server
 *              reserves the slots, RDMA READs the values into them, commits
 *              and answers a status per key. 1 round trip per batch.
 *              Larger chunks (where the round trip matters less than
 *              the data, and soft-RoCE moves READs slower than WRITEs under
 *              load and lost a 3 MiB READ's connection), or all with
 *              KVSTORE_RDMA_PULL_MAX=0: RESERVE (control round trip: the
 *              server reserves a slot per key and answers addr/rkey/token),
 *              then ONE ibv_post_send of the chain  WRITE ... WRITE,
 *              SEND(COMMIT). RC delivers the SEND after the WRITEs before
 *              it, so when the server sees COMMIT every value has landed; it
 *              links the items and answers a status per key. 2 round trips.
 *   get batch: a chunk of at most KVSTORE_RDMA_PUSH_MAX bytes of capacity
 *              (default 256 KiB) as PUSH: ONE SEND naming, per key, where its
 *              value must land (the caller's buffer when it lies in a
 *              kvs_register_buffer region, else the bounce buffer); the
 *              server pins the items, RDMA WRITEs the values there and then
 *              sends the reply (RC: after every WRITE has landed): a status
 *              and length per key, as GET. 1 round trip. Larger chunks, or
 *              all with KVSTORE_RDMA_PUSH_MAX=0: LEASE (the server pins each
 *              key's item, answers addr/rkey/len/token), then ONE
 *              ibv_post_send of  READ ... READ, SEND(RELEASE) with
 *              IBV_SEND_FENCE on the SEND so that the server unpins only
 *              after every READ has executed. 2 round trips.
 *
 * Explicit COMMIT, not WRITE_WITH_IMM: one message commits the whole
 * batch (an immediate carries 32 bits, one per key would cost one receive
 * and one completion per key on the server), and it carries the tokens the
 * server checks. Only the last WR of a chain is signaled; WRITEs/READs whose
 * slices are adjacent on both sides are merged into one SGE, slices adjacent
 * only remotely share one WR (up to max_sge); a chain longer than the send
 * queue is posted in pieces (each ending in a signaled WR). Control
 * messages that fit max_inline_data are sent inline.
 *
 * Values in memory registered with kvs_register_buffer (cached per
 * connection, registered again after a reconnect) move zero-copy; others go
 * through one registered bounce buffer per connection (grown, and
 * registered again, only when a larger batch needs it).
 *
 * Threads: one request at a time per connection (conn->mu held for the
 * whole exchange); req->done runs on the submitting thread before submit
 * returns. No transport thread.
 */
#include "transport.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NRECV            4
#define SQ_DEPTH         1024
#define MAX_SGE          16
#define INLINE_WANT      256
#define RD_ATOM_MAX      16
#define CHUNK_KEYS       2048        /* keys per RESERVE/LEASE message */
#define BOUNCE_CHUNK     (16u << 20) /* bounce bytes per chunk (one value may exceed it) */
#define BACKOFF_MS       200
#define PULL_MAX_DEFAULT (256u << 10) /* largest put chunk (value bytes) sent as PULL */
#define PUSH_MAX_DEFAULT (256u << 10) /* largest get chunk (capacity bytes) sent as PUSH */

struct ureg {
    void *ptr;
    size_t len;
    struct ibv_mr *mr; /* NULL while disconnected */
    struct ureg *next;
};

/* Where one key's slice comes from / goes to, for the chain builder. */
struct slice {
    uint64_t laddr;
    uint32_t lkey;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t len;
};

struct kvs_conn {
    struct kvs_endpoint ep;
    struct kvs_transport_config cfg;
    pthread_mutex_t mu;
    int autosel;          /* scheme "auto": rdma when possible, else tcp */
    atomic_int use_tcp;   /* auto decided for tcp */
    struct kvs_conn *tcp; /* auto: the tcp transport's conn (its own type) */
    int up;
    int last_err;
    uint64_t retry_at_ms;
    struct kvs_limits lim;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_cq *cq;
    uint8_t *ctrl; /* NRECV receive buffers, then the send buffer */
    struct ibv_mr *ctrl_mr;
    uint8_t *bounce;
    size_t bounce_size;
    struct ibv_mr *bounce_mr;
    struct ureg *regs;
    uint32_t sq_depth, max_sge, max_inline;
    uint64_t next_id;
    uint64_t sig_posted, sig_done; /* signaled WRs (wr_id = sequence) */
    int reply_idx;                 /* receive buffer holding the reply, or -1 */
    uint32_t reply_len;
    uint32_t stall_ms;  /* KVS_RDMA_TEST_STALL_MS: test hook, sleep between the two round trips */
    uint32_t token_xor; /* KVS_RDMA_TEST_TOKEN_XOR: test hook, names tokens (PULL: rkeys) it was not
                           given */
    uint32_t pull_max;  /* KVSTORE_RDMA_PULL_MAX: larger put chunks take RESERVE + WRITEs/COMMIT */
    uint32_t push_max;  /* KVSTORE_RDMA_PUSH_MAX: larger get chunks take LEASE + READs/RELEASE */
    atomic_uint_fast64_t doorbells, wrs, cqes, round_trips, bounce_bytes, zero_copy_bytes,
        reconnects, split_chains;
    /* Where a put/get batch's time goes (microseconds, summed over chunks). */
    atomic_uint_fast64_t slot_wait_us, chain_wait_us, copy_us;
};

/* ---- small helpers ---- */

static uint8_t *send_buf(struct kvs_conn *c)
{
    return c->ctrl + (size_t)NRECV * KVS_WIRE_CTRL_MAX;
}

static int post_recv(struct kvs_conn *c, int idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->ctrl + (size_t)idx * KVS_WIRE_CTRL_MAX),
                          .length = KVS_WIRE_CTRL_MAX,
                          .lkey = c->ctrl_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)idx, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = kvs_now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

/* Waits for the next CM event, which must be `want`. 0 or a negative code. */
static int wait_cm(struct kvs_conn *c, enum rdma_cm_event_type want, uint64_t deadline)
{
    struct pollfd p = {.fd = c->ec->fd, .events = POLLIN};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n == 0) return -ETIMEDOUT;
    if (n < 0) return -errno;
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(c->ec, &ev) != 0) return -EIO;
    enum rdma_cm_event_type got = ev->event;
    rdma_ack_cm_event(ev);
    if (got == want) return 0;
    if (got == RDMA_CM_EVENT_REJECTED || got == RDMA_CM_EVENT_UNREACHABLE ||
        got == RDMA_CM_EVENT_ADDR_ERROR || got == RDMA_CM_EVENT_ROUTE_ERROR)
        return -ECONNREFUSED;
    return -EIO;
}

/* Tears the connection down; registrations are kept, to be registered again. */
static void conn_down(struct kvs_conn *c)
{
    for (struct ureg *u = c->regs; u; u = u->next) {
        if (u->mr) ibv_dereg_mr(u->mr);
        u->mr = NULL;
    }
    if (c->id && c->up) rdma_disconnect(c->id);
    if (c->id && c->id->qp) rdma_destroy_qp(c->id);
    if (c->bounce_mr) ibv_dereg_mr(c->bounce_mr);
    if (c->ctrl_mr) ibv_dereg_mr(c->ctrl_mr);
    if (c->cq) ibv_destroy_cq(c->cq);
    if (c->comp) ibv_destroy_comp_channel(c->comp);
    if (c->pd) ibv_dealloc_pd(c->pd);
    if (c->id) rdma_destroy_id(c->id);
    if (c->ec) rdma_destroy_event_channel(c->ec);
    free(c->ctrl);
    free(c->bounce);
    c->bounce_mr = c->ctrl_mr = NULL;
    c->cq = NULL;
    c->comp = NULL;
    c->pd = NULL;
    c->id = NULL;
    c->ec = NULL;
    c->ctrl = c->bounce = NULL;
    c->bounce_size = 0;
    c->up = 0;
}

/*
 * PULL is used only when both ends want it: KVSTORE_RDMA_PULL_MAX > 0 here
 * and the server's HELLO announced KVS_FEAT_PULL (an older kvstored would cut
 * the connection on opcode 12). Without it no memory is remotely readable.
 */
static int pull_on(const struct kvs_conn *c)
{
    return c->pull_max && (c->lim.features & KVS_FEAT_PULL);
}

/*
 * PUSH likewise: KVSTORE_RDMA_PUSH_MAX > 0 here and KVS_FEAT_PUSH in the
 * server's HELLO. Without it no memory is remotely writable.
 */
static int push_on(const struct kvs_conn *c)
{
    return c->push_max && (c->lim.features & KVS_FEAT_PUSH);
}

/*
 * Registered memory (bounce buffer, kvs_register_buffer regions): local use,
 * plus remote READ when PULL is on and remote WRITE when PUSH is on. Only
 * called once HELLO/AUTH has set c->lim.
 */
static int mr_access(const struct kvs_conn *c)
{
    int access = IBV_ACCESS_LOCAL_WRITE;
    if (pull_on(c)) access |= IBV_ACCESS_REMOTE_READ;
    if (push_on(c)) access |= IBV_ACCESS_REMOTE_WRITE;
    return access;
}

/* Makes the bounce buffer at least need bytes (registered again when it grows). */
static int bounce_reserve(struct kvs_conn *c, size_t need)
{
    if (c->bounce_size >= need) return 0;
    size_t size = c->bounce_size ? c->bounce_size : (1u << 20);
    while (size < need)
        size *= 2;
    uint8_t *b;
    if (posix_memalign((void **)&b, 4096, size) != 0) return -ENOMEM;
    struct ibv_mr *mr = ibv_reg_mr(c->pd, b, size, mr_access(c));
    if (!mr) {
        free(b);
        return -ENOMEM;
    }
    if (c->bounce_mr) ibv_dereg_mr(c->bounce_mr);
    free(c->bounce);
    c->bounce = b;
    c->bounce_mr = mr;
    c->bounce_size = size;
    return 0;
}

/* The registration covering [p, p+len), if any. */
static struct ibv_mr *find_reg(struct kvs_conn *c, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    for (struct ureg *u = c->regs; u; u = u->next)
        if (u->mr && a >= (uintptr_t)u->ptr && a + len <= (uintptr_t)u->ptr + u->len) return u->mr;
    return NULL;
}

/* ---- completions ---- */

/*
 * Polls the CQ until the signaled WR with sequence number sig has completed
 * and (want_reply) a control reply has arrived. Sleeps on the completion
 * channel between polls. 0, -ETIMEDOUT or -ECONNRESET (a failed WR).
 */
static int wait_done(struct kvs_conn *c, uint64_t sig, int want_reply, uint64_t deadline)
{
    for (;;) {
        struct ibv_wc wc[16];
        int n;
        while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
            atomic_fetch_add(&c->cqes, (uint64_t)n);
            for (int i = 0; i < n; i++) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    kvs_log(KVS_LOG_WARN, "rdma %s: %s", c->ep.name,
                            ibv_wc_status_str(wc[i].status));
                    return -ECONNRESET;
                }
                if (wc[i].opcode == IBV_WC_RECV) {
                    c->reply_idx = (int)wc[i].wr_id;
                    c->reply_len = wc[i].byte_len;
                } else if (wc[i].wr_id > c->sig_done) {
                    c->sig_done = wc[i].wr_id;
                }
            }
        }
        if (n < 0) return -EIO;
        if (c->sig_done >= sig && (!want_reply || c->reply_idx >= 0)) return 0;
        if (ibv_req_notify_cq(c->cq, 0) != 0) return -EIO;
        /* A completion may have arrived before notification was armed. */
        n = ibv_poll_cq(c->cq, 1, wc);
        if (n > 0) {
            atomic_fetch_add(&c->cqes, 1);
            if (wc[0].status != IBV_WC_SUCCESS) return -ECONNRESET;
            if (wc[0].opcode == IBV_WC_RECV) {
                c->reply_idx = (int)wc[0].wr_id;
                c->reply_len = wc[0].byte_len;
            } else if (wc[0].wr_id > c->sig_done) {
                c->sig_done = wc[0].wr_id;
            }
            continue;
        }
        int ms = remaining_ms(deadline);
        if (ms == 0) return -ETIMEDOUT;
        /* The CM channel too: a server that cuts us off says DISCONNECTED at once. */
        struct pollfd p[2] = {{.fd = c->comp->fd, .events = POLLIN},
                              {.fd = c->ec->fd, .events = POLLIN}};
        int r = poll(p, 2, ms < 100 ? ms : 100);
        if (r < 0 && errno != EINTR) return -errno;
        if (r > 0 && (p[0].revents & POLLIN)) {
            struct ibv_cq *cq;
            void *ctx;
            if (ibv_get_cq_event(c->comp, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
        }
        if (r > 0 && (p[1].revents & POLLIN)) {
            struct rdma_cm_event *ev;
            if (rdma_get_cm_event(c->ec, &ev) == 0) {
                enum rdma_cm_event_type t = ev->event;
                rdma_ack_cm_event(ev);
                if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)
                    return -ECONNRESET;
            }
        }
    }
}

/*
 * Posts wrs[0..nwr) (data WRs; may be 0) followed by the control SEND of
 * msg_len bytes from the send buffer, with as few ibv_post_send calls as the
 * send queue allows (one when the chain fits). Pieces before the last are
 * waited for; the last is not: wait_reply waits for it and the answer.
 * fence: the SEND waits for the READs before it.
 */
static int post_chain(struct kvs_conn *c, struct ibv_send_wr *wrs, uint32_t nwr, size_t msg_len,
                      int fence, uint64_t deadline)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)send_buf(c), .length = (uint32_t)msg_len, .lkey = c->ctrl_mr->lkey};
    struct ibv_send_wr ctl = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    if (msg_len <= c->max_inline) ctl.send_flags |= IBV_SEND_INLINE;
    if (fence && nwr) ctl.send_flags |= IBV_SEND_FENCE;
    uint32_t room = c->sq_depth - 1; /* WRs per post besides the control SEND */
    uint32_t i = 0;
    int rc;
    c->reply_idx = -1;
    if (nwr > room) atomic_fetch_add(&c->split_chains, 1);
    while (nwr - i > room) {
        /* A piece of a chain longer than the send queue: ends signaled. */
        struct ibv_send_wr *last = &wrs[i + room - 1], *bad;
        struct ibv_send_wr *saved = last->next;
        last->next = NULL;
        last->send_flags |= IBV_SEND_SIGNALED;
        last->wr_id = ++c->sig_posted;
        rc = ibv_post_send(c->id->qp, &wrs[i], &bad);
        last->next = saved;
        if (rc) return -EIO;
        atomic_fetch_add(&c->doorbells, 1);
        atomic_fetch_add(&c->wrs, room);
        if ((rc = wait_done(c, c->sig_posted, 0, deadline)) < 0) return rc;
        i += room;
    }
    ctl.wr_id = ++c->sig_posted;
    struct ibv_send_wr *head = &ctl, *bad;
    if (nwr > i) {
        wrs[nwr - 1].next = &ctl;
        head = &wrs[i];
    }
    if (ibv_post_send(c->id->qp, head, &bad) != 0) return -EIO;
    atomic_fetch_add(&c->doorbells, 1);
    atomic_fetch_add(&c->wrs, nwr - i + 1);
    atomic_fetch_add(&c->round_trips, 1);
    return 0;
}

/* Waits for the last post of post_chain and the reply: it is then in c->ctrl[c->reply_idx]. */
static int wait_reply(struct kvs_conn *c, uint64_t deadline)
{
    return wait_done(c, c->sig_posted, 1, deadline);
}

/* post_chain, then wait_reply. */
static int post_chain_and_call(struct kvs_conn *c, struct ibv_send_wr *wrs, uint32_t nwr,
                               size_t msg_len, int fence, uint64_t deadline)
{
    int rc = post_chain(c, wrs, nwr, msg_len, fence, deadline);
    return rc < 0 ? rc : wait_reply(c, deadline);
}

static uint64_t elapsed_us(uint64_t since_ns)
{
    return (kvs_now_ns() - since_ns) / 1000u;
}

static size_t put_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len, uint64_t id)
{
    struct kvs_wire_hdr h = {.magic = KVS_WIRE_MAGIC,
                             .version = KVS_WIRE_VERSION,
                             .opcode = opcode,
                             .count = count,
                             .body_len = body_len,
                             .id = id};
    kvs_wire_hdr_encode(out, &h);
    return KVS_WIRE_HDR_LEN;
}

/*
 * Checks the reply in c->ctrl[reply_idx] against the request: magic,
 * version, opcode, id, count, body length. Returns its body, or NULL with
 * *err set (-EPROTO, or the server's status for an ERROR reply).
 */
static const uint8_t *take_reply(struct kvs_conn *c, uint8_t opcode, uint64_t id, uint32_t count,
                                 uint32_t entry_len, uint32_t *body_len, int *err)
{
    const uint8_t *m = c->ctrl + (size_t)c->reply_idx * KVS_WIRE_CTRL_MAX;
    struct kvs_wire_hdr h;
    *err = -EPROTO;
    if (post_recv(c, c->reply_idx) < 0) return NULL;
    if (kvs_wire_ctrl_hdr_decode(m, c->reply_len, &h) < 0 || h.id != id) return NULL;
    const uint8_t *body = m + KVS_WIRE_HDR_LEN;
    if (h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY)) {
        int32_t st;
        const char *text;
        size_t tlen;
        if (kvs_wire_error_decode(body, h.body_len, &st, &text, &tlen) == 0)
            kvs_log(KVS_LOG_WARN, "rdma %s: server error %d: %.*s", c->ep.name, st, (int)tlen,
                    text);
        return NULL;
    }
    if (h.opcode != (opcode | KVS_OP_REPLY) || h.count != count) return NULL;
    if (entry_len && (uint64_t)count * entry_len != h.body_len) return NULL;
    *body_len = h.body_len;
    *err = 0;
    return body;
}

/* ---- connection set-up ---- */

/*
 * The AUTH exchange after HELLO, over the control channel, with the same
 * semantics as transport/tcp.c authenticate (docs/PROTOCOL.md
 * "Authentication", docs/SECURITY.md "RDMA"): proves that we hold
 * KVSTORE_AUTH_FILE's secret without sending it and checks the server's
 * proof. -EACCES (with one warning) for a server that wants a secret we lack,
 * that does not authenticate although we hold one, that refuses our proof,
 * or whose own proof is wrong. Runs before any RESERVE/LEASE, so no address
 * or rkey is ever asked for on an unauthenticated connection.
 */
static int authenticate(struct kvs_conn *c, const uint8_t *hello_body, uint32_t hello_len,
                        const struct kvs_wire_hello *hello, uint64_t deadline)
{
    const struct kvs_transport_config *cfg = &c->cfg;
    int run;
    const char *refusal = kvs_auth_client_refusal(hello->features, cfg->auth_secret_len, &run);
    if (refusal) {
        kvs_log(KVS_LOG_WARN, "rdma %s: %s", c->ep.name, refusal);
        return -EACCES;
    }
    if (!run) return 0;
    /* The HELLO body lies in a receive buffer already posted again: take the nonce first. */
    struct kvs_auth_client a;
    if (kvs_auth_client_begin(&a, cfg->auth_secret, cfg->auth_secret_len, hello_body, hello_len,
                              hello) < 0)
        return -EPROTO;
    uint64_t id = ++c->next_id;
    uint8_t *out = send_buf(c);
    size_t len = put_hdr(out, KVS_OP_AUTH, 0, KVS_WIRE_AUTH_LEN, id);
    kvs_wire_auth_encode(out + len, a.client_nonce, a.mac);
    len += KVS_WIRE_AUTH_LEN;
    int rc = post_chain_and_call(c, NULL, 0, len, 0, deadline);
    if (rc < 0) return rc;
    /* The server answers a wrong proof with ERROR -EACCES, then closes. */
    const uint8_t *m = c->ctrl + (size_t)c->reply_idx * KVS_WIRE_CTRL_MAX;
    struct kvs_wire_hdr h;
    int32_t st;
    const char *text;
    size_t tlen;
    if (kvs_wire_ctrl_hdr_decode(m, c->reply_len, &h) == 0 &&
        h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY) &&
        kvs_wire_error_decode(m + KVS_WIRE_HDR_LEN, h.body_len, &st, &text, &tlen) == 0 &&
        st == -EACCES) {
        kvs_log(KVS_LOG_WARN, "rdma %s: " KVS_AUTH_REFUSED_TEXT, c->ep.name);
        return -EACCES;
    }
    uint32_t blen;
    const uint8_t *body = take_reply(c, KVS_OP_AUTH, id, 0, 0, &blen, &rc);
    if (!body) return rc;
    if (blen != KVS_WIRE_MAC_LEN) return -EPROTO;
    if (!kvs_auth_client_server_ok(&a, cfg->auth_secret, cfg->auth_secret_len, body)) {
        kvs_log(KVS_LOG_WARN, "rdma %s: " KVS_AUTH_BAD_SERVER_TEXT, c->ep.name);
        return -EACCES;
    }
    return 0;
}

/* HELLO (and AUTH, see authenticate) on a fresh connection; fills c->lim. */
static int say_hello(struct kvs_conn *c, uint64_t deadline)
{
    uint64_t id = ++c->next_id;
    size_t len = put_hdr(send_buf(c), KVS_OP_HELLO, 0, 0, id);
    int rc = post_chain_and_call(c, NULL, 0, len, 0, deadline);
    if (rc < 0) return rc;
    uint32_t blen;
    const uint8_t *body = take_reply(c, KVS_OP_HELLO, id, 0, 0, &blen, &rc);
    if (!body) return rc;
    struct kvs_wire_hello h;
    if (kvs_wire_hello_decode(body, blen, &h) < 0) return -EPROTO;
    if ((rc = authenticate(c, body, blen, &h, deadline)) < 0) return rc;
    c->lim = (struct kvs_limits){.max_key = h.max_key,
                                 .max_object = h.max_object,
                                 .max_frame = h.max_frame < KVS_WIRE_CTRL_MAX ? h.max_frame
                                                                              : KVS_WIRE_CTRL_MAX,
                                 .max_keys = h.max_keys,
                                 .features = h.features};
    return 0;
}

/* A count (kvs_parse_uint) or a size (kvs_parse_size) from the environment, in [min, max]. */
static uint32_t env_u32(const char *name, int (*parse)(const char *, uint64_t *), uint32_t dflt,
                        uint32_t min, uint32_t max)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    uint64_t v;
    if (parse(s, &v) < 0 || v < min || v > max) {
        kvs_log(KVS_LOG_WARN, "%s='%s' ignored: expected %u..%u", name, s, min, max);
        return dflt;
    }
    return (uint32_t)v;
}

/* Resolves, creates the QP and its buffers, connects, says HELLO. */
static int open_connection(struct kvs_conn *c)
{
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.connect_timeout_ms;
    int rc;
    struct addrinfo hints = {
        .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(c->ep.host, c->ep.port, &hints, &res) != 0) return -ECONNREFUSED;
    c->ec = rdma_create_event_channel();
    if (!c->ec) {
        rc = -ECONNREFUSED;
        goto out;
    }
    if (rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP) != 0) {
        rc = -ECONNREFUSED;
        goto out;
    }
    /* A failed call is "refused"; a failed wait keeps its own code (-ETIMEDOUT...). */
    if (rdma_resolve_addr(c->id, NULL, res->ai_addr, remaining_ms(deadline)) != 0) {
        rc = -ECONNREFUSED;
        goto out;
    }
    if ((rc = wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline)) < 0) goto out;
    if (rdma_resolve_route(c->id, remaining_ms(deadline)) != 0) {
        rc = -ECONNREFUSED;
        goto out;
    }
    if ((rc = wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline)) < 0) goto out;
    struct ibv_device_attr da;
    rc = -EIO;
    if (ibv_query_device(c->id->verbs, &da) != 0) goto out;
    c->sq_depth = env_u32("KVS_RDMA_MAX_WR", kvs_parse_uint, SQ_DEPTH, 4, 1u << 20);
    if ((int)c->sq_depth > da.max_qp_wr) c->sq_depth = (uint32_t)da.max_qp_wr;
    c->max_sge = da.max_sge < MAX_SGE ? (uint32_t)da.max_sge : MAX_SGE;
    c->max_sge = env_u32("KVS_RDMA_MAX_SGE", kvs_parse_uint, c->max_sge, 1, c->max_sge);
    c->pd = ibv_alloc_pd(c->id->verbs);
    if (!c->pd) goto out;
    c->comp = ibv_create_comp_channel(c->id->verbs);
    if (!c->comp) goto out;
    c->cq = ibv_create_cq(c->id->verbs, (int)(c->sq_depth + NRECV + 8), NULL, c->comp, 0);
    if (!c->cq) goto out;
    struct ibv_qp_init_attr qa = {.send_cq = c->cq,
                                  .recv_cq = c->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = c->sq_depth,
                                          .max_recv_wr = NRECV,
                                          .max_send_sge = c->max_sge,
                                          .max_recv_sge = 1,
                                          .max_inline_data = INLINE_WANT}};
    if (rdma_create_qp(c->id, c->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(c->id, c->pd, &qa) != 0) goto out;
    }
    c->max_inline = qa.cap.max_inline_data;
    size_t bytes = (size_t)(NRECV + 1) * KVS_WIRE_CTRL_MAX;
    if (posix_memalign((void **)&c->ctrl, 4096, bytes) != 0) {
        c->ctrl = NULL;
        rc = -ENOMEM;
        goto out;
    }
    c->ctrl_mr = ibv_reg_mr(c->pd, c->ctrl, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!c->ctrl_mr) goto out;
    for (int i = 0; i < NRECV; i++)
        if ((rc = post_recv(c, i)) < 0) goto out;
    struct rdma_conn_param p = {
        .initiator_depth =
            (uint8_t)(da.max_qp_init_rd_atom < RD_ATOM_MAX ? da.max_qp_init_rd_atom : RD_ATOM_MAX),
        /* kvstored READs put values from us (PULL). */
        .responder_resources =
            (uint8_t)(da.max_qp_rd_atom < RD_ATOM_MAX ? da.max_qp_rd_atom : RD_ATOM_MAX),
        .retry_count = 7,
        .rnr_retry_count = 7};
    if (rdma_connect(c->id, &p) != 0) {
        rc = -ECONNREFUSED;
        goto out;
    }
    if ((rc = wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, deadline)) < 0) goto out;
    c->up = 1;
    c->sig_posted = c->sig_done = 0;
    if ((rc = say_hello(c, deadline)) < 0) goto out;
    /*
     * Only now, with the server's proof checked (when we hold a secret), do
     * memory regions the server may READ (PULL) or WRITE (PUSH) exist on this
     * connection: an impostor cannot read or overwrite registered buffers
     * during the handshake, even by guessing an rkey. (The bounce buffer is
     * registered on first use.)
     */
    for (struct ureg *u = c->regs; u; u = u->next)
        u->mr = ibv_reg_mr(c->pd, u->ptr, u->len, mr_access(c));
    freeaddrinfo(res);
    return 0;
out:
    freeaddrinfo(res);
    conn_down(c);
    return rc;
}

/* Connects if needed, with a backoff after a failure. Holds c->mu. */
static int ensure_up(struct kvs_conn *c)
{
    if (c->up) return 0;
    if (c->last_err && kvs_now_ms() < c->retry_at_ms) return c->last_err;
    if (c->last_err || c->next_id) atomic_fetch_add(&c->reconnects, 1);
    int rc = open_connection(c);
    c->last_err = rc;
    if (rc < 0) c->retry_at_ms = kvs_now_ms() + BACKOFF_MS;
    return rc;
}

/* ---- the chain builder ---- */

/*
 * Appends one slice to the chain: extends the last SGE when the slice is
 * adjacent to it on both sides, adds an SGE to the last WR when only the
 * remote side is adjacent (up to max_sge), else starts a new WR.
 */
static void chain_add(struct kvs_conn *c, struct ibv_send_wr *wrs, struct ibv_sge *sges,
                      uint32_t *nwr, uint32_t *nsge, uint64_t *rnext, enum ibv_wr_opcode op,
                      const struct slice *s)
{
    if (*nwr > 0) {
        struct ibv_send_wr *w = &wrs[*nwr - 1];
        struct ibv_sge *last = &w->sg_list[w->num_sge - 1];
        if (w->wr.rdma.rkey == s->rkey && *rnext == s->raddr) {
            if (last->lkey == s->lkey && last->addr + last->length == s->laddr) {
                last->length += s->len;
                *rnext += s->len;
                return;
            }
            if ((uint32_t)w->num_sge < c->max_sge) {
                sges[*nsge] = (struct ibv_sge){.addr = s->laddr, .length = s->len, .lkey = s->lkey};
                (*nsge)++;
                w->num_sge++;
                *rnext += s->len;
                return;
            }
        }
        w->next = &wrs[*nwr];
    }
    sges[*nsge] = (struct ibv_sge){.addr = s->laddr, .length = s->len, .lkey = s->lkey};
    wrs[*nwr] = (struct ibv_send_wr){.sg_list = &sges[*nsge],
                                     .num_sge = 1,
                                     .opcode = op,
                                     .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
    (*nsge)++;
    (*nwr)++;
    *rnext = s->raddr + s->len;
}

static void fail_keys(struct kvs_key_io *k, uint32_t n, int status)
{
    for (uint32_t i = 0; i < n; i++)
        k[i].status = status;
}

/*
 * How many keys from k[0..n) go in one RESERVE/LEASE message, or (remote: each
 * key names client memory) one PULL/PUSH message; at least one.
 */
static uint32_t chunk_size(struct kvs_conn *c, const struct kvs_key_io *k, uint32_t n, int put,
                           int remote)
{
    _Static_assert(KVS_WIRE_PULL_SRC_LEN == KVS_WIRE_PUSH_DST_LEN &&
                       KVS_WIRE_PULL_MAX_KEYS == KVS_WIRE_PUSH_MAX_KEYS,
                   "PULL and PUSH entries are cut alike");
    size_t bytes = KVS_WIRE_HDR_LEN, bounce = 0;
    uint32_t i = 0, max = remote ? KVS_WIRE_PULL_MAX_KEYS : CHUNK_KEYS;
    for (; i < n && i < max; i++) {
        size_t e = KVS_WIRE_ENTRY_LEN + k[i].klen + (remote ? KVS_WIRE_PULL_SRC_LEN : 0);
        size_t b = find_reg(c, put ? k[i].val : k[i].buf, k[i].len) ? 0 : k[i].len;
        if (i > 0 && (bytes + e > KVS_WIRE_CTRL_MAX || bounce + b > BOUNCE_CHUNK)) break;
        bytes += e;
        bounce += b;
    }
    return i;
}

/* The value bytes (puts) or capacity bytes (gets) of k[0..n). */
static uint64_t chunk_bytes(const struct kvs_key_io *k, uint32_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += k[i].len;
    return sum;
}

/*
 * Puts: copies the values that are not in registered memory into the
 * bounce buffer, back to back in key order, and notes each one's offset
 * (UINT64_MAX: registered, no copy). Runs while the RESERVE is in flight,
 * so the copy costs no time of its own; the offsets do not depend on the
 * reply (a reserved slot has exactly the value's length).
 */
static int copy_puts_in(struct kvs_conn *c, const struct kvs_key_io *k, uint32_t n,
                        uint64_t *bounce_off)
{
    uint64_t t0 = kvs_now_ns();
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++)
        if (k[i].len && !find_reg(c, k[i].val, k[i].len)) need += k[i].len;
    int rc = bounce_reserve(c, need);
    if (rc < 0) return rc;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        bounce_off[i] = UINT64_MAX;
        if (!k[i].len || find_reg(c, k[i].val, k[i].len)) continue;
        memcpy(c->bounce + off, k[i].val, k[i].len);
        bounce_off[i] = off;
        off += k[i].len;
    }
    atomic_fetch_add(&c->copy_us, elapsed_us(t0));
    return 0;
}

/* A PULL/PUSH entry for key k naming len bytes of our memory at addr/rkey; its size. */
static size_t remote_entry(uint8_t *out, const struct kvs_conn *c, const struct kvs_key_io *k,
                           uint32_t len, uint64_t addr, uint32_t rkey)
{
    struct kvs_wire_remote_entry e = {.key = (const uint8_t *)k->key,
                                      .klen = (uint16_t)k->klen,
                                      .len = len,
                                      .addr = addr,
                                      .rkey = rkey ^ c->token_xor}; /* test hook: a wrong rkey */
    return kvs_wire_remote_entry_encode(out, &e);
}

/*
 * One chunk of a put batch as PULL: values outside registered memory are
 * copied into the bounce buffer, then one SEND tells the server where each
 * value lies; it READs them into the slots it reserved, commits, and
 * answers a status per key. One round trip. Returns 0, or a transport
 * error (the connection is then unusable).
 */
static int do_pull(struct kvs_conn *c, struct kvs_key_io *k, uint32_t n, uint64_t deadline)
{
    uint64_t *bounce_off = calloc(n ? n : 1, sizeof(*bounce_off));
    if (!bounce_off) return -ENOMEM;
    int rc = copy_puts_in(c, k, n, bounce_off);
    if (rc < 0) goto out;
    uint8_t *out = send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t addr = (uintptr_t)k[i].val;
        uint32_t rkey = 0;
        if (bounce_off[i] != UINT64_MAX) {
            addr = (uintptr_t)(c->bounce + bounce_off[i]);
            rkey = c->bounce_mr->rkey;
            atomic_fetch_add(&c->bounce_bytes, k[i].len);
        } else if (k[i].len) {
            rkey = find_reg(c, k[i].val, k[i].len)->rkey;
            atomic_fetch_add(&c->zero_copy_bytes, k[i].len);
        }
        len += remote_entry(out + len, c, &k[i], (uint32_t)k[i].len, addr, rkey);
    }
    put_hdr(out, KVS_OP_RDMA_PULL, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    uint64_t t0 = kvs_now_ns();
    rc = post_chain_and_call(c, NULL, 0, len, 0, deadline);
    atomic_fetch_add(&c->chain_wait_us, elapsed_us(t0));
    if (rc < 0) goto out;
    uint32_t blen;
    const uint8_t *body = take_reply(c, KVS_OP_RDMA_PULL, id, n, KVS_WIRE_STATUS_LEN, &blen, &rc);
    if (!body) goto out;
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_wire_status st;
        if (kvs_wire_status_decode(body + (size_t)i * KVS_WIRE_STATUS_LEN, KVS_OP_RDMA_PULL, &st) <
            0) {
            rc = -EPROTO;
            goto out;
        }
        k[i].status = st.status;
        if (st.status == 0) k[i].vlen = k[i].len;
    }
out:
    free(bounce_off);
    return rc;
}

/*
 * One chunk of a get batch as PUSH: one SEND names, per key, its capacity
 * and where its value must land (the caller's buffer when it lies in a
 * registered region, else a capacity-sized piece of the bounce buffer); the
 * server WRITEs the values there and its reply, which RC delivers after the
 * WRITEs, gives a status and length per key, as GET. One round trip.
 * Returns 0, or a transport error (the connection is then unusable).
 */
static int do_push(struct kvs_conn *c, struct kvs_key_io *k, uint32_t n, uint64_t deadline)
{
    uint64_t *bounce_off = calloc(n ? n : 1, sizeof(*bounce_off));
    struct ibv_mr **mrs = calloc(n ? n : 1, sizeof(struct ibv_mr *));
    int rc = -ENOMEM;
    if (!bounce_off || !mrs) goto out;
    /* Bounce space first: growing registers again, so sizes are known before any rkey. */
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++) {
        mrs[i] = k[i].len ? find_reg(c, k[i].buf, k[i].len) : NULL;
        if (!mrs[i]) need += k[i].len;
    }
    if ((rc = bounce_reserve(c, need)) < 0) goto out;
    uint8_t *out = send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN, boff = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cap = (uint32_t)k[i].len; /* chunks over UINT32_MAX bytes take LEASE */
        uint64_t addr = (uintptr_t)k[i].buf;
        uint32_t rkey = 0;
        bounce_off[i] = UINT64_MAX;
        if (mrs[i]) {
            rkey = mrs[i]->rkey;
        } else if (cap) {
            bounce_off[i] = boff;
            addr = (uintptr_t)(c->bounce + boff);
            rkey = c->bounce_mr->rkey;
            boff += cap;
        }
        len += remote_entry(out + len, c, &k[i], cap, addr, rkey);
    }
    put_hdr(out, KVS_OP_RDMA_PUSH, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    uint64_t t0 = kvs_now_ns();
    rc = post_chain_and_call(c, NULL, 0, len, 0, deadline);
    atomic_fetch_add(&c->chain_wait_us, elapsed_us(t0));
    if (rc < 0) goto out;
    uint32_t blen;
    const uint8_t *body = take_reply(c, KVS_OP_RDMA_PUSH, id, n, KVS_WIRE_STATUS_LEN, &blen, &rc);
    if (!body) goto out;
    t0 = kvs_now_ns();
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_wire_status s;
        if (kvs_wire_status_decode(body + (size_t)i * KVS_WIRE_STATUS_LEN, KVS_OP_RDMA_PUSH, &s) <
            0) {
            rc = -EPROTO;
            goto out;
        }
        int32_t st = s.status;
        uint32_t vlen = s.len;
        if (st == 0 && vlen > k[i].len) {
            rc = -EPROTO; /* the server says it wrote more than the capacity */
            goto out;
        }
        k[i].status = st;
        if (st != 0 && st != -ERANGE) continue;
        k[i].vlen = vlen;
        if (st != 0 || vlen == 0) continue;
        if (bounce_off[i] != UINT64_MAX) {
            memcpy(k[i].buf, c->bounce + bounce_off[i], vlen);
            atomic_fetch_add(&c->bounce_bytes, vlen);
        } else {
            atomic_fetch_add(&c->zero_copy_bytes, vlen);
        }
    }
    atomic_fetch_add(&c->copy_us, elapsed_us(t0));
out:
    free(bounce_off);
    free(mrs);
    return rc;
}

/*
 * One chunk of a put or get batch: the slot round trip, then the data chain
 * and COMMIT/RELEASE in one post. Fills the keys' statuses; returns 0, or
 * a transport error (the connection is then unusable).
 */
static int do_chunk(struct kvs_conn *c, struct kvs_key_io *k, uint32_t n, int put,
                    uint64_t deadline)
{
    struct ibv_send_wr *wrs = calloc(n ? n : 1, sizeof(*wrs));
    struct ibv_sge *sges = calloc(n ? n : 1, sizeof(*sges));
    uint32_t *tokens = calloc(n ? n : 1, sizeof(*tokens));
    uint64_t *bounce_off = calloc(n ? n : 1, sizeof(*bounce_off));
    struct kvs_wire_slot *slots = calloc(n ? n : 1, sizeof(*slots));
    int rc = -ENOMEM;
    if (!wrs || !sges || !tokens || !bounce_off || !slots) goto out;

    uint8_t *out = send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cap = k[i].len > UINT32_MAX ? UINT32_MAX : (uint32_t)k[i].len;
        len += kvs_wire_key_entry_encode(out + len, (const uint8_t *)k[i].key, (uint16_t)k[i].klen,
                                         cap);
    }
    uint8_t op = put ? KVS_OP_RDMA_RESERVE : KVS_OP_RDMA_LEASE;
    put_hdr(out, op, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    uint64_t t0 = kvs_now_ns();
    if ((rc = post_chain(c, NULL, 0, len, 0, deadline)) < 0) goto out;
    if (put && (rc = copy_puts_in(c, k, n, bounce_off)) < 0) goto out;
    rc = wait_reply(c, deadline);
    atomic_fetch_add(&c->slot_wait_us, elapsed_us(t0));
    if (rc < 0) goto out;
    uint32_t blen;
    const uint8_t *body = take_reply(c, op, id, n, KVS_WIRE_SLOT_LEN, &blen, &rc);
    if (!body) goto out;

    for (uint32_t i = 0; i < n; i++) {
        if (kvs_wire_slot_decode(body + (size_t)i * KVS_WIRE_SLOT_LEN, op, &slots[i]) < 0) {
            rc = -EPROTO;
            goto out;
        }
    }
    if (!put) {
        /* Bounce space first: growing re-registers, so sizes are known before any SGE. */
        size_t need = 0;
        for (uint32_t i = 0; i < n; i++)
            if (slots[i].status == 0 && !find_reg(c, k[i].buf, k[i].len)) need += slots[i].len;
        if ((rc = bounce_reserve(c, need)) < 0) goto out;
    }

    uint32_t nwr = 0, nsge = 0, ntok = 0;
    uint64_t rnext = 0, boff = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_wire_slot slot = slots[i];
        if (!put) bounce_off[i] = UINT64_MAX;
        tokens[i] = KVS_WIRE_TOKEN_NONE;
        k[i].status = slot.status;
        if (slot.status < 0) {
            if (slot.status == -ERANGE) k[i].vlen = slot.len;
            continue;
        }
        if ((put && slot.len != k[i].len) || (!put && slot.len > k[i].len)) {
            rc = -EPROTO; /* the server answered a slot that does not fit */
            goto out;
        }
        tokens[i] = slot.token;
        ntok++;
        k[i].vlen = slot.len;
        if (slot.len == 0) continue;
        void *user = put ? (void *)k[i].val : k[i].buf;
        struct ibv_mr *mr = find_reg(c, user, slot.len);
        struct slice sl = {.raddr = slot.addr, .rkey = slot.rkey, .len = slot.len};
        if (mr) {
            sl.laddr = (uintptr_t)user;
            sl.lkey = mr->lkey;
            atomic_fetch_add(&c->zero_copy_bytes, slot.len);
        } else {
            if (!put) {
                bounce_off[i] = boff;
                boff += slot.len;
            }
            sl.laddr = (uintptr_t)(c->bounce + bounce_off[i]);
            sl.lkey = c->bounce_mr->lkey;
            atomic_fetch_add(&c->bounce_bytes, slot.len);
        }
        chain_add(c, wrs, sges, &nwr, &nsge, &rnext, put ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                  &sl);
    }
    if (ntok == 0) goto out; /* nothing reserved or leased: no second round trip */
    if (c->stall_ms) usleep(c->stall_ms * 1000u);

    /* COMMIT / RELEASE for every token, chained behind the data WRs. */
    id = ++c->next_id;
    len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        struct kvs_wire_token t = {.token = tokens[i] ^ c->token_xor,
                                   .flags = put ? KVS_WIRE_TOKEN_COMMIT : 0};
        kvs_wire_token_encode(out + len, &t);
        len += KVS_WIRE_TOKEN_LEN;
    }
    op = put ? KVS_OP_RDMA_COMMIT : KVS_OP_RDMA_RELEASE;
    put_hdr(out, op, ntok, ntok * KVS_WIRE_TOKEN_LEN, id);
    t0 = kvs_now_ns();
    rc = post_chain_and_call(c, wrs, nwr, len, !put, deadline);
    atomic_fetch_add(&c->chain_wait_us, elapsed_us(t0));
    if (rc < 0) goto out;
    body = take_reply(c, op, id, ntok, KVS_WIRE_STATUS_LEN, &blen, &rc);
    if (!body) goto out;
    t0 = kvs_now_ns();
    uint32_t t = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        struct kvs_wire_status st;
        if (kvs_wire_status_decode(body + (size_t)t++ * KVS_WIRE_STATUS_LEN, op, &st) < 0) {
            rc = -EPROTO;
            goto out;
        }
        k[i].status = st.status;
        if (st.status == 0 && !put && bounce_off[i] != UINT64_MAX)
            memcpy(k[i].buf, c->bounce + bounce_off[i], k[i].vlen);
    }
    if (!put) atomic_fetch_add(&c->copy_us, elapsed_us(t0));
out:
    free(wrs);
    free(sges);
    free(tokens);
    free(bounce_off);
    free(slots);
    return rc;
}

/* EXISTS / REMOVE / STATS: an ordinary wire frame as one control message. */
static int do_plain(struct kvs_conn *c, struct kvs_req *req, struct kvs_key_io *k, uint32_t n,
                    uint64_t deadline)
{
    uint8_t *out = send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++)
        len +=
            kvs_wire_key_entry_encode(out + len, (const uint8_t *)k[i].key, (uint16_t)k[i].klen, 0);
    put_hdr(out, req->opcode, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    int rc = post_chain_and_call(c, NULL, 0, len, 0, deadline);
    if (rc < 0) return rc;
    uint32_t blen;
    const uint8_t *body = take_reply(
        c, req->opcode, id, n, req->opcode == KVS_OP_STATS ? 0 : KVS_WIRE_STATUS_LEN, &blen, &rc);
    if (!body) return rc;
    if (req->opcode == KVS_OP_STATS) {
        req->text_len = blen;
        memcpy(req->text, body, blen < req->text_cap ? blen : req->text_cap);
        req->status = 0;
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_wire_status st;
        if (kvs_wire_status_decode(body + (size_t)i * KVS_WIRE_STATUS_LEN, req->opcode, &st) < 0)
            return -EPROTO;
        k[i].status = st.status;
        k[i].vlen = st.len; /* REMOVE_MATCHING: its count */
    }
    return 0;
}

/* ---- the ops ---- */

static int rdma_create(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                       struct kvs_conn **out)
{
    struct kvs_conn *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->ep = *ep;
    c->cfg = *cfg;
    c->autosel = strcmp(ep->scheme, "auto") == 0;
    c->reply_idx = -1;
    c->stall_ms = env_u32("KVS_RDMA_TEST_STALL_MS", kvs_parse_uint, 0, 0, 600000);
    c->token_xor = env_u32("KVS_RDMA_TEST_TOKEN_XOR", kvs_parse_uint, 0, 0, UINT32_MAX);
    c->pull_max = env_u32("KVSTORE_RDMA_PULL_MAX", kvs_parse_size, PULL_MAX_DEFAULT, 0, UINT32_MAX);
    c->push_max = env_u32("KVSTORE_RDMA_PUSH_MAX", kvs_parse_size, PUSH_MAX_DEFAULT, 0, UINT32_MAX);
    pthread_mutex_init(&c->mu, NULL);
    if (c->autosel) {
        int rc = kvs_tcp_transport.create(ep, cfg, &c->tcp);
        if (rc < 0) {
            pthread_mutex_destroy(&c->mu);
            free(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

static int device_present(void)
{
    int n = 0;
    struct ibv_device **d = ibv_get_device_list(&n);
    if (d) ibv_free_device_list(d);
    return d && n > 0;
}

/*
 * auto: TCP first (HELLO says whether the server offers RDMA), then RDMA at
 * the same host:port when a local device exists and the server offers it.
 * The choice is made once per connection object and logged at info level.
 */
static int auto_choose(struct kvs_conn *c, struct kvs_limits *lim)
{
    int rc = kvs_tcp_transport.connect(c->tcp, lim);
    if (rc < 0) return rc;
    const char *why = NULL;
    if (!device_present())
        why = "no local RDMA device";
    else if (!(lim->features & KVS_FEAT_RDMA))
        why = "the server does not offer RDMA";
    else if ((rc = ensure_up(c)) < 0)
        why = "the RDMA connection failed: ";
    if (why) {
        c->use_tcp = 1;
        kvs_log(KVS_LOG_INFO, "kvstore %s: transport tcp (%s%s)", c->ep.name, why,
                rc < 0 ? strerror(-rc) : "");
        return 0;
    }
    kvs_tcp_transport.disconnect(c->tcp);
    kvs_log(KVS_LOG_INFO, "kvstore %s: transport rdma", c->ep.name);
    *lim = c->lim;
    c->autosel = 0;
    return 0;
}

static int rdma_connect_op(struct kvs_conn *c, struct kvs_limits *lim)
{
    if (c->use_tcp) return kvs_tcp_transport.connect(c->tcp, lim);
    pthread_mutex_lock(&c->mu);
    int rc = c->autosel ? auto_choose(c, lim) : ensure_up(c);
    if (rc == 0 && !c->use_tcp) *lim = c->lim;
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && c->use_tcp) return kvs_tcp_transport.connect(c->tcp, lim);
    return rc;
}

static void rdma_submit(struct kvs_conn *c, struct kvs_req *req)
{
    if (c->use_tcp) {
        kvs_tcp_transport.submit(c->tcp, req);
        return;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms;
    struct kvs_limits lim;
    int rc = c->autosel ? auto_choose(c, &lim) : ensure_up(c);
    if (rc == 0 && c->use_tcp) {
        pthread_mutex_unlock(&c->mu);
        kvs_tcp_transport.submit(c->tcp, req);
        return;
    }
    req->status = 0;
    uint32_t done = 0;
    if (rc == 0 && req->opcode == KVS_OP_STATS) {
        rc = do_plain(c, req, NULL, 0, deadline);
    } else if (rc == 0) {
        int put = req->opcode == KVS_OP_PUT;
        int sided = put || req->opcode == KVS_OP_GET;
        while (done < req->n) {
            struct kvs_key_io *k = req->keys + done;
            uint32_t m = chunk_size(c, k, req->n - done, put, 0);
            /*
             * A put chunk whose values are small in all takes PULL, a get
             * chunk whose capacities are, PUSH (docs/rdma.md).
             */
            int pull = put && pull_on(c) && chunk_bytes(k, m) <= c->pull_max;
            int push = req->opcode == KVS_OP_GET && push_on(c) && chunk_bytes(k, m) <= c->push_max;
            if (pull || push) m = chunk_size(c, k, m, put, 1);
            if (!sided) {
                uint32_t cap = (KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN) / KVS_WIRE_STATUS_LEN;
                if (m > cap) m = cap;
            }
            if (pull)
                rc = do_pull(c, k, m, deadline);
            else if (push)
                rc = do_push(c, k, m, deadline);
            else
                rc = sided ? do_chunk(c, k, m, put, deadline) : do_plain(c, req, k, m, deadline);
            if (rc < 0) break;
            done += m;
        }
    }
    if (rc < 0) {
        int st = rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -EPROTO || rc == -EACCES
                     ? rc
                     : -ECONNRESET;
        if (c->up) {
            kvs_log(KVS_LOG_WARN, "rdma %s: connection lost: %s", c->ep.name, strerror(-rc));
            conn_down(c);
            c->last_err = st;
            c->retry_at_ms = 0;
        }
        if (req->opcode == KVS_OP_STATS)
            req->status = st;
        else
            fail_keys(req->keys + done, req->n - done, st);
        req->status = st;
    }
    pthread_mutex_unlock(&c->mu);
    req->done(req);
}

static void rdma_disconnect_op(struct kvs_conn *c)
{
    if (c->tcp) kvs_tcp_transport.disconnect(c->tcp);
    pthread_mutex_lock(&c->mu);
    conn_down(c);
    pthread_mutex_unlock(&c->mu);
}

static void rdma_destroy(struct kvs_conn *c)
{
    if (!c) return;
    rdma_disconnect_op(c);
    if (c->tcp) kvs_tcp_transport.destroy(c->tcp);
    while (c->regs) {
        struct ureg *u = c->regs;
        c->regs = u->next;
        free(u);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int rdma_reg_mem(struct kvs_conn *c, void *ptr, size_t len)
{
    if (c->use_tcp) return 0;
    struct ureg *u = calloc(1, sizeof(*u));
    if (!u) return -ENOMEM;
    u->ptr = ptr;
    u->len = len;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->up) {
        u->mr = ibv_reg_mr(c->pd, ptr, len, mr_access(c));
        if (!u->mr) rc = errno ? -errno : -ENOMEM;
    }
    if (rc == 0) {
        u->next = c->regs;
        c->regs = u;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc < 0) free(u);
    return rc;
}

static int rdma_unreg_mem(struct kvs_conn *c, void *ptr)
{
    if (c->use_tcp) return 0;
    pthread_mutex_lock(&c->mu);
    int rc = -ENOENT;
    for (struct ureg **pp = &c->regs; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr != ptr) continue;
        struct ureg *u = *pp;
        *pp = u->next;
        if (u->mr) ibv_dereg_mr(u->mr);
        free(u);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void rdma_counters(struct kvs_conn *c, kvs_counter_fn emit, void *arg)
{
    if (c->use_tcp) {
        if (kvs_tcp_transport.counters) kvs_tcp_transport.counters(c->tcp, emit, arg);
        return;
    }
    emit(arg, "doorbells", atomic_load(&c->doorbells));
    emit(arg, "work_requests", atomic_load(&c->wrs));
    emit(arg, "completions", atomic_load(&c->cqes));
    emit(arg, "round_trips", atomic_load(&c->round_trips));
    emit(arg, "bounce_bytes", atomic_load(&c->bounce_bytes));
    emit(arg, "zero_copy_bytes", atomic_load(&c->zero_copy_bytes));
    emit(arg, "split_chains", atomic_load(&c->split_chains));
    emit(arg, "reconnects", atomic_load(&c->reconnects));
    emit(arg, "slot_wait_us", atomic_load(&c->slot_wait_us));
    emit(arg, "chain_wait_us", atomic_load(&c->chain_wait_us));
    emit(arg, "copy_us", atomic_load(&c->copy_us));
}

static void rdma_fork_prepare(struct kvs_conn *c)
{
    if (c->tcp && kvs_tcp_transport.fork_prepare) kvs_tcp_transport.fork_prepare(c->tcp);
    pthread_mutex_lock(&c->mu);
}

static void rdma_fork_parent(struct kvs_conn *c)
{
    pthread_mutex_unlock(&c->mu);
    if (c->tcp && kvs_tcp_transport.fork_parent) kvs_tcp_transport.fork_parent(c->tcp);
}

/*
 * The child cannot use the parent's verbs objects: forget them (without
 * destroying anything the parent still uses) and reconnect on first use.
 */
static void rdma_fork_child(struct kvs_conn *c)
{
    c->ec = NULL;
    c->id = NULL;
    c->pd = NULL;
    c->comp = NULL;
    c->cq = NULL;
    c->ctrl = c->bounce = NULL;
    c->ctrl_mr = c->bounce_mr = NULL;
    c->bounce_size = 0;
    for (struct ureg *u = c->regs; u; u = u->next)
        u->mr = NULL;
    c->up = 0;
    c->last_err = 0;
    pthread_mutex_unlock(&c->mu);
    if (c->tcp && kvs_tcp_transport.fork_child) kvs_tcp_transport.fork_child(c->tcp);
}

const struct kvs_transport_ops kvs_rdma_transport = {
    .name = "rdma",
    .create = rdma_create,
    .connect = rdma_connect_op,
    .submit = rdma_submit,
    .disconnect = rdma_disconnect_op,
    .destroy = rdma_destroy,
    .reg_mem = rdma_reg_mem,
    .unreg_mem = rdma_unreg_mem,
    .counters = rdma_counters,
    .fork_prepare = rdma_fork_prepare,
    .fork_parent = rdma_fork_parent,
    .fork_child = rdma_fork_child,
};

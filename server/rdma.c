/*
 * rdma.c - kvstored's RDMA listener and the server half of the one-sided
 * protocol (docs/rdma.md).
 *
 * The store's pool is one mmap (pool.h); it is registered once, as one
 * memory region, when the listener starts. Clients move values with RDMA
 * WRITE/READ straight into/out of slots the server hands out:
 *
 *   RESERVE  reserves a new pinned item per key (kvsd_store_reserve) and
 *            returns (token, addr, rkey); COMMIT links or aborts each one.
 *   LEASE    pins each key's current item (kvsd_store_lookup with pin) and
 *            returns (token, addr, rkey, len); RELEASE unpins.
 *   PULL     a put in one round trip: the client names where each value
 *            lies in its registered memory; the server reserves the slots,
 *            RDMA READs the values into them (one chain, the last READ
 *            signaled), and when that completes commits and answers.
 *   PUSH     a get in one round trip: the client names where each value
 *            must land in its registered memory; the server pins each item
 *            (a read lease), posts one chain of RDMA WRITEs from the slots
 *            followed by the reply SEND (RC: the client sees the reply only
 *            after every WRITE has landed), and unpins when that SEND
 *            completes, or when the client's next message shows it arrived.
 *
 * A token names an entry of the connection's own lease table; COMMIT and
 * RELEASE check index, generation and kind, so a client can only commit or
 * release what it was given, and addr/len always come from the store's own
 * items. A reservation or lease older than lease_ms, or any error on the
 * queue pair, cuts the connection: its QP is moved to the error state first
 * (so no WRITE or READ of it can land any more), then everything it held
 * is aborted or unpinned.
 *
 * All connections share one completion queue and one completion channel;
 * an internal epoll fd gathers the CM event channel, the completion
 * channel and a lease timer so that the main loop watches one fd.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "wire.h"

#define NRECV      8 /* receive buffers per connection */
#define SEND_DEPTH 16
#define PULL_MAX   KVS_WIRE_PULL_MAX_KEYS /* READs one PULL may post */
#define PULL_WR_ID (UINT64_MAX - 1)       /* wr_id of a PULL's signaled last READ */
#define PUSH_MAX   KVS_WIRE_PUSH_MAX_KEYS /* WRITEs one PUSH may post */
/* wr_id of a PUSH's reply SEND: the tag, then the PUSH's sequence number (32 bits). */
#define PUSH_WR_TAG     0x5055534800000000ull
#define PUSH_WR_MASK    0xffffffff00000000ull
#define LEASES_PER_CONN 16384u
#define MAX_CONNS       128
#define CQ_DEPTH        (MAX_CONNS * (NRECV + SEND_DEPTH))
#define INLINE_WANT     256
#define TOKEN_IDX_MASK  0xffffu
#define TOKEN_FREE      UINT32_MAX

enum lease_kind { LEASE_FREE = 0, LEASE_RESERVE, LEASE_READ };

struct lease {
    struct kvsd_item *it;
    uint64_t deadline_ns;
    uint32_t next_free;
    uint16_t gen;
    uint8_t kind;
};

struct rconn {
    struct kvsd_rdma *r;
    struct rdma_cm_id *id;
    uint8_t *bufs; /* NRECV receive buffers, then the send buffer */
    struct ibv_mr *mr;
    struct kvsd_proto_conn *proto;
    struct lease *leases;
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
        uint32_t *tokens; /* PULL_MAX: the reservation per key, or TOKEN_FREE */
        int32_t *status;  /* PULL_MAX: the key's status when it has no token */
        struct ibv_send_wr *wrs;
        struct ibv_sge *sges;
    } pull;
    /* The PUSH whose reply SEND has not completed yet: its items stay pinned until it has. */
    struct {
        int pending;
        uint32_t seq; /* names its reply SEND's completion */
        uint32_t count;
        uint32_t *tokens; /* PUSH_MAX: the read lease pinning each key's item, or TOKEN_FREE */
        struct ibv_send_wr *wrs;
        struct ibv_sge *sges;
    } push;
    struct rconn *prev, *next;
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
    int push_on; /* serves PUSH and announces KVS_FEAT_PUSH (KVS_RDMA_TEST_NO_PUSH turns it off) */
    struct rconn *conns;
    struct kvsd_rdma_counters ctr;
};

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    return 0;
}

/* ---- leases ---- */

static int leases_init(struct rconn *c)
{
    c->leases = calloc(LEASES_PER_CONN, sizeof(*c->leases));
    if (!c->leases) return -ENOMEM;
    for (uint32_t i = 0; i < LEASES_PER_CONN; i++)
        c->leases[i].next_free = i + 1 < LEASES_PER_CONN ? i + 1 : TOKEN_FREE;
    c->free_head = 0;
    return 0;
}

/* Takes a free entry for it; returns its token, or TOKEN_FREE when the table is full. */
static uint32_t lease_take(struct rconn *c, struct kvsd_item *it, enum lease_kind kind)
{
    uint32_t idx = c->free_head;
    if (idx == TOKEN_FREE) return TOKEN_FREE;
    struct lease *l = &c->leases[idx];
    c->free_head = l->next_free;
    l->it = it;
    l->kind = (uint8_t)kind;
    l->deadline_ns = kvs_now_ns() + (uint64_t)c->r->cfg.lease_ms * 1000000ull;
    c->nused++;
    return ((uint32_t)l->gen << 16) | idx;
}

/* The live entry a client's token names, if it is of that kind; else NULL. */
static struct lease *lease_find(struct rconn *c, uint32_t token, enum lease_kind kind)
{
    uint32_t idx = token & TOKEN_IDX_MASK;
    if (idx >= LEASES_PER_CONN) return NULL;
    struct lease *l = &c->leases[idx];
    if (l->kind != kind || l->gen != (uint16_t)(token >> 16)) return NULL;
    return l;
}

static void lease_put(struct rconn *c, struct lease *l)
{
    l->it = NULL;
    l->kind = LEASE_FREE;
    l->gen++;
    uint32_t idx = (uint32_t)(l - c->leases);
    l->next_free = c->free_head;
    c->free_head = idx;
    c->nused--;
}

/* Aborts every reservation and unpins every lease of c. Its QP must be dead. */
static void leases_drop_all(struct rconn *c)
{
    struct kvsd_store *st = c->r->srv->store;
    for (uint32_t i = 0; c->leases && c->nused && i < LEASES_PER_CONN; i++) {
        struct lease *l = &c->leases[i];
        if (l->kind == LEASE_RESERVE)
            kvsd_store_abort(st, l->it);
        else if (l->kind == LEASE_READ)
            kvsd_store_unpin(st, l->it);
        else
            continue;
        lease_put(c, l);
    }
}

/* ---- connections ---- */

static int post_recv_on(struct rconn *c, struct ibv_qp *qp, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX),
                          .length = KVS_WIRE_CTRL_MAX,
                          .lkey = c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = idx, .sg_list = &sge, .num_sge = 1}, *bad;
    return -ibv_post_recv(qp, &wr, &bad);
}

static int post_recv(struct rconn *c, uint32_t idx)
{
    return post_recv_on(c, c->id->qp, idx);
}

/*
 * Cuts a connection: the QP goes to the error state at once, so no WRITE or
 * READ of this client lands any more, then its reservations and leases are
 * dropped. The id is destroyed when the DISCONNECTED event arrives.
 */
static void conn_kill(struct rconn *c, const char *why)
{
    if (c->dead) return;
    c->dead = 1;
    if (c->r->cfg.verbose) fprintf(stderr, "kvstored: rdma: closing a connection: %s\n", why);
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    if (c->id->qp) ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
    leases_drop_all(c);
    rdma_disconnect(c->id);
}

/*
 * Turns remote READ/WRITE on the connection's QP on or off (RTS -> RTS,
 * IBV_QP_ACCESS_FLAGS). With --auth-file a QP has none until its peer has
 * passed AUTH: the pool's rkey is then useless on it, even if guessed or
 * learned on another connection. 0 or -errno.
 */
static int qp_remote_access(struct rconn *c, int on)
{
    struct ibv_qp_attr attr = {.qp_access_flags =
                                   on ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0};
    int rc = ibv_modify_qp(c->id->qp, &attr, IBV_QP_ACCESS_FLAGS);
    if (rc != 0) return rc > 0 ? -rc : -EIO;
    c->remote_access = on;
    return 0;
}

/*
 * Cuts c once the reply just posted (an ERROR saying why, e.g. -EACCES) has
 * left, so that the peer reads the reason rather than a bare disconnect: a
 * QP moved to the error state at once would flush that reply unsent. Until
 * then the QP has no remote access and nothing the peer sends is served; a
 * peer that never acknowledges is cut by the lease tick.
 */
static void conn_close_after_reply(struct rconn *c, const char *why)
{
    if (c->dead || c->closing) return;
    if (qp_remote_access(c, 0) < 0) {
        conn_kill(c, why);
        return;
    }
    c->closing = why;
    c->close_by_ns = kvs_now_ns() + 1000000000ull;
}

static void conn_free(struct rconn *c)
{
    struct kvsd_rdma *r = c->r;
    if (c->id->qp) rdma_destroy_qp(c->id);
    leases_drop_all(c);
    if (c->proto) kvsd_proto_conn_free(c->proto);
    if (c->mr) ibv_dereg_mr(c->mr);
    free(c->bufs);
    free(c->leases);
    free(c->pull.tokens);
    free(c->pull.status);
    free(c->pull.wrs);
    free(c->pull.sges);
    free(c->push.tokens);
    free(c->push.wrs);
    free(c->push.sges);
    c->id->context = NULL;
    rdma_destroy_id(c->id);
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    r->ctr.conns_current--;
    free(c);
}

static struct rconn *conn_by_qp(struct kvsd_rdma *r, uint32_t qp_num)
{
    for (struct rconn *c = r->conns; c; c = c->next)
        if (c->id->qp && c->id->qp->qp_num == qp_num) return c;
    return NULL;
}

/*
 * With --auth-file the QP is created and brought to RTS here rather than by
 * rdma_create_qp/rdma_accept, which grant remote READ and WRITE from INIT on:
 * revoking them after rdma_accept left a window (seen in the VM) in which a
 * peer that fires a WRITE right after ESTABLISHED got it through. Here the
 * QP never has remote access until AUTH turns it on (qp_remote_access). The
 * transitions are those librdmacm makes (rdma_init_qp_attr per state), with
 * qp_access_flags 0 and our responder resources. *qa gets the capabilities.
 */
static int create_qp_without_remote_access(struct kvsd_rdma *r, struct rdma_cm_id *cid,
                                           struct ibv_qp_init_attr *qa, uint8_t resp_res,
                                           uint8_t init_depth, struct ibv_qp **out)
{
    struct ibv_qp *qp = ibv_create_qp(r->pd, qa);
    if (!qp) {
        qa->cap.max_inline_data = 0;
        qp = ibv_create_qp(r->pd, qa);
    }
    if (!qp) return errno ? -errno : -ENOMEM;
    static const enum ibv_qp_state states[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        struct ibv_qp_attr attr = {.qp_state = states[i]};
        int mask = 0;
        if (rdma_init_qp_attr(cid, &attr, &mask) != 0) goto fail;
        attr.qp_access_flags = 0;
        if (states[i] == IBV_QPS_RTR) attr.max_dest_rd_atomic = resp_res;
        /* Our own READs (PULL) only: no access for the peer. */
        if (states[i] == IBV_QPS_RTS) attr.max_rd_atomic = init_depth;
        if (ibv_modify_qp(qp, &attr, mask) != 0) goto fail;
    }
    *out = qp;
    return 0;
fail:;
    int rc = errno ? -errno : -EIO;
    ibv_destroy_qp(qp);
    return rc;
}

/*
 * Accepts a connect request: QP on the shared CQ, buffers, receives posted.
 * With --auth-file the QP has no remote access until the peer passes AUTH.
 */
static int conn_accept(struct kvsd_rdma *r, struct rdma_cm_id *cid,
                       const struct rdma_conn_param *req)
{
    if (cid->verbs != r->verbs || r->ctr.conns_current >= MAX_CONNS) return -EBUSY;
    struct rconn *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->r = r;
    c->id = cid;
    struct ibv_qp *own_qp = NULL;
    int rc = -ENOMEM;
    size_t bytes = (size_t)(NRECV + 1) * KVS_WIRE_CTRL_MAX;
    if (posix_memalign((void **)&c->bufs, 4096, bytes) != 0) {
        c->bufs = NULL;
        goto fail;
    }
    if (leases_init(c) < 0) goto fail;
    c->pull.tokens = calloc(PULL_MAX, sizeof(*c->pull.tokens));
    c->pull.status = calloc(PULL_MAX, sizeof(*c->pull.status));
    c->pull.wrs = calloc(PULL_MAX, sizeof(*c->pull.wrs));
    c->pull.sges = calloc(PULL_MAX, sizeof(*c->pull.sges));
    if (!c->pull.tokens || !c->pull.status || !c->pull.wrs || !c->pull.sges) goto fail;
    c->push.tokens = calloc(PUSH_MAX, sizeof(*c->push.tokens));
    c->push.wrs = calloc(PUSH_MAX, sizeof(*c->push.wrs));
    c->push.sges = calloc(PUSH_MAX, sizeof(*c->push.sges));
    if (!c->push.tokens || !c->push.wrs || !c->push.sges) goto fail;
    c->proto = kvsd_proto_conn_new(r->srv);
    if (!c->proto) goto fail;
    c->mr = ibv_reg_mr(r->pd, c->bufs, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr) {
        rc = -errno;
        goto fail;
    }
    struct ibv_qp_init_attr qa = {.send_cq = r->cq,
                                  .recv_cq = r->cq,
                                  .qp_type = IBV_QPT_RC,
                                  /*
                                   * A PULL's READs, or two PUSH chains: a PUSH's
                                   * WRITEs and reply hold their slots until the
                                   * reply's completion, which may come after the
                                   * client's next PUSH (its ACK can trail it).
                                   */
                                  .cap = {.max_send_wr = SEND_DEPTH + 2 * (PUSH_MAX + 1),
                                          .max_recv_wr = NRECV,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1,
                                          .max_inline_data = INLINE_WANT}};
    /* The CM event reports the client's initiator depth as our responder_resources. */
    uint8_t rd = req->responder_resources < r->max_rd_atom ? req->responder_resources
                                                           : (uint8_t)r->max_rd_atom;
    /* ...and its responder resources as our initiator depth: what PULL's READs may use. */
    uint8_t init = req->initiator_depth < r->max_init_rd_atom ? req->initiator_depth
                                                              : (uint8_t)r->max_init_rd_atom;
    struct rdma_conn_param p = {
        .responder_resources = rd, .initiator_depth = init, .rnr_retry_count = 7};
    if (r->srv->auth_secret) {
        /* Our own QP: rdma_accept leaves it alone (cid->qp is set only afterwards). */
        if ((rc = create_qp_without_remote_access(r, cid, &qa, rd, init, &own_qp)) < 0) goto fail;
        p.qp_num = own_qp->qp_num;
    } else if (rdma_create_qp(cid, r->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(cid, r->pd, &qa) != 0) {
            rc = -errno;
            goto fail;
        }
        c->remote_access = 1;
    }
    c->max_inline = qa.cap.max_inline_data;
    for (uint32_t i = 0; i < NRECV; i++)
        if ((rc = post_recv_on(c, own_qp ? own_qp : cid->qp, i)) < 0) goto fail;
    cid->context = c;
    c->next = r->conns;
    if (r->conns) r->conns->prev = c;
    r->conns = c;
    r->ctr.conns_current++;
    r->ctr.conns_total++;
    rc = rdma_accept(cid, &p) != 0 ? (errno ? -errno : -EIO) : 0;
    if (own_qp) cid->qp = own_qp; /* from now on it is the id's, as rdma_create_qp's would be */
    if (rc < 0) {
        conn_free(c); /* destroys cid (and the QP) too */
        return rc;
    }
    return 0;
fail:
    if (own_qp) ibv_destroy_qp(own_qp);
    if (cid->qp) rdma_destroy_qp(cid);
    if (c->proto) kvsd_proto_conn_free(c->proto);
    if (c->mr) ibv_dereg_mr(c->mr);
    free(c->leases);
    free(c->pull.tokens);
    free(c->pull.status);
    free(c->pull.wrs);
    free(c->pull.sges);
    free(c->push.tokens);
    free(c->push.wrs);
    free(c->push.sges);
    free(c->bufs);
    free(c);
    return rc;
}

/* ---- control messages ---- */

static uint8_t *send_buf(struct rconn *c)
{
    return c->bufs + (size_t)NRECV * KVS_WIRE_CTRL_MAX;
}

static void send_reply(struct rconn *c, size_t len)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)send_buf(c), .length = (uint32_t)len, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = UINT64_MAX,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (len <= c->max_inline) wr.send_flags |= IBV_SEND_INLINE;
    if (ibv_post_send(c->id->qp, &wr, &bad) != 0) {
        conn_kill(c, "ibv_post_send failed");
        return;
    }
    c->r->ctr.messages_out++;
}

static void put_reply_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len,
                          uint64_t id)
{
    struct kvs_wire_hdr h = {.magic = KVS_WIRE_MAGIC,
                             .version = KVS_WIRE_VERSION,
                             .opcode = (uint8_t)(opcode | KVS_OP_REPLY),
                             .count = count,
                             .body_len = body_len,
                             .id = id};
    kvs_wire_hdr_encode(out, &h);
}

/* An ERROR reply, then the connection is cut: the client broke the protocol. */
static void reply_error_and_kill(struct rconn *c, uint64_t id, int32_t status, const char *why)
{
    uint8_t *out = send_buf(c);
    size_t blen = kvs_wire_error_encode(out + KVS_WIRE_HDR_LEN,
                                        KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN, status, why);
    put_reply_hdr(out, KVS_OP_ERROR, 0, (uint32_t)blen, id);
    send_reply(c, KVS_WIRE_HDR_LEN + blen);
    c->r->srv->counters.errors_protocol++;
    conn_kill(c, why);
}

/* A slot that was not handed out: status (< 0) and, for LEASE's -ERANGE, the value's length. */
static void put_failed_slot(uint8_t *p, int32_t status, uint32_t len)
{
    struct kvs_wire_slot s = {.status = status, .token = KVS_WIRE_TOKEN_NONE, .len = len};
    kvs_wire_slot_encode(p, &s);
}

/*
 * RESERVE and LEASE: walks the keyed entries of body, answers one slot per
 * entry. A malformed entry cuts the connection (after an ERROR reply).
 */
static void handle_slots(struct rconn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    struct kvsd_server *srv = c->r->srv;
    struct kvsd_store *st = srv->store;
    uint8_t *out = send_buf(c) + KVS_WIRE_HDR_LEN;
    uint8_t *pool = kvsd_pool_base(kvsd_store_pool(st));
    size_t pool_size = kvsd_pool_size(kvsd_store_pool(st));
    int reserve = h->opcode == KVS_OP_RDMA_RESERVE;
    size_t off = 0;
    if ((uint64_t)h->count * KVS_WIRE_SLOT_LEN + KVS_WIRE_HDR_LEN > KVS_WIRE_CTRL_MAX) {
        reply_error_and_kill(c, h->id, -EMSGSIZE, "too many keys for one rdma message");
        return;
    }
    for (uint32_t i = 0; i < h->count; i++, out += KVS_WIRE_SLOT_LEN) {
        struct kvs_wire_item e;
        if (kvs_wire_key_entry_decode(body, h->body_len, &off, &e) < 0) {
            reply_error_and_kill(c, h->id, -EBADMSG, "malformed rdma entry");
            return;
        }
        const uint8_t *key = e.key;
        srv->counters.keys[reserve ? KVS_OP_PUT : KVS_OP_GET]++;
        if (c->free_head == TOKEN_FREE) {
            put_failed_slot(out, -ENOSPC, 0);
            continue;
        }
        struct kvsd_item *it = NULL;
        int32_t status = 0;
        if (reserve) {
            if (e.len > srv->limits.max_object) {
                srv->counters.put_too_big++;
                put_failed_slot(out, -E2BIG, 0);
                continue;
            }
            status = kvsd_store_reserve(st, key, e.klen, e.len, &it);
            if (status == -ENOSPC) srv->counters.put_no_space++;
        } else {
            it = kvsd_store_lookup(st, key, e.klen, 1);
            if (!it) {
                srv->counters.get_misses++;
                status = -ENOENT;
            } else if (kvsd_item_len(it) > e.len) {
                srv->counters.get_range++;
                put_failed_slot(out, -ERANGE, kvsd_item_len(it));
                kvsd_store_unpin(st, it);
                continue;
            } else {
                srv->counters.get_hits++;
            }
        }
        if (status < 0) {
            put_failed_slot(out, status, 0);
            continue;
        }
        uint8_t *data = kvsd_item_data(st, it);
        uint32_t len = kvsd_item_len(it);
        /* Every range handed out lies inside the registered pool. */
        if (data < pool || (size_t)(data - pool) + len > pool_size) {
            reserve ? kvsd_store_abort(st, it) : kvsd_store_unpin(st, it);
            put_failed_slot(out, -EIO, 0);
            continue;
        }
        uint32_t token = lease_take(c, it, reserve ? LEASE_RESERVE : LEASE_READ);
        struct kvs_wire_slot slot = {.token = token,
                                     .addr = (uint64_t)(uintptr_t)data,
                                     .rkey = c->r->pool_mr->rkey,
                                     .len = len};
        kvs_wire_slot_encode(out, &slot);
        reserve ? c->r->ctr.reserves++ : c->r->ctr.leases++;
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma message");
        return;
    }
    srv->counters.requests[reserve ? KVS_OP_PUT : KVS_OP_GET]++;
    put_reply_hdr(send_buf(c), h->opcode, h->count, h->count * KVS_WIRE_SLOT_LEN, h->id);
    send_reply(c, KVS_WIRE_HDR_LEN + (size_t)h->count * KVS_WIRE_SLOT_LEN);
}

/* COMMIT and RELEASE: every token is checked against the connection's own table. */
static void handle_tokens(struct rconn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    struct kvsd_store *st = c->r->srv->store;
    int commit = h->opcode == KVS_OP_RDMA_COMMIT;
    if ((uint64_t)h->count * KVS_WIRE_TOKEN_LEN != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "bad rdma token list");
        return;
    }
    uint8_t *out = send_buf(c) + KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < h->count; i++, out += KVS_WIRE_STATUS_LEN) {
        struct kvs_wire_token t;
        if (kvs_wire_token_decode(body + (size_t)i * KVS_WIRE_TOKEN_LEN, h->opcode, &t) < 0) {
            /* What it committed before this entry stays: its own values, whole. */
            reply_error_and_kill(c, h->id, -EBADMSG, "bad rdma token flags");
            return;
        }
        struct lease *l = lease_find(c, t.token, commit ? LEASE_RESERVE : LEASE_READ);
        int32_t status = 0;
        if (!l) {
            c->r->ctr.bad_tokens++;
            status = -EINVAL;
        } else if (commit && t.flags == KVS_WIRE_TOKEN_COMMIT) {
            status = kvsd_store_commit(st, l->it);
            c->r->ctr.commits++;
            lease_put(c, l);
        } else if (commit) {
            kvsd_store_abort(st, l->it);
            c->r->ctr.aborts++;
            lease_put(c, l);
        } else {
            kvsd_store_unpin(st, l->it);
            c->r->ctr.releases++;
            lease_put(c, l);
        }
        kvs_wire_status_encode(out, status, 0);
    }
    put_reply_hdr(send_buf(c), h->opcode, h->count, h->count * KVS_WIRE_STATUS_LEN, h->id);
    send_reply(c, KVS_WIRE_HDR_LEN + (size_t)h->count * KVS_WIRE_STATUS_LEN);
}

/* Commits what a finished PULL's READs brought in and answers a status per key. */
static void pull_finish(struct rconn *c)
{
    struct kvsd_store *st = c->r->srv->store;
    uint8_t *out = send_buf(c) + KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < c->pull.count; i++, out += KVS_WIRE_STATUS_LEN) {
        int32_t status = c->pull.status[i];
        struct lease *l = c->pull.tokens[i] == TOKEN_FREE
                              ? NULL
                              : lease_find(c, c->pull.tokens[i], LEASE_RESERVE);
        if (l) {
            status = kvsd_store_commit(st, l->it);
            c->r->ctr.commits++;
            lease_put(c, l);
        }
        kvs_wire_status_encode(out, status, 0);
    }
    c->pull.pending = 0;
    put_reply_hdr(send_buf(c), KVS_OP_RDMA_PULL, c->pull.count, c->pull.count * KVS_WIRE_STATUS_LEN,
                  c->pull.id);
    send_reply(c, KVS_WIRE_HDR_LEN + (size_t)c->pull.count * KVS_WIRE_STATUS_LEN);
}

/*
 * PULL: reserves a slot per key (a reservation lease, so that expiry and a
 * cut connection abort it), then posts one chain of RDMA READs from the
 * client's addresses into the slots; reads adjacent on both sides share one
 * READ. The last READ is signaled; its completion runs pull_finish. The
 * addresses are the client's own memory: a bad one fails the READ, which
 * cuts only this connection.
 */
static void handle_pull(struct rconn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    struct kvsd_server *srv = c->r->srv;
    struct kvsd_store *st = srv->store;
    uint8_t *pool = kvsd_pool_base(kvsd_store_pool(st));
    size_t pool_size = kvsd_pool_size(kvsd_store_pool(st));
    if (h->count > PULL_MAX) {
        reply_error_and_kill(c, h->id, -EMSGSIZE, "too many keys for one rdma pull");
        return;
    }
    c->pull.id = h->id;
    c->pull.count = h->count;
    struct ibv_send_wr *wrs = c->pull.wrs;
    struct ibv_sge *sges = c->pull.sges;
    uint32_t nwr = 0;
    uint64_t rnext = 0;
    size_t off = 0;
    for (uint32_t i = 0; i < h->count; i++) {
        struct kvs_wire_remote_entry e;
        c->pull.tokens[i] = TOKEN_FREE;
        c->pull.status[i] = 0;
        if (kvs_wire_remote_entry_decode(body, h->body_len, &off, &e) < 0) {
            reply_error_and_kill(c, h->id, -EBADMSG, "malformed rdma pull entry");
            return;
        }
        srv->counters.keys[KVS_OP_PUT]++;
        if (c->free_head == TOKEN_FREE) {
            c->pull.status[i] = -ENOSPC;
            continue;
        }
        if (e.len > srv->limits.max_object) {
            srv->counters.put_too_big++;
            c->pull.status[i] = -E2BIG;
            continue;
        }
        struct kvsd_item *it = NULL;
        int32_t status = kvsd_store_reserve(st, e.key, e.klen, e.len, &it);
        if (status < 0) {
            if (status == -ENOSPC) srv->counters.put_no_space++;
            c->pull.status[i] = status;
            continue;
        }
        uint8_t *data = kvsd_item_data(st, it);
        if (data < pool || (size_t)(data - pool) + e.len > pool_size) {
            kvsd_store_abort(st, it);
            c->pull.status[i] = -EIO;
            continue;
        }
        c->pull.tokens[i] = lease_take(c, it, LEASE_RESERVE);
        c->r->ctr.reserves++;
        if (e.len == 0) continue;
        uintptr_t laddr = (uintptr_t)data;
        if (nwr > 0) {
            struct ibv_send_wr *w = &wrs[nwr - 1];
            if (w->wr.rdma.rkey == e.rkey && rnext == e.addr &&
                w->sg_list->addr + w->sg_list->length == laddr &&
                (uint64_t)w->sg_list->length + e.len <= UINT32_MAX) {
                w->sg_list->length += e.len;
                rnext += e.len;
                continue;
            }
            w->next = &wrs[nwr];
        }
        sges[nwr] = (struct ibv_sge){.addr = laddr, .length = e.len, .lkey = c->r->pool_mr->lkey};
        wrs[nwr] = (struct ibv_send_wr){.sg_list = &sges[nwr],
                                        .num_sge = 1,
                                        .opcode = IBV_WR_RDMA_READ,
                                        .wr.rdma = {.remote_addr = e.addr, .rkey = e.rkey}};
        rnext = e.addr + e.len;
        nwr++;
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma pull");
        return;
    }
    srv->counters.requests[KVS_OP_PUT]++;
    c->r->ctr.pulls++;
    if (nwr == 0) { /* nothing to read (every key failed, or empty values) */
        pull_finish(c);
        return;
    }
    wrs[nwr - 1].next = NULL;
    wrs[nwr - 1].wr_id = PULL_WR_ID;
    wrs[nwr - 1].send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr *bad;
    if (ibv_post_send(c->id->qp, wrs, &bad) != 0) {
        conn_kill(c, "ibv_post_send of a pull failed");
        return;
    }
    c->pull.pending = 1;
}

/* Unpins the items of the PUSH whose reply has arrived (its WRITEs landed before it). */
static void push_finish(struct rconn *c)
{
    struct kvsd_store *st = c->r->srv->store;
    for (uint32_t i = 0; i < c->push.count; i++) {
        if (c->push.tokens[i] == TOKEN_FREE) continue;
        struct lease *l = lease_find(c, c->push.tokens[i], LEASE_READ);
        if (l) {
            kvsd_store_unpin(st, l->it);
            lease_put(c, l);
        }
    }
    c->push.pending = 0;
    c->push.count = 0;
}

/* Appends one WRITE of a PUSH; merged into the previous one when adjacent on both sides. */
static void push_write(struct rconn *c, uint32_t *nwr, uint64_t *rnext, uintptr_t laddr,
                       const struct kvs_wire_remote_entry *e, uint32_t len)
{
    struct ibv_send_wr *wrs = c->push.wrs;
    if (*nwr > 0) {
        struct ibv_send_wr *w = &wrs[*nwr - 1];
        if (w->wr.rdma.rkey == e->rkey && *rnext == e->addr &&
            w->sg_list->addr + w->sg_list->length == laddr &&
            (uint64_t)w->sg_list->length + len <= UINT32_MAX) {
            w->sg_list->length += len;
            *rnext += len;
            return;
        }
        w->next = &wrs[*nwr];
    }
    c->push.sges[*nwr] =
        (struct ibv_sge){.addr = laddr, .length = len, .lkey = c->r->pool_mr->lkey};
    wrs[*nwr] = (struct ibv_send_wr){.sg_list = &c->push.sges[*nwr],
                                     .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE,
                                     .wr.rdma = {.remote_addr = e->addr, .rkey = e->rkey}};
    *rnext = e->addr + len;
    (*nwr)++;
}

/*
 * PUSH: looks each key up and pins its item (a read lease, so that expiry
 * and a cut connection unpin it), then posts ONE chain: an RDMA WRITE per
 * value (adjacent ones merged, all unsignaled) into the memory the client
 * named, and the reply SEND, signaled. RC executes the chain in order, so
 * the client receives the reply only after every WRITE has landed; the pins
 * go when the SEND completes (push_finish). A value longer than the named
 * capacity is never written: -ERANGE and its length, as GET. The addresses
 * are the client's own memory: a bad one fails the WRITE, which cuts only
 * this connection.
 */
static void handle_push(struct rconn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    struct kvsd_server *srv = c->r->srv;
    struct kvsd_store *st = srv->store;
    uint8_t *pool = kvsd_pool_base(kvsd_store_pool(st));
    size_t pool_size = kvsd_pool_size(kvsd_store_pool(st));
    if (h->count > PUSH_MAX) {
        reply_error_and_kill(c, h->id, -EMSGSIZE, "too many keys for one rdma push");
        return;
    }
    uint8_t *out = send_buf(c) + KVS_WIRE_HDR_LEN;
    uint32_t nwr = 0, pinned = 0;
    uint64_t rnext = 0;
    size_t off = 0;
    c->push.count = h->count;
    for (uint32_t i = 0; i < h->count; i++)
        c->push.tokens[i] = TOKEN_FREE;
    for (uint32_t i = 0; i < h->count; i++, out += KVS_WIRE_STATUS_LEN) {
        struct kvs_wire_remote_entry e;
        if (kvs_wire_remote_entry_decode(body, h->body_len, &off, &e) < 0) {
            /* The pins taken so far are leases: cutting the connection drops them. */
            reply_error_and_kill(c, h->id, -EBADMSG, "malformed rdma push entry");
            return;
        }
        srv->counters.keys[KVS_OP_GET]++;
        int32_t status = 0;
        uint32_t len = 0;
        struct kvsd_item *it =
            c->free_head == TOKEN_FREE ? NULL : kvsd_store_lookup(st, e.key, e.klen, 1);
        if (c->free_head == TOKEN_FREE) {
            status = -ENOSPC;
        } else if (!it) {
            srv->counters.get_misses++;
            status = -ENOENT;
        } else {
            len = kvsd_item_len(it);
            uint8_t *data = kvsd_item_data(st, it);
            if (len > e.len) {
                srv->counters.get_range++;
                status = -ERANGE; /* the length goes back, nothing is written */
            } else if (data < pool || (size_t)(data - pool) + len > pool_size) {
                status = -EIO;
                len = 0;
            } else {
                srv->counters.get_hits++;
                if (len > 0) {
                    c->push.tokens[i] = lease_take(c, it, LEASE_READ);
                    it = NULL; /* the lease holds the pin now */
                    pinned++;
                    push_write(c, &nwr, &rnext, (uintptr_t)data, &e, len);
                }
            }
            if (it) kvsd_store_unpin(st, it);
        }
        kvs_wire_status_encode(out, status, len);
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma push");
        return;
    }
    srv->counters.requests[KVS_OP_GET]++;
    c->r->ctr.pushes++;
    size_t len = KVS_WIRE_HDR_LEN + (size_t)h->count * KVS_WIRE_STATUS_LEN;
    put_reply_hdr(send_buf(c), KVS_OP_RDMA_PUSH, h->count, h->count * KVS_WIRE_STATUS_LEN, h->id);
    struct ibv_sge sge = {
        .addr = (uintptr_t)send_buf(c), .length = (uint32_t)len, .lkey = c->mr->lkey};
    struct ibv_send_wr reply = {.wr_id = PUSH_WR_TAG | ++c->push.seq,
                                .sg_list = &sge,
                                .num_sge = 1,
                                .opcode = IBV_WR_SEND,
                                .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (len <= c->max_inline) reply.send_flags |= IBV_SEND_INLINE;
    if (nwr > 0) c->push.wrs[nwr - 1].next = &reply;
    if (ibv_post_send(c->id->qp, nwr > 0 ? c->push.wrs : &reply, &bad) != 0) {
        conn_kill(c, "ibv_post_send of a push failed");
        return;
    }
    c->r->ctr.messages_out++;
    c->push.pending = pinned > 0;
    if (!c->push.pending) c->push.count = 0;
}

/* Any other frame: through the same protocol state machine as TCP. */
static void handle_proto(struct rconn *c, const uint8_t *msg, size_t len)
{
    size_t taken = kvsd_proto_feed(c->proto, msg, len);
    uint8_t *out = send_buf(c);
    size_t n = 0;
    struct iovec iov[16];
    int cnt;
    while ((cnt = kvsd_proto_out_iov(c->proto, iov, 16)) > 0) {
        size_t took = 0;
        for (int i = 0; i < cnt && n < KVS_WIRE_CTRL_MAX; i++) {
            size_t k =
                iov[i].iov_len < KVS_WIRE_CTRL_MAX - n ? iov[i].iov_len : KVS_WIRE_CTRL_MAX - n;
            memcpy(out + n, iov[i].iov_base, k);
            n += k;
            took += k;
        }
        kvsd_proto_sent(c->proto, took);
        if (n == KVS_WIRE_CTRL_MAX) break;
    }
    if (kvsd_proto_out_pending(c->proto) > 0) {
        conn_kill(c, "reply larger than one rdma message");
        return;
    }
    if (n) send_reply(c, n);
    if (taken < len || kvsd_proto_closing(c->proto)) {
        const char *why = kvsd_proto_authenticated(c->proto)
                              ? "protocol error"
                              : "refused: a wrong AUTH, or a request before AUTH";
        if (n)
            conn_close_after_reply(c, why);
        else
            conn_kill(c, why);
    }
}

static void handle_message(struct rconn *c, const uint8_t *msg, size_t len)
{
    c->r->ctr.messages_in++;
    if (len < KVS_WIRE_HDR_LEN) {
        conn_kill(c, "short rdma message");
        return;
    }
    struct kvs_wire_hdr h;
    if (kvs_wire_ctrl_hdr_decode(msg, len, &h) < 0) {
        conn_kill(c, "bad rdma message header");
        return;
    }
    const uint8_t *body = msg + KVS_WIRE_HDR_LEN;
    if (c->pull.pending) {
        /* The client waits for a PULL's reply before it sends again; its reply would be lost. */
        conn_kill(c, "rdma message while a pull is in flight");
        return;
    }
    /*
     * The client sends again only once it has the last PUSH's reply, which
     * RC delivered after every WRITE: the pins are no longer needed, even if
     * the SEND's own completion has not been polled yet. (A client that sends
     * early only reads its own buffers early; its rkey reaches the pool anyway.)
     */
    if (c->push.pending) push_finish(c);
    if (!kvsd_proto_authenticated(c->proto)) {
        /*
         * With --auth-file, nothing hands out a slot (or an rkey) before AUTH:
         * proto answers everything but HELLO and AUTH with -EACCES and closes.
         * Remote access is turned on only once AUTH has passed (before any
         * RESERVE/LEASE can be read: one message at a time).
         */
        handle_proto(c, msg, len);
        if (!c->dead && !c->closing && kvsd_proto_authenticated(c->proto) && !c->remote_access) {
            int rc = qp_remote_access(c, 1);
            if (rc < 0) conn_kill(c, "cannot grant remote access after AUTH");
        }
        return;
    }
    switch (h.opcode) {
    case KVS_OP_RDMA_RESERVE:
    case KVS_OP_RDMA_LEASE:
        handle_slots(c, &h, body);
        break;
    case KVS_OP_RDMA_COMMIT:
    case KVS_OP_RDMA_RELEASE:
        handle_tokens(c, &h, body);
        break;
    case KVS_OP_RDMA_PULL:
        handle_pull(c, &h, body);
        break;
    case KVS_OP_RDMA_PUSH:
        /* A kvstored without PUSH (KVS_RDMA_TEST_NO_PUSH) answers it as an unknown opcode. */
        if (c->r->push_on)
            handle_push(c, &h, body);
        else
            handle_proto(c, msg, len);
        break;
    default:
        handle_proto(c, msg, len);
        break;
    }
}

/* ---- events ---- */

static void cm_events(struct kvsd_rdma *r)
{
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(r->ec, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        struct rdma_cm_id *id = ev->id;
        struct rdma_conn_param req = ev->param.conn;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            int rc = conn_accept(r, id, &req);
            if (rc < 0) {
                if (r->cfg.verbose)
                    fprintf(stderr, "kvstored: rdma: refusing a connection: %s\n", strerror(-rc));
                rdma_reject(id, NULL, 0);
                rdma_destroy_id(id);
            }
            continue;
        }
        struct rconn *c = id->context;
        if (!c || id == r->lid) continue;
        switch (type) {
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            conn_kill(c, "disconnected");
            conn_free(c);
            break;
        default:
            break;
        }
    }
}

static void cq_events(struct kvsd_rdma *r)
{
    struct ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(r->comp, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
    ibv_req_notify_cq(r->cq, 0);
    struct ibv_wc wc[32];
    int n;
    while ((n = ibv_poll_cq(r->cq, 32, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            struct rconn *c = conn_by_qp(r, wc[i].qp_num);
            if (!c || c->dead) continue;
            if (wc[i].status != IBV_WC_SUCCESS) {
                conn_kill(c, ibv_wc_status_str(wc[i].status));
                continue;
            }
            if (c->closing) {
                /* Its last reply has left: cut it now. Nothing it sent is served. */
                if (wc[i].opcode != IBV_WC_RECV) conn_kill(c, c->closing);
                continue;
            }
            if (wc[i].wr_id == PULL_WR_ID && c->pull.pending) {
                pull_finish(c); /* RC: every READ before the signaled last one is done too */
                continue;
            }
            if ((wc[i].wr_id & PUSH_WR_MASK) == PUSH_WR_TAG) {
                /* A PUSH's reply has left, after its WRITEs: unpin (unless already done). */
                if (c->push.pending && (uint32_t)wc[i].wr_id == c->push.seq) push_finish(c);
                continue;
            }
            if (wc[i].opcode != IBV_WC_RECV) continue;
            uint32_t idx = (uint32_t)wc[i].wr_id;
            handle_message(c, c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX, wc[i].byte_len);
            if (!c->dead && post_recv(c, idx) < 0) conn_kill(c, "ibv_post_recv failed");
        }
    }
}

/* Cuts every connection holding a reservation or lease past its deadline. */
static void lease_tick(struct kvsd_rdma *r)
{
    uint64_t expirations;
    if (read(r->tfd, &expirations, sizeof(expirations)) < 0) return;
    uint64_t now = kvs_now_ns();
    for (struct rconn *c = r->conns; c; c = c->next) {
        if (!c->dead && c->closing && c->close_by_ns < now) conn_kill(c, c->closing);
        if (c->dead || !c->nused) continue;
        for (uint32_t i = 0; i < LEASES_PER_CONN; i++) {
            if (c->leases[i].kind != LEASE_FREE && c->leases[i].deadline_ns < now) {
                r->ctr.lease_expiries++;
                conn_kill(c, "a reservation or lease expired");
                break;
            }
        }
    }
}

void kvsd_rdma_service(void *arg)
{
    struct kvsd_rdma *r = arg;
    struct epoll_event evs[4];
    int n = epoll_wait(r->epfd, evs, 4, 0);
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd == r->ec->fd)
            cm_events(r);
        else if (fd == r->comp->fd)
            cq_events(r);
        else if (fd == r->tfd)
            lease_tick(r);
    }
}

/* ---- set-up ---- */

static int fail_with(char *err, size_t errlen, int rc, const char *what)
{
    snprintf(err, errlen, "%s: %s", what, strerror(rc < 0 ? -rc : rc));
    return rc < 0 ? rc : -rc;
}

static int watch(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (set_nonblock(fd) < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return -errno;
    return 0;
}

static int bind_listen(struct kvsd_rdma *r, char *err, size_t errlen)
{
    struct addrinfo hints = {
        .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(r->cfg.host, r->cfg.port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "cannot resolve %s:%s: %s", r->cfg.host, r->cfg.port,
                 gai_strerror(gai));
        return -EINVAL;
    }
    int rc = 0;
    if (rdma_bind_addr(r->lid, res->ai_addr) != 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot bind rdma %s:%s: %s (no RDMA device on that address?)",
                 r->cfg.host, r->cfg.port, strerror(errno));
    } else if (rdma_listen(r->lid, 64) != 0) {
        rc = -errno;
        snprintf(err, errlen, "rdma_listen %s:%s: %s", r->cfg.host, r->cfg.port, strerror(errno));
    }
    freeaddrinfo(res);
    return rc;
}

int kvsd_rdma_create(struct kvsd_server *srv, const struct kvsd_rdma_config *cfg,
                     struct kvsd_rdma **out, char *err, size_t errlen)
{
    *out = NULL;
    int ndev = 0;
    struct ibv_device **devs = ibv_get_device_list(&ndev);
    if (devs) ibv_free_device_list(devs);
    if (!devs || ndev == 0) {
        snprintf(err, errlen, "no RDMA device found");
        return -ENODEV;
    }
    struct kvsd_rdma *r = calloc(1, sizeof(*r));
    if (!r) return fail_with(err, errlen, -ENOMEM, "rdma");
    r->srv = srv;
    r->cfg = *cfg;
    if (r->cfg.lease_ms == 0) r->cfg.lease_ms = 10000;
    r->push_on = 1;
#ifdef KVS_TEST_HOOKS
    /* Test hook (test builds only): behave like a kvstored from before PUSH (docs/rdma.md). */
    const char *no_push = getenv("KVS_RDMA_TEST_NO_PUSH");
    if (no_push && *no_push && strcmp(no_push, "0") != 0) r->push_on = 0;
#endif
    r->tfd = r->epfd = -1;
    int rc;
    r->ec = rdma_create_event_channel();
    if (!r->ec) {
        rc = fail_with(err, errlen, -errno, "rdma_create_event_channel");
        if (rc == -ENOENT) rc = -ENODEV;
        goto fail;
    }
    if (rdma_create_id(r->ec, &r->lid, r, RDMA_PS_TCP) != 0) {
        rc = fail_with(err, errlen, -errno, "rdma_create_id");
        goto fail;
    }
    if ((rc = bind_listen(r, err, errlen)) < 0) goto fail;
    r->verbs = r->lid->verbs;
    if (!r->verbs) {
        snprintf(err, errlen, "bind --rdma-listen to the address of an RDMA device");
        rc = -EINVAL;
        goto fail;
    }
    struct ibv_device_attr da;
    if (ibv_query_device(r->verbs, &da) != 0) {
        rc = fail_with(err, errlen, -errno, "ibv_query_device");
        goto fail;
    }
    r->max_rd_atom = da.max_qp_rd_atom < 16 ? (uint32_t)da.max_qp_rd_atom : 16;
    r->max_init_rd_atom = da.max_qp_init_rd_atom < 16 ? (uint32_t)da.max_qp_init_rd_atom : 16;
    r->pd = ibv_alloc_pd(r->verbs);
    if (!r->pd) {
        rc = fail_with(err, errlen, -errno, "ibv_alloc_pd");
        goto fail;
    }
    /* The whole pool, once: every slot handed out lies inside it. */
    struct kvsd_pool *pool = kvsd_store_pool(srv->store);
    r->pool_mr =
        ibv_reg_mr(r->pd, kvsd_pool_base(pool), kvsd_pool_size(pool),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!r->pool_mr) {
        rc = fail_with(err, errlen, -errno, "ibv_reg_mr of the pool (ulimit -l?)");
        goto fail;
    }
    r->comp = ibv_create_comp_channel(r->verbs);
    if (!r->comp) {
        rc = fail_with(err, errlen, -errno, "ibv_create_comp_channel");
        goto fail;
    }
    int depth = CQ_DEPTH < da.max_cqe ? CQ_DEPTH : da.max_cqe;
    r->cq = ibv_create_cq(r->verbs, depth, NULL, r->comp, 0);
    if (!r->cq || ibv_req_notify_cq(r->cq, 0) != 0) {
        rc = fail_with(err, errlen, -errno, "ibv_create_cq");
        goto fail;
    }
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    long tick_ms = r->cfg.lease_ms / 4 < 20    ? 20
                   : r->cfg.lease_ms / 4 > 250 ? 250
                                               : r->cfg.lease_ms / 4;
    struct itimerspec its = {
        .it_interval = {.tv_sec = tick_ms / 1000, .tv_nsec = tick_ms % 1000 * 1000000},
        .it_value = {.tv_sec = tick_ms / 1000, .tv_nsec = tick_ms % 1000 * 1000000}};
    if (r->tfd < 0 || timerfd_settime(r->tfd, 0, &its, NULL) < 0) {
        rc = fail_with(err, errlen, -errno, "timerfd");
        goto fail;
    }
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0 || (rc = watch(r->epfd, r->ec->fd)) < 0 ||
        (rc = watch(r->epfd, r->comp->fd)) < 0 || (rc = watch(r->epfd, r->tfd)) < 0) {
        rc = fail_with(err, errlen, r->epfd < 0 ? -errno : rc, "epoll");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    kvsd_rdma_destroy(r);
    return rc;
}

int kvsd_rdma_local_addr(const struct kvsd_rdma *r, char *buf, size_t len)
{
    struct sockaddr *sa = rdma_get_local_addr(r->lid);
    char host[64];
    if (!sa || sa->sa_family != AF_INET ||
        !inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, host, sizeof(host)))
        return -EINVAL;
    snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(rdma_get_src_port(r->lid)));
    return 0;
}

int kvsd_rdma_fd(const struct kvsd_rdma *r)
{
    return r->epfd;
}

void kvsd_rdma_stats(void *arg, void (*line)(void *text, const char *name, uint64_t value),
                     void *text)
{
    const struct kvsd_rdma_counters *k = &((struct kvsd_rdma *)arg)->ctr;
    line(text, "rdma_connections_current", k->conns_current);
    line(text, "rdma_connections_total", k->conns_total);
    line(text, "rdma_reserves", k->reserves);
    line(text, "rdma_commits", k->commits);
    line(text, "rdma_aborts", k->aborts);
    line(text, "rdma_leases", k->leases);
    line(text, "rdma_releases", k->releases);
    line(text, "rdma_bad_tokens", k->bad_tokens);
    line(text, "rdma_lease_expiries", k->lease_expiries);
    line(text, "rdma_messages_in", k->messages_in);
    line(text, "rdma_messages_out", k->messages_out);
    line(text, "rdma_pulls", k->pulls);
    line(text, "rdma_pushes", k->pushes);
}

uint32_t kvsd_rdma_features(const struct kvsd_rdma *r)
{
    return KVS_FEAT_PULL | (r->push_on ? KVS_FEAT_PUSH : 0);
}

const struct kvsd_rdma_counters *kvsd_rdma_counters(const struct kvsd_rdma *r)
{
    return &r->ctr;
}

void kvsd_rdma_destroy(struct kvsd_rdma *r)
{
    if (!r) return;
    while (r->conns) {
        conn_kill(r->conns, "shutting down");
        conn_free(r->conns);
    }
    if (r->epfd >= 0) close(r->epfd);
    if (r->tfd >= 0) close(r->tfd);
    if (r->cq) ibv_destroy_cq(r->cq);
    if (r->comp) ibv_destroy_comp_channel(r->comp);
    if (r->pool_mr) ibv_dereg_mr(r->pool_mr);
    if (r->pd) ibv_dealloc_pd(r->pd);
    if (r->lid) rdma_destroy_id(r->lid);
    if (r->ec) rdma_destroy_event_channel(r->ec);
    free(r);
}

/*
 * rdma_conn.c - one RDMA connection of kvstored: accepting it (its QP on
 * the shared CQ, its buffers, receives posted; with --auth-file a QP with no
 * remote access until AUTH), remote access on and off, sending a control
 * message, cutting it and freeing it.
 *
 * Cutting a connection moves its QP to the error state first, so that no
 * WRITE or READ of it can land any more, then drops its reservations and
 * leases; the id is destroyed when the DISCONNECTED event arrives.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "parse.h"

static int post_recv_on(struct kvsd_rdma_conn *c, struct ibv_qp *qp, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX),
                          .length = KVS_WIRE_CTRL_MAX,
                          .lkey = c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = idx, .sg_list = &sge, .num_sge = 1}, *bad;
    return -ibv_post_recv(qp, &wr, &bad);
}

int kvsd_rdma_post_recv(struct kvsd_rdma_conn *c, uint32_t idx)
{
    return post_recv_on(c, c->id->qp, idx);
}

/*
 * Cuts a connection: the QP goes to the error state at once, so no WRITE or
 * READ of this client lands any more, then its reservations and leases are
 * dropped (reservations past their deadline at expired_before_ns counted as
 * expired). The id is destroyed when the DISCONNECTED event arrives.
 */
static void conn_cut(struct kvsd_rdma_conn *c, const char *why, uint64_t expired_before_ns)
{
    if (c->dead) return;
    c->dead = 1;
    if (c->r->cfg.verbose) {
        char peer[64] = "unknown peer";
        kvsd_rdma_peer_name(c->id, peer, sizeof(peer));
        kvs_log_server("kvstored", "rdma: closing the connection from %s: %s", peer, why);
    }
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    if (c->id->qp) ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
    kvsd_rdma_leases_drop_all(c, expired_before_ns);
    rdma_disconnect(c->id);
}

void kvsd_rdma_conn_kill(struct kvsd_rdma_conn *c, const char *why)
{
    conn_cut(c, why, 0);
}

void kvsd_rdma_conn_expire(struct kvsd_rdma_conn *c, uint64_t now_ns)
{
    conn_cut(c, "a reservation or lease expired", now_ns);
}

/*
 * Turns remote READ/WRITE on the connection's QP on or off (RTS -> RTS,
 * IBV_QP_ACCESS_FLAGS). With --auth-file a QP has none until its peer has
 * passed AUTH: the pool's rkey is then useless on it, even if guessed or
 * learned on another connection. 0 or -errno.
 */
int kvsd_rdma_qp_remote_access(struct kvsd_rdma_conn *c, int on)
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
 * peer that never acknowledges is cut by the lease tick after lease_ms (the
 * bound on anything a peer holds; a fixed second was too short for a
 * loaded soft-RoCE VM, whose refused peers then read a bare disconnect).
 */
void kvsd_rdma_conn_close_after_reply(struct kvsd_rdma_conn *c, const char *why)
{
    if (c->dead || c->closing) return;
    if (kvsd_rdma_qp_remote_access(c, 0) < 0) {
        kvsd_rdma_conn_kill(c, why);
        return;
    }
    c->closing = why;
    c->close_by_ns = kvs_now_ns() + (uint64_t)c->r->cfg.lease_ms * KVS_NS_PER_MS;
}

/* Frees what conn_alloc allocated (each piece may be missing). */
static void conn_release_memory(struct kvsd_rdma_conn *c)
{
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
    free(c);
}

void kvsd_rdma_conn_free(struct kvsd_rdma_conn *c)
{
    struct kvsd_rdma *r = c->r;
    if (c->id->qp) rdma_destroy_qp(c->id);
    kvsd_rdma_leases_drop_all(c, 0);
    c->id->context = NULL;
    rdma_destroy_id(c->id);
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    r->ctr.conns_current--;
    conn_release_memory(c);
}

struct kvsd_rdma_conn *kvsd_rdma_conn_by_qp(struct kvsd_rdma *r, uint32_t qp_num)
{
    for (struct kvsd_rdma_conn *c = r->conns; c; c = c->next)
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

/* A new connection's memory: control buffers (registered), lease table, PULL/PUSH arrays, proto. */
static int conn_alloc(struct kvsd_rdma *r, struct rdma_cm_id *cid, struct kvsd_rdma_conn **out)
{
    struct kvsd_rdma_conn *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->r = r;
    c->id = cid;
    size_t bytes = (size_t)(KVSD_RDMA_NRECV + 1) * KVS_WIRE_CTRL_MAX;
    if (posix_memalign((void **)&c->bufs, 4096, bytes) != 0) c->bufs = NULL;
    c->pull.tokens = calloc(KVSD_RDMA_PULL_MAX, sizeof(*c->pull.tokens));
    c->pull.status = calloc(KVSD_RDMA_PULL_MAX, sizeof(*c->pull.status));
    c->pull.wrs = calloc(KVSD_RDMA_PULL_MAX, sizeof(*c->pull.wrs));
    c->pull.sges = calloc(KVSD_RDMA_PULL_MAX, sizeof(*c->pull.sges));
    c->push.tokens = calloc(KVSD_RDMA_PUSH_MAX, sizeof(*c->push.tokens));
    c->push.wrs = calloc(KVSD_RDMA_PUSH_MAX, sizeof(*c->push.wrs));
    c->push.sges = calloc(KVSD_RDMA_PUSH_MAX, sizeof(*c->push.sges));
    c->proto = kvsd_proto_conn_new(r->srv);
    if (!c->bufs || kvsd_rdma_leases_init(c) < 0 || !c->pull.tokens || !c->pull.status ||
        !c->pull.wrs || !c->pull.sges || !c->push.tokens || !c->push.wrs || !c->push.sges ||
        !c->proto) {
        conn_release_memory(c);
        return -ENOMEM;
    }
    c->mr = ibv_reg_mr(r->pd, c->bufs, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr) {
        int rc = errno ? -errno : -ENOMEM;
        conn_release_memory(c);
        return rc;
    }
    *out = c;
    return 0;
}

/*
 * c's RC queue pair on the shared CQ, and the connection parameters to
 * accept with (*p). With --auth-file the QP is our own, with no remote
 * access (*own_qp; rdma_accept leaves it alone: cid->qp is set only
 * afterwards); without, rdma_create_qp's, with remote access.
 */
static int conn_create_qp(struct kvsd_rdma_conn *c, const struct rdma_conn_param *req,
                          struct rdma_conn_param *p, struct ibv_qp **own_qp)
{
    struct kvsd_rdma *r = c->r;
    struct ibv_qp_init_attr qa = {
        .send_cq = r->cq,
        .recv_cq = r->cq,
        .qp_type = IBV_QPT_RC,
        /*
         * A PULL's READs, or two PUSH chains: a PUSH's WRITEs and reply hold
         * their slots until the reply's completion, which may come after the
         * client's next PUSH (its ACK can trail it).
         */
        .cap = {.max_send_wr = KVSD_RDMA_SEND_DEPTH + 2 * (KVSD_RDMA_PUSH_MAX + 1),
                .max_recv_wr = KVSD_RDMA_NRECV,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = KVSD_RDMA_INLINE_WANT}};
    /* The CM event reports the client's initiator depth as our responder_resources. */
    uint8_t rd = req->responder_resources < r->max_rd_atom ? req->responder_resources
                                                           : (uint8_t)r->max_rd_atom;
    /* ...and its responder resources as our initiator depth: what PULL's READs may use. */
    uint8_t init = req->initiator_depth < r->max_init_rd_atom ? req->initiator_depth
                                                              : (uint8_t)r->max_init_rd_atom;
    *p = (struct rdma_conn_param){
        .responder_resources = rd, .initiator_depth = init, .rnr_retry_count = 7};
    *own_qp = NULL;
    if (r->srv->auth_secret) {
        int rc = create_qp_without_remote_access(r, c->id, &qa, rd, init, own_qp);
        if (rc < 0) return rc;
        p->qp_num = (*own_qp)->qp_num;
    } else if (rdma_create_qp(c->id, r->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(c->id, r->pd, &qa) != 0) return errno ? -errno : -EIO;
        c->remote_access = 1;
    } else {
        c->remote_access = 1;
    }
    c->max_inline = qa.cap.max_inline_data;
    return 0;
}

/*
 * Accepts a connect request: QP on the shared CQ, buffers, receives posted.
 * With --auth-file the QP has no remote access until the peer passes AUTH.
 */
int kvsd_rdma_conn_accept(struct kvsd_rdma *r, struct rdma_cm_id *cid,
                          const struct rdma_conn_param *req)
{
    if (cid->verbs != r->verbs || r->ctr.conns_current >= KVSD_RDMA_MAX_CONNS) return -EBUSY;
    struct kvsd_rdma_conn *c = NULL;
    int rc = conn_alloc(r, cid, &c);
    if (rc < 0) return rc;
    struct rdma_conn_param p;
    struct ibv_qp *own_qp = NULL;
    rc = conn_create_qp(c, req, &p, &own_qp);
    for (uint32_t i = 0; rc == 0 && i < KVSD_RDMA_NRECV; i++)
        rc = post_recv_on(c, own_qp ? own_qp : cid->qp, i);
    if (rc < 0) {
        if (own_qp) ibv_destroy_qp(own_qp);
        if (cid->qp) rdma_destroy_qp(cid);
        conn_release_memory(c);
        return rc;
    }
    cid->context = c;
    c->next = r->conns;
    if (r->conns) r->conns->prev = c;
    r->conns = c;
    r->ctr.conns_current++;
    r->ctr.conns_total++;
    rc = rdma_accept(cid, &p) != 0 ? (errno ? -errno : -EIO) : 0;
    if (own_qp) cid->qp = own_qp; /* from now on it is the id's, as rdma_create_qp's would be */
    if (rc < 0) kvsd_rdma_conn_free(c); /* destroys cid (and the QP) too */
    return rc;
}

uint8_t *kvsd_rdma_send_buf(struct kvsd_rdma_conn *c)
{
    return c->bufs + (size_t)KVSD_RDMA_NRECV * KVS_WIRE_CTRL_MAX;
}

void kvsd_rdma_send_reply(struct kvsd_rdma_conn *c, size_t len)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)kvsd_rdma_send_buf(c), .length = (uint32_t)len, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = UINT64_MAX,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (len <= c->max_inline) wr.send_flags |= IBV_SEND_INLINE;
    if (ibv_post_send(c->id->qp, &wr, &bad) != 0) {
        kvsd_rdma_conn_kill(c, "ibv_post_send failed");
        return;
    }
    c->r->ctr.messages_out++;
}

void kvsd_rdma_peer_name(struct rdma_cm_id *id, char *buf, size_t len)
{
    struct sockaddr *sa = id ? rdma_get_peer_addr(id) : NULL;
    if (sa)
        kvs_format_sockaddr(sa,
                            sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                      : sizeof(struct sockaddr_in),
                            buf, len);
}

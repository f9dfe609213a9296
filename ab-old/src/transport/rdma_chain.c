/*
 * rdma_chain.c - posting work requests and waiting for them (RDMA transport).
 *
 * A request is one chain: its data WRs (RDMA WRITEs or READs; none for a
 * control-only exchange) followed by one control SEND, posted with one
 * ibv_post_send when it fits the send queue. Only the last WR of a post is
 * signaled; WRs carry a sequence number as wr_id so that one completion
 * says every WR before it is done (RC completes a send queue in order).
 * Slices adjacent on both sides merge into one SGE, slices adjacent only
 * remotely share one WR (up to max_sge). A chain longer than the send queue
 * is posted in pieces, each ending in a signaled WR that is waited for.
 * Control messages that fit max_inline_data are sent inline.
 */
#include "rdma_int.h"

#include <errno.h>
#include <poll.h>

int kvs_rdma_post_recv(struct kvs_rdma_conn *c, int idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->ctrl + (size_t)idx * KVS_WIRE_CTRL_MAX),
                          .length = KVS_WIRE_CTRL_MAX,
                          .lkey = c->ctrl_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)idx, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

/* Notes one completion: a reply received, or a signaled WR done. 0, or -ECONNRESET. */
static int take_wc(struct kvs_rdma_conn *c, const struct ibv_wc *wc)
{
    atomic_fetch_add(&c->cqes, 1);
    if (wc->status != IBV_WC_SUCCESS) {
        kvs_log(KVS_LOG_WARN, "rdma %s: %s", c->ep.name, ibv_wc_status_str(wc->status));
        return -ECONNRESET;
    }
    if (wc->opcode == IBV_WC_RECV) {
        c->reply_idx = (int)wc->wr_id;
        c->reply_len = wc->byte_len;
    } else if (wc->wr_id > c->sig_done) {
        c->sig_done = wc->wr_id;
    }
    return 0;
}

/* Polls every completion there is. 0, -ECONNRESET (a failed WR) or -EIO. */
static int poll_all(struct kvs_rdma_conn *c)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0)
        for (int i = 0; i < n; i++)
            if (take_wc(c, &wc[i]) < 0) return -ECONNRESET;
    return n < 0 ? -EIO : 0;
}

/*
 * Sleeps up to 100 ms (and not past deadline) on the completion channel and
 * the CM channel: a server that cuts us off says DISCONNECTED at once.
 * 0, -ETIMEDOUT, -ECONNRESET or -errno.
 */
static int sleep_on_channels(struct kvs_rdma_conn *c, uint64_t deadline)
{
    int ms = kvs_rdma_remaining_ms(deadline);
    if (ms == 0) return -ETIMEDOUT;
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
    return 0;
}

/*
 * Polls the CQ until the signaled WR with sequence number sig has completed
 * and (want_reply) a control reply has arrived. Sleeps on the completion
 * channel between polls. 0, -ETIMEDOUT or -ECONNRESET (a failed WR).
 */
static int wait_done(struct kvs_rdma_conn *c, uint64_t sig, int want_reply, uint64_t deadline)
{
    for (;;) {
        int rc = poll_all(c);
        if (rc < 0) return rc;
        if (c->sig_done >= sig && (!want_reply || c->reply_idx >= 0)) return 0;
        if (ibv_req_notify_cq(c->cq, 0) != 0) return -EIO;
        /* A completion may have arrived before notification was armed. */
        struct ibv_wc wc;
        int n = ibv_poll_cq(c->cq, 1, &wc);
        if (n > 0) {
            if (take_wc(c, &wc) < 0) return -ECONNRESET;
            continue;
        }
        if ((rc = sleep_on_channels(c, deadline)) < 0) return rc;
    }
}

size_t kvs_rdma_put_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len,
                        uint64_t id)
{
    struct kvs_wire_hdr h = {.opcode = opcode, .count = count, .body_len = body_len, .id = id};
    kvs_wire_hdr_encode(out, &h);
    return KVS_WIRE_HDR_LEN;
}

/* Posts wrs[0..n) as one piece of a chain longer than the send queue, ending signaled; waits. */
static int post_piece(struct kvs_rdma_conn *c, struct ibv_send_wr *wrs, uint32_t n,
                      uint64_t deadline)
{
    struct ibv_send_wr *last = &wrs[n - 1], *bad;
    struct ibv_send_wr *saved = last->next;
    last->next = NULL;
    last->send_flags |= IBV_SEND_SIGNALED;
    last->wr_id = ++c->sig_posted;
    int rc = ibv_post_send(c->id->qp, wrs, &bad);
    last->next = saved;
    if (rc) return -EIO;
    atomic_fetch_add(&c->doorbells, 1);
    atomic_fetch_add(&c->wrs, n);
    return wait_done(c, c->sig_posted, 0, deadline);
}

int kvs_rdma_post_chain(struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch, size_t msg_len,
                        int fence, uint64_t deadline)
{
    struct ibv_send_wr *wrs = ch ? ch->wrs : NULL;
    uint32_t nwr = ch ? ch->nwr : 0;
    struct ibv_sge sge = {.addr = (uintptr_t)kvs_rdma_send_buf(c),
                          .length = (uint32_t)msg_len,
                          .lkey = c->ctrl_mr->lkey};
    struct ibv_send_wr ctl = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    if (msg_len <= c->max_inline) ctl.send_flags |= IBV_SEND_INLINE;
    if (fence && nwr) ctl.send_flags |= IBV_SEND_FENCE;
    uint32_t room = c->sq_depth - 1; /* WRs per post besides the control SEND */
    uint32_t i = 0;
    c->reply_idx = -1;
    if (nwr > room) atomic_fetch_add(&c->split_chains, 1);
    for (; nwr - i > room; i += room) {
        int rc = post_piece(c, &wrs[i], room, deadline);
        if (rc < 0) return rc;
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

int kvs_rdma_wait_reply(struct kvs_rdma_conn *c, uint64_t deadline)
{
    return wait_done(c, c->sig_posted, 1, deadline);
}

int kvs_rdma_call(struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch, size_t msg_len, int fence,
                  uint64_t deadline)
{
    int rc = kvs_rdma_post_chain(c, ch, msg_len, fence, deadline);
    return rc < 0 ? rc : kvs_rdma_wait_reply(c, deadline);
}

static const uint8_t *reply_msg(const struct kvs_rdma_conn *c)
{
    return c->ctrl + (size_t)c->reply_idx * KVS_WIRE_CTRL_MAX;
}

int kvs_rdma_reply_error(const struct kvs_rdma_conn *c, int32_t *status)
{
    struct kvs_wire_hdr h;
    const char *text;
    size_t tlen;
    const uint8_t *m = reply_msg(c);
    return kvs_wire_ctrl_hdr_decode(m, c->reply_len, &h) == 0 &&
           h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY) &&
           kvs_wire_error_decode(m + KVS_WIRE_HDR_LEN, h.body_len, status, &text, &tlen) == 0;
}

const uint8_t *kvs_rdma_take_reply(struct kvs_rdma_conn *c, uint8_t opcode, uint64_t id,
                                   uint32_t count, uint32_t entry_len, uint32_t *body_len, int *err)
{
    const uint8_t *m = reply_msg(c);
    struct kvs_wire_hdr h;
    *err = -EPROTO;
    if (kvs_rdma_post_recv(c, c->reply_idx) < 0) return NULL;
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

void kvs_rdma_chain_add(const struct kvs_rdma_conn *c, struct kvs_rdma_chain *ch,
                        enum ibv_wr_opcode op, const struct kvs_rdma_slice *s)
{
    if (ch->nwr > 0) {
        struct ibv_send_wr *w = &ch->wrs[ch->nwr - 1];
        struct ibv_sge *last = &w->sg_list[w->num_sge - 1];
        if (w->wr.rdma.rkey == s->rkey && ch->rnext == s->raddr) {
            if (last->lkey == s->lkey && last->addr + last->length == s->laddr) {
                last->length += s->len;
                ch->rnext += s->len;
                return;
            }
            if ((uint32_t)w->num_sge < c->max_sge) {
                ch->sges[ch->nsge++] =
                    (struct ibv_sge){.addr = s->laddr, .length = s->len, .lkey = s->lkey};
                w->num_sge++;
                ch->rnext += s->len;
                return;
            }
        }
        w->next = &ch->wrs[ch->nwr];
    }
    ch->sges[ch->nsge] = (struct ibv_sge){.addr = s->laddr, .length = s->len, .lkey = s->lkey};
    ch->wrs[ch->nwr] = (struct ibv_send_wr){.sg_list = &ch->sges[ch->nsge],
                                            .num_sge = 1,
                                            .opcode = op,
                                            .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
    ch->nsge++;
    ch->nwr++;
    ch->rnext = s->raddr + s->len;
}

/*
 * rdma_chain.c - posting work requests and waiting for them (RDMA transport).
 *
 * A request is one chain: its data WRs (RDMA WRITEs or READs; none for a
 * control-only exchange) followed by one control SEND, posted with one
 * ibv_post_send when it fits the send queue. Only the last WR of a post is
 * signaled; its wr_id is the count of WRs posted up to it, so that one
 * completion says every WR before it is done (RC completes a send queue in
 * order) and how much of the queue is free again, which several requests
 * share: a post waits for room. Slices adjacent on both sides merge into
 * one SGE, slices adjacent only remotely share one WR (up to max_sge). A
 * chain longer than the send queue is posted in pieces, each ending in a
 * signaled WR. Control messages that fit max_inline_data are sent inline.
 *
 * Replies: each lane (rdma_int.h) has at most one control message awaiting
 * its reply; a reply goes to the lane whose message carried its id. No
 * thread of its own: whichever waiter finds nobody polling polls for all.
 */
#include "rdma_int.h"

#include <errno.h>
#include <poll.h>

#include "clock.h"

int kvs_rdma_post_recv(struct kvs_rdma_conn *c, int idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->ctrl + (size_t)idx * KVS_WIRE_CTRL_MAX),
                          .length = KVS_WIRE_CTRL_MAX,
                          .lkey = c->ctrl_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)idx, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

/*
 * Gives the reply in receive buffer idx to the lane whose message it
 * answers (by the id in its header). 0, or -EPROTO for a reply no lane
 * waits for (or one too short to carry an id).
 */
static int match_reply(struct kvs_rdma_conn *c, int idx, uint32_t len)
{
    struct kvs_wire_hdr h;
    const uint8_t *m = c->ctrl + (size_t)idx * KVS_WIRE_CTRL_MAX;
    if (kvs_wire_ctrl_hdr_decode(m, len, &h) == 0 &&
        kvs_rdma_lane_answer(c->lanes, KVS_RDMA_LANES, h.id, idx, len)) {
        c->inflight--;
        return 0;
    }
    kvs_log(KVS_LOG_WARN, "rdma %s: a reply that answers no request in flight", c->ep.name);
    return -EPROTO;
}

/* Notes one completion: a reply to its lane, or send queue room. 0, -ECONNRESET or -EPROTO. */
static int take_wc(struct kvs_rdma_conn *c, const struct ibv_wc *wc)
{
    atomic_fetch_add(&c->cqes, 1);
    if (wc->status != IBV_WC_SUCCESS) {
        kvs_log(KVS_LOG_WARN, "rdma %s: %s", c->ep.name, ibv_wc_status_str(wc->status));
        return -ECONNRESET;
    }
    if (wc->opcode == IBV_WC_RECV) return match_reply(c, (int)wc->wr_id, wc->byte_len);
    if (wc->wr_id > c->sq_done) c->sq_done = wc->wr_id; /* RC: every WR before it is done too */
    return 0;
}

/* Polls every completion there is. 1 if there were any, 0 if none, or a negative code. */
static int poll_all(struct kvs_rdma_conn *c)
{
    struct ibv_wc wc[16];
    int n, any = 0;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        any = 1;
        for (int i = 0; i < n; i++) {
            int rc = take_wc(c, &wc[i]);
            if (rc < 0) return rc;
        }
    }
    return n < 0 ? -EIO : any;
}

/*
 * Sleeps up to 100 ms (and not past deadline) on the completion channel and
 * the CM channel, with mu released (unless opening): a server that cuts us
 * off says DISCONNECTED at once. Only the poller calls it, and the channels
 * stay while any lane is busy. 0, -ECONNRESET or -errno.
 */
static int sleep_on_channels(struct kvs_rdma_conn *c, uint64_t deadline)
{
    int ms = kvs_rdma_remaining_ms(deadline);
    struct ibv_comp_channel *comp = c->comp;
    struct rdma_event_channel *ec = c->ec;
    struct pollfd p[2] = {{.fd = comp->fd, .events = POLLIN}, {.fd = ec->fd, .events = POLLIN}};
    int opening = c->opening, rc = 0;
    if (!opening) pthread_mutex_unlock(&c->mu);
    int r = poll(p, 2, ms < 100 ? ms : 100);
    if (r < 0 && errno != EINTR) rc = -errno;
    if (r > 0 && (p[0].revents & POLLIN)) {
        struct ibv_cq *cq;
        void *ctx;
        if (ibv_get_cq_event(comp, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
    }
    if (r > 0 && (p[1].revents & POLLIN)) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ec, &ev) == 0) {
            enum rdma_cm_event_type t = ev->event;
            rdma_ack_cm_event(ev);
            if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)
                rc = -ECONNRESET;
        }
    }
    if (!opening) pthread_mutex_lock(&c->mu);
    return rc;
}

/* One poller's round: what the CQ holds, else a sleep on the channels. 0 or a negative code. */
static int poll_round(struct kvs_rdma_conn *c, uint64_t deadline)
{
    int rc = poll_all(c);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (ibv_req_notify_cq(c->cq, 0) != 0) return -EIO;
    /* A completion may have arrived before notification was armed. */
    if ((rc = poll_all(c)) != 0) return rc < 0 ? rc : 0;
    return sleep_on_channels(c, deadline);
}

void kvs_rdma_cond_wait(struct kvs_rdma_conn *c, uint64_t deadline)
{
    uint64_t now = kvs_now_ms();
    uint64_t until = deadline < now + 100 ? deadline : now + 100;
    struct timespec ts = kvs_ns_to_timespec(until * KVS_NS_PER_MS);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* Free WRs in the send queue. */
static uint32_t sq_room(const struct kvs_rdma_conn *c)
{
    return c->sq_depth - (uint32_t)(c->sq_posted - c->sq_done);
}

/*
 * Waits until l's reply has arrived (room 0) or the send queue has room
 * free WRs. The first waiter that finds nobody polling becomes the poller:
 * it polls the CQ and sleeps on the channels with mu released, hands every
 * reply to its lane, and gives the role up once what it waits for is there
 * (waking the others, one of which takes it over). The rest sleep on c->cv.
 * 0, -ETIMEDOUT, -ECONNRESET (a failed WR, the server gone, the connection
 * cut under another request) or -EPROTO.
 */
static int wait_for(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, uint32_t room,
                    uint64_t deadline)
{
    for (;;) {
        if (room ? sq_room(c) >= room : l->reply_idx >= 0) return 0;
        if (c->broken) return -ECONNRESET;
        if (kvs_now_ms() >= deadline) return -ETIMEDOUT;
        if (c->polling) {
            kvs_rdma_cond_wait(c, deadline);
            continue;
        }
        c->polling = 1;
        int rc = poll_round(c, deadline);
        c->polling = 0;
        pthread_cond_broadcast(&c->cv);
        if (rc < 0) return rc;
    }
}

size_t kvs_rdma_put_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len,
                        uint64_t id)
{
    struct kvs_wire_hdr h = {.opcode = opcode, .count = count, .body_len = body_len, .id = id};
    kvs_wire_hdr_encode(out, &h);
    return KVS_WIRE_HDR_LEN;
}

/*
 * Posts wrs[0..n) as one ibv_post_send once the send queue has room for
 * them, the last one signaled (its wr_id: the count of WRs posted so far).
 */
static int post_room(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, struct ibv_send_wr *wrs,
                     uint32_t n, uint64_t deadline)
{
    int rc = wait_for(c, l, n, deadline);
    if (rc < 0) return rc;
    struct ibv_send_wr *last = &wrs[n - 1], *bad;
    struct ibv_send_wr *saved = last->next;
    last->next = NULL;
    last->send_flags |= IBV_SEND_SIGNALED;
    last->wr_id = c->sq_posted + n;
    rc = ibv_post_send(c->id->qp, wrs, &bad);
    last->next = saved;
    if (rc) return -EIO;
    c->sq_posted += n;
    atomic_fetch_add(&c->doorbells, 1);
    atomic_fetch_add(&c->wrs, n);
    return 0;
}

int kvs_rdma_reply_free(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l)
{
    int idx = l->reply_idx;
    l->reply_idx = -1;
    return idx >= 0 ? kvs_rdma_post_recv(c, idx) : 0;
}

int kvs_rdma_post_chain(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, struct kvs_rdma_chain *ch,
                        size_t msg_len, int fence, uint64_t deadline)
{
    if (c->broken) return -ECONNRESET;
    struct kvs_wire_hdr h;
    if (kvs_wire_ctrl_hdr_decode(l->send, msg_len, &h) < 0 || h.id == 0) return -EPROTO;
    if (kvs_rdma_reply_free(c, l) < 0) return -EIO;
    struct ibv_send_wr *wrs = ch ? ch->wrs : NULL;
    uint32_t nwr = ch ? ch->nwr : 0;
    struct ibv_sge sge = {
        .addr = (uintptr_t)l->send, .length = (uint32_t)msg_len, .lkey = c->ctrl_mr->lkey};
    struct ibv_send_wr ctl = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
    if (msg_len <= c->max_inline) ctl.send_flags |= IBV_SEND_INLINE;
    if (fence && nwr) ctl.send_flags |= IBV_SEND_FENCE;
    uint32_t room = c->sq_depth - 1; /* WRs per post besides the control SEND */
    uint32_t i = 0;
    if (nwr > room) atomic_fetch_add(&c->split_chains, 1);
    for (; nwr - i > room; i += room) {
        int rc = post_room(c, l, &wrs[i], room, deadline);
        if (rc < 0) return rc;
    }
    struct ibv_send_wr *head = &ctl;
    if (nwr > i) {
        wrs[nwr - 1].next = &ctl;
        head = &wrs[i];
    }
    int rc = post_room(c, l, head, nwr - i + 1, deadline);
    if (rc < 0) return rc;
    kvs_rdma_lane_expect(l, h.id);
    c->inflight++;
    if (c->inflight > atomic_load(&c->inflight_max)) atomic_store(&c->inflight_max, c->inflight);
    atomic_fetch_add(&c->round_trips, 1);
    return 0;
}

int kvs_rdma_wait_reply(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, uint64_t deadline)
{
    return wait_for(c, l, 0, deadline);
}

int kvs_rdma_call(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, struct kvs_rdma_chain *ch,
                  size_t msg_len, int fence, uint64_t deadline)
{
    int rc = kvs_rdma_post_chain(c, l, ch, msg_len, fence, deadline);
    return rc < 0 ? rc : kvs_rdma_wait_reply(c, l, deadline);
}

static const uint8_t *reply_msg(const struct kvs_rdma_conn *c, const struct kvs_rdma_lane *l)
{
    return c->ctrl + (size_t)l->reply_idx * KVS_WIRE_CTRL_MAX;
}

int kvs_rdma_reply_error(const struct kvs_rdma_conn *c, const struct kvs_rdma_lane *l,
                         int32_t *status)
{
    struct kvs_wire_hdr h;
    const char *text;
    size_t tlen;
    const uint8_t *m = reply_msg(c, l);
    return kvs_wire_ctrl_hdr_decode(m, l->reply_len, &h) == 0 &&
           h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY) &&
           kvs_wire_error_decode(m + KVS_WIRE_HDR_LEN, h.body_len, status, &text, &tlen) == 0;
}

const uint8_t *kvs_rdma_take_reply(struct kvs_rdma_conn *c, struct kvs_rdma_lane *l, uint8_t opcode,
                                   uint32_t count, uint32_t entry_len, uint32_t *body_len, int *err)
{
    const uint8_t *m = reply_msg(c, l);
    struct kvs_wire_hdr h;
    *err = -EPROTO;
    if (kvs_wire_ctrl_hdr_decode(m, l->reply_len, &h) < 0) return NULL;
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

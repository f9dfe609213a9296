/*
 * rdma_ops.c - the control messages of kvstored's RDMA side (docs/rdma.md):
 *
 *   RESERVE  a new pinned item per key, answered as (token, addr, rkey);
 *            COMMIT links or aborts each one.
 *   LEASE    each key's current item pinned, answered as (token, addr,
 *            rkey, len); RELEASE unpins.
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
 * Every other frame (HELLO, AUTH, EXISTS, REMOVE, STATS, plain PUT/GET) goes
 * through the same protocol state machine as TCP (proto.c). Addresses and
 * lengths handed out always come from the store's own items, checked to lie
 * inside the registered pool.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "ops.h"

static void put_reply_hdr(uint8_t *out, uint8_t opcode, uint32_t count, uint32_t body_len,
                          uint64_t id)
{
    struct kvs_wire_hdr h = {
        .opcode = (uint8_t)(opcode | KVS_OP_REPLY), .count = count, .body_len = body_len, .id = id};
    kvs_wire_hdr_encode(out, &h);
}

/* An ERROR reply, then the connection is cut: the client broke the protocol. */
static void reply_error_and_kill(struct kvsd_rdma_conn *c, uint64_t id, int32_t status,
                                 const char *why)
{
    uint8_t *out = kvsd_rdma_send_buf(c);
    size_t blen = kvs_wire_error_encode(out + KVS_WIRE_HDR_LEN,
                                        KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN, status, why);
    put_reply_hdr(out, KVS_OP_ERROR, 0, (uint32_t)blen, id);
    kvsd_rdma_send_reply(c, KVS_WIRE_HDR_LEN + blen);
    c->r->srv->counters.errors_protocol++;
    kvsd_rdma_conn_kill(c, why);
}

/* ---- slots: a key's item under a lease, by ops.c's rules ---- */

/* 1 if [data, data + len) lies inside the registered pool (every range handed out must). */
static int in_pool(const struct kvsd_rdma *r, const uint8_t *data, uint32_t len)
{
    struct kvsd_pool *pool = kvsd_store_pool(r->srv->store);
    const uint8_t *base = kvsd_pool_base(pool);
    return data >= base && (size_t)(data - base) + len <= kvsd_pool_size(pool);
}

/*
 * A put of len bytes for key: a new slot by ops.c's rules (kvsd_ops_put_reserve),
 * held by a reservation lease. 0 with *token and *data; or the key's status:
 * ops.c's refusals, -ENOSPC when the connection's lease table is full, -EIO
 * for a slot outside the registered pool.
 */
static int32_t reserve_slot(struct kvsd_rdma_conn *c, const uint8_t *key, uint16_t klen,
                            uint32_t len, uint32_t *token, uint8_t **data)
{
    struct kvsd_server *srv = c->r->srv;
    if (c->free_head == KVSD_RDMA_TOKEN_FREE) {
        kvsd_ops_refused(srv, KVS_OP_PUT);
        return -ENOSPC;
    }
    struct kvsd_item *it;
    int32_t status = kvsd_ops_put_reserve(srv, key, klen, len, &it);
    if (status < 0) return status;
    *data = kvsd_item_data(srv->store, it);
    if (!in_pool(c->r, *data, len)) {
        kvsd_ops_put_abort(srv, it);
        return -EIO;
    }
    *token = kvsd_rdma_lease_take(c, it, KVSD_LEASE_RESERVE);
    c->r->ctr.reserves++;
    return 0;
}

/*
 * A get of key for a reader with room for cap bytes: its item by ops.c's
 * rules (kvsd_ops_get), pinned under a read lease. 0 with *token, *data and
 * *len; -ERANGE with *len (nothing pinned); or the key's status with *len 0:
 * ops.c's, -ENOSPC when the lease table is full, -EIO outside the pool.
 */
static int32_t lease_item(struct kvsd_rdma_conn *c, const uint8_t *key, uint16_t klen, uint32_t cap,
                          uint32_t *token, uint8_t **data, uint32_t *len)
{
    struct kvsd_server *srv = c->r->srv;
    *len = 0;
    if (c->free_head == KVSD_RDMA_TOKEN_FREE) {
        kvsd_ops_refused(srv, KVS_OP_GET);
        return -ENOSPC;
    }
    struct kvsd_item *it;
    int32_t status = kvsd_ops_get(srv, key, klen, cap, &it, len);
    if (status < 0) return status;
    *data = kvsd_item_data(srv->store, it);
    if (!in_pool(c->r, *data, *len)) {
        kvsd_ops_get_done(srv, it);
        *len = 0;
        return -EIO;
    }
    *token = kvsd_rdma_lease_take(c, it, KVSD_LEASE_READ);
    return 0;
}

/* Unpins the item a read lease holds and frees the lease (no-op for a token naming none). */
static void drop_read_lease(struct kvsd_rdma_conn *c, uint32_t token)
{
    struct kvsd_rdma_lease *l =
        token == KVSD_RDMA_TOKEN_FREE ? NULL : kvsd_rdma_lease_find(c, token, KVSD_LEASE_READ);
    if (!l) return;
    kvsd_ops_get_done(c->r->srv, l->it);
    kvsd_rdma_lease_put(c, l);
}

/* Commits the item a reservation lease holds and frees the lease: the key's status. */
static int32_t commit_reservation(struct kvsd_rdma_conn *c, struct kvsd_rdma_lease *l)
{
    int32_t status = kvsd_ops_put_commit(c->r->srv, l->it);
    c->r->ctr.commits++;
    kvsd_rdma_lease_put(c, l);
    return status;
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
static void handle_slots(struct kvsd_rdma_conn *c, const struct kvs_wire_hdr *h,
                         const uint8_t *body)
{
    uint8_t *out = kvsd_rdma_send_buf(c) + KVS_WIRE_HDR_LEN;
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
        struct kvs_wire_slot slot = {.rkey = c->r->pool_mr->rkey, .len = e.len};
        uint8_t *data = NULL;
        int32_t status = reserve
                             ? reserve_slot(c, e.key, e.klen, e.len, &slot.token, &data)
                             : lease_item(c, e.key, e.klen, e.len, &slot.token, &data, &slot.len);
        if (status < 0) {
            put_failed_slot(out, status, status == -ERANGE ? slot.len : 0);
            continue;
        }
        slot.addr = (uint64_t)(uintptr_t)data;
        kvs_wire_slot_encode(out, &slot);
        if (!reserve) c->r->ctr.leases++;
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma message");
        return;
    }
    c->r->srv->counters.requests[reserve ? KVS_OP_PUT : KVS_OP_GET]++;
    put_reply_hdr(kvsd_rdma_send_buf(c), h->opcode, h->count, h->count * KVS_WIRE_SLOT_LEN, h->id);
    kvsd_rdma_send_reply(c, KVS_WIRE_HDR_LEN + (size_t)h->count * KVS_WIRE_SLOT_LEN);
}

/* One COMMIT or RELEASE entry against the connection's own table: the key's status. */
static int32_t settle_token(struct kvsd_rdma_conn *c, uint8_t opcode,
                            const struct kvs_wire_token *t)
{
    int commit = opcode == KVS_OP_RDMA_COMMIT;
    struct kvsd_rdma_lease *l =
        kvsd_rdma_lease_find(c, t->token, commit ? KVSD_LEASE_RESERVE : KVSD_LEASE_READ);
    if (!l) {
        c->r->ctr.bad_tokens++;
        return -EINVAL;
    }
    if (commit && t->flags == KVS_WIRE_TOKEN_COMMIT) return commit_reservation(c, l);
    if (commit) {
        kvsd_ops_put_abort(c->r->srv, l->it);
        c->r->ctr.aborts++;
    } else {
        kvsd_ops_get_done(c->r->srv, l->it);
        c->r->ctr.releases++;
    }
    kvsd_rdma_lease_put(c, l);
    return 0;
}

/* COMMIT and RELEASE: every token is checked against the connection's own table. */
static void handle_tokens(struct kvsd_rdma_conn *c, const struct kvs_wire_hdr *h,
                          const uint8_t *body)
{
    if ((uint64_t)h->count * KVS_WIRE_TOKEN_LEN != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "bad rdma token list");
        return;
    }
    uint8_t *out = kvsd_rdma_send_buf(c) + KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < h->count; i++, out += KVS_WIRE_STATUS_LEN) {
        struct kvs_wire_token t;
        if (kvs_wire_token_decode(body + (size_t)i * KVS_WIRE_TOKEN_LEN, h->opcode, &t) < 0) {
            /* What it committed before this entry stays: its own values, whole. */
            reply_error_and_kill(c, h->id, -EBADMSG, "bad rdma token flags");
            return;
        }
        kvs_wire_status_encode(out, settle_token(c, h->opcode, &t), 0);
    }
    put_reply_hdr(kvsd_rdma_send_buf(c), h->opcode, h->count, h->count * KVS_WIRE_STATUS_LEN,
                  h->id);
    kvsd_rdma_send_reply(c, KVS_WIRE_HDR_LEN + (size_t)h->count * KVS_WIRE_STATUS_LEN);
}

/* ---- PULL and PUSH: the server moves the values ---- */

/* A chain of RDMA READs (PULL) or WRITEs (PUSH) between the pool and the client's memory. */
struct xfer_chain {
    struct ibv_send_wr *wrs;
    struct ibv_sge *sges;
    uint32_t nwr;
    uint64_t rnext; /* client address just past the last transfer */
};

/*
 * Appends one transfer of len bytes between the pool at laddr and the
 * client's memory e names; merged into the last WR when adjacent to it on
 * both sides (one SGE per WR), else a new WR of opcode op, unsignaled.
 */
static void xfer_add(struct kvsd_rdma *r, struct xfer_chain *ch, enum ibv_wr_opcode op,
                     const uint8_t *laddr, const struct kvs_wire_remote_entry *e, uint32_t len)
{
    uintptr_t la = (uintptr_t)laddr;
    if (ch->nwr > 0) {
        struct ibv_send_wr *w = &ch->wrs[ch->nwr - 1];
        if (w->wr.rdma.rkey == e->rkey && ch->rnext == e->addr &&
            w->sg_list->addr + w->sg_list->length == la &&
            (uint64_t)w->sg_list->length + len <= UINT32_MAX) {
            w->sg_list->length += len;
            ch->rnext += len;
            return;
        }
        w->next = &ch->wrs[ch->nwr];
    }
    ch->sges[ch->nwr] = (struct ibv_sge){.addr = la, .length = len, .lkey = r->pool_mr->lkey};
    ch->wrs[ch->nwr] = (struct ibv_send_wr){.sg_list = &ch->sges[ch->nwr],
                                            .num_sge = 1,
                                            .opcode = op,
                                            .wr.rdma = {.remote_addr = e->addr, .rkey = e->rkey}};
    ch->rnext = e->addr + len;
    ch->nwr++;
}

/* Commits what a finished PULL's READs brought in and answers a status per key. */
void kvsd_rdma_pull_finish(struct kvsd_rdma_conn *c)
{
    uint8_t *out = kvsd_rdma_send_buf(c) + KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < c->pull.count; i++, out += KVS_WIRE_STATUS_LEN) {
        int32_t status = c->pull.status[i];
        struct kvsd_rdma_lease *l =
            c->pull.tokens[i] == KVSD_RDMA_TOKEN_FREE
                ? NULL
                : kvsd_rdma_lease_find(c, c->pull.tokens[i], KVSD_LEASE_RESERVE);
        if (l) status = commit_reservation(c, l);
        kvs_wire_status_encode(out, status, 0);
    }
    c->pull.pending = 0;
    put_reply_hdr(kvsd_rdma_send_buf(c), KVS_OP_RDMA_PULL, c->pull.count,
                  c->pull.count * KVS_WIRE_STATUS_LEN, c->pull.id);
    kvsd_rdma_send_reply(c, KVS_WIRE_HDR_LEN + (size_t)c->pull.count * KVS_WIRE_STATUS_LEN);
}

/* Posts a PULL's READs, the last one signaled (its completion runs pull_finish). */
static void post_pull(struct kvsd_rdma_conn *c, struct xfer_chain *ch)
{
    if (ch->nwr == 0) { /* nothing to read (every key failed, or empty values) */
        kvsd_rdma_pull_finish(c);
        return;
    }
    struct ibv_send_wr *last = &ch->wrs[ch->nwr - 1], *bad;
    last->next = NULL;
    last->wr_id = KVSD_RDMA_PULL_WR_ID;
    last->send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(c->id->qp, ch->wrs, &bad) != 0) {
        kvsd_rdma_conn_kill(c, "ibv_post_send of a pull failed");
        return;
    }
    c->pull.pending = 1;
}

/*
 * PULL: reserves a slot per key (a reservation lease, so that expiry and a
 * cut connection abort it), then posts one chain of RDMA READs from the
 * client's addresses into the slots; reads adjacent on both sides share one
 * READ. The last READ is signaled; its completion runs pull_finish. The
 * addresses are the client's own memory: a bad one fails the READ, which
 * cuts only this connection.
 */
static void handle_pull(struct kvsd_rdma_conn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    if (h->count > KVSD_RDMA_PULL_MAX) {
        reply_error_and_kill(c, h->id, -EMSGSIZE, "too many keys for one rdma pull");
        return;
    }
    c->pull.id = h->id;
    c->pull.count = h->count;
    struct xfer_chain ch = {.wrs = c->pull.wrs, .sges = c->pull.sges};
    size_t off = 0;
    for (uint32_t i = 0; i < h->count; i++) {
        struct kvs_wire_remote_entry e;
        c->pull.tokens[i] = KVSD_RDMA_TOKEN_FREE;
        if (kvs_wire_remote_entry_decode(body, h->body_len, &off, &e) < 0) {
            reply_error_and_kill(c, h->id, -EBADMSG, "malformed rdma pull entry");
            return;
        }
        uint8_t *data = NULL;
        c->pull.status[i] = reserve_slot(c, e.key, e.klen, e.len, &c->pull.tokens[i], &data);
        if (c->pull.status[i] == 0 && e.len > 0)
            xfer_add(c->r, &ch, IBV_WR_RDMA_READ, data, &e, e.len);
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma pull");
        return;
    }
    c->r->srv->counters.requests[KVS_OP_PUT]++;
    c->r->ctr.pulls++;
    post_pull(c, &ch);
}

/* Unpins the items of the PUSH whose reply has arrived (its WRITEs landed before it). */
void kvsd_rdma_push_finish(struct kvsd_rdma_conn *c)
{
    for (uint32_t i = 0; i < c->push.count; i++)
        drop_read_lease(c, c->push.tokens[i]);
    c->push.pending = 0;
    c->push.count = 0;
}

/*
 * Posts a PUSH's WRITEs and, behind them in the same chain, its reply (the
 * count status entries already in the send buffer), signaled. pinned: keys
 * whose items stay pinned until that reply's completion.
 */
static void post_push(struct kvsd_rdma_conn *c, struct xfer_chain *ch, uint32_t count, uint64_t id,
                      uint32_t pinned)
{
    size_t len = KVS_WIRE_HDR_LEN + (size_t)count * KVS_WIRE_STATUS_LEN;
    put_reply_hdr(kvsd_rdma_send_buf(c), KVS_OP_RDMA_PUSH, count, count * KVS_WIRE_STATUS_LEN, id);
    struct ibv_sge sge = {
        .addr = (uintptr_t)kvsd_rdma_send_buf(c), .length = (uint32_t)len, .lkey = c->mr->lkey};
    struct ibv_send_wr reply = {.wr_id = KVSD_RDMA_PUSH_WR_TAG | ++c->push.seq,
                                .sg_list = &sge,
                                .num_sge = 1,
                                .opcode = IBV_WR_SEND,
                                .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (len <= c->max_inline) reply.send_flags |= IBV_SEND_INLINE;
    if (ch->nwr > 0) ch->wrs[ch->nwr - 1].next = &reply;
    if (ibv_post_send(c->id->qp, ch->nwr > 0 ? ch->wrs : &reply, &bad) != 0) {
        kvsd_rdma_conn_kill(c, "ibv_post_send of a push failed");
        return;
    }
    kvsd_rdma_replied(c);
    c->push.pending = pinned > 0;
    if (!c->push.pending) c->push.count = 0;
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
static void handle_push(struct kvsd_rdma_conn *c, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    if (h->count > KVSD_RDMA_PUSH_MAX) {
        reply_error_and_kill(c, h->id, -EMSGSIZE, "too many keys for one rdma push");
        return;
    }
    uint8_t *out = kvsd_rdma_send_buf(c) + KVS_WIRE_HDR_LEN;
    struct xfer_chain ch = {.wrs = c->push.wrs, .sges = c->push.sges};
    uint32_t pinned = 0;
    size_t off = 0;
    c->push.count = h->count;
    for (uint32_t i = 0; i < h->count; i++)
        c->push.tokens[i] = KVSD_RDMA_TOKEN_FREE;
    for (uint32_t i = 0; i < h->count; i++, out += KVS_WIRE_STATUS_LEN) {
        struct kvs_wire_remote_entry e;
        if (kvs_wire_remote_entry_decode(body, h->body_len, &off, &e) < 0) {
            /* The pins taken so far are leases: cutting the connection drops them. */
            reply_error_and_kill(c, h->id, -EBADMSG, "malformed rdma push entry");
            return;
        }
        uint32_t token = KVSD_RDMA_TOKEN_FREE, len;
        uint8_t *data = NULL;
        int32_t status = lease_item(c, e.key, e.klen, e.len, &token, &data, &len);
        if (status == 0 && len > 0) {
            c->push.tokens[i] = token; /* pinned until the reply has left */
            pinned++;
            xfer_add(c->r, &ch, IBV_WR_RDMA_WRITE, data, &e, len);
        } else if (status == 0) {
            drop_read_lease(c, token); /* an empty value: nothing to write */
        }
        kvs_wire_status_encode(out, status, len); /* -ERANGE: the length, nothing written */
    }
    if (off != h->body_len) {
        reply_error_and_kill(c, h->id, -EBADMSG, "trailing bytes in rdma push");
        return;
    }
    c->r->srv->counters.requests[KVS_OP_GET]++;
    c->r->ctr.pushes++;
    post_push(c, &ch, h->count, h->id, pinned);
}

/* Any other frame: through the same protocol state machine as TCP. */
static void handle_proto(struct kvsd_rdma_conn *c, const uint8_t *msg, size_t len)
{
    size_t taken = kvsd_proto_feed(c->proto, msg, len);
    uint8_t *out = kvsd_rdma_send_buf(c);
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
        kvsd_rdma_conn_kill(c, "reply larger than one rdma message");
        return;
    }
    if (n) kvsd_rdma_send_reply(c, n);
    if (taken < len || kvsd_proto_closing(c->proto)) {
        const char *why = kvsd_proto_authenticated(c->proto)
                              ? "protocol error"
                              : "refused: a wrong AUTH, or a request before AUTH";
        if (n)
            kvsd_rdma_conn_close_after_reply(c, why);
        else
            kvsd_rdma_conn_kill(c, why);
    }
}

/* Serves one control message received whole. */
static void handle_message(struct kvsd_rdma_conn *c, const uint8_t *msg, size_t len)
{
    c->r->ctr.messages_in++;
    if (len < KVS_WIRE_HDR_LEN) {
        kvsd_rdma_conn_kill(c, "short rdma message");
        return;
    }
    struct kvs_wire_hdr h;
    if (kvs_wire_ctrl_hdr_decode(msg, len, &h) < 0) {
        kvsd_rdma_conn_kill(c, "bad rdma message header");
        return;
    }
    const uint8_t *body = msg + KVS_WIRE_HDR_LEN;
    if (!kvsd_proto_authenticated(c->proto)) {
        /*
         * With --auth-file, nothing hands out a slot (or an rkey) before AUTH:
         * proto answers everything but HELLO and AUTH with -EACCES and closes.
         * Remote access is turned on only once AUTH has passed (before any
         * RESERVE/LEASE is served: messages are served one at a time, in order).
         */
        handle_proto(c, msg, len);
        if (!c->dead && !c->closing && kvsd_proto_authenticated(c->proto) && !c->remote_access) {
            int rc = kvsd_rdma_qp_remote_access(c, 1);
            if (rc < 0) kvsd_rdma_conn_kill(c, "cannot grant remote access after AUTH");
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

/*
 * 1 when the message in receive buffer idx must wait: a PULL's READs are in
 * flight (its reply comes first, and there is one PULL state), or it is a
 * PUSH while the last PUSH's reply has not completed (its items stay pinned
 * until then). Replies thus leave in arrival order.
 */
static int must_wait(const struct kvsd_rdma_conn *c, uint32_t idx, uint32_t len)
{
    if (c->pull.pending) return 1;
    struct kvs_wire_hdr h;
    const uint8_t *msg = c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX;
    return c->push.pending && kvs_wire_ctrl_hdr_decode(msg, len, &h) == 0 &&
           h.opcode == KVS_OP_RDMA_PUSH;
}

void kvsd_rdma_serve_queue(struct kvsd_rdma_conn *c)
{
    /* A connection being closed (closing: once its last reply has left) serves nothing more. */
    while (c->queue.n > 0 && !c->dead && !c->closing) {
        uint32_t idx = c->queue.idx[c->queue.head], len = c->queue.len[c->queue.head];
        if (must_wait(c, idx, len)) return;
        c->queue.head = (c->queue.head + 1) % KVSD_RDMA_NRECV;
        c->queue.n--;
        handle_message(c, c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX, len);
        if (!c->dead && kvsd_rdma_post_recv(c, idx) < 0)
            kvsd_rdma_conn_kill(c, "ibv_post_recv failed");
    }
}

void kvsd_rdma_received(struct kvsd_rdma_conn *c, uint32_t idx, uint32_t len)
{
    if (c->queue.n >= KVSD_RDMA_NRECV) { /* cannot happen: one entry per receive buffer */
        kvsd_rdma_conn_kill(c, "rdma receive queue overflow");
        return;
    }
    c->queue.idx[(c->queue.head + c->queue.n) % KVSD_RDMA_NRECV] = idx;
    c->queue.len[(c->queue.head + c->queue.n) % KVSD_RDMA_NRECV] = len;
    c->queue.n++;
    kvsd_rdma_serve_queue(c);
}

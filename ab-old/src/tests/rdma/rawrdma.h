/*
 * rawrdma.h - a raw RDMA peer for tests (librdmacm + verbs, not the
 * client library): an RC queue pair connected to kvstored's RDMA side that
 * sends hand-made control messages and one-sided READs/WRITEs, so that tests
 * can break every rule the library keeps. Its buffer (receive | send | data)
 * is registered with remote WRITE and READ access: kvstored writes PUSH
 * values into raw_data() and reads PULL values from it.
 *
 * Header-only (static inline), like tests/lib/rawwire.h; the helpers assert
 * with cmocka, so include <cmocka.h> (and its prerequisites) first.
 */
#ifndef KVTEST_RAWRDMA_H
#define KVTEST_RAWRDMA_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

#define RAW_CTRL   8192
#define RAW_DATA   65536
#define RAW_WAIT_S 15

struct raw {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    uint8_t *buf; /* receive | send | data */
    struct ibv_mr *mr;
    uint64_t next_id;
    int gone; /* DISCONNECTED seen or a failed completion */
};

static inline uint8_t *raw_recv_buf(struct raw *r)
{
    return r->buf;
}
static inline uint8_t *raw_send_buf(struct raw *r)
{
    return r->buf + RAW_CTRL;
}
static inline uint8_t *raw_data(struct raw *r)
{
    return r->buf + 2 * RAW_CTRL;
}

static inline int raw_post_recv(struct raw *r)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)raw_recv_buf(r), .length = RAW_CTRL, .lkey = r->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(r->id->qp, &wr, &bad);
}

static inline int raw_wait_cm_event(struct raw *r, enum rdma_cm_event_type want)
{
    time_t end = time(NULL) + RAW_WAIT_S;
    while (time(NULL) < end) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(r->ec, &ev) == 0) {
            enum rdma_cm_event_type got = ev->event;
            rdma_ack_cm_event(ev);
            return got == want ? 0 : -1;
        }
        usleep(1000);
    }
    return -1;
}

/* Connects a bare RC queue pair to kvstored's RDMA side at host:port; nothing is said yet. */
static inline struct raw *raw_connect(const char *host, const char *port)
{
    struct raw *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    assert_int_equal(getaddrinfo(host, port, &hints, &res), 0);
    r->ec = rdma_create_event_channel();
    assert_non_null(r->ec);
    int fl = fcntl(r->ec->fd, F_GETFL);
    assert_int_equal(fcntl(r->ec->fd, F_SETFL, fl | O_NONBLOCK), 0);
    assert_int_equal(rdma_create_id(r->ec, &r->id, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_resolve_addr(r->id, NULL, res->ai_addr, 5000), 0);
    freeaddrinfo(res);
    assert_int_equal(raw_wait_cm_event(r, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    assert_int_equal(rdma_resolve_route(r->id, 5000), 0);
    assert_int_equal(raw_wait_cm_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
    r->pd = ibv_alloc_pd(r->id->verbs);
    assert_non_null(r->pd);
    r->cq = ibv_create_cq(r->id->verbs, 64, NULL, NULL, 0);
    assert_non_null(r->cq);
    struct ibv_qp_init_attr qa = {
        .send_cq = r->cq,
        .recv_cq = r->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    assert_int_equal(rdma_create_qp(r->id, r->pd, &qa), 0);
    size_t bytes = 2 * RAW_CTRL + RAW_DATA;
    r->buf = calloc(1, bytes);
    assert_non_null(r->buf);
    /* Remote WRITE and READ: kvstored writes PUSH values here and reads PULL values from here. */
    r->mr = ibv_reg_mr(r->pd, r->buf, bytes,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    assert_non_null(r->mr);
    assert_int_equal(raw_post_recv(r), 0);
    struct rdma_conn_param p = {
        /* responder resources: kvstored READs PULL values from raw_data() */
        .initiator_depth = 1,
        .responder_resources = 1,
        .retry_count = 7,
        .rnr_retry_count = 7};
    assert_int_equal(rdma_connect(r->id, &p), 0);
    assert_int_equal(raw_wait_cm_event(r, RDMA_CM_EVENT_ESTABLISHED), 0);
    return r;
}

static inline void raw_close(struct raw *r)
{
    if (!r->gone) rdma_disconnect(r->id);
    rdma_destroy_qp(r->id);
    ibv_dereg_mr(r->mr);
    ibv_destroy_cq(r->cq);
    ibv_dealloc_pd(r->pd);
    rdma_destroy_id(r->id);
    rdma_destroy_event_channel(r->ec);
    free(r->buf);
    free(r);
}

/*
 * Waits (bounded) for the completion of wr_id, or (wr_id 0) for a received
 * message. Returns the completion's status (IBV_WC_SUCCESS...) and the
 * received length in *len; -ETIMEDOUT; -ECONNRESET once the server cut us off.
 */
static inline int raw_wait(struct raw *r, uint64_t wr_id, uint32_t *len)
{
    time_t end = time(NULL) + RAW_WAIT_S;
    while (time(NULL) < end) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(r->cq, 1, &wc);
        assert_true(n >= 0);
        if (n == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                r->gone = 1;
                if (wr_id && wc.wr_id == wr_id) return wc.status;
                if (wc.status == IBV_WC_WR_FLUSH_ERR) return -ECONNRESET;
                return wc.status;
            }
            if (wc.opcode == IBV_WC_RECV) {
                if (len) *len = wc.byte_len;
                if (wr_id == 0) return IBV_WC_SUCCESS;
                continue;
            }
            if (wc.wr_id == wr_id) return IBV_WC_SUCCESS;
            continue;
        }
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(r->ec, &ev) == 0) {
            enum rdma_cm_event_type t = ev->event;
            rdma_ack_cm_event(ev);
            if (t == RDMA_CM_EVENT_DISCONNECTED) {
                r->gone = 1;
                return -ECONNRESET;
            }
        }
        usleep(1000);
    }
    return -ETIMEDOUT;
}

/*
 * Sends one control message (header + body) and waits for the reply, left in
 * raw_recv_buf; returns the reply's opcode byte, or a negative code.
 */
static inline int raw_call(struct raw *r, uint8_t opcode, uint32_t count, const void *body,
                           uint32_t blen, uint32_t *reply_len)
{
    struct kvs_wire_hdr h = {.magic = KVS_WIRE_MAGIC,
                             .version = KVS_WIRE_VERSION,
                             .opcode = opcode,
                             .count = count,
                             .body_len = blen,
                             .id = ++r->next_id};
    uint8_t *out = raw_send_buf(r);
    assert_true(KVS_WIRE_HDR_LEN + blen <= RAW_CTRL);
    kvs_wire_hdr_encode(out, &h);
    if (blen) memcpy(out + KVS_WIRE_HDR_LEN, body, blen);
    struct ibv_sge sge = {
        .addr = (uintptr_t)out, .length = KVS_WIRE_HDR_LEN + blen, .lkey = r->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 100 + r->next_id,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(r->id->qp, &wr, &bad) != 0) return -EIO;
    uint32_t len = 0;
    int rc = raw_wait(r, 0, &len);
    if (rc != IBV_WC_SUCCESS) return rc > 0 ? -EIO : rc;
    uint8_t *in = raw_recv_buf(r);
    assert_true(len >= KVS_WIRE_HDR_LEN);
    assert_int_equal(kvs_get_u64(in + 16), r->next_id);
    *reply_len = len - KVS_WIRE_HDR_LEN;
    int op = in[5];
    assert_int_equal(raw_post_recv(r), 0);
    return op;
}

/*
 * One RESERVE (put) or LEASE (get) of n keys: keys[i] is klens[i] bytes
 * (any bytes: a test may send keys the library never would), lens[i] the
 * value's length or the capacity. The reply's slots go to slots[0..n).
 * Returns the reply's opcode byte, or a negative code.
 */
static inline int raw_slots(struct raw *r, uint8_t opcode, uint32_t n, const char *const *keys,
                            const uint16_t *klens, const uint32_t *lens,
                            struct kvs_wire_slot *slots)
{
    uint8_t body[RAW_CTRL - KVS_WIRE_HDR_LEN];
    size_t blen = 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(blen + KVS_WIRE_ENTRY_LEN + klens[i] <= sizeof(body));
        blen += kvs_wire_key_entry_encode(body + blen, (const uint8_t *)keys[i], klens[i], lens[i]);
    }
    uint32_t rlen = 0;
    int op = raw_call(r, opcode, n, body, (uint32_t)blen, &rlen);
    if (op != (opcode | KVS_OP_REPLY)) return op;
    assert_int_equal(rlen, (size_t)n * KVS_WIRE_SLOT_LEN);
    const uint8_t *s = raw_recv_buf(r) + KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++) /* kvstored's slots are well formed */
        assert_int_equal(kvs_wire_slot_decode(s + (size_t)i * KVS_WIRE_SLOT_LEN, opcode, &slots[i]),
                         0);
    return op;
}

/* One RESERVE or LEASE entry for a C-string key; the reply's slot in *slot. */
static inline int raw_slot(struct raw *r, uint8_t opcode, const char *key, uint32_t len,
                           struct kvs_wire_slot *slot)
{
    uint16_t klen = (uint16_t)strlen(key);
    return raw_slots(r, opcode, 1, &key, &klen, &len, slot);
}

/* COMMIT (flags KVS_WIRE_TOKEN_COMMIT) or RELEASE of one token; the entry's status. */
static inline int32_t raw_token(struct raw *r, uint8_t opcode, uint32_t token)
{
    uint8_t body[KVS_WIRE_TOKEN_LEN];
    struct kvs_wire_token t = {.token = token,
                               .flags = opcode == KVS_OP_RDMA_COMMIT ? KVS_WIRE_TOKEN_COMMIT : 0};
    kvs_wire_token_encode(body, &t);
    uint32_t rlen = 0;
    assert_int_equal(raw_call(r, opcode, 1, body, sizeof(body), &rlen), opcode | KVS_OP_REPLY);
    assert_int_equal(rlen, KVS_WIRE_STATUS_LEN);
    struct kvs_wire_status st;
    assert_int_equal(kvs_wire_status_decode(raw_recv_buf(r) + KVS_WIRE_HDR_LEN, opcode, &st), 0);
    return st.status;
}

/* One-sided READ or WRITE of len bytes of raw_data; the completion's status. */
static inline int raw_rdma(struct raw *r, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey,
                           uint32_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)raw_data(r), .length = len, .lkey = r->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 7,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = raddr, .rkey = rkey}},
                       *bad;
    if (ibv_post_send(r->id->qp, &wr, &bad) != 0) return -EIO;
    return raw_wait(r, 7, NULL);
}

#endif

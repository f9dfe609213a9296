/*
 * rdma_conn.c - one RDMA connection's life (RDMA transport): rdma_cm
 * address and route resolution, the RC queue pair and its buffers, connect,
 * HELLO and AUTH over the control channel, teardown; the memory registered
 * for transfers (kvs_register_buffer regions, the bounce buffer).
 *
 * Client memory becomes remotely readable (PULL) or writable (PUSH) only
 * after HELLO, and AUTH when a secret is held, have succeeded: an impostor
 * cannot read or overwrite registered buffers during the handshake.
 */
#include "rdma_int.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* Waits for the next CM event, which must be `want`. 0 or a negative code. */
static int wait_cm(struct kvs_rdma_conn *c, enum rdma_cm_event_type want, uint64_t deadline)
{
    struct pollfd p = {.fd = c->ec->fd, .events = POLLIN};
    int n = poll(&p, 1, kvs_rdma_remaining_ms(deadline));
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

void kvs_rdma_conn_down(struct kvs_rdma_conn *c)
{
    for (struct kvs_rdma_ureg *u = c->regs; u; u = u->next) {
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

/* Only called once HELLO/AUTH has set c->lim. */
int kvs_rdma_mr_access(const struct kvs_rdma_conn *c)
{
    int access = IBV_ACCESS_LOCAL_WRITE;
    if (kvs_rdma_pull_on(c)) access |= IBV_ACCESS_REMOTE_READ;
    if (kvs_rdma_push_on(c)) access |= IBV_ACCESS_REMOTE_WRITE;
    return access;
}

int kvs_rdma_bounce_reserve(struct kvs_rdma_conn *c, size_t need)
{
    if (c->bounce_size >= need) return 0;
    size_t size = c->bounce_size ? c->bounce_size : (1u << 20);
    while (size < need)
        size *= 2;
    uint8_t *b;
    if (posix_memalign((void **)&b, 4096, size) != 0) return -ENOMEM;
    struct ibv_mr *mr = ibv_reg_mr(c->pd, b, size, kvs_rdma_mr_access(c));
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

struct ibv_mr *kvs_rdma_find_reg(struct kvs_rdma_conn *c, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    for (struct kvs_rdma_ureg *u = c->regs; u; u = u->next)
        if (u->mr && a >= (uintptr_t)u->ptr && a + len <= (uintptr_t)u->ptr + u->len) return u->mr;
    return NULL;
}

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
static int authenticate(struct kvs_rdma_conn *c, const uint8_t *hello_body, uint32_t hello_len,
                        const struct kvs_wire_hello *hello, uint64_t deadline)
{
    const struct kvs_transport_config *cfg = &c->cfg;
    /* The HELLO body lies in a receive buffer already posted again: take the nonce first. */
    struct kvs_auth_client a;
    int rc = kvs_auth_client_open(&a, "rdma", c->ep.name, cfg->auth_secret, cfg->auth_secret_len,
                                  hello_body, hello_len, hello);
    if (rc <= 0) return rc;
    uint64_t id = ++c->next_id;
    uint8_t *out = kvs_rdma_send_buf(c);
    size_t len = kvs_rdma_put_hdr(out, KVS_OP_AUTH, 0, KVS_WIRE_AUTH_LEN, id);
    kvs_wire_auth_encode(out + len, a.client_nonce, a.mac);
    len += KVS_WIRE_AUTH_LEN;
    rc = kvs_rdma_call(c, NULL, len, 0, deadline);
    if (rc < 0) return rc;
    /* The server answers a wrong proof with ERROR -EACCES, then closes. */
    int32_t st;
    if (kvs_rdma_reply_error(c, &st) && st == -EACCES)
        return kvs_auth_client_verdict(&a, "rdma", c->ep.name, cfg->auth_secret,
                                       cfg->auth_secret_len, st, NULL, 0);
    uint32_t blen;
    const uint8_t *body = kvs_rdma_take_reply(c, KVS_OP_AUTH, id, 0, 0, &blen, &rc);
    if (!body) return rc;
    return kvs_auth_client_verdict(&a, "rdma", c->ep.name, cfg->auth_secret, cfg->auth_secret_len,
                                   0, body, blen);
}

/* HELLO (and AUTH, see authenticate) on a fresh connection; fills c->lim. */
static int say_hello(struct kvs_rdma_conn *c, uint64_t deadline)
{
    uint64_t id = ++c->next_id;
    size_t len = kvs_rdma_put_hdr(kvs_rdma_send_buf(c), KVS_OP_HELLO, 0, 0, id);
    int rc = kvs_rdma_call(c, NULL, len, 0, deadline);
    if (rc < 0) return rc;
    uint32_t blen;
    const uint8_t *body = kvs_rdma_take_reply(c, KVS_OP_HELLO, id, 0, 0, &blen, &rc);
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

/*
 * The event channel and id, then the endpoint's address and route. A failed
 * call is "refused"; a failed wait keeps its own code (-ETIMEDOUT ...).
 */
static int resolve(struct kvs_rdma_conn *c, uint64_t deadline)
{
    struct addrinfo hints = {
        .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(c->ep.host, c->ep.port, &hints, &res);
    if (gai != 0) {
        kvs_log(KVS_LOG_ERROR,
                "rdma %s: cannot resolve host \"%s\": %s; check the name in the server list",
                c->ep.name, c->ep.host, gai_strerror(gai));
        return -EHOSTUNREACH;
    }
    int rc = -ECONNREFUSED;
    c->ec = rdma_create_event_channel();
    if (!c->ec || rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP) != 0) goto out;
    if (rdma_resolve_addr(c->id, NULL, res->ai_addr, kvs_rdma_remaining_ms(deadline)) != 0)
        goto out;
    if ((rc = wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline)) < 0) goto out;
    rc = -ECONNREFUSED;
    if (rdma_resolve_route(c->id, kvs_rdma_remaining_ms(deadline)) != 0) goto out;
    rc = wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline);
out:
    freeaddrinfo(res);
    return rc;
}

/* The send queue depth and SGEs per WR: the defaults (or the test hooks), within the device's. */
static void size_queues(struct kvs_rdma_conn *c, const struct ibv_device_attr *da)
{
    c->sq_depth = c->hooks.max_wr ? c->hooks.max_wr : KVS_RDMA_SQ_DEPTH;
    if ((int)c->sq_depth > da->max_qp_wr) c->sq_depth = (uint32_t)da->max_qp_wr;
    c->max_sge = da->max_sge < KVS_RDMA_MAX_SGE ? (uint32_t)da->max_sge : KVS_RDMA_MAX_SGE;
    if (c->hooks.max_sge && c->hooks.max_sge < c->max_sge) c->max_sge = c->hooks.max_sge;
}

/*
 * Protection domain, completion channel and CQ, the RC queue pair, the
 * control buffers (registered, receives posted). 0, -EIO or -ENOMEM.
 */
static int create_qp(struct kvs_rdma_conn *c, const struct ibv_device_attr *da)
{
    size_queues(c, da);
    c->pd = ibv_alloc_pd(c->id->verbs);
    if (!c->pd) return -EIO;
    c->comp = ibv_create_comp_channel(c->id->verbs);
    if (!c->comp) return -EIO;
    c->cq = ibv_create_cq(c->id->verbs, (int)(c->sq_depth + KVS_RDMA_NRECV + 8), NULL, c->comp, 0);
    if (!c->cq) return -EIO;
    struct ibv_qp_init_attr qa = {.send_cq = c->cq,
                                  .recv_cq = c->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = c->sq_depth,
                                          .max_recv_wr = KVS_RDMA_NRECV,
                                          .max_send_sge = c->max_sge,
                                          .max_recv_sge = 1,
                                          .max_inline_data = KVS_RDMA_INLINE_WANT}};
    if (rdma_create_qp(c->id, c->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(c->id, c->pd, &qa) != 0) return -EIO;
    }
    c->max_inline = qa.cap.max_inline_data;
    size_t bytes = (size_t)(KVS_RDMA_NRECV + 1) * KVS_WIRE_CTRL_MAX;
    if (posix_memalign((void **)&c->ctrl, 4096, bytes) != 0) {
        c->ctrl = NULL;
        return -ENOMEM;
    }
    c->ctrl_mr = ibv_reg_mr(c->pd, c->ctrl, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!c->ctrl_mr) return -EIO;
    for (int i = 0; i < KVS_RDMA_NRECV; i++) {
        int rc = kvs_rdma_post_recv(c, i);
        if (rc < 0) return rc;
    }
    return 0;
}

/* rdma_connect with READ depths for both directions (kvstored READs PULL's values from us). */
static int connect_qp(struct kvs_rdma_conn *c, const struct ibv_device_attr *da, uint64_t deadline)
{
    struct rdma_conn_param p = {
        .initiator_depth =
            (uint8_t)(da->max_qp_init_rd_atom < KVS_RDMA_RD_ATOM_MAX ? da->max_qp_init_rd_atom
                                                                     : KVS_RDMA_RD_ATOM_MAX),
        .responder_resources =
            (uint8_t)(da->max_qp_rd_atom < KVS_RDMA_RD_ATOM_MAX ? da->max_qp_rd_atom
                                                                : KVS_RDMA_RD_ATOM_MAX),
        .retry_count = 7,
        .rnr_retry_count = 7};
    if (rdma_connect(c->id, &p) != 0) return -ECONNREFUSED;
    return wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, deadline);
}

/* Resolves, creates the QP and its buffers, connects, says HELLO, registers the regions. */
static int open_connection(struct kvs_rdma_conn *c)
{
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.connect_timeout_ms;
    struct ibv_device_attr da;
    int rc = resolve(c, deadline);
    if (rc == 0 && ibv_query_device(c->id->verbs, &da) != 0) rc = -EIO;
    if (rc == 0) rc = create_qp(c, &da);
    if (rc == 0) rc = connect_qp(c, &da, deadline);
    if (rc == 0) {
        c->up = 1;
        c->sig_posted = c->sig_done = 0;
        rc = say_hello(c, deadline);
    }
    if (rc < 0) {
        kvs_rdma_conn_down(c);
        return rc;
    }
    /* Only now may memory the server READs (PULL) or WRITEs (PUSH) exist here. */
    for (struct kvs_rdma_ureg *u = c->regs; u; u = u->next)
        u->mr = ibv_reg_mr(c->pd, u->ptr, u->len, kvs_rdma_mr_access(c));
    return 0;
}

int kvs_rdma_device_present(void)
{
    int n = 0;
    struct ibv_device **d = ibv_get_device_list(&n);
    if (d) ibv_free_device_list(d);
    return d && n > 0;
}

int kvs_rdma_ensure_up(struct kvs_rdma_conn *c)
{
    if (c->up) return 0;
    if (c->last_err && kvs_now_ms() < c->retry_at_ms) return c->last_err;
    if (!kvs_rdma_device_present()) {
        if (c->last_err != -ENODEV)
            kvs_log(KVS_LOG_ERROR,
                    "rdma %s: no RDMA device on this machine; use tcp:// (or "
                    "KVSTORE_TRANSPORT=auto, which falls back to tcp)",
                    c->ep.name);
        c->last_err = -ENODEV;
        c->retry_at_ms = kvs_now_ms() + KVS_RDMA_BACKOFF_MS;
        return -ENODEV;
    }
    if (c->last_err || c->next_id) atomic_fetch_add(&c->reconnects, 1);
    int rc = open_connection(c);
    c->last_err = rc;
    if (rc < 0) c->retry_at_ms = kvs_now_ms() + KVS_RDMA_BACKOFF_MS;
    return rc;
}

/*
 * rdma.c - kvstored's RDMA listener (docs/rdma.md): set-up, the event loop
 * and the STATS lines; rdma_int.h says which file does which job.
 *
 * The store's pool is one mmap (pool.h); it is registered once, as one
 * memory region, when the listener starts. Clients move values with RDMA
 * WRITE/READ straight into/out of slots the server hands out
 * (rdma_ops.c). A reservation or lease older than lease_ms, or any error on
 * the queue pair, cuts the connection (rdma_conn.c).
 *
 * All connections share one completion queue and one completion channel;
 * an internal epoll fd gathers the CM event channel, the completion
 * channel and a lease timer so that the main loop watches one fd.
 */
#include "rdma_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "parse.h"

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    return 0;
}

static void cm_events(struct kvsd_rdma *r)
{
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(r->ec, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        struct rdma_cm_id *id = ev->id;
        struct rdma_conn_param req = ev->param.conn;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            int rc = kvsd_rdma_conn_accept(r, id, &req);
            if (rc < 0) {
                if (r->cfg.verbose) {
                    char peer[64] = "unknown peer";
                    kvsd_rdma_peer_name(id, peer, sizeof(peer));
                    kvs_log_server("kvstored", "rdma: refusing a connection from %s: %s", peer,
                                   strerror(-rc));
                }
                rdma_reject(id, NULL, 0);
                rdma_destroy_id(id);
            }
            continue;
        }
        struct kvsd_rdma_conn *c = id->context;
        if (!c || id == r->lid) continue;
        switch (type) {
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            kvsd_rdma_conn_kill(c, "disconnected");
            kvsd_rdma_conn_free(c);
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
            struct kvsd_rdma_conn *c = kvsd_rdma_conn_by_qp(r, wc[i].qp_num);
            if (!c || c->dead) continue;
            if (wc[i].status != IBV_WC_SUCCESS) {
                kvsd_rdma_conn_kill(c, ibv_wc_status_str(wc[i].status));
                continue;
            }
            if (c->closing) {
                /* Its last reply has left: cut it now. Nothing it sent is served. */
                if (wc[i].opcode != IBV_WC_RECV) kvsd_rdma_conn_kill(c, c->closing);
                continue;
            }
            if (wc[i].wr_id == KVSD_RDMA_PULL_WR_ID && c->pull.pending) {
                kvsd_rdma_pull_finish(
                    c); /* RC: every READ before the signaled last one is done too */
                continue;
            }
            if ((wc[i].wr_id & KVSD_RDMA_PUSH_WR_MASK) == KVSD_RDMA_PUSH_WR_TAG) {
                /* A PUSH's reply has left, after its WRITEs: unpin (unless already done). */
                if (c->push.pending && (uint32_t)wc[i].wr_id == c->push.seq)
                    kvsd_rdma_push_finish(c);
                continue;
            }
            if (wc[i].opcode != IBV_WC_RECV) continue;
            uint32_t idx = (uint32_t)wc[i].wr_id;
            kvsd_rdma_handle_message(c, c->bufs + (size_t)idx * KVS_WIRE_CTRL_MAX, wc[i].byte_len);
            if (!c->dead && kvsd_rdma_post_recv(c, idx) < 0)
                kvsd_rdma_conn_kill(c, "ibv_post_recv failed");
        }
    }
}

/* Cuts every connection holding a reservation or lease past its deadline. */
static void lease_tick(struct kvsd_rdma *r)
{
    uint64_t expirations;
    if (read(r->tfd, &expirations, sizeof(expirations)) < 0) return;
    uint64_t now = kvs_now_ns();
    for (struct kvsd_rdma_conn *c = r->conns; c; c = c->next) {
        if (!c->dead && c->closing && c->close_by_ns < now) kvsd_rdma_conn_kill(c, c->closing);
        if (c->dead || !kvsd_rdma_leases_expired(c, now)) continue;
        r->ctr.lease_expiries++;
        kvsd_rdma_conn_expire(c, now);
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

/* The event channel and the listening id, bound to cfg's address on an RDMA device. */
static int open_listener(struct kvsd_rdma *r, char *err, size_t errlen)
{
    r->ec = rdma_create_event_channel();
    if (!r->ec) {
        int rc = fail_with(err, errlen, -errno, "rdma_create_event_channel");
        return rc == -ENOENT ? -ENODEV : rc;
    }
    if (rdma_create_id(r->ec, &r->lid, r, RDMA_PS_TCP) != 0)
        return fail_with(err, errlen, -errno, "rdma_create_id");
    int rc = bind_listen(r, err, errlen);
    if (rc < 0) return rc;
    r->verbs = r->lid->verbs;
    if (!r->verbs) {
        snprintf(err, errlen, "bind --rdma-listen to the address of an RDMA device");
        return -EINVAL;
    }
    return 0;
}

/*
 * On the listener's device: READ depths, the protection domain, the pool
 * registered once (every slot handed out lies inside it), the shared
 * completion channel and CQ.
 */
static int open_device(struct kvsd_rdma *r, char *err, size_t errlen)
{
    struct ibv_device_attr da;
    if (ibv_query_device(r->verbs, &da) != 0)
        return fail_with(err, errlen, -errno, "ibv_query_device");
    r->max_rd_atom = da.max_qp_rd_atom < 16 ? (uint32_t)da.max_qp_rd_atom : 16;
    r->max_init_rd_atom = da.max_qp_init_rd_atom < 16 ? (uint32_t)da.max_qp_init_rd_atom : 16;
    r->pd = ibv_alloc_pd(r->verbs);
    if (!r->pd) return fail_with(err, errlen, -errno, "ibv_alloc_pd");
    struct kvsd_pool *pool = kvsd_store_pool(r->srv->store);
    r->pool_mr =
        ibv_reg_mr(r->pd, kvsd_pool_base(pool), kvsd_pool_size(pool),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!r->pool_mr) return fail_with(err, errlen, -errno, "ibv_reg_mr of the pool (ulimit -l?)");
    r->comp = ibv_create_comp_channel(r->verbs);
    if (!r->comp) return fail_with(err, errlen, -errno, "ibv_create_comp_channel");
    int depth = KVSD_RDMA_CQ_DEPTH < da.max_cqe ? KVSD_RDMA_CQ_DEPTH : da.max_cqe;
    r->cq = ibv_create_cq(r->verbs, depth, NULL, r->comp, 0);
    if (!r->cq || ibv_req_notify_cq(r->cq, 0) != 0)
        return fail_with(err, errlen, -errno, "ibv_create_cq");
    return 0;
}

/* The lease timer (a quarter of lease_ms, within 20..250 ms) and the one epoll fd over it all. */
static int start_events(struct kvsd_rdma *r, char *err, size_t errlen)
{
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    long tick_ms = r->cfg.lease_ms / 4 < 20    ? 20
                   : r->cfg.lease_ms / 4 > 250 ? 250
                                               : r->cfg.lease_ms / 4;
    struct timespec tick = {.tv_sec = tick_ms / 1000, .tv_nsec = tick_ms % 1000 * 1000000};
    struct itimerspec its = {.it_interval = tick, .it_value = tick};
    if (r->tfd < 0 || timerfd_settime(r->tfd, 0, &its, NULL) < 0)
        return fail_with(err, errlen, -errno, "timerfd");
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0) return fail_with(err, errlen, -errno, "epoll");
    int rc;
    if ((rc = watch(r->epfd, r->ec->fd)) < 0 || (rc = watch(r->epfd, r->comp->fd)) < 0 ||
        (rc = watch(r->epfd, r->tfd)) < 0)
        return fail_with(err, errlen, rc, "epoll");
    return 0;
}

/* Test hooks, compiled only into KVS_TEST_HOOKS builds (mk/rdma.mk): never read by kvstored. */
static void load_hooks(struct kvsd_rdma *r)
{
#ifdef KVS_TEST_HOOKS
    /* Behave like a kvstored from before PUSH (docs/rdma.md). */
    const char *no_push = getenv("KVS_RDMA_TEST_NO_PUSH");
    if (no_push && *no_push && strcmp(no_push, "0") != 0) r->push_on = 0;
#else
    (void)r;
#endif
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
    load_hooks(r);
    r->tfd = r->epfd = -1;
    int rc = open_listener(r, err, errlen);
    if (rc == 0) rc = open_device(r, err, errlen);
    if (rc == 0) rc = start_events(r, err, errlen);
    if (rc < 0) {
        kvsd_rdma_destroy(r);
        return rc;
    }
    *out = r;
    return 0;
}

int kvsd_rdma_local_addr(const struct kvsd_rdma *r, char *buf, size_t len)
{
    struct sockaddr *sa = rdma_get_local_addr(r->lid);
    return kvs_format_sockaddr(sa,
                               sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                               : sizeof(struct sockaddr_in),
                               buf, len);
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
        kvsd_rdma_conn_kill(r->conns, "shutting down");
        kvsd_rdma_conn_free(r->conns);
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

/*
 * auto.c - the "auto" transport: RDMA when it works, else TCP, chosen once
 * per server (KVSTORE_TRANSPORT=auto, docs/rdma.md "Choosing the transport").
 *
 * It composes the two transports and moves no bytes itself. The first
 * connect goes over TCP: its HELLO says whether the server offers RDMA
 * (KVS_FEAT_RDMA). When this machine has an RDMA device and the server
 * offers it, the rdma transport connects to the same host:port (rdma_cm
 * has its own port space); if that works the TCP connection is dropped and
 * RDMA serves the server from then on (it reconnects over RDMA), else TCP
 * does. The choice and its reason are logged at info level. Until a choice
 * is made (the server is unreachable), requests go to TCP, which reports
 * the failure in its own terms.
 */
#include "transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct auto_conn {
    struct kvs_endpoint ep;
    pthread_mutex_t mu;          /* held while choosing */
    struct kvs_conn *tcp, *rdma; /* both created up front; each its transport's own */
    _Atomic(const struct kvs_transport_ops *) chosen; /* NULL until chosen */
};

static struct auto_conn *auto_of(struct kvs_conn *c)
{
    return (struct auto_conn *)(void *)c;
}

/* The transport and connection serving now: the chosen one, or TCP until then. */
static const struct kvs_transport_ops *serving(struct auto_conn *a, struct kvs_conn **conn)
{
    const struct kvs_transport_ops *ops = atomic_load(&a->chosen);
    if (ops == &kvs_rdma_transport) {
        *conn = a->rdma;
        return ops;
    }
    *conn = a->tcp;
    return &kvs_tcp_transport;
}

/* Connects over TCP, then picks (see the top of the file). 0 or TCP's connect error. */
static int choose(struct auto_conn *a, struct kvs_limits *lim)
{
    int rc = kvs_tcp_transport.connect(a->tcp, lim);
    if (rc < 0) return rc;
    const char *why = NULL;
    struct kvs_limits rlim;
    if (!kvs_rdma_device_present())
        why = "no local RDMA device";
    else if (!(lim->features & KVS_FEAT_RDMA))
        why = "the server does not offer RDMA";
    else if ((rc = kvs_rdma_transport.connect(a->rdma, &rlim)) < 0)
        why = "the RDMA connection failed: ";
    if (why) {
        kvs_log(KVS_LOG_INFO, "kvstore %s: transport tcp (%s%s)", a->ep.name, why,
                rc < 0 ? strerror(-rc) : "");
        atomic_store(&a->chosen, &kvs_tcp_transport);
        return 0;
    }
    kvs_tcp_transport.disconnect(a->tcp);
    kvs_log(KVS_LOG_INFO, "kvstore %s: transport rdma", a->ep.name);
    *lim = rlim;
    atomic_store(&a->chosen, &kvs_rdma_transport);
    return 0;
}

/* Makes the choice if none is made yet. 0, or the error that kept it from being made. */
static int ensure_chosen(struct auto_conn *a, struct kvs_limits *lim, int *chose_now)
{
    *chose_now = 0;
    if (atomic_load(&a->chosen)) return 0;
    pthread_mutex_lock(&a->mu);
    int rc = 0;
    if (!atomic_load(&a->chosen)) {
        rc = choose(a, lim);
        *chose_now = rc == 0;
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int auto_create(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                       struct kvs_conn **out)
{
    if (&kvs_rdma_transport == NULL) return -ENOTSUP;
    struct auto_conn *a = calloc(1, sizeof(*a));
    if (!a) return -ENOMEM;
    a->ep = *ep;
    struct kvs_endpoint tep = *ep, rep = *ep;
    snprintf(tep.scheme, sizeof(tep.scheme), "tcp");
    snprintf(rep.scheme, sizeof(rep.scheme), "rdma");
    int rc = kvs_tcp_transport.create(&tep, cfg, &a->tcp);
    if (rc == 0) {
        rc = kvs_rdma_transport.create(&rep, cfg, &a->rdma);
        if (rc < 0) kvs_tcp_transport.destroy(a->tcp);
    }
    if (rc < 0) {
        free(a);
        return rc;
    }
    pthread_mutex_init(&a->mu, NULL);
    *out = (struct kvs_conn *)(void *)a;
    return 0;
}

static int auto_connect(struct kvs_conn *c, struct kvs_limits *lim)
{
    struct auto_conn *a = auto_of(c);
    int chose_now;
    int rc = ensure_chosen(a, lim, &chose_now);
    if (rc < 0 || chose_now) return rc;
    struct kvs_conn *conn;
    const struct kvs_transport_ops *ops = serving(a, &conn);
    return ops->connect(conn, lim);
}

static void auto_submit(struct kvs_conn *c, struct kvs_req *req)
{
    struct auto_conn *a = auto_of(c);
    struct kvs_limits lim;
    int chose_now;
    (void)ensure_chosen(a, &lim, &chose_now); /* on failure TCP reports it */
    struct kvs_conn *conn;
    const struct kvs_transport_ops *ops = serving(a, &conn);
    ops->submit(conn, req);
}

static void auto_disconnect(struct kvs_conn *c)
{
    struct auto_conn *a = auto_of(c);
    kvs_tcp_transport.disconnect(a->tcp);
    kvs_rdma_transport.disconnect(a->rdma);
}

static void auto_destroy(struct kvs_conn *c)
{
    if (!c) return;
    struct auto_conn *a = auto_of(c);
    kvs_tcp_transport.destroy(a->tcp);
    kvs_rdma_transport.destroy(a->rdma);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Registrations go to RDMA (cached there until it connects) unless TCP was chosen. */
static int auto_reg_mem(struct kvs_conn *c, void *ptr, size_t len)
{
    struct auto_conn *a = auto_of(c);
    if (atomic_load(&a->chosen) == &kvs_tcp_transport) return 0;
    return kvs_rdma_transport.reg_mem(a->rdma, ptr, len);
}

static int auto_unreg_mem(struct kvs_conn *c, void *ptr)
{
    struct auto_conn *a = auto_of(c);
    if (atomic_load(&a->chosen) == &kvs_tcp_transport) return 0;
    return kvs_rdma_transport.unreg_mem(a->rdma, ptr);
}

/* Shared buffers are TCP's business (its local socket), whichever is chosen later. */
static int auto_share_mem(struct kvs_conn *c, void *ptr, size_t len, int fd)
{
    return kvs_tcp_transport.share_mem(auto_of(c)->tcp, ptr, len, fd);
}

static void auto_unshare_mem(struct kvs_conn *c, void *ptr)
{
    kvs_tcp_transport.unshare_mem(auto_of(c)->tcp, ptr);
}

/* The chosen transport's counters (RDMA's until a choice is made). */
static void auto_counters(struct kvs_conn *c, kvs_counter_fn emit, void *arg)
{
    struct auto_conn *a = auto_of(c);
    if (atomic_load(&a->chosen) == &kvs_tcp_transport) {
        if (kvs_tcp_transport.counters) kvs_tcp_transport.counters(a->tcp, emit, arg);
        return;
    }
    kvs_rdma_transport.counters(a->rdma, emit, arg);
}

static void auto_fork_prepare(struct kvs_conn *c)
{
    struct auto_conn *a = auto_of(c);
    pthread_mutex_lock(&a->mu);
    if (kvs_tcp_transport.fork_prepare) kvs_tcp_transport.fork_prepare(a->tcp);
    kvs_rdma_transport.fork_prepare(a->rdma);
}

static void auto_fork_parent(struct kvs_conn *c)
{
    struct auto_conn *a = auto_of(c);
    kvs_rdma_transport.fork_parent(a->rdma);
    if (kvs_tcp_transport.fork_parent) kvs_tcp_transport.fork_parent(a->tcp);
    pthread_mutex_unlock(&a->mu);
}

static void auto_fork_child(struct kvs_conn *c)
{
    struct auto_conn *a = auto_of(c);
    kvs_rdma_transport.fork_child(a->rdma);
    if (kvs_tcp_transport.fork_child) kvs_tcp_transport.fork_child(a->tcp);
    pthread_mutex_unlock(&a->mu);
}

const struct kvs_transport_ops kvs_auto_transport = {
    .name = "auto",
    .create = auto_create,
    .connect = auto_connect,
    .submit = auto_submit,
    .disconnect = auto_disconnect,
    .destroy = auto_destroy,
    .reg_mem = auto_reg_mem,
    .unreg_mem = auto_unreg_mem,
    .share_mem = auto_share_mem,
    .unshare_mem = auto_unshare_mem,
    .counters = auto_counters,
    .fork_prepare = auto_fork_prepare,
    .fork_parent = auto_fork_parent,
    .fork_child = auto_fork_child,
};

/*
 * tcp.c - the TCP transport's vtable and a connection's life: created
 * without connecting, brought up on first use (with a backoff after a failed
 * attempt), dropped, destroyed, and reset in a forked child. How the files of the transport divide
 * the work, and the invariants they keep: tcp_int.h.
 */
#include "tcp_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The transport's own state behind the vtable's handle. */
static struct tcp_conn *tcp_of(struct kvs_conn *conn)
{
    return (struct tcp_conn *)conn;
}

/* ---- bringing a connection up ---- */

/* With c->mu held: the connection's limits and generation; true if it is up (else stale). */
static bool current(const struct tcp_conn *c, struct kvs_limits *lim, uint64_t *gen)
{
    *lim = c->lim;
    *gen = c->gen;
    return c->up;
}

/* With c->mu held: 0 if a connection attempt may start now, else the error to return. */
static int may_attempt(const struct tcp_conn *c)
{
    if (c->stop) return -ECONNRESET;
    if (c->last_err && kvs_now_ms() < c->retry_after) return c->last_err;
    return 0;
}

/* With c->mu held: a failed attempt (err) starts or doubles the backoff; returns its ms. */
static unsigned note_failure(struct tcp_conn *c, int err)
{
    c->last_err = err;
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : TCP_BACKOFF_MIN;
    if (c->backoff_ms > TCP_BACKOFF_MAX) c->backoff_ms = TCP_BACKOFF_MAX;
    c->retry_after = kvs_now_ms() + c->backoff_ms;
    return c->backoff_ms;
}

/*
 * With c->mu held: makes fd the current connection, starting the reader
 * thread on the first one. 0, or -ENOMEM (fd not taken).
 */
static int install(struct tcp_conn *c, int fd, const struct kvs_limits *lim)
{
    if (!c->reader_started) {
        if (pthread_create(&c->reader, NULL, tcp_reader_main, c) != 0) return -ENOMEM;
        c->reader_started = true;
    }
    /* The reader closes the previous fd itself; this one is new and never reused before. */
    c->fd = fd;
    c->lim = *lim;
    tcp_shm_unref(c->shm); /* the last connection's region, once its jobs are done */
    c->shm = c->shm_new;
    c->shm_new = NULL;
    c->gen++;
    c->up = true;
    c->dropping = false;
    c->last_err = 0;
    c->backoff_ms = 0;
    pthread_cond_broadcast(&c->cv);
    atomic_fetch_add(&c->n_connects, 1);
    return 0;
}

/* With c->connect_mu held: tcp_conn_up's slow path (one attempt at a time). */
static int connect_now(struct tcp_conn *c, struct kvs_limits *lim, uint64_t *gen)
{
    pthread_mutex_lock(&c->mu);
    bool up = current(c, lim, gen); /* another thread may have connected meanwhile */
    int rc = up ? 0 : may_attempt(c);
    pthread_mutex_unlock(&c->mu);
    if (up || rc < 0) return rc;

    struct kvs_limits fresh;
    int fd = tcp_open_connection(c, &fresh);
    unsigned backoff = 0;
    pthread_mutex_lock(&c->mu);
    if (fd < 0)
        backoff = note_failure(c, fd);
    else if ((rc = install(c, fd, &fresh)) == 0)
        current(c, lim, gen);
    struct tcp_shm *unused = c->shm_new; /* not installed */
    c->shm_new = NULL;
    pthread_mutex_unlock(&c->mu);
    tcp_shm_unref(unused);

    if (fd < 0) {
        kvs_log(KVS_LOG_WARN, "tcp %s: cannot connect (%s); next attempt in %u ms", c->ep.name,
                strerror(-fd), backoff);
        return fd;
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    kvs_log(KVS_LOG_INFO, "tcp %s: connected (max_object %llu, max_frame %llu, max_keys %u)",
            c->ep.name, (unsigned long long)fresh.max_object, (unsigned long long)fresh.max_frame,
            fresh.max_keys);
    return 0;
}

int tcp_conn_up(struct tcp_conn *c, struct kvs_limits *lim, uint64_t *gen)
{
    pthread_mutex_lock(&c->mu);
    bool up = current(c, lim, gen);
    pthread_mutex_unlock(&c->mu);
    if (up) return 0;

    pthread_mutex_lock(&c->connect_mu);
    int rc = connect_now(c, lim, gen);
    pthread_mutex_unlock(&c->connect_mu);
    return rc;
}

/* ---- the vtable ---- */

static int tcp_create(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                      struct kvs_conn **out)
{
    struct tcp_conn *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->rx = malloc(TCP_RX_BUF);
    if (!c->rx) {
        free(c);
        return -ENOMEM;
    }
    c->ep = *ep;
    c->cfg = *cfg;
    c->fd = -1;
    c->reader_fd = -1;
    pthread_mutex_init(&c->connect_mu, NULL);
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->send_cv, NULL);
    *out = (struct kvs_conn *)c;
    return 0;
}

static int tcp_connect(struct kvs_conn *conn, struct kvs_limits *lim)
{
    uint64_t gen;
    return tcp_conn_up(tcp_of(conn), lim, &gen);
}

static void tcp_submit(struct kvs_conn *conn, struct kvs_req *req)
{
    struct tcp_conn *c = tcp_of(conn);
    struct kvs_limits lim;
    uint64_t gen;
    int rc = tcp_conn_up(c, &lim, &gen);
    if (rc == 0)
        tcp_send_req(c, req, &lim, gen);
    else
        tcp_fail_req(req, rc);
}

static void tcp_disconnect(struct kvs_conn *conn)
{
    struct tcp_conn *c = tcp_of(conn);
    pthread_mutex_lock(&c->mu);
    uint64_t gen = c->gen;
    c->dropping = c->up;
    pthread_mutex_unlock(&c->mu);
    tcp_conn_kill(c, gen, -ECONNRESET);
}

static void tcp_destroy(struct kvs_conn *conn)
{
    struct tcp_conn *c = tcp_of(conn);
    pthread_mutex_lock(&c->connect_mu); /* no connection attempt in progress from here on */
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    uint64_t gen = c->gen;
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->send_cv);
    bool started = c->reader_started, writer = c->writer_started;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->connect_mu);
    tcp_conn_kill(c, gen, -ECONNRESET);
    if (started) pthread_join(c->reader, NULL);
    if (writer) pthread_join(c->writer, NULL); /* it drops what is left in its queue */
    if (!started && c->fd >= 0) close(c->fd);
    tcp_shm_unref(c->shm);
    pthread_cond_destroy(&c->send_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->send_mu);
    pthread_mutex_destroy(&c->connect_mu);
    free(c->rx);
    free(c);
}

/* ---- buffer regions (kvs_alloc_buffer, tcp_shm.c) ---- */

struct buf_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void buf_done(struct kvs_req *req)
{
    struct buf_wait *w = req->arg;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/*
 * With connect_mu held, not on a reader thread: has kvstored map (map) or
 * unmap buffer region n on the current connection, in the stream, and
 * waits for its answer. A connection without a ring has nothing to do (the
 * next one maps c->bufs at its handshake). 0 or kvstored's refusal.
 */
static int buf_update(struct tcp_conn *c, uint32_t n, bool map)
{
    pthread_mutex_lock(&c->mu);
    uint64_t gen = c->gen;
    struct tcp_shm *shm = c->up ? tcp_shm_ref(c->shm) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (!shm) return 0;
    if (!map) tcp_shm_buf_mapped(shm, n, NULL, false); /* no key goes there from now on */
    struct buf_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    struct kvs_req req = {.opcode = KVS_OP_SHM_BUF, .done = buf_done, .arg = &w};
    struct tcp_job *job;
    int rc = tcp_shm_buf_job_new(c, &req, n, map, &job);
    if (rc == 0) {
        tcp_send_job(c, job, gen);
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = req.status;
    }
    if (rc == 0 && map) {
        pthread_mutex_lock(&c->mu);
        tcp_shm_buf_mapped(shm, n, &c->bufs[n - 1], true);
        pthread_mutex_unlock(&c->mu);
    }
    tcp_shm_unref(shm);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

/*
 * Sharing and unsharing edit c->bufs under mu. Off a reader thread they
 * also hold connect_mu, so that the in-stream (un)mapping and a handshake's
 * do not cross; a reader thread (a callback calling kvs_alloc_buffer) must
 * wait for neither, so there the next connection maps a new buffer, and an
 * unshared one stays mapped in kvstored until the connection ends.
 */
static int tcp_share_mem(struct kvs_conn *conn, void *ptr, size_t len, int fd)
{
    struct tcp_conn *c = tcp_of(conn);
    bool reader = tcp_on_reader_thread;
    if (!reader) pthread_mutex_lock(&c->connect_mu);
    pthread_mutex_lock(&c->mu);
    uint32_t n = 1;
    while (n <= KVS_WIRE_SHM_BUFFERS && c->bufs[n - 1].base)
        n++;
    bool full = n > KVS_WIRE_SHM_BUFFERS;
    if (!full) c->bufs[n - 1] = (struct tcp_buf){.base = ptr, .size = len, .fd = fd};
    pthread_mutex_unlock(&c->mu);
    int rc = full || reader ? 0 : buf_update(c, n, true);
    if (!reader) pthread_mutex_unlock(&c->connect_mu);
    if (full) return -ENOMEM;
    if (rc < 0)
        kvs_log(KVS_LOG_WARN,
                "tcp %s: buffer region not mapped (%s); its values go through the ring", c->ep.name,
                strerror(-rc));
    return 0;
}

static void tcp_unshare_mem(struct kvs_conn *conn, void *ptr)
{
    struct tcp_conn *c = tcp_of(conn);
    bool reader = tcp_on_reader_thread;
    if (!reader) pthread_mutex_lock(&c->connect_mu);
    uint32_t n = 1;
    pthread_mutex_lock(&c->mu);
    while (n <= KVS_WIRE_SHM_BUFFERS && c->bufs[n - 1].base != ptr)
        n++;
    if (n <= KVS_WIRE_SHM_BUFFERS && reader && c->shm) tcp_shm_buf_mapped(c->shm, n, NULL, false);
    pthread_mutex_unlock(&c->mu);
    if (n <= KVS_WIRE_SHM_BUFFERS && !reader) (void)buf_update(c, n, false);
    pthread_mutex_lock(&c->mu);
    if (n <= KVS_WIRE_SHM_BUFFERS) c->bufs[n - 1] = (struct tcp_buf){.fd = -1};
    pthread_mutex_unlock(&c->mu);
    if (!reader) pthread_mutex_unlock(&c->connect_mu);
}

static void tcp_counters(struct kvs_conn *conn, kvs_counter_fn emit, void *arg)
{
    struct tcp_conn *c = tcp_of(conn);
    emit(arg, "frames_sent", atomic_load(&c->n_frames));
    emit(arg, "send_syscalls", atomic_load(&c->n_send_calls));
    emit(arg, "recv_syscalls", atomic_load(&c->n_recv_calls));
    emit(arg, "bytes_sent", atomic_load(&c->n_bytes_sent));
    emit(arg, "bytes_received", atomic_load(&c->n_bytes_recv));
    emit(arg, "connects", atomic_load(&c->n_connects));
    emit(arg, "connections_lost", atomic_load(&c->n_conn_lost));
    emit(arg, "timeouts", atomic_load(&c->n_timeouts));
    emit(arg, "local_connects", atomic_load(&c->n_local_connects));
    emit(arg, "shm_connects", atomic_load(&c->n_shm_connects));
    emit(arg, "shm_fallbacks", atomic_load(&c->n_shm_fallbacks));
    emit(arg, "shm_in_place", atomic_load(&c->n_shm_in_place));
}

static void tcp_fork_prepare(struct kvs_conn *conn)
{
    struct tcp_conn *c = tcp_of(conn);
    pthread_mutex_lock(&c->connect_mu);
    pthread_mutex_lock(&c->mu);
}

static void tcp_fork_parent(struct kvs_conn *conn)
{
    struct tcp_conn *c = tcp_of(conn);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->connect_mu);
}

/*
 * In the child: the reader thread does not exist here and the socket is
 * shared with the parent. Close our copy of the fd (no shutdown: that would
 * cut the parent's connection), forget the parent's frames, and let the first
 * use reconnect.
 */
static void tcp_fork_child(struct kvs_conn *conn)
{
    struct tcp_conn *c = tcp_of(conn);
    if (c->reader_fd >= 0 && c->reader_fd != c->fd) close(c->reader_fd);
    if (c->fd >= 0) close(c->fd);
    c->fd = c->reader_fd = -1;
    c->up = false;
    c->reader_started = false;
    c->writer_started = false;
    c->sendq_head = c->sendq_tail = NULL; /* the parent's jobs */
    c->last_err = 0;
    c->backoff_ms = 0;
    tcp_pending_forget(c); /* the parent's requests: their memory stays the parent's business */
    /* The parent's region is not mapped here (MADV_DONTFORK): forget it, unmap nothing. */
    c->shm = c->shm_new = c->rx_shm = NULL;
    c->rx_pos = c->rx_len = 0;
    c->rx_frame = NULL;
    pthread_mutex_init(&c->send_mu, NULL); /* a parent thread may have held it */
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->send_cv, NULL);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->connect_mu);
}

const struct kvs_transport_ops kvs_tcp_transport = {
    .name = "tcp",
    .create = tcp_create,
    .connect = tcp_connect,
    .submit = tcp_submit,
    .disconnect = tcp_disconnect,
    .destroy = tcp_destroy,
    .share_mem = tcp_share_mem,
    .unshare_mem = tcp_unshare_mem,
    .counters = tcp_counters,
    .fork_prepare = tcp_fork_prepare,
    .fork_parent = tcp_fork_parent,
    .fork_child = tcp_fork_child,
};

/*
 * tcp.c - the TCP transport: one connection per (client, server).
 *
 * Sending: a request (one per-server sub-batch) becomes one or more wire
 * frames (split by the server's max_frame / max_keys), all sent with one
 * sendmsg loop whose iovecs point at the caller's values; only the frame and
 * entry headers and the keys are copied into a small scratch area.
 *
 * Receiving: one reader thread per connection, started on the first
 * connection and kept for the conn's life (it waits for the next connection
 * after a loss). It matches replies to frames by id through a pending table
 * and reads GET values straight into the caller's buffers. Many frames may be
 * in flight on one connection (pipelining), from many threads.
 *
 * Lifetimes, the invariants that make timeouts and lost connections safe:
 *  - a frame is in the pending table until the reader takes it (to read its
 *    reply), the reader expires it (timeout), or the connection dies; whoever
 *    removes it under conn->mu is the only one to touch its keys from then on;
 *  - a job (one request) holds one reference per frame plus one for the
 *    sender; req->done runs when the last is dropped, so it never runs while
 *    sendmsg may still read the caller's values;
 *  - the socket fd is closed only by the reader, holding send_mu, after the
 *    connection is marked down, so no sender writes to a reused fd number.
 *
 * A reader thread never blocks in a send: a callback it runs may submit more
 * work (to this server or another), and a reader blocked in sendmsg while its
 * server waits for it to read replies would deadlock. A reader's submission
 * tries a non-blocking send (only if the socket is free: trylock of send_mu
 * and nothing queued); whatever does not go at once - all of it, or the rest
 * of a partly sent job - is queued for a per-connection writer thread,
 * started on first need. Other threads send inline, unless jobs are queued:
 * then they queue behind them, so a partly sent frame is always finished
 * before any other byte goes on the socket. The writer leaves a job at the
 * head of the queue until it is sent, and pops it holding send_mu.
 *
 * Lock order: connect_mu -> send_mu -> mu.
 */
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <uthash.h>

#define TCP_RX_BUF (64 * 1024)
#define TCP_DIRECT_READ                                                                            \
    (16 * 1024)             /* larger remainders are read straight into the caller's buffer */
#define TCP_TICK_MS     100 /* reader wake-up period for timeout checks */
#define TCP_BACKOFF_MIN 20
#define TCP_BACKOFF_MAX 1000
#define TCP_ERRTEXT_MAX 256
#define KEY_PENDING     INT32_MIN /* a key's status while it is on the wire */

/* True on tcp reader threads (of any connection): they must never block in a send. */
static __thread bool on_reader_thread;

struct tcp_job;

/* One wire frame in flight: a contiguous range of a request's keys. */
struct tcp_frame {
    UT_hash_handle hh;
    uint64_t id;
    struct tcp_job *job;
    uint32_t first, end; /* keys[first..end) of the request */
    uint32_t nsent;      /* keys in that range actually sent (status KEY_PENDING) */
    uint64_t deadline_ms;
};

/* One submitted request; frames, iovecs and scratch follow in the same allocation. */
struct tcp_job {
    struct kvs_req *req;
    struct tcp_job *next_send; /* in the writer's queue */
    uint64_t gen;              /* the connection it was registered on */
    atomic_uint refs;          /* one per frame + one for the sender */
    atomic_int first_error;
    uint32_t nframes;
    struct tcp_frame *frames;
    struct iovec *iov;
    int niov;
    uint8_t *scratch;
};

struct kvs_conn {
    struct kvs_endpoint ep;
    struct kvs_transport_config cfg;

    pthread_mutex_t connect_mu; /* one (re)connection attempt at a time */
    pthread_mutex_t send_mu;    /* one sender on the socket at a time */
    pthread_mutex_t mu;         /* everything below */
    pthread_cond_t cv;          /* the reader waits here for a connection */
    pthread_cond_t send_cv;     /* the writer waits here for work */

    bool up;
    bool stop;
    int fd;        /* the current connection's socket, -1 once the reader closed it */
    int reader_fd; /* the socket the reader is using (may be an older one), or -1 */
    uint64_t gen;  /* bumped at every new connection */
    struct kvs_limits lim;
    struct tcp_frame *pending; /* uthash by id */
    atomic_ullong next_id;
    int last_err;         /* of the last failed connection attempt */
    uint64_t retry_after; /* ms: no new attempt before, fail with last_err */
    unsigned backoff_ms;
    bool reader_started;
    pthread_t reader;
    /* Jobs submitted from a reader thread, sent by the writer thread. */
    struct tcp_job *sendq_head, *sendq_tail;
    bool writer_started;
    pthread_t writer;

    /* reader-only state */
    uint8_t *rx;
    size_t rx_pos, rx_len;
    struct tcp_frame *rx_frame; /* the frame whose reply the reader is reading */
    uint64_t next_scan_ms;

    /* counters */
    atomic_ullong n_frames, n_send_calls, n_recv_calls, n_bytes_sent, n_bytes_recv;
    atomic_ullong n_connects, n_timeouts, n_conn_lost;
};

/* ---- jobs and frames ---- */

static void job_put(struct tcp_job *job)
{
    if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) != 1) return;
    struct kvs_req *req = job->req;
    if (req->opcode != KVS_OP_STATS) req->status = atomic_load(&job->first_error);
    free(job);
    req->done(req);
}

/* Ends a frame: keys still on the wire get status; drops the frame's job reference. */
static void frame_finish(struct tcp_frame *f, int status)
{
    struct kvs_req *req = f->job->req;
    if (status < 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&f->job->first_error, &expected, status);
        if (req->opcode == KVS_OP_STATS) req->status = status;
    }
    for (uint32_t i = f->first; i < f->end; i++)
        if (req->keys[i].status == KEY_PENDING) req->keys[i].status = status;
    job_put(f->job);
}

/* ---- connection loss ---- */

/*
 * Marks connection gen down (if it still is the current one) and fails every
 * frame still pending on it with status. Callbacks run without locks held.
 */
static void conn_kill(struct kvs_conn *c, uint64_t gen, int status)
{
    pthread_mutex_lock(&c->mu);
    if (!c->up || c->gen != gen) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->up = false;
    shutdown(c->fd, SHUT_RDWR); /* wakes the reader and any blocked sender */
    struct tcp_frame *list = c->pending;
    c->pending = NULL;
    bool closing = c->stop;
    pthread_mutex_unlock(&c->mu);

    atomic_fetch_add(&c->n_conn_lost, 1);
    kvs_log(closing ? KVS_LOG_DEBUG : KVS_LOG_WARN, "tcp %s: connection %s (%s)", c->ep.name,
            closing ? "closed" : "lost", strerror(-status));
    struct tcp_frame *f, *tmp;
    HASH_ITER(hh, list, f, tmp)
    {
        HASH_DELETE(hh, list, f);
        frame_finish(f, status);
    }
}

/* Fails the frames whose deadline has passed; called by the reader. */
static void expire_frames(struct kvs_conn *c, uint64_t now)
{
    struct tcp_frame *expired = NULL, *f, *tmp;
    pthread_mutex_lock(&c->mu);
    HASH_ITER(hh, c->pending, f, tmp)
    {
        if (f->deadline_ms > now) continue;
        HASH_DELETE(hh, c->pending, f);
        HASH_ADD(hh, expired, id, sizeof(f->id), f);
    }
    pthread_mutex_unlock(&c->mu);
    HASH_ITER(hh, expired, f, tmp)
    {
        HASH_DELETE(hh, expired, f);
        atomic_fetch_add(&c->n_timeouts, 1);
        kvs_log(KVS_LOG_WARN, "tcp %s: request %llu timed out", c->ep.name,
                (unsigned long long)f->id);
        frame_finish(f, -ETIMEDOUT);
    }
}

/* ---- connecting ---- */

static int sock_error(int err)
{
    switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case EPROTO:
        return -err;
    case EPIPE:
    case ENOTCONN:
    case ECONNABORTED:
        return -ECONNRESET;
    case EAGAIN:
        return -ETIMEDOUT;
    default:
        return -EIO;
    }
}

/* Connects one address within deadline (ms); returns the fd or a negative code. */
static int connect_addr(const struct addrinfo *ai, uint64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) return -EIO;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno != EINPROGRESS) {
        rc = sock_error(errno);
        goto fail;
    }
    if (rc < 0) {
        for (;;) {
            uint64_t now = kvs_now_ms();
            if (now >= deadline) {
                rc = -ETIMEDOUT;
                goto fail;
            }
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, (int)(deadline - now));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = -EIO;
                goto fail;
            }
            if (n > 0) break;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
        if (err) {
            rc = sock_error(err);
            goto fail;
        }
    }
    return fd;
fail:
    close(fd);
    return rc;
}

/* Receives exactly n bytes before deadline (ms); the socket has a short SO_RCVTIMEO. */
static int recv_exact(int fd, void *buf, size_t n, uint64_t deadline)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t got = recv(fd, p, n, 0);
        if (got > 0) {
            p += got;
            n -= (size_t)got;
            continue;
        }
        if (got == 0) return -ECONNRESET;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return sock_error(errno);
        if (kvs_now_ms() >= deadline) return -ETIMEDOUT;
    }
    return 0;
}

/*
 * Sends *iov[0..*niov), advancing *iov and *niov past what went (the iovecs
 * are modified in place). 0 once all is sent, a negative code on error; with
 * MSG_DONTWAIT in flags, -EAGAIN when the socket buffer is full.
 */
static int send_iov(struct kvs_conn *c, int fd, struct iovec **iovp, int *niovp, int flags)
{
    struct iovec *iov = *iovp;
    int niov = *niovp;
    int rc = 0;
    while (niov > 0) {
        struct msghdr msg = {.msg_iov = iov,
                             .msg_iovlen = (size_t)(niov < IOV_MAX ? niov : IOV_MAX)};
        ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
        atomic_fetch_add_explicit(&c->n_send_calls, 1, memory_order_relaxed);
        if (sent < 0) {
            if (errno == EINTR) continue;
            if ((flags & MSG_DONTWAIT) && (errno == EAGAIN || errno == EWOULDBLOCK))
                rc = -EAGAIN;
            else
                rc = sock_error(errno); /* EAGAIN here is SO_SNDTIMEO: the server stopped reading */
            break;
        }
        atomic_fetch_add_explicit(&c->n_bytes_sent, (unsigned long long)sent, memory_order_relaxed);
        while (niov > 0 && (size_t)sent >= iov->iov_len) {
            sent -= (ssize_t)iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + sent;
            iov->iov_len -= (size_t)sent;
        }
    }
    *iovp = iov;
    *niovp = niov;
    return rc;
}

/* Sends all of iov[0..niov) (modified in place); 0 or a negative code. */
static int send_all(struct kvs_conn *c, int fd, struct iovec *iov, int niov)
{
    return send_iov(c, fd, &iov, &niov, 0);
}

static void set_timeout_opt(int fd, int opt, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/*
 * The AUTH exchange after HELLO (docs/PROTOCOL.md "Authentication"): proves
 * that we hold KVSTORE_AUTH_FILE's secret without sending it, and checks the
 * server's proof that it holds it too. -EACCES for a server that wants a
 * secret we lack, that does not authenticate although we were given a
 * secret, or whose proof (or verdict) says the secrets differ.
 */
static int authenticate(struct kvs_conn *c, int fd, const uint8_t *hello_body, size_t hello_len,
                        const struct kvs_wire_hello *hello, uint64_t deadline)
{
    const struct kvs_transport_config *cfg = &c->cfg;
    int run;
    const char *refusal = kvs_auth_client_refusal(hello->features, cfg->auth_secret_len, &run);
    if (refusal) {
        kvs_log(KVS_LOG_WARN, "tcp %s: %s", c->ep.name, refusal);
        return -EACCES;
    }
    if (!run) return 0;
    struct kvs_auth_client a;
    if (kvs_auth_client_begin(&a, cfg->auth_secret, cfg->auth_secret_len, hello_body, hello_len,
                              hello) < 0)
        return -EPROTO;

    uint8_t out[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN], in[KVS_WIRE_HDR_LEN], body[256];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN, .id = 0};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_auth_encode(out + KVS_WIRE_HDR_LEN, a.client_nonce, a.mac);
    struct iovec iov = {.iov_base = out, .iov_len = sizeof(out)};
    int rc = send_all(c, fd, &iov, 1);
    if (rc == 0) rc = recv_exact(fd, in, sizeof(in), deadline);
    if (rc < 0) return rc;
    if (kvs_wire_hdr_decode(in, &h, sizeof(body)) < 0) return -EPROTO;
    rc = recv_exact(fd, body, h.body_len, deadline);
    if (rc < 0) return rc;
    if (h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY)) {
        if ((int32_t)kvs_get_u32(body) != -EACCES) return -EPROTO;
        kvs_log(KVS_LOG_WARN, "tcp %s: " KVS_AUTH_REFUSED_TEXT, c->ep.name);
        return -EACCES;
    }
    if (h.opcode != (KVS_OP_AUTH | KVS_OP_REPLY) || h.body_len != KVS_WIRE_MAC_LEN) return -EPROTO;
    if (!kvs_auth_client_server_ok(&a, cfg->auth_secret, cfg->auth_secret_len, body)) {
        kvs_log(KVS_LOG_WARN, "tcp %s: " KVS_AUTH_BAD_SERVER_TEXT, c->ep.name);
        return -EACCES;
    }
    return 0;
}

/* HELLO exchange (and AUTH, see authenticate) on a fresh blocking socket; fills *lim. */
static int say_hello(struct kvs_conn *c, int fd, struct kvs_limits *lim, uint64_t deadline)
{
    uint8_t out[KVS_WIRE_HDR_LEN], in[KVS_WIRE_HDR_LEN], body[KVS_WIRE_HELLO_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO, .id = 0};
    kvs_wire_hdr_encode(out, &h);
    struct iovec iov = {.iov_base = out, .iov_len = sizeof(out)};
    int rc = send_all(c, fd, &iov, 1);
    if (rc < 0) return rc;
    rc = recv_exact(fd, in, sizeof(in), deadline);
    if (rc < 0) return rc;
    rc = kvs_wire_hdr_decode(in, &h, 4096);
    if (rc < 0 || h.opcode != (KVS_OP_HELLO | KVS_OP_REPLY) || h.body_len < KVS_WIRE_HELLO_LEN ||
        h.body_len > 4096)
        return -EPROTO;
    uint8_t rest[4096];
    rc = recv_exact(fd, rest, h.body_len, deadline);
    if (rc < 0) return rc;
    memcpy(body, rest, sizeof(body));
    struct kvs_wire_hello hello;
    if (kvs_wire_hello_decode(body, sizeof(body), &hello) < 0) return -EPROTO;
    rc = authenticate(c, fd, rest, h.body_len, &hello, deadline);
    if (rc < 0) return rc;
    lim->max_key = hello.max_key < KVS_WIRE_MAX_KEY ? hello.max_key : KVS_WIRE_MAX_KEY;
    lim->max_object = hello.max_object < UINT32_MAX ? hello.max_object : UINT32_MAX;
    lim->max_frame = hello.max_frame < UINT32_MAX ? hello.max_frame : UINT32_MAX;
    lim->max_keys = hello.max_keys < KVS_WIRE_MAX_KEYS ? hello.max_keys : KVS_WIRE_MAX_KEYS;
    lim->features = hello.features;
    return 0;
}

/* Opens a connection and does HELLO; returns the fd or a negative code. */
static int open_connection(struct kvs_conn *c, struct kvs_limits *lim)
{
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.connect_timeout_ms;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(c->ep.host, c->ep.port, &hints, &res);
    if (rc != 0) {
        kvs_log(KVS_LOG_ERROR, "tcp %s: cannot resolve: %s", c->ep.name, gai_strerror(rc));
        return -ECONNREFUSED;
    }
    int fd = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = connect_addr(ai, deadline);
        if (fd >= 0) break;
    }
    freeaddrinfo(res);
    if (fd < 0) return fd;

    int one = 1;
    rc = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (rc == 0) rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rc < 0) {
        close(fd);
        return -EIO;
    }
    set_timeout_opt(fd, SO_SNDTIMEO, c->cfg.timeout_ms);
    set_timeout_opt(fd, SO_RCVTIMEO, TCP_TICK_MS);
    rc = say_hello(c, fd, lim, deadline);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static void *reader_main(void *arg);

/*
 * Brings the connection up if it is down; *gen gets the connection's
 * generation and *lim its limits. 0 or a negative code.
 */
static int conn_up(struct kvs_conn *c, struct kvs_limits *lim, uint64_t *gen)
{
    pthread_mutex_lock(&c->mu);
    if (c->up) goto copy;
    pthread_mutex_unlock(&c->mu);

    pthread_mutex_lock(&c->connect_mu);
    pthread_mutex_lock(&c->mu);
    if (c->up) {
        pthread_mutex_unlock(&c->connect_mu);
        goto copy;
    }
    if (c->stop) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->connect_mu);
        return -ECONNRESET;
    }
    uint64_t now = kvs_now_ms();
    if (c->last_err && now < c->retry_after) {
        int err = c->last_err;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->connect_mu);
        return err;
    }
    pthread_mutex_unlock(&c->mu);

    struct kvs_limits fresh;
    int fd = open_connection(c, &fresh);

    pthread_mutex_lock(&c->mu);
    if (fd < 0) {
        c->last_err = fd;
        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : TCP_BACKOFF_MIN;
        if (c->backoff_ms > TCP_BACKOFF_MAX) c->backoff_ms = TCP_BACKOFF_MAX;
        c->retry_after = kvs_now_ms() + c->backoff_ms;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->connect_mu);
        kvs_log(KVS_LOG_WARN, "tcp %s: cannot connect (%s); next attempt in %u ms", c->ep.name,
                strerror(-fd), c->backoff_ms);
        return fd;
    }
    if (!c->reader_started) {
        int rc = pthread_create(&c->reader, NULL, reader_main, c);
        if (rc != 0) {
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&c->connect_mu);
            close(fd);
            return -ENOMEM;
        }
        c->reader_started = true;
    }
    /* The reader closes the previous fd itself; this one is new and never reused before. */
    c->fd = fd;
    c->lim = fresh;
    c->gen++;
    c->up = true;
    c->last_err = 0;
    c->backoff_ms = 0;
    pthread_cond_broadcast(&c->cv);
    atomic_fetch_add(&c->n_connects, 1);
    kvs_log(KVS_LOG_INFO, "tcp %s: connected (max_object %llu, max_frame %llu, max_keys %u)",
            c->ep.name, (unsigned long long)fresh.max_object, (unsigned long long)fresh.max_frame,
            fresh.max_keys);
    pthread_mutex_unlock(&c->connect_mu);
copy:
    *lim = c->lim;
    *gen = c->gen;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int tcp_connect(struct kvs_conn *c, struct kvs_limits *lim)
{
    uint64_t gen;
    return conn_up(c, lim, &gen);
}

/* ---- receiving ---- */

/*
 * Reads n bytes of the current connection into dst (NULL: discard them).
 * While it waits it expires timed-out frames; if the frame being read
 * (rx_frame) passes its deadline, the connection is given up (-ETIMEDOUT).
 */
static int rx_read(struct kvs_conn *c, int fd, void *dst, size_t n)
{
    uint8_t *out = dst;
    while (n > 0) {
        size_t avail = c->rx_len - c->rx_pos;
        if (avail > 0) {
            size_t take = avail < n ? avail : n;
            if (out) {
                memcpy(out, c->rx + c->rx_pos, take);
                out += take;
            }
            c->rx_pos += take;
            n -= take;
            continue;
        }
        uint8_t *into = c->rx;
        size_t want = TCP_RX_BUF;
        if (out && n >= TCP_DIRECT_READ) {
            into = out;
            want = n;
        }
        c->rx_pos = c->rx_len = 0;
        ssize_t got = recv(fd, into, want, 0);
        atomic_fetch_add_explicit(&c->n_recv_calls, 1, memory_order_relaxed);
        if (got > 0) {
            atomic_fetch_add_explicit(&c->n_bytes_recv, (unsigned long long)got,
                                      memory_order_relaxed);
            if (into == out) {
                out += got;
                n -= (size_t)got;
            } else {
                c->rx_len = (size_t)got;
            }
        } else if (got == 0) {
            return -ECONNRESET;
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            return sock_error(errno);
        }
        uint64_t now = kvs_now_ms();
        if (now >= c->next_scan_ms) {
            c->next_scan_ms = now + TCP_TICK_MS;
            expire_frames(c, now);
            if (c->rx_frame && c->rx_frame->deadline_ms <= now) {
                atomic_fetch_add(&c->n_timeouts, 1);
                return -ETIMEDOUT;
            }
            pthread_mutex_lock(&c->mu);
            bool stop = c->stop;
            pthread_mutex_unlock(&c->mu);
            if (stop) return -ECONNRESET;
        }
    }
    return 0;
}

/* Takes the frame with this id out of the pending table (NULL: expired or unknown). */
static struct tcp_frame *take_frame(struct kvs_conn *c, uint64_t id)
{
    struct tcp_frame *f = NULL;
    pthread_mutex_lock(&c->mu);
    HASH_FIND(hh, c->pending, &id, sizeof(id), f);
    if (f) HASH_DELETE(hh, c->pending, f);
    pthread_mutex_unlock(&c->mu);
    return f;
}

/* Reads the per-key entries of a keyed reply into frame f's keys. */
static int read_key_replies(struct kvs_conn *c, int fd, const struct kvs_wire_hdr *h,
                            struct tcp_frame *f)
{
    struct kvs_req *req = f->job->req;
    if (h->count != f->nsent) return -EPROTO;
    uint64_t left = h->body_len;
    for (uint32_t i = f->first; i < f->end; i++) {
        struct kvs_key_io *k = &req->keys[i];
        if (k->status != KEY_PENDING) continue;
        uint8_t raw[KVS_WIRE_STATUS_LEN];
        struct kvs_wire_status s;
        if (left < sizeof(raw)) return -EPROTO;
        int rc = rx_read(c, fd, raw, sizeof(raw));
        if (rc < 0) return rc;
        left -= sizeof(raw);
        if (kvs_wire_status_decode(raw, req->opcode, &s) < 0) return -EPROTO;
        if (req->opcode == KVS_OP_GET && s.status == 0) {
            if (s.len > k->len || s.len > left) return -EPROTO;
            rc = rx_read(c, fd, k->buf, s.len);
            if (rc < 0) return rc;
            left -= s.len;
        }
        k->vlen = s.len;
        k->status = s.status;
    }
    return left == 0 ? 0 : -EPROTO;
}

/* Reads one reply frame and completes what it answers. */
static int read_one_reply(struct kvs_conn *c, int fd)
{
    uint8_t raw[KVS_WIRE_HDR_LEN];
    int rc = rx_read(c, fd, raw, sizeof(raw));
    if (rc < 0) return rc;
    struct kvs_wire_hdr h;
    if (kvs_wire_hdr_decode(raw, &h, UINT32_MAX) < 0 || !(h.opcode & KVS_OP_REPLY)) {
        kvs_log(KVS_LOG_ERROR, "tcp %s: malformed reply header", c->ep.name);
        return -EPROTO;
    }
    struct tcp_frame *f = take_frame(c, h.id);
    if (!f) return rx_read(c, fd, NULL, h.body_len); /* it timed out: skip its reply */

    c->rx_frame = f;
    struct kvs_req *req = f->job->req;
    int status = 0;
    if (h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY)) {
        uint8_t st[4];
        char text[TCP_ERRTEXT_MAX];
        size_t tlen = h.body_len - 4 < sizeof(text) - 1 ? h.body_len - 4 : sizeof(text) - 1;
        rc = rx_read(c, fd, st, 4);
        if (rc == 0) rc = rx_read(c, fd, text, tlen);
        if (rc == 0) rc = rx_read(c, fd, NULL, h.body_len - 4 - tlen);
        if (rc == 0) {
            text[tlen] = '\0';
            status = (int32_t)kvs_get_u32(st);
            if (status >= 0 || !kvs_wire_status_known(status)) status = -EIO;
            kvs_log(KVS_LOG_WARN, "tcp %s: server refused request: %s (%s)", c->ep.name, text,
                    strerror(-status));
        }
    } else if (h.opcode != (req->opcode | KVS_OP_REPLY)) {
        rc = -EPROTO;
    } else if (req->opcode == KVS_OP_STATS) {
        size_t keep = h.body_len < req->text_cap ? h.body_len : req->text_cap;
        rc = rx_read(c, fd, req->text, keep);
        if (rc == 0) rc = rx_read(c, fd, NULL, h.body_len - keep);
        req->text_len = h.body_len;
    } else {
        rc = read_key_replies(c, fd, &h, f);
    }
    c->rx_frame = NULL;
    frame_finish(f, rc < 0 ? rc : status);
    return rc;
}

/* Reader thread: waits for a connection, reads its replies until it dies, repeats. */
static void *reader_main(void *arg)
{
    struct kvs_conn *c = arg;
    on_reader_thread = true;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->up && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop && !c->up) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        int fd = c->fd;
        uint64_t gen = c->gen;
        c->reader_fd = fd;
        pthread_mutex_unlock(&c->mu);

        c->rx_pos = c->rx_len = 0;
        c->next_scan_ms = kvs_now_ms() + TCP_TICK_MS;
        int rc;
        do
            rc = read_one_reply(c, fd);
        while (rc == 0);
        conn_kill(c, gen, rc == -ECONNRESET || rc == -ETIMEDOUT || rc == -EPROTO ? rc : -EIO);

        /* Forget the number before anyone (a forked child, a sender) can see it reused. */
        pthread_mutex_lock(&c->send_mu);
        pthread_mutex_lock(&c->mu);
        close(fd);
        if (c->fd == fd) c->fd = -1;
        c->reader_fd = -1;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->send_mu);
    }
    return NULL;
}

/* ---- sending ---- */

/* Fails every key of req with status and completes it (nothing was sent). */
static void fail_req(struct kvs_req *req, int status)
{
    for (uint32_t i = 0; i < req->n; i++)
        req->keys[i].status = status;
    req->status = status;
    req->done(req);
}

/* Wire size of key i in a request frame and (an upper bound of) in its reply. */
static void entry_sizes(const struct kvs_req *req, const struct kvs_key_io *k,
                        const struct kvs_limits *lim, uint64_t *rq, uint64_t *rp)
{
    *rq = KVS_WIRE_ENTRY_LEN + k->klen;
    *rp = KVS_WIRE_STATUS_LEN;
    if (req->opcode == KVS_OP_PUT) *rq += k->len;
    if (req->opcode == KVS_OP_GET) *rp += k->len < lim->max_object ? k->len : lim->max_object;
}

/*
 * Splits req into frames that respect lim; marks the keys to send
 * KEY_PENDING and those no frame can hold -E2BIG. Counts frames, iovecs and
 * scratch bytes; with job != NULL, also fills frames, scratch and iovecs.
 */
static void plan_frames(struct kvs_req *req, const struct kvs_limits *lim, struct tcp_job *job,
                        uint32_t *nframes, int *niov, size_t *scratch_len)
{
    uint32_t frames = 0;
    int iovs = 0;
    size_t scratch = 0;
    uint64_t body = 0, reply = 0;
    uint32_t count = 0;
    struct tcp_frame *f = NULL;
    uint8_t *hdr_at = NULL;
    bool scratch_open = false; /* the last iovec is scratch and may grow */

    for (uint32_t i = 0; i < req->n; i++) {
        struct kvs_key_io *k = &req->keys[i];
        uint64_t rq, rp;
        entry_sizes(req, k, lim, &rq, &rp);
        if (rq > lim->max_frame || rp > lim->max_frame) {
            k->status = -E2BIG;
            continue;
        }
        k->status = KEY_PENDING;
        if (frames == 0 || count == lim->max_keys || body + rq > lim->max_frame ||
            reply + rp > lim->max_frame) {
            if (job && f) {
                f->end = i;
                f->nsent = count;
                struct kvs_wire_hdr h = {
                    .opcode = req->opcode, .count = count, .body_len = (uint32_t)body, .id = f->id};
                kvs_wire_hdr_encode(hdr_at, &h);
            }
            frames++;
            body = reply = 0;
            count = 0;
            if (job) {
                f = &job->frames[frames - 1];
                f->first = i;
                hdr_at = job->scratch + scratch;
                if (!scratch_open) job->iov[iovs] = (struct iovec){hdr_at, 0};
                job->iov[scratch_open ? iovs - 1 : iovs].iov_len += KVS_WIRE_HDR_LEN;
            }
            if (!scratch_open) iovs++;
            scratch_open = true;
            scratch += KVS_WIRE_HDR_LEN;
        }
        if (job) {
            uint8_t *e = job->scratch + scratch;
            kvs_wire_entry_encode(e, (uint16_t)k->klen,
                                  k->len > UINT32_MAX ? UINT32_MAX : (uint32_t)k->len);
            if (req->opcode != KVS_OP_PUT && req->opcode != KVS_OP_GET)
                kvs_wire_entry_encode(e, (uint16_t)k->klen, 0);
            memcpy(e + KVS_WIRE_ENTRY_LEN, k->key, k->klen);
            if (!scratch_open) job->iov[iovs] = (struct iovec){e, 0};
            job->iov[scratch_open ? iovs - 1 : iovs].iov_len += KVS_WIRE_ENTRY_LEN + k->klen;
        }
        if (!scratch_open) iovs++;
        scratch_open = true;
        scratch += KVS_WIRE_ENTRY_LEN + k->klen;
        if (req->opcode == KVS_OP_PUT && k->len > 0) {
            if (job) job->iov[iovs] = (struct iovec){(void *)k->val, k->len};
            iovs++;
            scratch_open = false;
        }
        body += rq;
        reply += rp;
        count++;
    }
    if (req->n == 0) { /* STATS: one empty frame */
        frames = 1;
        if (job) {
            f = &job->frames[0];
            f->first = 0;
            hdr_at = job->scratch;
            job->iov[0] = (struct iovec){hdr_at, KVS_WIRE_HDR_LEN};
        }
        iovs = 1;
        scratch = KVS_WIRE_HDR_LEN;
    }
    if (job && f) {
        f->end = req->n;
        f->nsent = count;
        struct kvs_wire_hdr h = {
            .opcode = req->opcode, .count = count, .body_len = (uint32_t)body, .id = f->id};
        kvs_wire_hdr_encode(hdr_at, &h);
    }
    *nframes = frames;
    *niov = iovs;
    *scratch_len = scratch;
}

/*
 * Writer thread: sends the queued jobs (the rest of them, if a reader sent a
 * part), in order. A job stays at the head of the queue until it is sent, so
 * an inline sender that finds the queue non-empty queues behind it instead
 * of writing into the middle of its frame.
 */
static void *writer_main(void *arg)
{
    struct kvs_conn *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->sendq_head && !c->stop)
            pthread_cond_wait(&c->send_cv, &c->mu);
        if (!c->sendq_head) break; /* stopping, and nothing left */
        pthread_mutex_unlock(&c->mu);

        pthread_mutex_lock(&c->send_mu);
        pthread_mutex_lock(&c->mu);
        struct tcp_job *job = c->sendq_head; /* only this thread pops: still there */
        bool live = c->up && c->gen == job->gen;
        int fd = c->fd;
        pthread_mutex_unlock(&c->mu);
        /* If the connection died meanwhile, its loss already failed the job's frames. */
        int rc = live ? send_all(c, fd, job->iov, job->niov) : 0;
        pthread_mutex_lock(&c->mu);
        c->sendq_head = job->next_send;
        if (!c->sendq_head) c->sendq_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->send_mu);
        if (rc < 0) conn_kill(c, job->gen, rc);
        job_put(job);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void tcp_submit(struct kvs_conn *c, struct kvs_req *req)
{
    struct kvs_limits lim;
    uint64_t gen;
    int rc = conn_up(c, &lim, &gen);
    if (rc < 0) {
        fail_req(req, rc);
        return;
    }

    uint32_t nframes;
    int niov;
    size_t scratch_len;
    plan_frames(req, &lim, NULL, &nframes, &niov, &scratch_len);
    if (nframes == 0) { /* every key refused (too big for any frame) */
        req->status = 0;
        req->done(req);
        return;
    }
    size_t size = sizeof(struct tcp_job) + nframes * sizeof(struct tcp_frame) +
                  (size_t)niov * sizeof(struct iovec) + scratch_len;
    struct tcp_job *job = calloc(1, size);
    if (!job) {
        fail_req(req, -ENOMEM);
        return;
    }
    job->req = req;
    job->nframes = nframes;
    job->frames = (struct tcp_frame *)(job + 1);
    job->iov = (struct iovec *)(job->frames + nframes);
    job->scratch = (uint8_t *)(job->iov + niov);
    job->niov = niov;
    atomic_init(&job->refs, nframes + 1);
    atomic_init(&job->first_error, 0);
    /* Frames, headers and iovecs are built before taking any lock. */
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms;
    uint64_t first_id = atomic_fetch_add_explicit(&c->next_id, nframes, memory_order_relaxed) + 1;
    for (uint32_t i = 0; i < nframes; i++) {
        job->frames[i].id = first_id + i;
        job->frames[i].job = job;
        job->frames[i].deadline_ms = deadline;
    }
    plan_frames(req, &lim, job, &nframes, &niov, &scratch_len);

    /* A reader sends only if the socket is free right now: it must not wait for send_mu. */
    bool reader = on_reader_thread;
    bool have_send = true;
    if (reader)
        have_send = pthread_mutex_trylock(&c->send_mu) == 0;
    else
        pthread_mutex_lock(&c->send_mu);
    pthread_mutex_lock(&c->mu);
    rc = c->up && c->gen == gen ? 0 : -ECONNRESET;
    if (rc == 0 && reader && !c->writer_started) {
        if (pthread_create(&c->writer, NULL, writer_main, c) == 0)
            c->writer_started = true;
        else
            rc = -ENOMEM;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&c->mu);
        if (have_send) pthread_mutex_unlock(&c->send_mu);
        free(job);
        fail_req(req, rc);
        return;
    }
    int fd = c->fd;
    for (uint32_t i = 0; i < nframes; i++)
        HASH_ADD(hh, c->pending, id, sizeof(job->frames[i].id), &job->frames[i]);
    atomic_fetch_add_explicit(&c->n_frames, nframes, memory_order_relaxed);
    job->gen = gen;
    /* Queued jobs go first (one may be partly sent): queue behind them. */
    if (!have_send || c->sendq_head) {
        if (c->sendq_tail)
            c->sendq_tail->next_send = job;
        else
            c->sendq_head = job;
        c->sendq_tail = job;
        pthread_cond_signal(&c->send_cv);
        pthread_mutex_unlock(&c->mu);
        if (have_send) pthread_mutex_unlock(&c->send_mu);
        return;
    }
    pthread_mutex_unlock(&c->mu);

    struct iovec *iov = job->iov;
    niov = job->niov;
    rc = send_iov(c, fd, &iov, &niov, reader ? MSG_DONTWAIT : 0);
    if (rc == -EAGAIN) {
        /*
         * The socket buffer is full: the writer sends the rest. It goes at the
         * head of the queue (jobs queued meanwhile by other connections'
         * readers have sent nothing yet); we still hold send_mu, so nobody has
         * written after our partial frame.
         */
        job->iov = iov;
        job->niov = niov;
        pthread_mutex_lock(&c->mu);
        job->next_send = c->sendq_head;
        c->sendq_head = job;
        if (!c->sendq_tail) c->sendq_tail = job;
        pthread_cond_signal(&c->send_cv);
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->send_mu);
        return;
    }
    pthread_mutex_unlock(&c->send_mu);
    if (rc < 0) conn_kill(c, gen, rc); /* fails our frames too, unless already answered */
    job_put(job);
}

/* ---- the rest of the vtable ---- */

static int tcp_create(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                      struct kvs_conn **out)
{
    struct kvs_conn *c = calloc(1, sizeof(*c));
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
    *out = c;
    return 0;
}

static void tcp_disconnect(struct kvs_conn *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->mu);
    conn_kill(c, gen, -ECONNRESET);
}

static void tcp_destroy(struct kvs_conn *c)
{
    pthread_mutex_lock(&c->connect_mu); /* no connection attempt in progress from here on */
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    uint64_t gen = c->gen;
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->send_cv);
    bool started = c->reader_started, writer = c->writer_started;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->connect_mu);
    conn_kill(c, gen, -ECONNRESET);
    if (started) pthread_join(c->reader, NULL);
    if (writer) pthread_join(c->writer, NULL); /* it drops what is left in its queue */
    if (!started && c->fd >= 0) close(c->fd);
    pthread_cond_destroy(&c->send_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->send_mu);
    pthread_mutex_destroy(&c->connect_mu);
    free(c->rx);
    free(c);
}

static void tcp_counters(struct kvs_conn *c, kvs_counter_fn emit, void *arg)
{
    emit(arg, "frames_sent", atomic_load(&c->n_frames));
    emit(arg, "send_syscalls", atomic_load(&c->n_send_calls));
    emit(arg, "recv_syscalls", atomic_load(&c->n_recv_calls));
    emit(arg, "bytes_sent", atomic_load(&c->n_bytes_sent));
    emit(arg, "bytes_received", atomic_load(&c->n_bytes_recv));
    emit(arg, "connects", atomic_load(&c->n_connects));
    emit(arg, "connections_lost", atomic_load(&c->n_conn_lost));
    emit(arg, "timeouts", atomic_load(&c->n_timeouts));
}

static void tcp_fork_prepare(struct kvs_conn *c)
{
    pthread_mutex_lock(&c->connect_mu);
    pthread_mutex_lock(&c->mu);
}

static void tcp_fork_parent(struct kvs_conn *c)
{
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->connect_mu);
}

/*
 * In the child: the reader thread does not exist here and the socket is
 * shared with the parent. Close our copy of the fd (no shutdown: that would
 * cut the parent's connection), forget the parent's frames, and let the first
 * use reconnect.
 */
static void tcp_fork_child(struct kvs_conn *c)
{
    if (c->reader_fd >= 0 && c->reader_fd != c->fd) close(c->reader_fd);
    if (c->fd >= 0) close(c->fd);
    c->fd = c->reader_fd = -1;
    c->up = false;
    c->reader_started = false;
    c->writer_started = false;
    c->sendq_head = c->sendq_tail = NULL; /* the parent's jobs */
    c->last_err = 0;
    c->backoff_ms = 0;
    HASH_CLEAR(hh,
               c->pending); /* the parent's requests: their memory stays the parent's business */
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
    .counters = tcp_counters,
    .fork_prepare = tcp_fork_prepare,
    .fork_parent = tcp_fork_parent,
    .fork_child = tcp_fork_child,
};

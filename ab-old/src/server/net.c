/*
 * net.c - the epoll event loop: accept, read into the places proto asks for,
 * writev the replies proto queues. Level-triggered: interest in input is
 * switched off while a connection is back-pressured, interest in output is
 * on only while replies are queued.
 */
#include "net.h"

#include "clock.h"
#include "local_socket.h"
#include "log.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS     64
#define READS_PER_WAKE 16           /* fairness: one busy client does not starve the others */
#define IOV_PER_WRITE  512          /* a 64-key GET reply is about 130 iovecs: one sendmsg */
#define DRAIN_LIMIT    (256 * 1024) /* input discarded after a fatal error before a hard close */
#define SWEEP_EVERY_MS 250          /* how often stalled connections are looked for */
#define FDS_PER_READ   4            /* descriptors one read of a local peer takes in */
/* Freed connection heap goes back to the kernel once it has fallen this far from its peak. */
#define TRIM_AFTER_DROP (16u << 20)

struct conn {
    int fd;
    uint32_t events;           /* what epoll watches now */
    int eof;                   /* the peer closed its side */
    int draining;              /* replies are out, write side shut: discarding input until EOF */
    int local;                 /* a Unix-domain peer: descriptors may come with its bytes */
    uint64_t last_progress_ms; /* last time bytes moved either way */
    size_t drained;
    struct kvsd_proto_conn *proto;
    struct conn *prev, *next;
    char peer[64]; /* who is at the other end, for the log: peer_name */
};

struct kvsd_net {
    struct kvsd_server *srv;
    int epfd;
    int lfd;
    int ufd; /* the local (Unix-domain) listener, or -1: kvsd_net_listen_local */
    char upath[108];
    int max_conns;
    int verbose;
    int spare_fd; /* held in reserve to accept-and-close when out of descriptors */
    unsigned stall_timeout_ms;
    unsigned put_timeout_ms;
    uint64_t next_sweep_ms;
    struct conn *conns;
    /* epoll tags of the two non-connection fds */
    char listen_tag, local_tag, stop_tag;
    /* one more fd served by this loop (kvstored's RDMA side): kvsd_net_watch */
    char extra_tag;
    void (*extra_fn)(void *arg);
    void *extra_arg;
};

static int set_reason(char *err, size_t errlen, int rc, const char *what)
{
    snprintf(err, errlen, "%s: %s", what, strerror(-rc));
    return rc;
}

/* Binds the first address of host:port that works. */
static int open_listener(const struct kvsd_net_config *cfg, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(cfg->host, cfg->port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "cannot resolve %s:%s: %s", cfg->host, cfg->port, gai_strerror(gai));
        return -EINVAL;
    }
    int rc = -EADDRNOTAVAIL;
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = set_reason(err, errlen, -errno, "socket");
            continue;
        }
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
            rc = -errno;
            snprintf(err, errlen, "cannot listen on %s:%s: %s", cfg->host, cfg->port,
                     strerror(errno));
            close(fd);
            fd = -1;
            continue;
        }
        break;
    }
    freeaddrinfo(res);
    return fd >= 0 ? fd : rc;
}

int kvsd_net_create(struct kvsd_server *srv, const struct kvsd_net_config *cfg,
                    struct kvsd_net **out, char *err, size_t errlen)
{
    int rc = -ENOMEM;
    struct kvsd_net *n = calloc(1, sizeof(*n));
    if (!n) {
        set_reason(err, errlen, rc, "kvstored");
        goto fail;
    }
    n->srv = srv;
    n->ufd = -1;
    n->max_conns = cfg->max_conns;
    n->verbose = cfg->verbose;
    n->stall_timeout_ms = cfg->stall_timeout_ms;
    n->put_timeout_ms = cfg->put_timeout_ms;
    n->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (n->spare_fd < 0) {
        rc = set_reason(err, errlen, -errno, "open /dev/null");
        goto fail_net;
    }
    n->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (n->epfd < 0) {
        rc = set_reason(err, errlen, -errno, "epoll_create1");
        goto fail_spare;
    }
    n->lfd = open_listener(cfg, err, errlen);
    if (n->lfd < 0) {
        rc = n->lfd;
        goto fail_epoll;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &n->listen_tag};
    if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, n->lfd, &ev) < 0) {
        rc = set_reason(err, errlen, -errno, "epoll_ctl");
        goto fail_listen;
    }
    *out = n;
    return 0;

fail_listen:
    close(n->lfd);
fail_epoll:
    close(n->epfd);
fail_spare:
    close(n->spare_fd);
fail_net:
    free(n);
fail:
    return rc;
}

int kvsd_net_local_addr(const struct kvsd_net *n, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(n->lfd, (struct sockaddr *)&ss, &sl) < 0) return -errno;
    return kvs_format_sockaddr((struct sockaddr *)&ss, sl, buf, len);
}

/* kvstored's log line, with --verbose: time, pid and text (common/log.c). */
#define NET_LOG(n, ...)                                                                            \
    do {                                                                                           \
        if ((n)->verbose) kvs_log_server("kvstored", __VA_ARGS__);                                 \
    } while (0)

/*
 * Who is at the other end of fd: "127.0.0.1:54321", "[::1]:54321", or for
 * the local socket "local pid 123 uid 1000" (SO_PEERCRED).
 */
static void peer_name(int fd, int local, char *buf, size_t len)
{
    snprintf(buf, len, "unknown peer");
    if (local) {
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
            snprintf(buf, len, "local pid %d uid %u", (int)cr.pid, (unsigned)cr.uid);
        return;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        kvs_format_sockaddr((struct sockaddr *)&ss, sl, buf, len);
}

static void conn_close(struct kvsd_net *n, struct conn *c)
{
    NET_LOG(n, "connection %d from %s closed", c->fd, c->peer);
    if (c->prev)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    close(c->fd); /* also removes it from the epoll set */
    kvsd_proto_conn_free(c->proto);
    n->srv->counters.conns_current--;
    free(c);
}

/*
 * Out of file descriptors: the pending connection would keep the (level-
 * triggered) listening socket readable and spin the loop. Spend the spare
 * descriptor to accept it and close it at once. Returns 1 if one was refused.
 */
static int refuse_without_fds(struct kvsd_net *n, int lfd)
{
    if (n->spare_fd < 0) return 0;
    close(n->spare_fd);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        n->srv->counters.conns_refused++;
    }
    n->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
}

/*
 * Serves the accepted socket fd (local: from the Unix-domain listener) as a
 * new connection, or refuses it (over --max-conns, a local peer of another
 * uid, or out of memory): closed at once and counted.
 */
static void conn_add(struct kvsd_net *n, int fd, int local)
{
    int one = 1;
    struct conn *c = NULL;
    if (n->srv->counters.conns_current >= (uint64_t)n->max_conns) goto refuse;
    if (local && !kvsd_local_peer_ok(fd, n->verbose)) {
        n->srv->counters.conns_refused_peer++;
        goto refuse;
    }
    c = calloc(1, sizeof(*c));
    if (!c || (!local && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) ||
        !(c->proto = kvsd_proto_conn_new(n->srv)))
        goto refuse;
    c->fd = fd;
    c->local = local;
    if (n->verbose) peer_name(fd, local, c->peer, sizeof(c->peer));
    if (local) kvsd_proto_allow_shm(c->proto);
    c->events = EPOLLIN;
    c->last_progress_ms = kvs_now_ms();
    struct epoll_event ev = {.events = c->events, .data.ptr = c};
    if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) goto refuse;
    c->next = n->conns;
    if (n->conns) n->conns->prev = c;
    n->conns = c;
    n->srv->counters.conns_current++;
    n->srv->counters.conns_total++;
    if (local) n->srv->counters.conns_local++;
    NET_LOG(n, "connection %d from %s accepted", fd, c->peer);
    return;
refuse:
    if (c) kvsd_proto_conn_free(c->proto);
    free(c);
    close(fd);
    n->srv->counters.conns_refused++;
}

static void accept_all(struct kvsd_net *n, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && refuse_without_fds(n, lfd)) continue;
            if (errno != EAGAIN) NET_LOG(n, "accept: %s", strerror(errno));
            return;
        }
        conn_add(n, fd, lfd == n->ufd);
    }
}

/*
 * One read into iov. A local peer's bytes may carry descriptors
 * (SCM_RIGHTS): every one received is handed to proto, which keeps the one
 * an SHM_MAP waits for and closes the others; those that do not fit the
 * control buffer are closed by the kernel.
 */
static ssize_t conn_recv(struct conn *c, struct iovec *iov, int cnt)
{
    if (!c->local) return readv(c->fd, iov, cnt);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(FDS_PER_READ * sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = iov,
                         .msg_iovlen = (size_t)cnt,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    ssize_t got = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0) return got;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < nfd; k++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(fd));
            kvsd_proto_take_fd(c->proto, fd);
        }
    }
    return got;
}

/* Reads what proto wants, where it wants it; 0, or -1 if the connection broke. */
static int conn_read(struct conn *c)
{
    for (int i = 0; i < READS_PER_WAKE; i++) {
        struct iovec iov[2];
        int cnt = kvsd_proto_recv_iov(c->proto, iov);
        if (cnt == 0) return 0;
        ssize_t got = conn_recv(c, iov, cnt);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return 0;
            return -1;
        }
        if (got == 0) {
            c->eof = 1;
            return 0;
        }
        size_t want = 0;
        for (int k = 0; k < cnt; k++)
            want += iov[k].iov_len;
        c->last_progress_ms = kvs_now_ms();
        kvsd_proto_received(c->proto, (size_t)got);
        if ((size_t)got < want) return 0; /* the socket is empty for now */
    }
    return 0;
}

/* Writes queued replies until done or the socket is full; 0, or -1 if it broke. */
static int conn_write(struct conn *c)
{
    while (kvsd_proto_out_pending(c->proto) > 0) {
        struct iovec iov[IOV_PER_WRITE];
        int cnt = kvsd_proto_out_iov(c->proto, iov, IOV_PER_WRITE);
        /* sendmsg, not writev: MSG_NOSIGNAL turns a vanished peer into EPIPE, not SIGPIPE. */
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t put = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (put < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return 0;
            return -1;
        }
        c->last_progress_ms = kvs_now_ms();
        kvsd_proto_sent(c->proto, (size_t)put);
        /*
         * Room again: parse input that waited behind the back-pressure (also
         * after EOF: a client may half-close once its requests are sent).
         */
        kvsd_proto_process(c->proto);
    }
    return 0;
}

/* After the last reply of a closing connection: half-close, then discard input until EOF. */
static int conn_drain(struct conn *c)
{
    char buf[16384];
    for (;;) {
        ssize_t got = read(c->fd, buf, sizeof(buf));
        if (got < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (got == 0) return -1;
        c->drained += (size_t)got;
        if (c->drained > DRAIN_LIMIT) return -1;
    }
}

static void conn_event(struct kvsd_net *n, struct conn *c, uint32_t events)
{
    if (events & EPOLLERR) goto close;
    if (c->draining) {
        if (conn_drain(c) < 0) goto close;
        return;
    }
    if ((events & (EPOLLIN | EPOLLHUP)) && !c->eof && conn_read(c) < 0) goto close;
    if (conn_write(c) < 0) goto close;

    int closing = kvsd_proto_closing(c->proto);
    size_t pending = kvsd_proto_out_pending(c->proto);
    if (closing && !c->draining)
        NET_LOG(n, "connection %d from %s: malformed input, closing", c->fd, c->peer);
    if ((c->eof || closing) && pending == 0) {
        if (c->eof) goto close;
        /* Closing with unread input would reset the connection and could lose the ERROR reply. */
        if (shutdown(c->fd, SHUT_WR) < 0) goto close;
        c->draining = 1;
        if (conn_drain(c) < 0) goto close;
    }

    uint32_t want = 0;
    if (c->draining || (!c->eof && kvsd_proto_want_input(c->proto))) want |= EPOLLIN;
    if (pending > 0) want |= EPOLLOUT;
    if (want != c->events) {
        struct epoll_event ev = {.events = want, .data.ptr = c};
        if (epoll_ctl(n->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) goto close;
        c->events = want;
    }
    return;

close:
    conn_close(n, c);
}

/* True if c has held its PUT slot longer than --put-timeout: the slot is thrown away. */
static int put_expired(struct kvsd_net *n, struct conn *c, uint64_t now)
{
    if (!n->put_timeout_ms || kvsd_proto_put_age_ms(c->proto, now) < n->put_timeout_ms) return 0;
    kvsd_proto_expire_put(c->proto);
    NET_LOG(n, "connection %d from %s: PUT value too slow, closing", c->fd, c->peer);
    return 1;
}

/* True if c is stalled mid-request or with replies the peer does not take (counted). */
static int stalled(struct kvsd_net *n, struct conn *c, uint64_t now)
{
    if (!n->stall_timeout_ms || now - c->last_progress_ms < n->stall_timeout_ms) return 0;
    if (!kvsd_proto_mid_frame(c->proto) && kvsd_proto_out_pending(c->proto) == 0) return 0;
    n->srv->counters.conns_stalled++;
    NET_LOG(n, "connection %d from %s stalled, closing", c->fd, c->peer);
    return 1;
}

/* Closes connections whose PUT slot expired, and those stalled. */
static void sweep(struct kvsd_net *n)
{
    uint64_t now = kvs_now_ms();
    if ((!n->stall_timeout_ms && !n->put_timeout_ms) || now < n->next_sweep_ms) return;
    n->next_sweep_ms = now + SWEEP_EVERY_MS;
    for (struct conn *c = n->conns, *next; c; c = next) {
        next = c->next;
        if (put_expired(n, c, now) || stalled(n, c, now)) conn_close(n, c);
    }
}

/*
 * Gives freed heap back to the kernel once the connections' heap has fallen
 * TRIM_AFTER_DROP below its peak (peers that queued replies have gone or
 * read them): glibc keeps freed memory for reuse, and memory freed below
 * the top of the heap, or under its raised trim threshold, would otherwise
 * stay in kvstored's RSS. A steady load never falls that far, so never pays.
 */
static void trim_heap(struct kvsd_server *srv)
{
    if (srv->conn_memory_peak - srv->conn_memory < TRIM_AFTER_DROP) return;
    srv->conn_memory_peak = srv->conn_memory;
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

int kvsd_net_run(struct kvsd_net *n, int stop_fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &n->stop_tag};
    if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, stop_fd, &ev) < 0) return -errno;

    int rc = 0;
    for (;;) {
        struct epoll_event events[MAX_EVENTS];
        int timed = n->stall_timeout_ms || n->put_timeout_ms;
        int timeout = timed && n->conns ? SWEEP_EVERY_MS : -1;
        int cnt = epoll_wait(n->epfd, events, MAX_EVENTS, timeout);
        if (cnt < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
            break;
        }
        int stop = 0;
        for (int i = 0; i < cnt; i++) {
            void *tag = events[i].data.ptr;
            if (tag == &n->stop_tag)
                stop = 1;
            else if (tag == &n->listen_tag)
                accept_all(n, n->lfd);
            else if (tag == &n->local_tag)
                accept_all(n, n->ufd);
            else if (tag == &n->extra_tag)
                n->extra_fn(n->extra_arg);
            else
                conn_event(n, tag, events[i].events);
        }
        if (stop) break;
        sweep(n);
        trim_heap(n->srv);
    }
    epoll_ctl(n->epfd, EPOLL_CTL_DEL, stop_fd, NULL);
    return rc;
}

int kvsd_net_listen_local(struct kvsd_net *n, const char *path, char *err, size_t errlen)
{
    if (n->ufd >= 0) return -EBUSY;
    int fd = kvsd_local_listen(path, err, errlen);
    if (fd < 0) return fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &n->local_tag};
    if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int rc = set_reason(err, errlen, -errno, "epoll_ctl");
        close(fd);
        unlink(path);
        return rc;
    }
    n->ufd = fd;
    snprintf(n->upath, sizeof(n->upath), "%s", path);
    return 0;
}

int kvsd_net_watch(struct kvsd_net *n, int fd, void (*fn)(void *arg), void *arg)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &n->extra_tag};
    if (n->extra_fn) return -EBUSY;
    if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return -errno;
    n->extra_fn = fn;
    n->extra_arg = arg;
    return 0;
}

void kvsd_net_destroy(struct kvsd_net *n)
{
    if (!n) return;
    while (n->conns)
        conn_close(n, n->conns);
    close(n->lfd);
    if (n->ufd >= 0) {
        close(n->ufd);
        unlink(n->upath);
    }
    close(n->epfd);
    if (n->spare_fd >= 0) close(n->spare_fd);
    free(n);
}

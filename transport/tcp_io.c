/*
 * tcp_io.c - blocking I/O on a TCP socket, counted in the connection's
 * counters where it sends: the sendmsg loop every sender uses (the
 * submitting thread, the writer thread, the handshake), and the exact
 * receive of the handshake. Socket errors become the transport's codes
 * (tcp_sock_error).
 */
#include "tcp_int.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>

/* Puts descriptor pass into msg as SCM_RIGHTS ancillary data held in ctl. */
static void attach_fd(struct msghdr *msg, char ctl[CMSG_SPACE(sizeof(int))], int pass)
{
    memset(ctl, 0, CMSG_SPACE(sizeof(int)));
    msg->msg_control = ctl;
    msg->msg_controllen = CMSG_SPACE(sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass, sizeof(int));
}

int tcp_send_iov(struct tcp_conn *c, int fd, struct iovec **iovp, int *niovp, int *pass_fd,
                 int flags)
{
    struct iovec *iov = *iovp;
    int niov = *niovp;
    int rc = 0;
    while (niov > 0) {
        struct msghdr msg = {.msg_iov = iov,
                             .msg_iovlen = (size_t)(niov < IOV_MAX ? niov : IOV_MAX)};
        _Alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
        if (pass_fd && *pass_fd >= 0) attach_fd(&msg, ctl, *pass_fd);
        ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
        atomic_fetch_add_explicit(&c->n_send_calls, 1, memory_order_relaxed);
        if (sent < 0) {
            if (errno == EINTR) continue;
            if ((flags & MSG_DONTWAIT) && (errno == EAGAIN || errno == EWOULDBLOCK))
                rc = -EAGAIN;
            else
                rc = tcp_sock_error(
                    errno); /* EAGAIN here is SO_SNDTIMEO: the server stopped reading */
            break;
        }
        atomic_fetch_add_explicit(&c->n_bytes_sent, (unsigned long long)sent, memory_order_relaxed);
        if (pass_fd) *pass_fd = -1; /* it went with the first byte */
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
int tcp_send_all(struct tcp_conn *c, int fd, struct iovec *iov, int niov)
{
    return tcp_send_iov(c, fd, &iov, &niov, NULL, 0);
}

/* Receives exactly n bytes before deadline (ms); the socket has a short SO_RCVTIMEO. */
int tcp_recv_exact(int fd, void *buf, size_t n, uint64_t deadline)
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
        if (errno != EAGAIN && errno != EWOULDBLOCK) return tcp_sock_error(errno);
        if (kvs_now_ms() >= deadline) return -ETIMEDOUT;
    }
    return 0;
}

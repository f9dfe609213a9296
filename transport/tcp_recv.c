/*
 * tcp_recv.c - the reader thread of a TCP connection: it waits for a
 * connection, reads its replies until it dies, and repeats. It buffers small
 * things (headers, statuses) and reads large value remainders straight into
 * the caller's buffer; every TCP_TICK_MS it expires the frames whose deadline
 * passed. A reply for an unknown id (a frame that already timed out) is read
 * and dropped.
 */
#include "tcp_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__thread bool tcp_on_reader_thread;

/*
 * Every TCP_TICK_MS while the reader reads: expires timed-out frames. 0, or
 * -ETIMEDOUT when the frame being read (rx_frame) is past its deadline (the
 * stream cannot be resynchronised), -ECONNRESET when the conn is stopping.
 */
static int rx_tick(struct tcp_conn *c)
{
    uint64_t now = kvs_now_ms();
    if (now < c->next_scan_ms) return 0;
    c->next_scan_ms = now + TCP_TICK_MS;
    tcp_pending_expire(c, now);
    if (c->rx_frame && c->rx_frame->deadline_ms <= now) {
        atomic_fetch_add(&c->n_timeouts, 1);
        return -ETIMEDOUT;
    }
    pthread_mutex_lock(&c->mu);
    bool stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    return stop ? -ECONNRESET : 0;
}

/*
 * One recv of at most want bytes into `into`, counted: the bytes read, 0 when
 * nothing came (a signal, or SO_RCVTIMEO's tick), or a negative code.
 */
static ssize_t rx_recv(struct tcp_conn *c, int fd, void *into, size_t want)
{
    ssize_t got = recv(fd, into, want, 0);
    atomic_fetch_add_explicit(&c->n_recv_calls, 1, memory_order_relaxed);
    if (got > 0) {
        atomic_fetch_add_explicit(&c->n_bytes_recv, (unsigned long long)got, memory_order_relaxed);
        return got;
    }
    if (got == 0) return -ECONNRESET;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return tcp_sock_error(errno);
}

/*
 * Reads n bytes of the current connection into dst (NULL: discard them).
 * While it waits it expires timed-out frames; if the frame being read
 * (rx_frame) passes its deadline, the connection is given up (-ETIMEDOUT).
 */
static int rx_read(struct tcp_conn *c, int fd, void *dst, size_t n)
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
        bool direct = out && n >= TCP_DIRECT_READ;
        c->rx_pos = c->rx_len = 0;
        ssize_t got = rx_recv(c, fd, direct ? out : c->rx, direct ? n : TCP_RX_BUF);
        if (got < 0) return (int)got;
        if (direct) {
            out += got;
            n -= (size_t)got;
        } else {
            c->rx_len = (size_t)got;
        }
        int rc = rx_tick(c);
        if (rc < 0) return rc;
    }
    return 0;
}

/*
 * Reads a GET value of len <= k->len bytes into k's buffer or, in order,
 * its segments (each straight from the socket when large, as rx_read does).
 */
static int rx_read_value(struct tcp_conn *c, int fd, const struct kvs_key_io *k, uint64_t len)
{
    if (k->iovcnt == 0) return rx_read(c, fd, k->buf, len);
    for (uint32_t j = 0; j < k->iovcnt && len > 0; j++) {
        size_t take = k->iov[j].iov_len < len ? k->iov[j].iov_len : len;
        int rc = take ? rx_read(c, fd, k->iov[j].iov_base, take) : 0;
        if (rc < 0) return rc;
        len -= take;
    }
    return 0;
}

/*
 * Reads the per-key entries of a keyed reply into frame f's keys. Like the
 * server's request parser, it takes the frame as a whole or not at all: the
 * entries must fill body_len exactly. Until they have, each key's entry is
 * staged in its vlen (status << 32 | len) while its status stays
 * KEY_PENDING; only then are the statuses given out. A malformed reply thus
 * fails every key of its frame (tcp_frame_finish), never reports one a
 * success it did not prove. (A GET's bytes land in the caller's buffer as
 * they come; a failed key's buffer holds nothing defined.)
 */
static int read_key_replies(struct tcp_conn *c, int fd, const struct kvs_wire_hdr *h,
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
        if (req->opcode == KVS_OP_GET && s.status == 0 && f->job->shm) {
            /* SHM_GET: kvstored put the value in the region at the key's offset. */
            uint64_t at = f->job->shm_off[i];
            if (s.len > k->len) return -EPROTO;
            if (s.len && at != TCP_SHM_IN_PLACE)
                kvs_key_scatter(k, tcp_shm_base(f->job->shm) + at, s.len);
        } else if (req->opcode == KVS_OP_GET && s.status == 0) {
            if (s.len > k->len || s.len > left) return -EPROTO;
            rc = rx_read_value(c, fd, k, s.len);
            if (rc < 0) return rc;
            left -= s.len;
        }
        k->vlen = (uint64_t)(uint32_t)s.status << 32 | s.len;
    }
    if (left != 0) return -EPROTO;
    for (uint32_t i = f->first; i < f->end; i++) {
        struct kvs_key_io *k = &req->keys[i];
        if (k->status != KEY_PENDING) continue;
        k->status = (int32_t)(uint32_t)(k->vlen >> 32);
        k->vlen &= UINT32_MAX;
    }
    return 0;
}

/*
 * Reads an ERROR reply's body (status, then text): *status gets the
 * server's code (-EIO for one this client does not know), and the text is
 * logged. 0 or a read error.
 */
static int read_error_reply(struct tcp_conn *c, int fd, uint32_t body_len, int *status)
{
    uint8_t st[4];
    char text[TCP_ERRTEXT_MAX];
    size_t tlen = body_len - 4 < sizeof(text) - 1 ? body_len - 4 : sizeof(text) - 1;
    int rc = rx_read(c, fd, st, 4);
    if (rc == 0) rc = rx_read(c, fd, text, tlen);
    if (rc == 0) rc = rx_read(c, fd, NULL, body_len - 4 - tlen);
    if (rc < 0) return rc;
    text[tlen] = '\0';
    *status = (int32_t)kvs_get_u32(st);
    if (*status >= 0 || !kvs_wire_status_known(*status)) *status = -EIO;
    kvs_log(KVS_LOG_WARN, "tcp %s: server refused request: %s (%s)", c->ep.name, text,
            strerror(-*status));
    return 0;
}

/* Reads a STATS or CLIENTS reply's text into req (what does not fit text_cap is dropped). */
static int read_text_reply(struct tcp_conn *c, int fd, uint32_t body_len, struct kvs_req *req)
{
    size_t keep = body_len < req->text_cap ? body_len : req->text_cap;
    int rc = rx_read(c, fd, req->text, keep);
    if (rc == 0) rc = rx_read(c, fd, NULL, body_len - keep);
    req->text_len = body_len;
    return rc;
}

/* The opcode frame f was sent with: its request's, or the SHM_ form of it (tcp_shm.c). */
static uint8_t frame_opcode(const struct tcp_frame *f)
{
    uint8_t op = f->job->req->opcode;
    if (!f->job->shm) return op;
    return op == KVS_OP_PUT ? KVS_OP_SHM_PUT : KVS_OP_SHM_GET;
}

/* Reads one reply frame and completes what it answers. */
static int read_one_reply(struct tcp_conn *c, int fd)
{
    uint8_t raw[KVS_WIRE_HDR_LEN];
    int rc = rx_read(c, fd, raw, sizeof(raw));
    if (rc < 0) return rc;
    struct kvs_wire_hdr h;
    if (kvs_wire_hdr_decode(raw, &h, UINT32_MAX) < 0 || !(h.opcode & KVS_OP_REPLY)) {
        kvs_log(KVS_LOG_ERROR, "tcp %s: malformed reply header", c->ep.name);
        return -EPROTO;
    }
    struct tcp_frame *f = tcp_pending_take(c, h.id);
    if (!f) { /* it timed out: skip its reply; kvstored is done with its room in the region */
        rc = rx_read(c, fd, NULL, h.body_len);
        tcp_shm_answered(c->rx_shm, h.id);
        return rc;
    }

    c->rx_frame = f;
    struct kvs_req *req = f->job->req;
    int status = 0;
    if (h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY))
        rc = read_error_reply(c, fd, h.body_len, &status);
    else if (h.opcode != (frame_opcode(f) | KVS_OP_REPLY))
        rc = -EPROTO;
    else if (kvs_wire_opcode_text(req->opcode))
        rc = read_text_reply(c, fd, h.body_len, req);
    else
        rc = read_key_replies(c, fd, &h, f);
    c->rx_frame = NULL;
    tcp_frame_finish(f, rc < 0 ? rc : status);
    /* After the values were copied out of the region: its room may be taken again. */
    tcp_shm_answered(c->rx_shm, h.id);
    return rc;
}

/* Reader thread: waits for a connection, reads its replies until it dies, repeats. */
void *tcp_reader_main(void *arg)
{
    struct tcp_conn *c = arg;
    tcp_on_reader_thread = true;
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
        c->rx_shm = tcp_shm_ref(c->shm);
        pthread_mutex_unlock(&c->mu);

        c->rx_pos = c->rx_len = 0;
        c->next_scan_ms = kvs_now_ms() + TCP_TICK_MS;
        int rc;
        do
            rc = read_one_reply(c, fd);
        while (rc == 0);
        tcp_conn_kill(c, gen, rc == -ECONNRESET || rc == -ETIMEDOUT || rc == -EPROTO ? rc : -EIO);

        /* Forget the number before anyone (a forked child, a sender) can see it reused. */
        pthread_mutex_lock(&c->send_mu);
        pthread_mutex_lock(&c->mu);
        close(fd);
        if (c->fd == fd) c->fd = -1;
        c->reader_fd = -1;
        struct tcp_shm *done = c->rx_shm;
        c->rx_shm = NULL;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->send_mu);
        tcp_shm_unref(done);
    }
    return NULL;
}

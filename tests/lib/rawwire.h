/*
 * rawwire.h - speaking the wire protocol without the client library, for
 * tests: building request frames in a growing buffer, and raw loopback
 * sockets whose every wait is bounded by a socket timeout.
 *
 * Header-only (static inline) on purpose: unit tests do not link tests/lib,
 * and preload tests link tests/lib without cmocka; the helpers assert with
 * cmocka, so include <cmocka.h> (and its prerequisites) before this file.
 */
#ifndef KVTEST_RAWWIRE_H
#define KVTEST_RAWWIRE_H

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"

/* ---- building requests ---- */

/* Request bytes; frame_start and count belong to the frame begun last. */
struct kvt_reqbuf {
    uint8_t *p;
    size_t len, cap;
    size_t frame_start;
    uint32_t count;
};

/* Appends len bytes, growing the buffer by doubling. */
static inline void kvt_reqbuf_put(struct kvt_reqbuf *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (len) memcpy(b->p + b->len, data, len);
    b->len += len;
}

/* Starts a frame; count and body_len are patched by kvt_req_end. */
static inline void kvt_req_begin(struct kvt_reqbuf *b, uint8_t op, uint64_t id)
{
    uint8_t h[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr hdr = {.opcode = op, .id = id};
    kvs_wire_hdr_encode(h, &hdr);
    b->frame_start = b->len;
    b->count = 0;
    kvt_reqbuf_put(b, h, sizeof(h));
}

/* One entry with an explicit key length (malformed frames may lie about it); val only for PUT. */
static inline void kvt_req_entry_klen(struct kvt_reqbuf *b, const char *key, uint16_t klen,
                                      uint32_t len, const void *val)
{
    uint8_t e[KVS_WIRE_ENTRY_LEN];
    kvs_wire_entry_encode(e, klen, len);
    kvt_reqbuf_put(b, e, sizeof(e));
    kvt_reqbuf_put(b, key, klen);
    if (val) kvt_reqbuf_put(b, val, len);
    b->count++;
}

/* One entry for a NUL-terminated key; val only for PUT. */
static inline void kvt_req_entry(struct kvt_reqbuf *b, const char *key, uint32_t len,
                                 const void *val)
{
    kvt_req_entry_klen(b, key, (uint16_t)strlen(key), len, val);
}

/* Patches count and body_len of the frame begun last. */
static inline void kvt_req_end(struct kvt_reqbuf *b)
{
    uint8_t *h = b->p + b->frame_start;
    kvs_put_u32(h + 8, b->count);
    kvs_put_u32(h + 12, (uint32_t)(b->len - b->frame_start - KVS_WIRE_HDR_LEN));
}

static inline void kvt_req_put(struct kvt_reqbuf *b, uint64_t id, const char *key, const void *val,
                               uint32_t len)
{
    kvt_req_begin(b, KVS_OP_PUT, id);
    kvt_req_entry(b, key, len, val);
    kvt_req_end(b);
}

static inline void kvt_req_get(struct kvt_reqbuf *b, uint64_t id, const char *key, uint32_t cap)
{
    kvt_req_begin(b, KVS_OP_GET, id);
    kvt_req_entry(b, key, cap, NULL);
    kvt_req_end(b);
}

/* ---- raw loopback sockets ---- */

/* Connects to 127.0.0.1:port; every send and recv on it gives up after timeout_s seconds. */
static inline int kvt_raw_connect(int port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Sends all len bytes (asserts that every send makes progress). */
static inline void kvt_raw_send_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        b += n;
        len -= (size_t)n;
    }
}

/* Reads exactly len bytes; returns 0, or -1 on EOF/error before that. */
static inline int kvt_raw_recv_all(int fd, void *p, size_t len)
{
    uint8_t *b = p;
    while (len > 0) {
        ssize_t n = recv(fd, b, len, 0);
        if (n <= 0) return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- kvstored's local socket (Unix domain; shared memory) ---- */

/* A raw connection to the Unix socket at path, every wait bounded; -1 if none listens. */
static inline int kvt_raw_local(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads one reply: its header into *h, its body into body (cap bytes at most, asserted). */
static inline void kvt_raw_read_reply(int fd, struct kvs_wire_hdr *h, uint8_t *body, size_t cap)
{
    uint8_t raw[KVS_WIRE_HDR_LEN] = {0}; /* zeroed: the analyzer cannot see recv fill it */
    assert_int_equal(kvt_raw_recv_all(fd, raw, sizeof(raw)), 0);
    assert_int_equal(kvs_wire_hdr_decode(raw, h, (uint32_t)cap), 0);
    assert_int_equal(kvt_raw_recv_all(fd, body, h->body_len), 0);
}

/* Sends p[0..len) in one sendmsg, with descriptor passfd attached (-1: none). */
static inline void kvt_raw_send_fd(int fd, const void *p, size_t len, int passfd)
{
    _Alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (passfd >= 0) {
        msg.msg_control = ctl;
        msg.msg_controllen = sizeof(ctl);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &passfd, sizeof(int));
    }
    assert_int_equal(sendmsg(fd, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

/* HELLO on a raw connection; returns the features the server announced. */
static inline uint32_t kvt_raw_hello(int fd)
{
    uint8_t out[KVS_WIRE_HDR_LEN], body[256] = {0};
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO, .id = 1};
    kvs_wire_hdr_encode(out, &h);
    kvt_raw_send_all(fd, out, sizeof(out));
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_HELLO | KVS_OP_REPLY);
    struct kvs_wire_hello hello;
    assert_int_equal(kvs_wire_hello_decode(body, KVS_WIRE_HELLO_LEN, &hello), 0);
    return hello.features;
}

#endif

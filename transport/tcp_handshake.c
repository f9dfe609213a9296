/*
 * tcp_handshake.c - opening one TCP connection: resolve the name, connect
 * each address within the connect timeout, then HELLO (the server's limits)
 * and, with a shared secret or a server that asks for one, AUTH. Everything
 * here runs on a fresh socket nobody else sees yet. A unix:// or shm://
 * endpoint, or KVSTORE_TRANSPORT=auto with the server on this host, connects
 * to kvstored's local socket instead (tcp_local.c); the rest is the same.
 */
#include "tcp_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Waits for a non-blocking connect on fd to complete, until deadline (ms). 0 or a negative code. */
static int wait_connected(int fd, uint64_t deadline)
{
    for (;;) {
        uint64_t now = kvs_now_ms();
        if (now >= deadline) return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -EIO;
        if (n > 0) break;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    return err ? tcp_sock_error(err) : 0;
}

/* Connects one address within deadline (ms); returns the fd or a negative code. */
static int connect_addr(const struct addrinfo *ai, uint64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) return -EIO;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0) rc = errno == EINPROGRESS ? wait_connected(fd, deadline) : tcp_sock_error(errno);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
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
static int authenticate(struct tcp_conn *c, int fd, const uint8_t *hello_body, size_t hello_len,
                        const struct kvs_wire_hello *hello, uint64_t deadline)
{
    const struct kvs_transport_config *cfg = &c->cfg;
    struct kvs_auth_client a;
    int rc = kvs_auth_client_open(&a, "tcp", c->ep.name, cfg->auth_secret, cfg->auth_secret_len,
                                  hello_body, hello_len, hello);
    if (rc <= 0) return rc;

    /* body zeroed: the analyzer cannot see that the decoder makes an ERROR body >= 4 bytes. */
    uint8_t out[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN], in[KVS_WIRE_HDR_LEN], body[256] = {0};
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN, .id = 0};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_auth_encode(out + KVS_WIRE_HDR_LEN, a.client_nonce, a.mac);
    struct iovec iov = {.iov_base = out, .iov_len = sizeof(out)};
    rc = tcp_send_all(c, fd, &iov, 1);
    if (rc == 0) rc = tcp_recv_exact(fd, in, sizeof(in), deadline);
    if (rc < 0) return rc;
    if (kvs_wire_hdr_decode(in, &h, sizeof(body)) < 0) return -EPROTO;
    rc = tcp_recv_exact(fd, body, h.body_len, deadline);
    if (rc < 0) return rc;
    int32_t refused = 0;
    if (h.opcode == (KVS_OP_ERROR | KVS_OP_REPLY))
        refused = (int32_t)kvs_get_u32(body);
    else if (h.opcode != (KVS_OP_AUTH | KVS_OP_REPLY))
        return -EPROTO;
    return kvs_auth_client_verdict(&a, "tcp", c->ep.name, cfg->auth_secret, cfg->auth_secret_len,
                                   refused, body, h.body_len);
}

/* HELLO exchange (and AUTH, see authenticate) on a fresh blocking socket; fills *lim. */
static int say_hello(struct tcp_conn *c, int fd, struct kvs_limits *lim, uint64_t deadline)
{
    uint8_t out[KVS_WIRE_HDR_LEN], in[KVS_WIRE_HDR_LEN], body[KVS_WIRE_HELLO_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO, .id = 0};
    kvs_wire_hdr_encode(out, &h);
    struct iovec iov = {.iov_base = out, .iov_len = sizeof(out)};
    int rc = tcp_send_all(c, fd, &iov, 1);
    if (rc < 0) return rc;
    rc = tcp_recv_exact(fd, in, sizeof(in), deadline);
    if (rc == -ETIMEDOUT) {
        kvs_log(KVS_LOG_ERROR, "tcp %s: no HELLO reply within %d ms: is this a kvstored?",
                c->ep.name, c->cfg.connect_timeout_ms);
        return rc;
    }
    if (rc < 0) return rc;
    rc = kvs_wire_hdr_decode(in, &h, 4096);
    if (rc < 0 || h.opcode != (KVS_OP_HELLO | KVS_OP_REPLY) || h.body_len < KVS_WIRE_HELLO_LEN ||
        h.body_len > 4096) {
        kvs_log(KVS_LOG_ERROR,
                "tcp %s: not a kvstored (its first bytes are no HELLO reply); check the port",
                c->ep.name);
        return -EPROTO;
    }
    uint8_t rest[4096];
    rc = tcp_recv_exact(fd, rest, h.body_len, deadline);
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

/* Blocking mode, options and HELLO on a connected fd (closed on failure); the fd or a negative
 * code. */
static int finish_connection(struct tcp_conn *c, int fd, int local, struct kvs_limits *lim,
                             uint64_t deadline)
{
    int one = 1;
    int rc = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (rc == 0 && !local) rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rc < 0) {
        close(fd);
        return -EIO;
    }
    set_timeout_opt(fd, SO_SNDTIMEO, c->cfg.timeout_ms);
    set_timeout_opt(fd, SO_RCVTIMEO, TCP_TICK_MS);
    rc = say_hello(c, fd, lim, deadline);
    if (rc == 0 && local && (lim->features & KVS_FEAT_SHM))
        rc = tcp_shm_attach(c, fd, deadline, &c->shm_new);
    if (rc == 0 && c->shm_new) rc = tcp_shm_map_buffers(c, fd, deadline, c->shm_new);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (c->shm_new) atomic_fetch_add(&c->n_shm_connects, 1);
    return fd;
}

/* The local socket at path, connected, its server trusted, HELLO done: the fd or a negative code.
 */
static int open_local(struct tcp_conn *c, const char *path, struct kvs_limits *lim,
                      uint64_t deadline)
{
    struct tcp_local_addr la;
    int fd = tcp_local_addr(path, &la);
    if (fd == 0) fd = connect_addr(&la.ai, deadline);
    if (fd < 0) return fd;
    int rc = tcp_local_check_server(c, fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    fd = finish_connection(c, fd, 1, lim, deadline);
    if (fd >= 0) atomic_fetch_add(&c->n_local_connects, 1);
    return fd;
}

int tcp_open_connection(struct tcp_conn *c, struct kvs_limits *lim)
{
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.connect_timeout_ms;
    if (c->ep.path[0]) return open_local(c, c->ep.path, lim, deadline);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(c->ep.host, c->ep.port, &hints, &res);
    if (rc != 0) {
        kvs_log(KVS_LOG_ERROR,
                "tcp %s: cannot resolve host \"%s\": %s; check the name in the server list",
                c->ep.name, c->ep.host, gai_strerror(rc));
        return -EHOSTUNREACH;
    }
    char path[108];
    if (c->ep.try_local && tcp_local_find(c, res, path, sizeof(path))) {
        int lfd = open_local(c, path, lim, deadline);
        tcp_local_chosen(c, path, lfd);
        if (lfd >= 0) {
            freeaddrinfo(res);
            return lfd;
        }
    }
    int fd = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = connect_addr(ai, deadline);
        if (fd >= 0) break;
    }
    freeaddrinfo(res);
    if (fd < 0) return fd;
    return finish_connection(c, fd, 0, lim, deadline);
}

/*
 * tcp_local.c - the tcp transport over kvstored's local (Unix-domain)
 * socket: the same frames and connection state machine, another socket. It
 * is used for a unix:// or shm:// endpoint, and for a bare host:port under
 * KVSTORE_TRANSPORT=auto when the server is on this host: one of the
 * resolved addresses is a loopback address or an address of one of this
 * host's interfaces, and the default socket for that port exists
 * (common/local.h: both sides compute the same path). Either way the
 * server must run as our uid or as root (SO_PEERCRED), or the connection
 * is dropped: a socket planted by another user gets none of our values.
 */
#include "tcp_int.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvstore.h"
#include "local.h"

int tcp_local_addr(const char *path, struct tcp_local_addr *la)
{
    memset(la, 0, sizeof(*la));
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(la->un.sun_path)) return -ECONNREFUSED;
    la->un.sun_family = AF_UNIX;
    memcpy(la->un.sun_path, path, n);
    la->ai.ai_family = AF_UNIX;
    la->ai.ai_socktype = SOCK_STREAM;
    la->ai.ai_addr = (struct sockaddr *)&la->un;
    la->ai.ai_addrlen = (socklen_t)sizeof(la->un);
    return 0;
}

int tcp_local_check_server(struct tcp_conn *c, int fd)
{
    unsigned uid = 0;
    int ok = kvs_local_peer_trusted(fd, &uid);
    if (ok == 1) return 0;
    if (ok == 0)
        kvs_log(KVS_LOG_WARN,
                "tcp %s: the local socket's server runs as uid %u, not as ours or root", c->ep.name,
                uid);
    return -EACCES;
}

int tcp_local_find(struct tcp_conn *c, const struct addrinfo *res, char *path, size_t len)
{
    int here = 0;
    for (const struct addrinfo *ai = res; ai && !here; ai = ai->ai_next)
        here = kvs_local_addr_is_here(ai->ai_addr);
    if (!here) return 0;
    struct stat st;
    if (kvs_local_default_path(c->ep.portno, path, len) < 0 || stat(path, &st) < 0 ||
        !S_ISSOCK(st.st_mode)) {
        kvs_log(KVS_LOG_DEBUG, "tcp %s: on this host, but no local socket at %s", c->ep.name, path);
        return 0;
    }
    return 1;
}

void tcp_local_chosen(struct tcp_conn *c, const char *path, int fd)
{
    int now = fd >= 0 ? 1 : 2;
    if (c->local_logged == now) return;
    c->local_logged = now;
    if (fd >= 0)
        kvs_log(KVS_LOG_INFO, "tcp %s: same host, using the local socket %s", c->ep.name, path);
    else
        kvs_log(KVS_LOG_INFO, "tcp %s: local socket %s: %s; using TCP", c->ep.name, path,
                kvs_strerror(fd));
}

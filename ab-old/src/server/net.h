/*
 * net.h - kvstored's TCP side: one epoll loop, non-blocking sockets, one
 * proto state machine per connection.
 */
#ifndef KVSD_NET_H
#define KVSD_NET_H

#include <stddef.h>

#include "proto.h"

struct kvsd_net;

struct kvsd_net_config {
    const char *host; /* numeric address or name to bind; nothing else is bound */
    const char *port;
    int max_conns; /* more are accepted and closed at once (and counted) */
    int verbose;   /* log connections and protocol errors on stderr */
    /*
     * A connection stuck this long in the middle of a request (holding a
     * reserved slot) or with unsent replies (holding pins) is closed, so a
     * stalled peer cannot hold memory forever. 0: never.
     */
    unsigned stall_timeout_ms;
    /*
     * A PUT slot reserved this long without its whole value in (a value
     * trickling in makes progress, so the stall timeout would not fire) is
     * thrown away (put_expired) and its connection closed. 0: never.
     */
    unsigned put_timeout_ms;
};

/*
 * Binds and listens (SO_REUSEADDR). Returns 0, or a negative errno with a
 * reason written to err.
 */
int kvsd_net_create(struct kvsd_server *srv, const struct kvsd_net_config *cfg,
                    struct kvsd_net **out, char *err, size_t errlen);
/* "HOST:PORT" actually bound (the real port when 0 was asked), "[v6]:PORT" for IPv6. */
int kvsd_net_local_addr(const struct kvsd_net *n, char *buf, size_t len);
/*
 * Also serves the same protocol on a Unix-domain socket at path
 * (local_socket.h: who may connect, a stale file replaced); unlinked again
 * by kvsd_net_destroy. 0 or a negative errno with a reason in err.
 */
int kvsd_net_listen_local(struct kvsd_net *n, const char *path, char *err, size_t errlen);
/*
 * Serves clients until stop_fd becomes readable (a signalfd, a pipe); does
 * not read stop_fd. Returns 0, or a negative errno if the loop itself failed.
 */
int kvsd_net_run(struct kvsd_net *n, int stop_fd);
/*
 * Has kvsd_net_run call fn(arg) whenever fd is readable (level-triggered):
 * how kvstored's RDMA side (server/rdma.h) shares this loop. One such fd.
 */
int kvsd_net_watch(struct kvsd_net *n, int fd, void (*fn)(void *arg), void *arg);
/* Closes every connection and the listening socket. */
void kvsd_net_destroy(struct kvsd_net *n);

#endif /* KVSD_NET_H */

/*
 * net.h - kvstored's TCP side: one epoll loop, non-blocking sockets, one
 * proto state machine per connection.
 */
#ifndef KVS_NET_H
#define KVS_NET_H

#include <stddef.h>

#include "proto.h"

struct kvs_net;

struct kvs_net_config {
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
};

/*
 * Binds and listens (SO_REUSEADDR). Returns 0, or a negative errno with a
 * reason written to err.
 */
int kvs_net_create(struct kvs_server *srv, const struct kvs_net_config *cfg, struct kvs_net **out,
                   char *err, size_t errlen);
/* "HOST:PORT" actually bound (the real port when 0 was asked), "[v6]:PORT" for IPv6. */
int kvs_net_local_addr(const struct kvs_net *n, char *buf, size_t len);
/*
 * Serves clients until stop_fd becomes readable (a signalfd, a pipe); does
 * not read stop_fd. Returns 0, or a negative errno if the loop itself failed.
 */
int kvs_net_run(struct kvs_net *n, int stop_fd);
/*
 * Has kvs_net_run call fn(arg) whenever fd is readable (level-triggered):
 * how kvstored's RDMA side (server/rdma.h) shares this loop. One such fd.
 */
int kvs_net_watch(struct kvs_net *n, int fd, void (*fn)(void *arg), void *arg);
/* Closes every connection and the listening socket. */
void kvs_net_destroy(struct kvs_net *n);

#endif /* KVS_NET_H */

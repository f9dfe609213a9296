/*
 * local.h - kvstored's same-host endpoint, a Unix-domain stream socket:
 * where it lives by default and whom either side trusts on it. The server
 * (server/local.c) listens there; the client (transport/tcp_local.c) finds
 * it there when KVSTORE_TRANSPORT is auto and the server's address is one of
 * this host's. The rules live here so that both sides compute the same.
 */
#ifndef KVS_LOCAL_H
#define KVS_LOCAL_H

#include <stddef.h>
#include <sys/socket.h>

/*
 * The default socket of the kvstored whose TCP port is port:
 * DIR/kvstored-PORT-NETNS.sock, DIR the first of $KVSTORE_RUNTIME_DIR,
 * $XDG_RUNTIME_DIR and /tmp that is set; NETNS the inode of this process's
 * network namespace (a TCP port is unique per namespace, so is this name;
 * without /proc the name is kvstored-PORT.sock). 0, or -ENAMETOOLONG when it
 * does not fit in len or in a sockaddr_un.
 */
int kvs_local_default_path(unsigned port, char *buf, size_t len);

/* 1 when sa (AF_INET or AF_INET6) is a loopback address or one of this host's interfaces'
 * addresses. */
int kvs_local_addr_is_here(const struct sockaddr *sa);

/*
 * The peer policy of the local socket, both ways: 1 when the process at the
 * other end of the connected Unix socket fd (SO_PEERCRED) runs as our
 * effective uid or as root, 0 when not, a negative errno when it cannot be
 * told. *peer_uid gets the peer's uid when known (may be NULL).
 */
int kvs_local_peer_trusted(int fd, unsigned *peer_uid);

#endif /* KVS_LOCAL_H */

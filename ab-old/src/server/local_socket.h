/*
 * local_socket.h - kvstored's same-host endpoint: a Unix-domain stream socket
 * speaking the same protocol as TCP (net.c serves its connections with the
 * same proto state machine). Who may connect: common/local.h's peer policy
 * (SO_PEERCRED: our uid or root), then --auth-file as on TCP.
 */
#ifndef KVSD_LOCAL_SOCKET_H
#define KVSD_LOCAL_SOCKET_H

#include <stddef.h>

/*
 * Binds and listens on path (mode 0666: the peer policy, not the file mode,
 * decides who gets in). A socket file already there is taken over when
 * nothing answers on it (a server that was killed left it); one that
 * answers is another server's: -EADDRINUSE. The fd or a negative errno with
 * a reason in err.
 */
int kvsd_local_listen(const char *path, char *err, size_t errlen);

/* 1 when the peer of accepted socket fd may be served (kvs_local_peer_trusted), else 0. */
int kvsd_local_peer_ok(int fd, int verbose);

#endif /* KVSD_LOCAL_SOCKET_H */

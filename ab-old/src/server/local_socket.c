/*
 * local_socket.c - kvstored's Unix-domain listener and its peer check (local_socket.h).
 */
#include "local_socket.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "local.h" /* common/: the shared rules */
#include "log.h"

/* 1 when a server answers on the socket at un (then it is not ours to replace). */
static int answers(const struct sockaddr_un *un)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int live = connect(fd, (const struct sockaddr *)un, sizeof(*un)) == 0;
    close(fd);
    return live;
}

int kvsd_local_listen(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(un.sun_path)) {
        snprintf(err, errlen, "local socket %s: path too long (at most %zu bytes)", path,
                 sizeof(un.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    memcpy(un.sun_path, path, n);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode) || answers(&un)) {
            snprintf(err, errlen, "local socket %s: %s", path,
                     S_ISSOCK(st.st_mode) ? "another server answers there" : "not a socket");
            return -EADDRINUSE;
        }
        unlink(path); /* a dead server's */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "local socket: %s", strerror(e));
        return -e;
    }
    if (bind(fd, (const struct sockaddr *)&un, sizeof(un)) < 0 || chmod(path, 0666) < 0 ||
        listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on local socket %s: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    return fd;
}

int kvsd_local_peer_ok(int fd, int verbose)
{
    unsigned uid = 0;
    int ok = kvs_local_peer_trusted(fd, &uid);
    if (ok != 1 && verbose)
        kvs_log_server("kvstored", "local peer uid %u refused (not ours, not root)", uid);
    return ok == 1;
}

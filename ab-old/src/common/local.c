/*
 * local.c - the local socket's default place and peer policy (local.h).
 */
#include "local.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int kvs_local_default_path(unsigned port, char *buf, size_t len)
{
    const char *dir = getenv("KVSTORE_RUNTIME_DIR");
    if (!dir || !*dir) dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || !*dir) dir = "/tmp";
    struct stat st;
    int n;
    if (stat("/proc/self/ns/net", &st) == 0)
        n = snprintf(buf, len, "%s/kvstored-%u-%llu.sock", dir, port,
                     (unsigned long long)st.st_ino);
    else
        n = snprintf(buf, len, "%s/kvstored-%u.sock", dir, port);
    struct sockaddr_un un;
    if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(un.sun_path)) return -ENAMETOOLONG;
    return 0;
}

/* 1 when a and b (same family) are the same address. */
static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family) return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

int kvs_local_addr_is_here(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        if ((a >> 24) == 127) return 1;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return 1;
    } else {
        return 0;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0) return 0;
    int here = 0;
    for (struct ifaddrs *i = ifs; i && !here; i = i->ifa_next)
        if (i->ifa_addr &&
            (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
            here = same_addr(sa, i->ifa_addr);
    freeifaddrs(ifs);
    return here;
}

int kvs_local_peer_trusted(int fd, unsigned *peer_uid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) return -errno;
    if (peer_uid) *peer_uid = (unsigned)cr.uid;
    return cr.uid == geteuid() || cr.uid == 0;
}

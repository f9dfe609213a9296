/*
 * memfd.h - memory to share with another process of this host: a sealed
 * memfd, mapped. The seals are what kvstored requires of a region a client
 * passes it (server/shm.c): no shrinking (a page vanishing under its copy
 * would be a SIGBUS in the server), no growing, no more seals.
 */
#ifndef KVS_MEMFD_H
#define KVS_MEMFD_H

#include <stddef.h>

/*
 * A memfd named name of size bytes, sealed, mapped shared read-write: 0 with
 * its descriptor in *fd and its mapping in *base, or a negative errno
 * (nothing left open).
 */
int kvs_memfd_map(const char *name, size_t size, int *fd, void **base);

#endif /* KVS_MEMFD_H */

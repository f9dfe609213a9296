/*
 * shm.h - a client's shared region, as kvstored maps it for one local
 * connection (docs/shm.md): the client creates a memfd, seals it, and
 * passes it with SHM_MAP; kvstored checks what it was given, maps it, and
 * copies PUT values out of it and GET values into it at the offsets the
 * client names, each range checked here. The mapping lives as long as the
 * connection: kvsd_shm_unmap when it closes, whatever state the client is in.
 */
#ifndef KVSD_SHM_H
#define KVSD_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define KVSD_SHM_MIN KVS_WIRE_SHM_MIN /* the smallest region accepted */

struct kvsd_shm {
    uint8_t *base; /* NULL: none mapped */
    uint64_t size;
};

/*
 * Checks fd and maps it as r: a memfd (a regular file of the kernel's shmem
 * filesystem: no pipe, socket, directory, disk or hugetlbfs file), opened
 * read-write, sealed against shrinking and against further seals (so that no
 * page can vanish under kvstored's copies: a SIGBUS), not sealed against
 * writes, exactly size bytes long, size a multiple of the page size in
 * KVSD_SHM_MIN..max. 0, or -EINVAL with the reason in *why (a constant
 * string). Does not close fd.
 */
int kvsd_shm_map(int fd, uint64_t size, uint64_t max, struct kvsd_shm *r, const char **why);
/* Unmaps r (none mapped: nothing to do). */
void kvsd_shm_unmap(struct kvsd_shm *r);
/* True if [off, off + len) lies inside r (and r is mapped). */
int kvsd_shm_range_ok(const struct kvsd_shm *r, uint64_t off, uint64_t len);

#endif /* KVSD_SHM_H */

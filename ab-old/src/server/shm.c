/*
 * shm.c - checking and mapping a client's region (shm.h). Every check here
 * stands between a client and a fault inside kvstored: a region that could
 * shrink under a copy would raise SIGBUS in the server; one that is not a
 * memfd could be a file others share; a range past its end would reach
 * whatever the server has mapped next to it.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

/* The seals a region must carry, and those it must not (kvstored writes GET values into it). */
#define SEALS_NEEDED (F_SEAL_SHRINK | F_SEAL_SEAL)
#ifdef F_SEAL_FUTURE_WRITE
#define SEALS_REFUSED (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)
#else
#define SEALS_REFUSED F_SEAL_WRITE
#endif

static int refuse(const char **why, const char *text)
{
    *why = text;
    return -EINVAL;
}

int kvsd_shm_map(int fd, uint64_t size, uint64_t max, struct kvsd_shm *r, const char **why)
{
    struct stat st;
    struct statfs sf;
    r->base = NULL;
    r->size = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) return refuse(why, "not a regular file");
    if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) return refuse(why, "not a memfd");
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) return refuse(why, "not open read-write");
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SEALS_NEEDED) != SEALS_NEEDED)
        return refuse(why, "not sealed against shrinking and further seals");
    if (seals & SEALS_REFUSED) return refuse(why, "sealed against writes");
    long page = sysconf(_SC_PAGESIZE);
    if (size < KVSD_SHM_MIN || size > max || (page > 0 && size % (uint64_t)page != 0))
        return refuse(why, "size out of range");
    if ((uint64_t)st.st_size != size) return refuse(why, "size differs from the file's");
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return refuse(why, "cannot be mapped");
    /* A forked kvstored child (there is none today) would not inherit clients' regions. */
    (void)madvise(p, size, MADV_DONTFORK);
    r->base = p;
    r->size = size;
    return 0;
}

void kvsd_shm_unmap(struct kvsd_shm *r)
{
    if (!r->base) return;
    munmap(r->base, r->size);
    r->base = NULL;
    r->size = 0;
}

int kvsd_shm_range_ok(const struct kvsd_shm *r, uint64_t off, uint64_t len)
{
    return r->base && off <= r->size && len <= r->size - off;
}

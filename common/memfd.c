/* memfd.c - a sealed memfd, mapped (memfd.h). */
#include "memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

int kvs_memfd_map(const char *name, size_t size, int *fd, void **base)
{
    int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0) return -errno;
    void *p = MAP_FAILED;
    if (ftruncate(f, (off_t)size) == 0 &&
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        close(f);
        return -err;
    }
    *fd = f;
    *base = p;
    return 0;
}

/*
 * file.c - small files replaced and read safely (file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"

/* 64 bits nobody can guess: getrandom, else (no entropy yet) the clock, pid and a counter. */
static uint64_t unguessable(void)
{
    static atomic_uint_fast64_t counter;
    uint64_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r)) return r;
    r = kvs_now_ns() ^ ((uint64_t)getpid() << 32) ^
        atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
    return r * 0xbf58476d1ce4e5b9ull;
}

/*
 * Creates a new temporary file beside path, its name written into tmp; the
 * open fd or a negative errno. A name that exists (whatever it is) is never
 * opened: another is tried.
 */
static int create_beside(const char *path, mode_t mode, char *tmp, size_t cap)
{
    for (int tries = 0; tries < 16; tries++) {
        int n = snprintf(tmp, cap, "%s.tmp.%016llx", path, (unsigned long long)unguessable());
        if (n < 0 || (size_t)n >= cap) return -ENAMETOOLONG;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0) return fd;
        if (errno != EEXIST) return -errno;
    }
    return -EEXIST;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int kvs_file_replace(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[PATH_MAX + 32];
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) return -EEXIST;
    int fd = create_beside(path, mode, tmp, sizeof(tmp));
    if (fd < 0) return fd;
    int rc = write_all(fd, data, len);
    if (close(fd) < 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0) rc = -errno;
    if (rc < 0) unlink(tmp);
    return rc;
}

ssize_t kvs_file_read(const char *path, char *buf, size_t cap)
{
    struct stat st;
    size_t got = 0;
    ssize_t rc = 0;
    if (cap == 0) return -EINVAL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -errno;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        goto out;
    }
    for (;;) {
        char probe;
        /* Up to cap - 1 bytes into buf; then one byte more tells a file too large. */
        ssize_t n = got < cap - 1 ? read(fd, buf + got, cap - 1 - got) : read(fd, &probe, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0) break;
        if (got == cap - 1) {
            rc = -EFBIG;
            goto out;
        }
        got += (size_t)n;
    }
    buf[got] = '\0';
    rc = (ssize_t)got;
out:
    close(fd);
    return rc;
}

/*
 * pool_reuse.c - keeps kvstored's pool mapping from one fuzz input to the
 * next (fuzz_server, fuzz_auth).
 *
 * Those targets build a whole server per input (kvsd_server_init ... fini),
 * so every input starts from the same state and a crash reproduces from the
 * input alone. The one part of that set-up which is not under test and is
 * not cheap is the pool's anonymous mmap, its munmap and the page faults of
 * a fresh mapping on every input. The targets are linked with
 * -Wl,--wrap=mmap -Wl,--wrap=munmap, so pool.c's two calls land here: one
 * mapping (of the largest size asked for) is handed out again and again.
 * Everything else (store, index, LRUs, page table) is still created and
 * freed per input.
 *
 * The only thing an input inherits is the bytes left in the pool by the one
 * before. The server never interprets value bytes (they are copied in from
 * a PUT and sent out by a GET), and a chunk's free-list link is read only
 * after the chunk was carved and freed by the same input (pool.c carves
 * lazily), so stale bytes cannot change what the code under test does; they
 * could only show up as the value bytes of a GET reply, which no harness
 * inspects.
 */
#include <stddef.h>
#include <sys/mman.h>

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);

#define POOL_PROT  (PROT_READ | PROT_WRITE)
#define POOL_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

static void *cached;      /* the kept mapping, or NULL */
static size_t cached_len; /* its length */
static int cached_in_use; /* handed out and not yet given back */

/* A pool-like request (anonymous, anywhere, read-write) gets the kept mapping when it is free. */
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (addr != NULL || prot != POOL_PROT || flags != POOL_FLAGS || fd != -1 || off != 0)
        return __real_mmap(addr, len, prot, flags, fd, off);
    if (cached_in_use) return __real_mmap(addr, len, prot, flags, fd, off);
    if (cached && cached_len < len) {
        __real_munmap(cached, cached_len);
        cached = NULL;
    }
    if (!cached) {
        void *p = __real_mmap(NULL, len, prot, flags, -1, 0);
        if (p == MAP_FAILED) return p;
        cached = p;
        cached_len = len;
    }
    cached_in_use = 1;
    return cached;
}

/* Giving back the kept mapping only marks it free; anything else is really unmapped. */
int __wrap_munmap(void *addr, size_t len)
{
    if (cached_in_use && addr == cached && len <= cached_len) {
        cached_in_use = 0;
        return 0;
    }
    return __real_munmap(addr, len);
}

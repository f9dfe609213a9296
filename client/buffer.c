/*
 * buffer.c - kvs_alloc_buffer / kvs_free_buffer: memory the client shares
 * with a same-host kvstored (docs/shm.md "Buffer regions"). A buffer is a
 * sealed memfd mapped here; each server's transport is handed it
 * (share_mem: tcp has kvstored map it on a local connection, so values
 * move between it and the store with kvstored's one copy) and it is
 * registered as kvs_register_buffer would (RDMA). The client owns the
 * mapping and the descriptor; the transports only borrow them until
 * unshare_mem.
 */
#include "client_int.h"

#include "memfd.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

void kvc_buffers_init(kvs_client *c)
{
    pthread_mutex_init(&c->buf_mu, NULL);
    for (size_t i = 0; i < KVS_MAX_SHARED_BUFFERS; i++)
        c->bufs[i].fd = -1;
}

/* Gives buffer b back: every server forgets it, then it is unmapped and its memfd closed. */
static void buffer_release(kvs_client *c, struct kvc_buffer *b)
{
    for (size_t s = 0; s < c->nservers; s++) {
        struct server_link *sv = &c->servers[s];
        if (!sv->conn) continue;
        if (sv->ops->unshare_mem) sv->ops->unshare_mem(sv->conn, b->ptr);
        if (sv->ops->unreg_mem) (void)sv->ops->unreg_mem(sv->conn, b->ptr);
    }
    munmap(b->ptr, b->len);
    close(b->fd);
    *b = (struct kvc_buffer){.fd = -1};
}

void kvc_buffers_fini(kvs_client *c)
{
    for (size_t i = 0; i < KVS_MAX_SHARED_BUFFERS; i++) {
        struct kvc_buffer *b = &c->bufs[i];
        if (!b->ptr || b->ptr == MAP_FAILED) continue;
        munmap(b->ptr, b->len);
        close(b->fd);
    }
    pthread_mutex_destroy(&c->buf_mu);
}

int kvs_alloc_buffer(kvs_client *c, size_t len, void **out)
{
    if (out) *out = NULL;
    if (!c || !out || len == 0 || len > KVC_SHM_MAX) return -EINVAL;
    long page = sysconf(_SC_PAGESIZE);
    size_t p = page > 0 ? (size_t)page : 4096;
    size_t size = (len + p - 1) / p * p;
    if (size < KVS_WIRE_SHM_MIN) size = KVS_WIRE_SHM_MIN; /* still one kvstored maps */

    /* The slot is claimed under buf_mu, the rest done without it: sharing waits for kvstored,
     * and a callback on the connection's reader thread may call in here meanwhile. */
    pthread_mutex_lock(&c->buf_mu);
    struct kvc_buffer *slot = NULL;
    for (size_t i = 0; i < KVS_MAX_SHARED_BUFFERS && !slot; i++)
        if (!c->bufs[i].ptr) slot = &c->bufs[i];
    if (slot) slot->ptr = MAP_FAILED;
    pthread_mutex_unlock(&c->buf_mu);
    if (!slot) return -ENOMEM;

    struct kvc_buffer b = {.len = size, .fd = -1};
    /* Any failure to make the memory is the API's -ENOMEM. */
    int rc = kvs_memfd_map("kvstore-buffer", size, &b.fd, &b.ptr) < 0 ? -ENOMEM : 0;
    for (size_t s = 0; rc == 0 && s < c->nservers; s++) {
        struct server_link *sv = &c->servers[s];
        if (sv->ops->share_mem) rc = sv->ops->share_mem(sv->conn, b.ptr, size, b.fd);
        if (rc == 0 && sv->ops->reg_mem) rc = sv->ops->reg_mem(sv->conn, b.ptr, size);
    }
    if (rc < 0 && b.ptr) buffer_release(c, &b); /* every server forgets it again */
    pthread_mutex_lock(&c->buf_mu);
    *slot = rc == 0 ? b : (struct kvc_buffer){.fd = -1};
    pthread_mutex_unlock(&c->buf_mu);
    if (rc == 0) *out = b.ptr;
    return rc;
}

int kvs_free_buffer(kvs_client *c, void *ptr)
{
    if (!c || !ptr || ptr == MAP_FAILED) return -EINVAL;
    struct kvc_buffer b = {.fd = -1};
    pthread_mutex_lock(&c->buf_mu);
    for (size_t i = 0; i < KVS_MAX_SHARED_BUFFERS && !b.ptr; i++) {
        if (c->bufs[i].ptr != ptr) continue;
        b = c->bufs[i];
        c->bufs[i] = (struct kvc_buffer){.fd = -1};
    }
    pthread_mutex_unlock(&c->buf_mu);
    if (!b.ptr) return -EINVAL;
    buffer_release(c, &b);
    return 0;
}

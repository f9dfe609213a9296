/*
 * pool.h - kvstored's value memory: one region, allocated once, carved
 * memcached-style into slab classes.
 *
 * The region is a single mmap so that it can later be registered for RDMA as
 * one memory region (base + size); every value lives at an offset inside it
 * and is contiguous. The region is cut into 1 MiB pages. A page either is
 * free, belongs to one slab class (and is carved into that class's fixed-size
 * chunks), or is part of a run of contiguous pages holding one large value
 * (larger than half a page). Chunk sizes grow by a factor 1.25 from 64 bytes,
 * so same-size layer slices fill whole pages and never fragment. A slab page
 * whose last chunk is freed goes back to the free pages, so memory moves
 * between classes as the workload changes.
 *
 * The pool only hands out and takes back slots; what lives in them (keys,
 * LRU, eviction) is the store's business (store.h).
 */
#ifndef KVS_POOL_H
#define KVS_POOL_H

#include <stddef.h>
#include <stdint.h>

#define KVS_POOL_PAGE      (1u << 20)
#define KVS_POOL_MIN_CHUNK 64u
#define KVS_POOL_LARGE     (-1) /* class id of values stored in page runs */
#define KVS_POOL_NO_PAGE   UINT32_MAX

struct kvs_pool;

struct kvs_pool_stats {
    uint64_t size; /* bytes in the region */
    uint32_t pages_total;
    uint32_t pages_free;
    uint64_t bytes_used; /* chunk or run bytes handed out */
};

struct kvs_pool_class_stats {
    uint32_t chunk_size;
    uint32_t chunks_per_page;
    uint32_t pages;
    uint64_t chunks_used;
};

/*
 * Maps a region of bytes rounded down to whole pages. Returns 0, -EINVAL
 * (less than one page, or too many pages) or -ENOMEM.
 */
int kvs_pool_create(size_t bytes, struct kvs_pool **out);
void kvs_pool_destroy(struct kvs_pool *p);

uint8_t *kvs_pool_base(const struct kvs_pool *p);
size_t kvs_pool_size(const struct kvs_pool *p);

/* Number of slab classes (ids 0..n-1). */
int kvs_pool_nclasses(const struct kvs_pool *p);
/* The slab class that holds a value of len bytes, or KVS_POOL_LARGE. */
int kvs_pool_class_of(const struct kvs_pool *p, size_t len);
/* Bytes a value of len bytes occupies (its chunk size, or its whole pages). */
size_t kvs_pool_slot_size(const struct kvs_pool *p, size_t len);

/*
 * Reserves a contiguous slot for len bytes and returns its offset. Returns
 * 0, -ENOSPC (no free chunk in the class and no free page / run of pages:
 * the caller may evict and retry) or -E2BIG (larger than the whole region).
 */
int kvs_pool_alloc(struct kvs_pool *p, size_t len, uint64_t *off);
/* Gives back a slot obtained with kvs_pool_alloc for the same len. */
void kvs_pool_free(struct kvs_pool *p, uint64_t off, size_t len);

/* Page index of an offset. */
static inline uint32_t kvs_pool_page_of(uint64_t off)
{
    return (uint32_t)(off / KVS_POOL_PAGE);
}

void kvs_pool_stats(const struct kvs_pool *p, struct kvs_pool_stats *st);
void kvs_pool_class_stats(const struct kvs_pool *p, int cls, struct kvs_pool_class_stats *st);

#endif /* KVS_POOL_H */

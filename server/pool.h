/*
 * pool.h - kvstored's value memory: one region, allocated once, carved
 * memcached-style into slab classes.
 *
 * The region is a single mmap so that it can later be registered for RDMA as
 * one memory region (base + size); every value lives at an offset inside it
 * and is contiguous. The region is cut into 1 MiB pages. A page either is
 * free, belongs to one slab class (and is carved into that class's fixed-size
 * chunks), or is part of a run of contiguous pages holding one large value
 * (larger than half a page). Chunk sizes grow by a factor 1.25 from 64 bytes;
 * a size reserved often whose growth class wastes over 2% of a page gets a
 * class of its own, learned (kvsd_pool_learn), so same-size layer slices fill
 * whole pages with at most 8 bytes of rounding and never fragment. A slab page
 * whose last chunk is freed goes back to the free pages, so memory moves
 * between classes as the workload changes.
 *
 * The pool only hands out and takes back slots; what lives in them (keys,
 * LRU, eviction) is the store's business (store.h).
 */
#ifndef KVSD_POOL_H
#define KVSD_POOL_H

#include <stddef.h>
#include <stdint.h>

#define KVSD_POOL_PAGE        (1u << 20)
#define KVSD_POOL_MIN_CHUNK   64u
#define KVSD_POOL_LARGE       (-1) /* class id of values stored in page runs */
#define KVSD_POOL_FREE        (-2) /* kvsd_pool_page_owner of a page nobody holds */
#define KVSD_POOL_NO_PAGE     UINT32_MAX
#define KVSD_POOL_MAX_CLASSES 64 /* growth classes (41) and learned ones */

struct kvsd_pool;

struct kvsd_pool_stats {
    uint64_t size; /* bytes in the region */
    uint32_t pages_total;
    uint32_t pages_free;
    uint64_t bytes_used; /* chunk or run bytes handed out */
};

struct kvsd_pool_class_stats {
    uint32_t chunk_size;
    uint32_t chunks_per_page;
    uint32_t pages;
    uint64_t chunks_used;
};

/*
 * Maps a region of bytes rounded down to whole pages. Returns 0, -EINVAL
 * (less than one page, or too many pages) or -ENOMEM.
 */
int kvsd_pool_create(size_t bytes, struct kvsd_pool **out);
void kvsd_pool_destroy(struct kvsd_pool *p);
/*
 * Touches every page of the pool now (--prefault), so that no store pays a
 * page fault (the kernel zeroing a page) on the way: 0, or -ENOMEM when the
 * machine has not that much memory to give.
 */
int kvsd_pool_prefault(struct kvsd_pool *p);

uint8_t *kvsd_pool_base(const struct kvsd_pool *p);
size_t kvsd_pool_size(const struct kvsd_pool *p);

/* Number of slab classes (ids 0..n-1); grows as classes are learned, ids never change. */
int kvsd_pool_nclasses(const struct kvsd_pool *p);
/* The slab class with the smallest chunk that holds len bytes, or KVSD_POOL_LARGE. */
int kvsd_pool_class_of(const struct kvsd_pool *p, size_t len);
/* Bytes a value of len bytes occupies (its chunk size, or its whole pages). */
size_t kvsd_pool_slot_size(const struct kvsd_pool *p, size_t len);

/*
 * Reserves a contiguous slot for len bytes and returns its offset. Returns
 * 0, -ENOSPC (no free chunk in the class and no free page / run of pages:
 * the caller may evict and retry) or -E2BIG (larger than the whole region).
 */
int kvsd_pool_alloc(struct kvsd_pool *p, size_t len, uint64_t *off);
/*
 * Notes that a value of len bytes is about to be stored. After 16 such
 * notes of one exact size (8-byte rounded; a few sizes are tracked at a
 * time) whose class holds over 2% fewer of it per page than chunks of that
 * exact size would, a class of that chunk size is added (until 64 classes).
 * Returns 1 when it added one, else 0. Values stored before keep their
 * slots; new ones of that size go to the new class.
 */
int kvsd_pool_learn(struct kvsd_pool *p, size_t len);

/* Gives back a slot obtained with kvsd_pool_alloc (len as given there). */
void kvsd_pool_free(struct kvsd_pool *p, uint64_t off, size_t len);

/*
 * Who holds page pg: its slab class, KVSD_POOL_LARGE (part of a run of
 * pages holding one large value; *run is the run's length on its first
 * page, 0 on the others) or KVSD_POOL_FREE.
 */
int kvsd_pool_page_owner(const struct kvsd_pool *p, uint32_t pg, uint32_t *run);

/* Page index of an offset. */
static inline uint32_t kvsd_pool_page_of(uint64_t off)
{
    return (uint32_t)(off / KVSD_POOL_PAGE);
}

void kvsd_pool_stats(const struct kvsd_pool *p, struct kvsd_pool_stats *st);
void kvsd_pool_class_stats(const struct kvsd_pool *p, int cls, struct kvsd_pool_class_stats *st);

#endif /* KVSD_POOL_H */

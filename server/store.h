/*
 * store.h - kvstored's index of keys over the memory pool: lookup, LRU
 * eviction, pinning.
 *
 * A put is two steps so that nobody ever sees half a value: reserve a NEW
 * slot (kvs_store_reserve), fill it (the protocol streams the bytes straight
 * off the socket into it), then commit: the item is linked into the index,
 * replacing any old item of the same key. A reader holding the old item keeps
 * it (pinned) until it is done; it is freed when its last pin drops.
 *
 * Pinned items (being written, or being read while their reply is still
 * being sent) are never evicted or reused. The store is a cache: when the
 * pool is full the least recently used unpinned item of all classes goes;
 * if it is of another slab class, its whole page is reclaimed for the class
 * that needs room; -ENOSPC only when nothing at all can be freed.
 *
 * Single-threaded: kvstored's event loop owns the store.
 */
#ifndef KVS_STORE_H
#define KVS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

struct kvs_store;
struct kvs_item;

struct kvs_store_stats {
    uint64_t items;        /* keys in the index */
    uint64_t evictions;    /* items dropped to make room */
    uint64_t reclaims;     /* times a page was taken from another class */
    uint64_t pinned;       /* items with a pin (being written or read) */
    uint64_t nospace;      /* reservations refused with -ENOSPC */
    uint64_t value_bytes;  /* bytes of the values in the index */
    uint64_t memory_used;  /* pool bytes handed out (chunk and run sizes) */
    uint64_t memory_total; /* pool bytes */
    uint32_t pages_total;
    uint32_t pages_free;
};

struct kvs_store_class_stats {
    uint32_t chunk_size; /* 0 for the large-value runs */
    uint32_t pages;
    uint64_t items;
    uint64_t evictions;
};

/* Creates a store over a pool of memory_bytes (rounded down to 1 MiB pages). */
int kvs_store_create(size_t memory_bytes, struct kvs_store **out);
/* Frees everything, pinned items included. */
void kvs_store_destroy(struct kvs_store *s);

struct kvs_pool *kvs_store_pool(const struct kvs_store *s);

/*
 * Reserves a new, pinned, unlinked item for key[0..klen) with a len-byte
 * slot. Returns 0, -ENOSPC (nothing can be evicted), -E2BIG (larger than the
 * pool) or -ENOMEM.
 */
int kvs_store_reserve(struct kvs_store *s, const uint8_t *key, uint16_t klen, uint32_t len,
                      struct kvs_item **out);
/*
 * Links a reserved item into the index (replacing the old one) and drops its
 * pin. Returns 0, or -ENOMEM (the index could not grow: the item is thrown
 * away and any old value stays).
 */
int kvs_store_commit(struct kvs_store *s, struct kvs_item *it);
/* Throws away a reserved item that will not be committed. */
void kvs_store_abort(struct kvs_store *s, struct kvs_item *it);

/*
 * Finds key; with pin, the item is pinned (the caller must kvs_store_unpin
 * it) and becomes the most recently used. NULL if absent.
 */
struct kvs_item *kvs_store_lookup(struct kvs_store *s, const uint8_t *key, uint16_t klen, int pin);
void kvs_store_pin(struct kvs_store *s, struct kvs_item *it);
void kvs_store_unpin(struct kvs_store *s, struct kvs_item *it);
/* 0 or -ENOENT. A pinned item stays readable by its holders until unpinned. */
int kvs_store_remove(struct kvs_store *s, const uint8_t *key, uint16_t klen);

/* The item's value: len bytes at data (inside the pool region, at offset). */
uint8_t *kvs_item_data(const struct kvs_store *s, const struct kvs_item *it);
uint32_t kvs_item_len(const struct kvs_item *it);
uint64_t kvs_item_offset(const struct kvs_item *it);
int kvs_item_pinned(const struct kvs_item *it);

void kvs_store_stats(const struct kvs_store *s, struct kvs_store_stats *st);
/* Slab classes 0..kvs_pool_nclasses()-1, then the large runs (cls == nclasses). */
void kvs_store_class_stats(const struct kvs_store *s, int cls, struct kvs_store_class_stats *st);

#endif /* KVS_STORE_H */

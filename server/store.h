/*
 * store.h - kvstored's index of keys over the memory pool: lookup, LRU
 * eviction, pinning.
 *
 * A put is two steps so that nobody ever sees half a value: reserve a NEW
 * slot (kvsd_store_reserve), fill it (the protocol streams the bytes straight
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
#ifndef KVSD_STORE_H
#define KVSD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

struct kvsd_store;
struct kvsd_item;

struct kvsd_store_stats {
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

struct kvsd_store_class_stats {
    uint32_t chunk_size; /* 0 for the large-value runs */
    uint32_t pages;
    uint64_t items;
    uint64_t evictions;
};

/* Creates a store over a pool of memory_bytes (rounded down to 1 MiB pages). */
int kvsd_store_create(size_t memory_bytes, struct kvsd_store **out);
/* Frees everything, pinned items included. */
void kvsd_store_destroy(struct kvsd_store *s);

struct kvsd_pool *kvsd_store_pool(const struct kvsd_store *s);

/*
 * Reserves a new, pinned, unlinked item for key[0..klen) with a len-byte
 * slot. Returns 0, -ENOSPC (nothing can be evicted), -E2BIG (larger than the
 * pool) or -ENOMEM.
 */
int kvsd_store_reserve(struct kvsd_store *s, const uint8_t *key, uint16_t klen, uint32_t len,
                       struct kvsd_item **out);
/*
 * Links a reserved item into the index (replacing the old one) and drops its
 * pin. Returns 0, or -ENOMEM (the index could not grow: the item is thrown
 * away and any old value stays).
 */
int kvsd_store_commit(struct kvsd_store *s, struct kvsd_item *it);
/* Throws away a reserved item that will not be committed. */
void kvsd_store_abort(struct kvsd_store *s, struct kvsd_item *it);

/*
 * A hint that key will be looked up soon: starts loading its index slot, so
 * that a frame's next lookup overlaps the current entry's work instead of
 * waiting for the cache miss. Changes nothing.
 */
void kvsd_store_prefetch(const struct kvsd_store *s, const uint8_t *key, uint16_t klen);

/*
 * Finds key; with pin, the item is pinned (the caller must kvsd_store_unpin
 * it) and becomes the most recently used. NULL if absent.
 */
struct kvsd_item *kvsd_store_lookup(struct kvsd_store *s, const uint8_t *key, uint16_t klen,
                                    int pin);
void kvsd_store_pin(struct kvsd_store *s, struct kvsd_item *it);
void kvsd_store_unpin(struct kvsd_store *s, struct kvsd_item *it);
/* 0 or -ENOENT. A pinned item stays readable by its holders until unpinned. */
int kvsd_store_remove(struct kvsd_store *s, const uint8_t *key, uint16_t klen);
/*
 * Removes every key for which match(key, klen, arg) returns non-zero, as
 * kvsd_store_remove does each; returns how many.
 */
uint64_t kvsd_store_remove_if(struct kvsd_store *s,
                              int (*match)(const uint8_t *key, uint16_t klen, void *arg),
                              void *arg);

/* The item's value: len bytes at data (inside the pool region, at offset). */
uint8_t *kvsd_item_data(const struct kvsd_store *s, const struct kvsd_item *it);
uint32_t kvsd_item_len(const struct kvsd_item *it);
uint64_t kvsd_item_offset(const struct kvsd_item *it);
int kvsd_item_pinned(const struct kvsd_item *it);

void kvsd_store_stats(const struct kvsd_store *s, struct kvsd_store_stats *st);
/* Slab classes 0..kvsd_pool_nclasses()-1, then the large runs (cls == nclasses). */
void kvsd_store_class_stats(const struct kvsd_store *s, int cls, struct kvsd_store_class_stats *st);

#endif /* KVSD_STORE_H */

/*
 * store.c - the key index, LRU per slab class, eviction, page reclamation
 * and pinning. See store.h for the rules.
 *
 * The index is an open-addressing table of item pointers (linear probing,
 * deletion by backward shift, so no tombstones; doubled at 3/4 full): 8
 * bytes a slot, 11-21 bytes a key, where a chained hash's per-item handle
 * cost 56 bytes in every item. Each item keeps its key's 32-bit hash, so
 * a probe compares keys only on a matching hash and growing rehashes none.
 *
 * An item is in exactly one of two places: linked (in the index and in its
 * class's LRU, newest at the head) or in limbo (reserved and not yet
 * committed, or replaced/removed while pinned). Limbo items are never
 * evicted; they are freed by abort or by their last unpin, and by destroy.
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/*
 * 64 bytes and the key (a 7-byte key: an 80-byte heap chunk). What the
 * fields cost is in docs/server.md "Memory layout".
 */
struct kvsd_item {
    struct kvsd_item *prev, *next;       /* LRU (linked) or limbo list */
    struct kvsd_item *pg_prev, *pg_next; /* items whose slot starts on the same page */
    uint64_t off;
    uint64_t atime; /* store clock at the last commit or pinned read */
    uint32_t len;
    uint32_t pins;
    uint32_t hash; /* of the key (key_hash): where the index looks for it */
    uint16_t klen;
    uint8_t linked;
    uint8_t lru; /* index into store->lrus (at most KVSD_POOL_MAX_CLASSES + 1 of them) */
    uint8_t key[];
};

_Static_assert(KVSD_POOL_MAX_CLASSES + 1 <= UINT8_MAX, "lru index must fit a byte");

/*
 * The key index: open addressing with linear probing from hash & (cap - 1),
 * it == NULL where free. Each slot keeps its item's hash beside the pointer,
 * so a probe passes the other keys of its run without loading their items
 * (a cache miss each, in a pool of scattered items): a lookup touches the
 * slot's line and then only the item it finds.
 */
struct index_slot {
    struct kvsd_item *it;
    uint32_t hash;
};

struct index {
    struct index_slot *slots;
    uint32_t cap; /* 0 (nothing allocated yet) or a power of two */
    uint32_t count;
};

struct lru {
    struct kvsd_item *head, *tail;
    uint64_t items;
    uint64_t evictions;
};

struct kvsd_store {
    struct kvsd_pool *pool;
    struct index index;
    struct kvsd_item *limbo;
    struct lru *lrus; /* one per slab class the pool can have, then one for large runs */
    int nlrus;
    struct kvsd_item **page_items; /* per pool page: reclaiming a page visits only its items */
    uint32_t *page_pins;           /* per pool page: pinned items whose slot starts there */
    uint32_t npages;
    uint64_t clock;
    uint64_t evictions, reclaims, pinned, nospace, value_bytes;
};

int kvsd_store_create(size_t memory_bytes, struct kvsd_store **out)
{
    int rc = -ENOMEM;
    struct kvsd_store *s = calloc(1, sizeof(*s));
    if (!s) goto fail;
    rc = kvsd_pool_create(memory_bytes, &s->pool);
    if (rc < 0) goto fail_store;
    rc = -ENOMEM;
    s->nlrus = KVSD_POOL_MAX_CLASSES + 1; /* room for learned classes */
    s->lrus = calloc((size_t)s->nlrus, sizeof(*s->lrus));
    if (!s->lrus) goto fail_pool;
    struct kvsd_pool_stats ps;
    kvsd_pool_stats(s->pool, &ps);
    s->npages = ps.pages_total;
    s->page_items = calloc(ps.pages_total, sizeof(*s->page_items));
    if (!s->page_items) goto fail_lrus;
    s->page_pins = calloc(ps.pages_total, sizeof(*s->page_pins));
    if (!s->page_pins) goto fail_items;
    *out = s;
    return 0;

fail_items:
    free(s->page_items);
fail_lrus:
    free(s->lrus);
fail_pool:
    kvsd_pool_destroy(s->pool);
fail_store:
    free(s);
fail:
    return rc;
}

/* ---- the index ---- */

/* FNV-1a over the key, then a finaliser so that the low bits linear probing uses mix. */
static uint32_t key_hash(const uint8_t *key, uint16_t klen)
{
    return (uint32_t)kvs_mix64(kvs_fnv1a(key, klen));
}

/* The slot holding key, or the free slot where it would go. cap must be non-zero. */
static uint32_t index_probe(const struct index *x, const uint8_t *key, uint16_t klen, uint32_t h)
{
    uint32_t mask = x->cap - 1;
    uint32_t i = h & mask;
    for (const struct kvsd_item *it; (it = x->slots[i].it) != NULL; i = (i + 1) & mask)
        if (x->slots[i].hash == h && it->klen == klen && memcmp(it->key, key, klen) == 0) return i;
    return i;
}

static struct kvsd_item *index_find(const struct index *x, const uint8_t *key, uint16_t klen)
{
    if (x->count == 0) return NULL;
    return x->slots[index_probe(x, key, klen, key_hash(key, klen))].it;
}

/*
 * Room for one more key below 3/4 load: the table doubles (its first one:
 * 16 slots). 0, or -ENOMEM with the table as it was.
 */
static int index_reserve(struct index *x)
{
    if ((uint64_t)(x->count + 1) * 4 <= (uint64_t)x->cap * 3) return 0;
    if (x->cap >= (1u << 31)) return -ENOMEM;
    uint32_t cap = x->cap ? x->cap * 2 : 16;
    struct index_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots) return -ENOMEM;
    for (uint32_t i = 0; i < x->cap; i++) {
        if (!x->slots[i].it) continue;
        uint32_t j = x->slots[i].hash & (cap - 1);
        while (slots[j].it)
            j = (j + 1) & (cap - 1);
        slots[j] = x->slots[i];
    }
    free(x->slots);
    x->slots = slots;
    x->cap = cap;
    return 0;
}

/* Takes slot i's item out, moving later items of its probe run back so that no probe breaks. */
static void index_delete_at(struct index *x, uint32_t i)
{
    uint32_t mask = x->cap - 1;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!x->slots[j].it) break;
        uint32_t home = x->slots[j].hash & mask;
        /* it stays if its home lies cyclically in (i, j]: a probe for it never passes i. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        x->slots[i] = x->slots[j];
        i = j;
    }
    x->slots[i] = (struct index_slot){0};
    x->count--;
}

/* Takes a linked item out of the index. */
static void index_delete(struct index *x, const struct kvsd_item *it)
{
    uint32_t mask = x->cap - 1;
    uint32_t i = it->hash & mask;
    while (x->slots[i].it != it)
        i = (i + 1) & mask;
    index_delete_at(x, i);
}

static void page_link(struct kvsd_store *s, struct kvsd_item *it)
{
    struct kvsd_item **head = &s->page_items[kvsd_pool_page_of(it->off)];
    it->pg_prev = NULL;
    it->pg_next = *head;
    if (*head) (*head)->pg_prev = it;
    *head = it;
}

static void page_unlink(struct kvsd_store *s, struct kvsd_item *it)
{
    if (it->pg_prev)
        it->pg_prev->pg_next = it->pg_next;
    else
        s->page_items[kvsd_pool_page_of(it->off)] = it->pg_next;
    if (it->pg_next) it->pg_next->pg_prev = it->pg_prev;
}

static void free_item(struct kvsd_store *s, struct kvsd_item *it)
{
    page_unlink(s, it);
    kvsd_pool_free(s->pool, it->off, it->len);
    free(it);
}

void kvsd_store_destroy(struct kvsd_store *s)
{
    if (!s) return;
    struct kvsd_item *it;
    for (uint32_t i = 0; i < s->index.cap; i++)
        if (s->index.slots[i].it) free_item(s, s->index.slots[i].it);
    free(s->index.slots);
    while (s->limbo) {
        it = s->limbo;
        s->limbo = it->next;
        free_item(s, it);
    }
    free(s->page_pins);
    free(s->page_items);
    free(s->lrus);
    kvsd_pool_destroy(s->pool);
    free(s);
}

struct kvsd_pool *kvsd_store_pool(const struct kvsd_store *s)
{
    return s->pool;
}

/* ---- the two lists an item can be on ---- */

static void lru_push_head(struct lru *l, struct kvsd_item *it)
{
    it->prev = NULL;
    it->next = l->head;
    if (l->head) l->head->prev = it;
    l->head = it;
    if (!l->tail) l->tail = it;
    l->items++;
}

static void lru_unlink(struct lru *l, struct kvsd_item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        l->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        l->tail = it->prev;
    it->prev = it->next = NULL;
    l->items--;
}

static void limbo_push(struct kvsd_store *s, struct kvsd_item *it)
{
    it->prev = NULL;
    it->next = s->limbo;
    if (s->limbo) s->limbo->prev = it;
    s->limbo = it;
}

static void limbo_unlink(struct kvsd_store *s, struct kvsd_item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        s->limbo = it->next;
    if (it->next) it->next->prev = it->prev;
    it->prev = it->next = NULL;
}

/* Takes a linked item out of everything but the index (whose slot its caller reuses or clears). */
static void detach_item(struct kvsd_store *s, struct kvsd_item *it)
{
    lru_unlink(&s->lrus[it->lru], it);
    it->linked = 0;
    s->value_bytes -= it->len;
    if (it->pins == 0)
        free_item(s, it);
    else
        limbo_push(s, it);
}

/* Takes a linked item out of the index; frees it, or leaves it in limbo for its pin holders. */
static void unlink_item(struct kvsd_store *s, struct kvsd_item *it)
{
    index_delete(&s->index, it);
    detach_item(s, it);
}

/* ---- pins ---- */

/* An item's first pin and its last: counted per store and per page. */
static void pin(struct kvsd_store *s, struct kvsd_item *it)
{
    if (it->pins++ > 0) return;
    s->pinned++;
    s->page_pins[kvsd_pool_page_of(it->off)]++;
}

/* Drops one pin; returns 1 if it was the last. */
static int drop_pin(struct kvsd_store *s, struct kvsd_item *it)
{
    if (--it->pins > 0) return 0;
    s->pinned--;
    s->page_pins[kvsd_pool_page_of(it->off)]--;
    return 1;
}

/* ---- eviction ---- */

/*
 * Whether evicting it, of list lru, frees memory that a slot of list lru_for
 * can use: a chunk of its own class, or a large run's pages, always; any
 * other item only by reclaiming its whole page, which needs every item on
 * that page unpinned. Evicting an item of a page a pin holds would only
 * throw data away.
 */
static int frees_room(const struct kvsd_store *s, int lru_for, int lru, const struct kvsd_item *it)
{
    if (lru == lru_for || lru == s->nlrus - 1) return 1;
    return s->page_pins[kvsd_pool_page_of(it->off)] == 0;
}

/* The least recently used item of list lru whose eviction helps lru_for, or NULL. */
static struct kvsd_item *oldest_useful(const struct kvsd_store *s, int lru_for, int lru)
{
    struct kvsd_item *it = s->lrus[lru].tail;
    while (it && (it->pins || !frees_room(s, lru_for, lru, it)))
        it = it->prev;
    return it;
}

static void evict(struct kvsd_store *s, struct kvsd_item *it)
{
    s->evictions++;
    s->lrus[it->lru].evictions++;
    unlink_item(s, it);
}

/* The least recently used item of all lists that helps lru_for (its list in *lru), or NULL. */
static struct kvsd_item *oldest_of_all(const struct kvsd_store *s, int lru_for, int *lru)
{
    struct kvsd_item *victim = NULL;
    for (int i = 0; i < s->nlrus; i++) {
        struct kvsd_item *it = oldest_useful(s, lru_for, i);
        if (it && (!victim || it->atime < victim->atime)) {
            victim = it;
            *lru = i;
        }
    }
    return victim;
}

/*
 * Frees memory for class lru_for by evicting victim, the oldest unpinned item
 * of all (in list lru). In lru_for's own slab class that frees a chunk; in
 * the large runs it frees the run's pages; elsewhere every unpinned item on
 * victim's page is evicted, so the page usually returns to the free pages
 * and moves to lru_for's class (a reclaim).
 */
static void free_for(struct kvsd_store *s, int lru_for, int lru, struct kvsd_item *victim)
{
    if (lru == lru_for || lru == s->nlrus - 1) {
        evict(s, victim);
        return;
    }
    s->reclaims++;
    struct kvsd_item *it = s->page_items[kvsd_pool_page_of(victim->off)];
    while (it) {
        struct kvsd_item *next = it->pg_next;
        if (it->linked && !it->pins) evict(s, it);
        it = next;
    }
}

/*
 * Whether a run of npages contiguous pages can be had by evicting: some
 * window of that many pages each free, or a slab page with no pinned item,
 * or part of a run whose value is not pinned. Decided before anything is
 * evicted: a 48 MiB put into a pool whose every page held a pinned item
 * used to evict every other item (15,808 in test_store) and then fail.
 */
static int run_possible(const struct kvsd_store *s, uint32_t npages)
{
    if (s->pinned == 0) return 1; /* everything can go (npages fits: the pool said so) */
    uint32_t window = 0;
    int run_free = 0; /* the run the page is part of can be freed */
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        uint32_t run;
        int owner = kvsd_pool_page_owner(s->pool, pg, &run);
        if (owner == KVSD_POOL_LARGE && run > 0) run_free = s->page_pins[pg] == 0;
        int can = owner == KVSD_POOL_FREE    ? 1
                  : owner == KVSD_POOL_LARGE ? run_free
                                             : s->page_pins[pg] == 0;
        window = can ? window + 1 : 0;
        if (window >= npages) return 1;
    }
    return 0;
}

/*
 * A slot for len bytes. With memory full, what goes is the least recently
 * used unpinned item of ALL classes (see free_for), not the oldest of the
 * item's own class: a class that held pages used to evict even its newest
 * items while other classes kept far older ones (memcached's "slab
 * calcification"), and a KV cache then lost slices saved a moment before.
 * Only items whose eviction frees memory the slot can use are candidates
 * (frees_room), and a large slot first checks that a window of pages can
 * be freed at all (run_possible): a put that cannot fit evicts nothing.
 * Each round evicts at least one item, so this ends.
 */
static int alloc_slot(struct kvsd_store *s, uint32_t len, uint64_t *off)
{
    int cls = kvsd_pool_class_of(s->pool, len);
    int lru_for = cls == KVSD_POOL_LARGE ? s->nlrus - 1 : cls;
    int checked = cls != KVSD_POOL_LARGE;
    for (;;) {
        int rc = kvsd_pool_alloc(s->pool, len, off);
        if (rc != -ENOSPC) return rc;
        if (!checked) {
            uint32_t npages = (uint32_t)(kvsd_pool_slot_size(s->pool, len) / KVSD_POOL_PAGE);
            if (!run_possible(s, npages)) return -ENOSPC;
            checked = 1;
        }
        int lru = -1;
        struct kvsd_item *victim = oldest_of_all(s, lru_for, &lru);
        if (!victim) return -ENOSPC;
        free_for(s, lru_for, lru, victim);
    }
}

/* ---- the API ---- */

int kvsd_store_reserve(struct kvsd_store *s, const uint8_t *key, uint16_t klen, uint32_t len,
                       struct kvsd_item **out)
{
    struct kvsd_item *it = malloc(sizeof(*it) + klen);
    if (!it) return -ENOMEM;
    kvsd_pool_learn(s->pool, len); /* before the class is chosen, so both agree */
    int rc = alloc_slot(s, len, &it->off);
    if (rc < 0) {
        if (rc == -ENOSPC) s->nospace++;
        free(it);
        return rc;
    }
    it->len = len;
    it->hash = key_hash(key, klen);
    it->pins = 0;
    it->klen = klen;
    it->linked = 0;
    it->atime = 0;
    int cls = kvsd_pool_class_of(s->pool, len);
    it->lru = (uint8_t)(cls == KVSD_POOL_LARGE ? s->nlrus - 1 : cls);
    memcpy(it->key, key, klen);
    pin(s, it);
    limbo_push(s, it);
    page_link(s, it);
    *out = it;
    return 0;
}

int kvsd_store_commit(struct kvsd_store *s, struct kvsd_item *it)
{
    struct index *x = &s->index;
    /* One probe: a replaced key's slot takes the new item as it is. */
    uint32_t i = 0;
    struct kvsd_item *old = NULL;
    if (x->cap) {
        i = index_probe(x, it->key, it->klen, it->hash);
        old = x->slots[i].it;
    }
    if (!old) {
        /* A new key needs room first: if the index cannot grow, nothing changes. */
        uint32_t cap = x->cap;
        if (index_reserve(x) < 0) {
            limbo_unlink(s, it);
            drop_pin(s, it);
            free_item(s, it);
            return -ENOMEM;
        }
        if (x->cap != cap) i = index_probe(x, it->key, it->klen, it->hash);
        x->count++;
    }
    limbo_unlink(s, it);
    if (old) detach_item(s, old);
    x->slots[i] = (struct index_slot){it, it->hash};
    it->linked = 1;
    it->atime = ++s->clock;
    s->value_bytes += it->len;
    lru_push_head(&s->lrus[it->lru], it);
    kvsd_store_unpin(s, it);
    return 0;
}

void kvsd_store_abort(struct kvsd_store *s, struct kvsd_item *it)
{
    limbo_unlink(s, it);
    if (it->pins) { /* its writer's pin: the only one a reserved item has */
        it->pins = 1;
        drop_pin(s, it);
    }
    free_item(s, it);
}

void kvsd_store_prefetch(const struct kvsd_store *s, const uint8_t *key, uint16_t klen)
{
    const struct index *x = &s->index;
    if (x->count == 0) return;
    __builtin_prefetch(&x->slots[key_hash(key, klen) & (x->cap - 1)]);
}

struct kvsd_item *kvsd_store_lookup(struct kvsd_store *s, const uint8_t *key, uint16_t klen,
                                    int want_pin)
{
    struct kvsd_item *it = index_find(&s->index, key, klen);
    if (it && want_pin) {
        pin(s, it);
        struct lru *l = &s->lrus[it->lru];
        lru_unlink(l, it);
        lru_push_head(l, it);
        it->atime = ++s->clock;
    }
    return it;
}

void kvsd_store_pin(struct kvsd_store *s, struct kvsd_item *it)
{
    pin(s, it);
}

void kvsd_store_unpin(struct kvsd_store *s, struct kvsd_item *it)
{
    if (!drop_pin(s, it)) return;
    if (!it->linked) {
        limbo_unlink(s, it);
        free_item(s, it);
    }
}

int kvsd_store_remove(struct kvsd_store *s, const uint8_t *key, uint16_t klen)
{
    struct kvsd_item *it = index_find(&s->index, key, klen);
    if (!it) return -ENOENT;
    unlink_item(s, it);
    return 0;
}

uint64_t kvsd_store_remove_if(struct kvsd_store *s,
                              int (*match)(const uint8_t *key, uint16_t klen, void *arg), void *arg)
{
    /* Every linked item is on exactly one LRU list; walk them, keeping each next. */
    uint64_t removed = 0;
    for (int i = 0; i < s->nlrus; i++) {
        for (struct kvsd_item *it = s->lrus[i].head, *next; it; it = next) {
            next = it->next;
            if (!match(it->key, it->klen, arg)) continue;
            unlink_item(s, it);
            removed++;
        }
    }
    return removed;
}

uint8_t *kvsd_item_data(const struct kvsd_store *s, const struct kvsd_item *it)
{
    return kvsd_pool_base(s->pool) + it->off;
}

uint32_t kvsd_item_len(const struct kvsd_item *it)
{
    return it->len;
}

uint64_t kvsd_item_offset(const struct kvsd_item *it)
{
    return it->off;
}

int kvsd_item_pinned(const struct kvsd_item *it)
{
    return it->pins > 0;
}

void kvsd_store_stats(const struct kvsd_store *s, struct kvsd_store_stats *st)
{
    struct kvsd_pool_stats ps;
    kvsd_pool_stats(s->pool, &ps);
    st->items = s->index.count;
    st->evictions = s->evictions;
    st->reclaims = s->reclaims;
    st->pinned = s->pinned;
    st->nospace = s->nospace;
    st->value_bytes = s->value_bytes;
    st->memory_used = ps.bytes_used;
    st->memory_total = ps.size;
    st->pages_total = ps.pages_total;
    st->pages_free = ps.pages_free;
}

void kvsd_store_class_stats(const struct kvsd_store *s, int cls, struct kvsd_store_class_stats *st)
{
    int nclasses = kvsd_pool_nclasses(s->pool);
    const struct lru *l = &s->lrus[cls == nclasses ? s->nlrus - 1 : cls];
    st->items = l->items;
    st->evictions = l->evictions;
    if (cls == nclasses) {
        struct kvsd_pool_stats ps;
        kvsd_pool_stats(s->pool, &ps);
        st->chunk_size = 0;
        /* Pages of large runs: everything neither free nor in a slab class. */
        uint32_t slab_pages = 0;
        for (int i = 0; i < nclasses; i++) {
            struct kvsd_pool_class_stats cs;
            kvsd_pool_class_stats(s->pool, i, &cs);
            slab_pages += cs.pages;
        }
        st->pages = ps.pages_total - ps.pages_free - slab_pages;
        return;
    }
    struct kvsd_pool_class_stats cs;
    kvsd_pool_class_stats(s->pool, cls, &cs);
    st->chunk_size = cs.chunk_size;
    st->pages = cs.pages;
}

/*
 * pool.c - one mmap'd region, 1 MiB pages, slab classes of fixed-size chunks
 * and runs of whole pages for large values. See pool.h.
 *
 * Free chunks of a page are kept on a list whose links live beside the page's
 * metadata in heap memory (a u16 per chunk), not in the chunks: freeing and
 * reusing a chunk touches no pool memory (each such touch a cache and TLB
 * miss in a pool larger than the caches), and an RDMA peer that can write
 * the pool cannot reach the allocator's state (docs/SECURITY.md). Chunks are
 * carved lazily, so a page costs nothing until it is used. Each class keeps
 * a list of its pages that still have room.
 */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE_FREE   KVSD_POOL_FREE /* page owner: nobody */
#define MAX_PAGES   (1u << 24)     /* 16 TiB: keeps page indices in 24 bits of headroom */
#define NO_CHUNK    UINT32_MAX
#define NO_LINK     UINT16_MAX /* links[] end; chunks per page are at most PAGE / MIN_CHUNK */
#define MAX_CLASSES KVSD_POOL_MAX_CLASSES
#define LEARN_SLOTS 8  /* sizes tracked as candidates for an exact class */
#define LEARN_AFTER 16 /* reservations of one size that make its exact class */

struct page {
    int32_t owner;       /* slab class, KVSD_POOL_LARGE or PAGE_FREE */
    uint32_t run;        /* pages in the run (large values, first page only) */
    uint32_t used;       /* chunks handed out */
    uint32_t carved;     /* chunks ever handed out (the rest are untouched) */
    uint32_t free_chunk; /* first chunk on the page's free list, or NO_CHUNK */
    uint32_t prev, next; /* the class's list of pages with room */
    uint16_t *links;     /* a slab page's free list: links[chunk] = next free chunk, or NO_LINK */
};

_Static_assert(KVSD_POOL_PAGE / KVSD_POOL_MIN_CHUNK < NO_LINK, "a chunk index must fit a link");

struct slab_class {
    uint32_t chunk_size;
    uint32_t per_page;
    uint32_t pages;
    uint32_t room_head; /* first page with a free chunk, or KVSD_POOL_NO_PAGE */
    uint64_t chunks_used;
};

struct kvsd_pool {
    uint8_t *base;
    size_t size;
    uint32_t npages;
    uint32_t pages_free;
    uint32_t free_hint; /* no free page below this index */
    uint64_t bytes_used;
    int nclasses;
    int nbase; /* classes 0..nbase-1 grow by the factor; learned ones follow */
    struct slab_class classes[MAX_CLASSES];
    struct {
        uint32_t chunk_size;
        uint32_t seen;
    } candidates[LEARN_SLOTS];
    struct page *pages;
    /* The class of the last length learned: KV-cache slices are uniform, so nearly every lookup. */
    size_t memo_len; /* SIZE_MAX: none */
    int memo_cls;
};

/* Chunk sizes: 64 bytes growing by 1.25 (8-byte aligned), the last one half a page. */
static void init_classes(struct kvsd_pool *p)
{
    uint32_t size = KVSD_POOL_MIN_CHUNK;
    int n = 0;
    while (size < KVSD_POOL_PAGE / 2 && n < MAX_CLASSES - 1) {
        p->classes[n++].chunk_size = size;
        size = (size + size / 4 + 7) & ~7u;
    }
    p->classes[n++].chunk_size = KVSD_POOL_PAGE / 2;
    for (int i = 0; i < n; i++) {
        p->classes[i].per_page = KVSD_POOL_PAGE / p->classes[i].chunk_size;
        p->classes[i].room_head = KVSD_POOL_NO_PAGE;
    }
    p->nclasses = n;
    p->nbase = n;
}

int kvsd_pool_create(size_t bytes, struct kvsd_pool **out)
{
    size_t npages = bytes / KVSD_POOL_PAGE;
    if (npages == 0 || npages > MAX_PAGES) return -EINVAL;

    int rc = -ENOMEM;
    struct kvsd_pool *p = calloc(1, sizeof(*p));
    if (!p) goto fail;
    p->npages = (uint32_t)npages;
    p->size = npages * KVSD_POOL_PAGE;
    p->pages = calloc(npages, sizeof(*p->pages));
    if (!p->pages) goto fail_pool;
    /* NORESERVE: a large cache on a small test machine only costs what it touches. */
    p->base = mmap(NULL, p->size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p->base == MAP_FAILED) goto fail_pages;

    for (uint32_t i = 0; i < p->npages; i++)
        p->pages[i].owner = PAGE_FREE;
    p->pages_free = p->npages;
    init_classes(p);
    p->memo_len = SIZE_MAX;
    *out = p;
    return 0;

fail_pages:
    free(p->pages);
fail_pool:
    free(p);
fail:
    return rc;
}

void kvsd_pool_destroy(struct kvsd_pool *p)
{
    if (!p) return;
    munmap(p->base, p->size);
    for (uint32_t i = 0; i < p->npages; i++)
        free(p->pages[i].links);
    free(p->pages);
    free(p);
}

int kvsd_pool_prefault(struct kvsd_pool *p)
{
    if (madvise(p->base, p->size, MADV_POPULATE_WRITE) == 0) return 0;
    if (errno != EINVAL) return -ENOMEM; /* EINVAL: a kernel before 5.14 */
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t off = 0; off < p->size; off += step)
        ((volatile uint8_t *)p->base)[off] = 0;
    return 0;
}

uint8_t *kvsd_pool_base(const struct kvsd_pool *p)
{
    return p->base;
}

size_t kvsd_pool_size(const struct kvsd_pool *p)
{
    return p->size;
}

int kvsd_pool_nclasses(const struct kvsd_pool *p)
{
    return p->nclasses;
}

static int class_walk(const struct kvsd_pool *p, size_t len)
{
    /*
     * Classes are few (at most 64): a linear walk is as fast as a search. The
     * growth classes are sorted, so the first that holds len is theirs; a
     * learned class (appended later, unsorted) wins when its chunk is smaller.
     */
    int best = KVSD_POOL_LARGE;
    for (int i = 0; i < p->nbase; i++) {
        if (len <= p->classes[i].chunk_size) {
            best = i;
            break;
        }
    }
    for (int i = p->nbase; i < p->nclasses; i++) {
        if (len <= p->classes[i].chunk_size &&
            (best == KVSD_POOL_LARGE || p->classes[i].chunk_size < p->classes[best].chunk_size))
            best = i;
    }
    return best;
}

int kvsd_pool_class_of(const struct kvsd_pool *p, size_t len)
{
    if (len > KVSD_POOL_PAGE / 2) return KVSD_POOL_LARGE;
    return len == p->memo_len ? p->memo_cls : class_walk(p, len);
}

/* A chunk size that holds len exactly (8-byte aligned, at least the smallest chunk). */
static uint32_t exact_chunk(size_t len)
{
    uint32_t size = (uint32_t)((len + 7) & ~(size_t)7);
    return size < KVSD_POOL_MIN_CHUNK ? KVSD_POOL_MIN_CHUNK : size;
}

static int learn_size(struct kvsd_pool *p, size_t len)
{
    if (len > KVSD_POOL_PAGE / 2 || p->nclasses == MAX_CLASSES) return 0;
    uint32_t exact = exact_chunk(len);
    int cls = kvsd_pool_class_of(p, len);
    /* Worth a class only if a page of exact chunks holds over 2% more values. */
    uint32_t held = p->classes[cls].per_page, held_exact = KVSD_POOL_PAGE / exact;
    if ((uint64_t)held * 50 >= (uint64_t)held_exact * 49) return 0;

    int slot = 0;
    for (int i = 0; i < LEARN_SLOTS; i++) {
        if (p->candidates[i].chunk_size == exact) {
            slot = i;
            break;
        }
        if (p->candidates[i].seen < p->candidates[slot].seen) slot = i;
    }
    if (p->candidates[slot].chunk_size != exact) {
        /* A new size takes the least-seen slot: rare sizes come and go, frequent ones stay. */
        p->candidates[slot].chunk_size = exact;
        p->candidates[slot].seen = 0;
    }
    if (++p->candidates[slot].seen < LEARN_AFTER) return 0;

    p->candidates[slot].chunk_size = 0;
    p->candidates[slot].seen = 0;
    struct slab_class *c = &p->classes[p->nclasses++];
    *c = (struct slab_class){
        .chunk_size = exact, .per_page = KVSD_POOL_PAGE / exact, .room_head = KVSD_POOL_NO_PAGE};
    return 1;
}

int kvsd_pool_learn(struct kvsd_pool *p, size_t len)
{
    int added = learn_size(p, len);
    /* classes change only here, so the memo stays the walk's answer */
    if (len <= KVSD_POOL_PAGE / 2 && (added || len != p->memo_len)) {
        p->memo_len = len;
        p->memo_cls = class_walk(p, len);
    }
    return added;
}

static size_t run_pages(size_t len)
{
    return (len + KVSD_POOL_PAGE - 1) / KVSD_POOL_PAGE;
}

size_t kvsd_pool_slot_size(const struct kvsd_pool *p, size_t len)
{
    int cls = kvsd_pool_class_of(p, len);
    if (cls == KVSD_POOL_LARGE) return run_pages(len) * KVSD_POOL_PAGE;
    return p->classes[cls].chunk_size;
}

/* First run of n free pages (first fit), or KVSD_POOL_NO_PAGE. */
static uint32_t find_free_run(const struct kvsd_pool *p, uint32_t n)
{
    uint32_t start = p->free_hint, len = 0;
    for (uint32_t i = p->free_hint; i < p->npages; i++) {
        if (p->pages[i].owner != PAGE_FREE) {
            len = 0;
            start = i + 1;
            continue;
        }
        if (++len == n) return start;
    }
    return KVSD_POOL_NO_PAGE;
}

/* Marks pages [first, first+n) taken by owner. */
static void take_pages(struct kvsd_pool *p, uint32_t first, uint32_t n, int32_t owner)
{
    for (uint32_t i = first; i < first + n; i++) {
        p->pages[i] = (struct page){.owner = owner,
                                    .free_chunk = NO_CHUNK,
                                    .prev = KVSD_POOL_NO_PAGE,
                                    .next = KVSD_POOL_NO_PAGE};
    }
    p->pages[first].run = n;
    p->pages_free -= n;
    if (first == p->free_hint) p->free_hint = first + n;
}

static void release_pages(struct kvsd_pool *p, uint32_t first, uint32_t n)
{
    for (uint32_t i = first; i < first + n; i++) {
        free(p->pages[i].links);
        p->pages[i] = (struct page){.owner = PAGE_FREE};
    }
    p->pages_free += n;
    if (first < p->free_hint) p->free_hint = first;
}

static void room_push(struct kvsd_pool *p, struct slab_class *c, uint32_t pg)
{
    struct page *page = &p->pages[pg];
    page->prev = KVSD_POOL_NO_PAGE;
    page->next = c->room_head;
    if (c->room_head != KVSD_POOL_NO_PAGE) p->pages[c->room_head].prev = pg;
    c->room_head = pg;
}

static void room_unlink(struct kvsd_pool *p, struct slab_class *c, uint32_t pg)
{
    struct page *page = &p->pages[pg];
    if (page->prev != KVSD_POOL_NO_PAGE)
        p->pages[page->prev].next = page->next;
    else
        c->room_head = page->next;
    if (page->next != KVSD_POOL_NO_PAGE) p->pages[page->next].prev = page->prev;
    page->prev = page->next = KVSD_POOL_NO_PAGE;
}

/* A chunk from a page of class cls that has room, taking a free page if none has. */
static int alloc_chunk(struct kvsd_pool *p, int cls, uint64_t *off)
{
    struct slab_class *c = &p->classes[cls];
    uint32_t pg = c->room_head;
    if (pg == KVSD_POOL_NO_PAGE) {
        pg = find_free_run(p, 1);
        if (pg == KVSD_POOL_NO_PAGE) return -ENOSPC;
        /* links of chunks not yet freed are never read: no need to clear them */
        uint16_t *links = malloc(c->per_page * sizeof(*links));
        if (!links) return -ENOMEM;
        take_pages(p, pg, 1, cls);
        p->pages[pg].links = links;
        c->pages++;
        room_push(p, c, pg);
    }
    struct page *page = &p->pages[pg];
    uint32_t idx;
    if (page->free_chunk != NO_CHUNK) {
        idx = page->free_chunk;
        uint16_t next = page->links[idx];
        page->free_chunk = next == NO_LINK ? NO_CHUNK : next;
    } else {
        idx = page->carved++;
    }
    page->used++;
    if (page->used == c->per_page) room_unlink(p, c, pg);
    c->chunks_used++;
    p->bytes_used += c->chunk_size;
    *off = (uint64_t)pg * KVSD_POOL_PAGE + (uint64_t)idx * c->chunk_size;
    return 0;
}

int kvsd_pool_alloc(struct kvsd_pool *p, size_t len, uint64_t *off)
{
    int cls = kvsd_pool_class_of(p, len);
    if (cls != KVSD_POOL_LARGE) return alloc_chunk(p, cls, off);

    size_t n = run_pages(len);
    if (n > p->npages) return -E2BIG;
    uint32_t first = find_free_run(p, (uint32_t)n);
    if (first == KVSD_POOL_NO_PAGE) return -ENOSPC;
    take_pages(p, first, (uint32_t)n, KVSD_POOL_LARGE);
    p->bytes_used += n * KVSD_POOL_PAGE;
    *off = (uint64_t)first * KVSD_POOL_PAGE;
    return 0;
}

void kvsd_pool_free(struct kvsd_pool *p, uint64_t off, size_t len)
{
    /* The page's owner, not len: a class learned since the alloc may hold len better now. */
    (void)len;
    uint32_t pg = kvsd_pool_page_of(off);
    int cls = p->pages[pg].owner;
    if (cls == KVSD_POOL_LARGE) {
        uint32_t n = p->pages[pg].run;
        release_pages(p, pg, n);
        p->bytes_used -= (uint64_t)n * KVSD_POOL_PAGE;
        return;
    }

    struct slab_class *c = &p->classes[cls];
    struct page *page = &p->pages[pg];
    uint32_t idx = (uint32_t)((off % KVSD_POOL_PAGE) / c->chunk_size);
    if (page->used == c->per_page) room_push(p, c, pg);
    page->used--;
    c->chunks_used--;
    p->bytes_used -= c->chunk_size;
    if (page->used == 0) {
        /* An empty page goes back to everyone: classes do not hoard memory. */
        room_unlink(p, c, pg);
        c->pages--;
        release_pages(p, pg, 1);
        return;
    }
    page->links[idx] = page->free_chunk == NO_CHUNK ? NO_LINK : (uint16_t)page->free_chunk;
    page->free_chunk = idx;
}

int kvsd_pool_page_owner(const struct kvsd_pool *p, uint32_t pg, uint32_t *run)
{
    const struct page *page = &p->pages[pg];
    *run = page->owner == KVSD_POOL_LARGE ? page->run : 0;
    return page->owner;
}

void kvsd_pool_stats(const struct kvsd_pool *p, struct kvsd_pool_stats *st)
{
    st->size = p->size;
    st->pages_total = p->npages;
    st->pages_free = p->pages_free;
    st->bytes_used = p->bytes_used;
}

void kvsd_pool_class_stats(const struct kvsd_pool *p, int cls, struct kvsd_pool_class_stats *st)
{
    const struct slab_class *c = &p->classes[cls];
    st->chunk_size = c->chunk_size;
    st->chunks_per_page = c->per_page;
    st->pages = c->pages;
    st->chunks_used = c->chunks_used;
}

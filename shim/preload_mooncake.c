/*
 * preload_mooncake.c - the interposed mooncake_store_* calls (shim/libkvbatch.map):
 * Mooncake Store's C API (store_c.h), batched over whichever library under
 * the shim provides it - Mooncake's own, or kvbatch's drop-in
 * libkvstore_mooncake.
 *
 * Nothing here runs until the program calls one of these names. The first
 * call looks up the library's functions: all from the one library that
 * defines mooncake_store_put_from for dlsym(RTLD_NEXT), or, when that finds
 * none (the library was loaded RTLD_LOCAL, as an extension module's
 * dependency is), from the first loaded object other than the shim that
 * defines it. With no such library every call says so once on stderr and
 * returns -1, Mooncake's code for a call that could not run.
 *
 * A store handle is the batching scope, as a kvs_client is: its first call
 * gives it a batcher (batcher/backend_mooncake.c; KVBATCH_* as for
 * libkvstore) in a table, found again through a per-thread cache;
 * mooncake_store_destroy flushes and frees it before the real destroy. A
 * forked child gets its own batcher for a store, on first use.
 *
 * Batched: put, put_from (one group per replicate config and copy mode:
 * put's values and write-behind copies are staged by the backend),
 * get_into, is_exist, get_size (the batcher's size probe, ordered behind
 * write-behind puts), and the program's own batch_put_from / batch_get_into
 * / batch_is_exist when small (mc_merged: they join the forming batches,
 * docs/shim.md "Small batch calls, merged"). Passed through after the
 * write-behind puts of their keys: larger batch calls, remove (of its key),
 * remove_by_regex and remove_all (of every key).
 * Everything else of the API is not interposed. A call goes straight to the
 * real function - counted as a direct call - when the shim cannot batch it:
 * not batching (policy off, a bad variable, after the exit flush), a NULL
 * store, arguments the batch path must not see (NULL or over-long key, NULL
 * buffer: the library answers those; an empty put, which Mooncake answers
 * alone), more than KVB_MC_MAX_STORES stores or KVB_MC_MAX_GROUPS configs.
 * Every call into the library is a backend call (batcher/backend.h): what
 * the library does inside it - the drop-in's kvs_* calls, which the shim
 * also interposes - passes through the shim uncounted, and a call made
 * inside one (a library under the shim calling its own exported names)
 * goes straight to the real function.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../batcher/backend_mooncake.h"
#include "shim.h"

/* What Mooncake's C layer returns for a call that could not run. */
#define MC_FAILED (-1)

#define KVB_MC_MAX_STORES 64

/* mooncake_store_destroy waits for a store's batches without a bound: the real destroy frees it. */
#define MC_DESTROY_TIMEOUT UINT64_MAX

/* The library's functions: those the backend calls, and the other interposed ones. */
struct mc_real {
    struct kvb_mc_calls be;
    void (*destroy)(mooncake_store_t);
    int (*remove)(mooncake_store_t, const char *, int);
    int64_t (*remove_by_regex)(mooncake_store_t, const char *, int);
    int64_t (*remove_all)(mooncake_store_t, int);
};

/* A store handle the program called through the shim. */
struct mc_store {
    _Atomic(mooncake_store_t) store; /* NULL: free */
    struct kvb_batcher *b;           /* NULL: its calls pass through; mc.lock */
    struct kvb_mc_backend *be;       /* b's backend (its groups); mc.lock */
    unsigned gen;                    /* the fork generation b belongs to; mc.lock */
};

/* The state of the Mooncake binding; the rest of the shim's is struct kvb_shim. */
static struct {
    pthread_mutex_t lock; /* the lookup and the store table; taken with no other shim lock */
    _Atomic bool found;   /* real is filled, read-only from then on */
    bool said_missing;    /* the "no library" message was written */
    struct mc_real real;
    bool can_batch; /* the library has every call the backend makes */
    bool atfork;    /* the fork handlers are registered */

    struct kvb_stats stats; /* this process's (reset in a forked child) */
    _Atomic bool used;      /* a store was batched in this process: the stats file shows them */

    struct mc_store stores[KVB_MC_MAX_STORES];
    _Atomic unsigned version; /* bumped on every destroy and fork: thread caches go stale */
} mc = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The last store this thread looked up, valid while the fork generation and table version hold. */
static __thread struct {
    mooncake_store_t store;
    struct kvb_batcher *b;
    struct kvb_mc_backend *be;
    unsigned gen, version;
} cache;

/* Fresh counters, Mooncake's codes counted under the classes of their meaning. */
static void stats_reset(void)
{
    kvb_stats_init(&mc.stats);
    mc.stats.classify = kvb_mc_status_class;
}

/* ---- the library ---- */

/* Is p inside libkvbatch itself? */
static bool in_shim(void *p)
{
    Dl_info a, self;
    return dladdr(p, &a) && dladdr((void *)in_shim, &self) && a.dli_fbase == self.dli_fbase;
}

#define MC_MAX_OBJECTS 256

struct objects {
    char *name[MC_MAX_OBJECTS];
    int n;
};

static int list_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct objects *o = arg;
    (void)size;
    if (info->dlpi_name && info->dlpi_name[0] && o->n < MC_MAX_OBJECTS)
        o->name[o->n] = strdup(info->dlpi_name), o->n += o->name[o->n] != NULL;
    return 0;
}

/*
 * A handle on the loaded object, other than the shim, that defines
 * mooncake_store_put_from, or NULL. The names are listed first and opened
 * after: dlopen inside dl_iterate_phdr's callback could wait on its lock.
 */
static void *find_loaded_library(void)
{
    struct objects o = {.n = 0};
    void *found = NULL;
    dl_iterate_phdr(list_object, &o);
    for (int i = 0; i < o.n; i++) {
        void *h = found ? NULL : dlopen(o.name[i], RTLD_LAZY | RTLD_NOLOAD);
        void *p = h ? dlsym(h, "mooncake_store_put_from") : NULL;
        if (p && !in_shim(p))
            found = h;
        else if (h)
            dlclose(h);
        free(o.name[i]);
    }
    return found;
}

/*
 * The library under the shim: a handle on the object that defines the
 * RTLD_NEXT mooncake_store_put_from (so every function comes from the same
 * one), NULL to look each name up with RTLD_NEXT (it is the program
 * itself), or NULL and *none when nothing defines it.
 */
static void *find_library(bool *none)
{
    Dl_info info;
    void *p = dlsym(RTLD_NEXT, "mooncake_store_put_from");
    *none = false;
    if (!p) {
        void *h = find_loaded_library();
        *none = h == NULL;
        return h;
    }
    if (dladdr(p, &info) && info.dli_fname && info.dli_fname[0])
        return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    return NULL;
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

/* Fills mc.real once a library provides the API; false (said once on stderr) while none does. */
static bool load_real(void)
{
    bool none;
    void *h = find_library(&none);
    if (none) {
        if (!mc.said_missing)
            kvb_shim_log(KVS_LOG_ERROR,
                         "kvbatch: Mooncake's C API (mooncake_store_*) was called, but no library "
                         "under the shim provides it; these calls return -1");
        mc.said_missing = true;
        return false;
    }
    struct mc_real *r = &mc.real;
#define LOAD(field, name) (*(void **)&(field) = h ? dlsym(h, name) : dlsym(RTLD_NEXT, name))
    LOAD(r->be.batch_put_from, "mooncake_store_batch_put_from");
    LOAD(r->be.batch_get_into, "mooncake_store_batch_get_into");
    LOAD(r->be.batch_is_exist, "mooncake_store_batch_is_exist");
    LOAD(r->be.put, "mooncake_store_put");
    LOAD(r->be.put_from, "mooncake_store_put_from");
    LOAD(r->be.get_into, "mooncake_store_get_into");
    LOAD(r->be.is_exist, "mooncake_store_is_exist");
    LOAD(r->be.get_size, "mooncake_store_get_size");
    LOAD(r->be.register_buffer, "mooncake_store_register_buffer");
    LOAD(r->be.unregister_buffer, "mooncake_store_unregister_buffer");
    LOAD(r->destroy, "mooncake_store_destroy");
    LOAD(r->remove, "mooncake_store_remove");
    LOAD(r->remove_by_regex, "mooncake_store_remove_by_regex");
    LOAD(r->remove_all, "mooncake_store_remove_all");
#undef LOAD
    if (!r->be.register_buffer || !r->be.unregister_buffer) /* staging needs both, or neither */
        r->be.register_buffer = NULL, r->be.unregister_buffer = NULL;
    mc.can_batch = r->be.batch_put_from && r->be.batch_get_into && r->be.batch_is_exist &&
                   r->be.put && r->be.put_from && r->be.get_into && r->be.is_exist &&
                   r->be.get_size;
    if (!mc.can_batch)
        kvb_shim_log(KVS_LOG_WARN, "kvbatch: the library providing mooncake_store_* lacks a "
                                   "batch or single-key call; its calls pass through");
    if (!mc.atfork) pthread_atfork(fork_prepare, fork_parent, fork_child);
    mc.atfork = true;
    return true;
}

/* Once per process, on the first interposed call: the shim, then the library. */
static bool mc_init(void)
{
    kvb_shim_init();
    if (atomic_load_explicit(&mc.found, memory_order_acquire)) return true;
    pthread_mutex_lock(&mc.lock);
    if (!atomic_load_explicit(&mc.found, memory_order_relaxed) && load_real()) {
        stats_reset();
        atomic_store_explicit(&mc.found, true, memory_order_release);
    }
    pthread_mutex_unlock(&mc.lock);
    return atomic_load_explicit(&mc.found, memory_order_acquire);
}

/* ok, or else says that the library providing the API lacks name. */
static bool present(bool ok, const char *name)
{
    if (!ok)
        kvb_shim_log(KVS_LOG_ERROR, "kvbatch: the library providing Mooncake's C API has no %s",
                     name);
    return ok;
}

/* The library is found (looked up now if need be) and has fn (read only then). */
#define HAVE(fn, name) (mc_init() && present((fn) != NULL, name))

/* A call into the library, inside the re-entry guard (batcher/backend.h). */
#define REAL(call)                                                                                 \
    ({                                                                                             \
        kvb_backend_call_begin();                                                                  \
        __typeof__(call) r_ = (call);                                                              \
        kvb_backend_call_end();                                                                    \
        r_;                                                                                        \
    })

/* ---- stores and their batchers ---- */

/* A batcher over store's Mooncake backend, configured by KVBATCH_*; NULL (logged) if none. */
static struct kvb_batcher *make_batcher(mooncake_store_t store, struct kvb_mc_backend **be_out)
{
    struct kvb_params p = kvb_shim_params();
    struct kvb_backend be;
    struct kvb_batcher *b = NULL;
    int rc = kvb_backend_mooncake(&mc.real.be, store, p.max_inflight, p.max_bytes, &be, be_out);
    if (rc == 0 && !(b = kvb_batcher_create(&p, &be, &mc.stats))) {
        rc = -errno;
        kvb_backend_release(&be);
    }
    if (!b)
        kvb_shim_log(KVS_LOG_WARN,
                     "kvbatch: cannot create a batcher (%s); this store is not batched",
                     strerror(-rc));
    else
        atomic_store(&mc.used, true);
    return b;
}

/* store's entry, or a free one taken for it, or NULL (table full). mc.lock held. */
static struct mc_store *entry_for(mooncake_store_t store, unsigned gen)
{
    struct mc_store *e = NULL;
    for (int i = 0; i < KVB_MC_MAX_STORES && !e; i++)
        if (atomic_load(&mc.stores[i].store) == store) e = &mc.stores[i];
    for (int i = 0; i < KVB_MC_MAX_STORES && !e; i++)
        if (!atomic_load(&mc.stores[i].store)) {
            e = &mc.stores[i];
            e->b = make_batcher(store, &e->be);
            e->gen = gen;
            atomic_store(&e->store, store);
        }
    return e;
}

/*
 * The batcher of store for this process (and its backend in *be), or NULL:
 * pass through. Its first call makes it; a forked child makes its own.
 */
static struct kvb_batcher *batcher_for(mooncake_store_t store, struct kvb_mc_backend **be)
{
    unsigned gen = atomic_load_explicit(&shim.fork_gen, memory_order_relaxed);
    unsigned version = atomic_load_explicit(&mc.version, memory_order_acquire);
    if (!store || !shim.batching || !mc.can_batch ||
        atomic_load_explicit(&shim.exited, memory_order_relaxed))
        return NULL;
    if (cache.store == store && cache.gen == gen && cache.version == version) {
        *be = cache.be;
        return cache.b;
    }
    bool child = false;
    pthread_mutex_lock(&mc.lock);
    struct mc_store *e = entry_for(store, gen);
    if (e && e->gen != gen) {
        e->b = make_batcher(store, &e->be); /* the parent's stays with the parent */
        e->gen = gen;
        child = true;
    }
    struct kvb_batcher *b = e ? e->b : NULL;
    *be = e ? e->be : NULL;
    pthread_mutex_unlock(&mc.lock);
    if (!e) {
        kvb_shim_log(KVS_LOG_WARN, "kvbatch: more than %d Mooncake stores; this one is not batched",
                     KVB_MC_MAX_STORES);
        return NULL;
    }
    if (child) kvb_statsfile_start(&shim.statsfile, gen);
    cache.store = store;
    cache.b = b;
    cache.be = *be;
    cache.gen = gen;
    cache.version = version;
    return b;
}

static bool writeback(void)
{
    return shim.cfg.put_mode == KVB_PUT_WRITEBACK;
}

/*
 * Makes a call on keys[0, n) - on every key, with keys NULL - come after the
 * pending write-behind puts of those keys (the only puts a Mooncake caller
 * does not wait for; its gets are all synchronous, so a call that changes
 * keys, changes, has no pending get to wait for: kvb_order_after_ops is
 * the rule it follows all the same).
 */
static void order_keys(mooncake_store_t store, size_t n, const char *const *keys, bool changes)
{
    struct kvb_mc_backend *be;
    struct kvb_batcher *b = writeback() ? batcher_for(store, &be) : NULL;
    if (b && changes)
        kvb_order_after_ops(b, n, keys);
    else if (b)
        kvb_order_after_puts(b, n, keys);
}

/*
 * A small batch call joins the forming batch of store's batcher
 * (kvb_batch_call): true when it did, its per-key results filled as the
 * library's batch call fills them. Puts go in the group of their config
 * (not copy mode: the caller's buffers, as the real call uses them); a put
 * of 0 bytes is the library's to answer.
 */
static bool mc_merged(mooncake_store_t store, int kind, const mooncake_replicate_config_t *config,
                      size_t n, const char *const keys[], void *const ptrs[], const size_t sizes[],
                      int ist[], ssize_t sres[])
{
    struct kvb_mc_backend *be;
    if (shim.cfg.batch_calls != KVB_CALLS_MERGE) return false;
    struct kvb_batcher *b = batcher_for(store, &be);
    if (!b || !keys || (kind != KVB_OP_EXISTS && !sizes)) return false;
    int g = 0;
    if (kind == KVB_OP_PUT) {
        for (size_t i = 0; i < n; i++)
            if (sizes[i] == 0) return false;
        if ((g = kvb_mc_group(be, config, false)) < 0) return false;
    }
    size_t nok;
    return kvb_batch_call(b, kind, (unsigned)g, n, keys, ptrs, sizes, ist, sres, &nok) == 1;
}

/* ---- the interposed calls ---- */

/* put and put_from: a put of group (config, copy mode) in store's batcher, or the real call. */
static int put_common(mooncake_store_t store, const char *key, const void *val, size_t size,
                      const mooncake_replicate_config_t *config, bool is_put)
{
    struct kvb_mc_backend *be;
    struct kvb_batcher *b = batcher_for(store, &be);
    /* Copy mode: put's value is not in registered memory; a write-behind value is the batcher's. */
    int g = b && size > 0 && kvb_args_batchable(key, val, size)
                ? kvb_mc_group(be, config, is_put || writeback())
                : -1;
    if (g >= 0) return kvb_put_group(b, (unsigned)g, key, val, size);
    int r = is_put ? REAL(mc.real.be.put(store, key, val, size, config))
                   : REAL(mc.real.be.put_from(store, key, (void *)val, size, config));
    kvb_count_direct(&mc.stats, KVB_OP_PUT, r, size);
    return r;
}

EXPORT int mooncake_store_put(mooncake_store_t store, const char *key, const void *value,
                              size_t size, const mooncake_replicate_config_t *config)
{
    if (!HAVE(mc.real.be.put, "mooncake_store_put")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.put(store, key, value, size, config);
    return put_common(store, key, value, size, config, true);
}

EXPORT int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer,
                                   size_t size, const mooncake_replicate_config_t *config)
{
    if (!HAVE(mc.real.be.put_from, "mooncake_store_put_from")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.put_from(store, key, buffer, size, config);
    return put_common(store, key, buffer, size, config, false);
}

EXPORT int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                       size_t size)
{
    struct kvb_mc_backend *be;
    if (!HAVE(mc.real.be.get_into, "mooncake_store_get_into")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.get_into(store, key, buffer, size);
    struct kvb_batcher *b = batcher_for(store, &be);
    /* A NULL buffer is the library's to answer (the batcher would take it for a size probe). */
    if (b && buffer && kvb_args_batchable(key, buffer, size)) return kvb_get(b, key, buffer, size);
    int64_t r = REAL(mc.real.be.get_into(store, key, buffer, size));
    kvb_count_direct(&mc.stats, KVB_OP_GET, (ssize_t)r, 0);
    return r;
}

EXPORT int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
    struct kvb_mc_backend *be;
    if (!HAVE(mc.real.be.is_exist, "mooncake_store_is_exist")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.is_exist(store, key);
    struct kvb_batcher *b = batcher_for(store, &be);
    if (b && kvb_args_batchable(key, NULL, 0)) return kvb_exists(b, key);
    int r = REAL(mc.real.be.is_exist(store, key));
    kvb_count_direct(&mc.stats, KVB_OP_EXISTS, r, 0);
    return r;
}

EXPORT int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
    struct kvb_mc_backend *be;
    if (!HAVE(mc.real.be.get_size, "mooncake_store_get_size")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.get_size(store, key);
    struct kvb_batcher *b = batcher_for(store, &be);
    /* The size probe: answered by a pending write-behind put, else by get_size itself. */
    if (b && kvb_args_batchable(key, NULL, 0)) return kvb_get(b, key, NULL, 0);
    int64_t r = REAL(mc.real.be.get_size(store, key));
    kvb_count_direct(&mc.stats, KVB_OP_GET, (ssize_t)r, 0);
    return r;
}

EXPORT int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
    if (!HAVE(mc.real.remove, "mooncake_store_remove")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.remove(store, key, force);
    if (key) order_keys(store, 1, &key, true);
    return REAL(mc.real.remove(store, key, force));
}

EXPORT int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern,
                                              int force)
{
    if (!HAVE(mc.real.remove_by_regex, "mooncake_store_remove_by_regex")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.remove_by_regex(store, pattern, force);
    order_keys(store, 0, NULL, true); /* every key */
    return REAL(mc.real.remove_by_regex(store, pattern, force));
}

EXPORT int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
    if (!HAVE(mc.real.remove_all, "mooncake_store_remove_all")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.remove_all(store, force);
    order_keys(store, 0, NULL, true); /* every key */
    return REAL(mc.real.remove_all(store, force));
}

EXPORT int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                         const size_t *sizes, size_t count,
                                         const mooncake_replicate_config_t *config,
                                         int *results_out)
{
    if (!HAVE(mc.real.be.batch_put_from, "mooncake_store_batch_put_from")) return MC_FAILED;
    if (kvb_in_backend_call())
        return mc.real.be.batch_put_from(store, keys, buffers, sizes, count, config, results_out);
    if (mc_merged(store, KVB_OP_PUT, config, count, (const char *const *)keys, buffers, sizes,
                  results_out, NULL))
        return 0;
    order_keys(store, count, (const char *const *)keys, true);
    return REAL(mc.real.be.batch_put_from(store, keys, buffers, sizes, count, config, results_out));
}

EXPORT int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                         const size_t *sizes, size_t count, int64_t *results_out)
{
    if (!HAVE(mc.real.be.batch_get_into, "mooncake_store_batch_get_into")) return MC_FAILED;
    if (kvb_in_backend_call())
        return mc.real.be.batch_get_into(store, keys, buffers, sizes, count, results_out);
    if (sizeof(int64_t) == sizeof(ssize_t) &&
        mc_merged(store, KVB_OP_GET, NULL, count, (const char *const *)keys, buffers, sizes, NULL,
                  (ssize_t *)(void *)results_out))
        return 0;
    order_keys(store, count, (const char *const *)keys, false);
    return REAL(mc.real.be.batch_get_into(store, keys, buffers, sizes, count, results_out));
}

EXPORT int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                         int *results_out)
{
    if (!HAVE(mc.real.be.batch_is_exist, "mooncake_store_batch_is_exist")) return MC_FAILED;
    if (kvb_in_backend_call()) return mc.real.be.batch_is_exist(store, keys, count, results_out);
    if (mc_merged(store, KVB_OP_EXISTS, NULL, count, (const char *const *)keys, NULL, NULL,
                  results_out, NULL))
        return 0;
    order_keys(store, count, (const char *const *)keys, false);
    return REAL(mc.real.be.batch_is_exist(store, keys, count, results_out));
}

/* Unlists store, flushes and frees its batcher (after the exit flush: leaves it), destroys it. */
EXPORT void mooncake_store_destroy(mooncake_store_t store)
{
    struct kvb_batcher *b = NULL;
    bool owned = false;
    if (!HAVE(mc.real.destroy, "mooncake_store_destroy")) return;
    if (kvb_in_backend_call()) {
        mc.real.destroy(store);
        return;
    }
    unsigned gen = atomic_load(&shim.fork_gen);
    if (store && !atomic_load(&shim.exited)) {
        pthread_mutex_lock(&mc.lock);
        for (int i = 0; i < KVB_MC_MAX_STORES; i++) {
            struct mc_store *e = &mc.stores[i];
            if (atomic_load(&e->store) != store) continue;
            b = e->b;
            owned = e->gen == gen;
            e->b = NULL;
            e->be = NULL;
            atomic_store(&e->store, NULL);
            atomic_fetch_add(&mc.version, 1);
            break;
        }
        pthread_mutex_unlock(&mc.lock);
    }
    if (b && owned) kvb_batcher_destroy(b, MC_DESTROY_TIMEOUT);
    kvb_backend_call_begin();
    mc.real.destroy(store);
    kvb_backend_call_end();
}

/* ---- the rest of the shim's hooks ---- */

const struct kvb_stats *kvb_shim_mc_stats(void)
{
    return atomic_load(&mc.used) ? &mc.stats : NULL;
}

void kvb_shim_mc_flush_all(void)
{
    struct kvb_batcher *b[KVB_MC_MAX_STORES];
    int n = 0;
    unsigned gen = atomic_load(&shim.fork_gen);
    uint64_t timeout = shim.cfg.exit_timeout_ns;
    if (!atomic_load(&mc.found)) return;
    pthread_mutex_lock(&mc.lock);
    for (int i = 0; i < KVB_MC_MAX_STORES; i++)
        if (atomic_load(&mc.stores[i].store) && mc.stores[i].gen == gen && mc.stores[i].b)
            b[n++] = mc.stores[i].b;
    pthread_mutex_unlock(&mc.lock);
    for (int i = 0; i < n; i++) {
        int rc = kvb_flush(b[i], KVB_FLUSH_EXIT, timeout);
        if (rc == -ETIMEDOUT)
            kvb_shim_log(KVS_LOG_WARN,
                         "kvbatch: exit: pending Mooncake ops not acknowledged within %llums",
                         (unsigned long long)(timeout / 1000000));
        else if (rc < 0)
            kvb_shim_log(KVS_LOG_WARN, "kvbatch: exit: a write-behind Mooncake put failed (%d)",
                         rc);
    }
}

/* The table lock is not held across fork; the child starts with fresh counters. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&mc.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mc.lock);
}

static void fork_child(void)
{
    stats_reset();
    atomic_store(&mc.used, false);
    atomic_fetch_add(&mc.version, 1);
    pthread_mutex_unlock(&mc.lock);
}

/*
 * preload.c - libkvbatch.so's lifecycle: the shim's state (struct kvb_shim,
 * shim.h), filled once per process by kvb_shim_init - the real functions,
 * the configuration, the stats file - and the fork and exit hooks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "shim.h"

struct kvb_shim shim = {
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .table_lock = PTHREAD_MUTEX_INITIALIZER,
};

void kvb_shim_log(enum kvs_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    if (lvl > shim.cfg.log_level) return;
    va_start(ap, fmt);
    kvs_log_vline("", fmt, ap);
    va_end(ap);
}

/*
 * The stats file's text: settings, the batchers' counters per backend
 * (libkvstore's always, Mooncake's once a store was batched), libkvstore's
 * transport counters.
 */
static size_t render_stats(void *arg, bool final, char *buf, size_t cap)
{
    (void)arg;
    struct kvb_stats_source src[2] = {{"kvs", &shim.stats}, {"mooncake", kvb_shim_mc_stats()}};
    struct kvb_proc_facts p = {(long)getpid(), shim.start_time, kvs_wall_s(), final};
    size_t n = kvb_settings_render(&shim.cfg, !shim.batching, &p, buf, cap);
    if (n < cap) n += kvb_stats_render(src, src[1].s ? 2 : 1, p.pid, buf + n, cap - n);
    if (n < cap) {
        kvb_shim_transport_totals(&shim.transport);
        n += kvb_transport_render(&shim.transport, p.pid, buf + n, cap - n);
    }
    return n;
}

/*
 * At exit: from now on calls pass through (shim.exited); flush every batcher
 * of this process (bounded), then write the stats file a last time.
 */
static void at_exit(void)
{
    atomic_store(&shim.exited, true);
    kvb_shim_flush_all();
    kvb_shim_mc_flush_all();
    kvb_statsfile_stop(&shim.statsfile);
}

static void fork_prepare(void)
{
    kvb_statsfile_fork_prepare(&shim.statsfile);
    pthread_mutex_lock(&shim.table_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&shim.table_lock);
    kvb_statsfile_fork_parent(&shim.statsfile);
}

/*
 * The child keeps none of the parent's batchers: their queued ops are the
 * parent's to send. It gets fresh counters, its own stats file (%p) and,
 * lazily, its own batchers and writer thread.
 */
static void fork_child(void)
{
    char path[KVB_STATS_PATH_MAX] = "";
    atomic_fetch_add(&shim.fork_gen, 1);
    atomic_fetch_add(&shim.table_version, 1);
    kvb_stats_init(&shim.stats);
    shim.start_time = kvs_wall_s();
    const char *pattern = getenv("KVBATCH_STATS_FILE");
    if (shim.statsfile.path[0] && pattern &&
        kvb_expand_path(pattern, (long)getpid(), path, sizeof(path)) < 0)
        path[0] = '\0';
    pthread_mutex_unlock(&shim.table_lock);
    kvb_statsfile_fork_child(&shim.statsfile, path);
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* Finds libkvstore's functions; false if one is missing (kvs_client_counters is optional). */
static bool load_real_calls(struct kvb_real_calls *r)
{
    bool ok = true;
#define LOAD(name)                                                                                 \
    do {                                                                                           \
        *(void **)&r->name = dlsym(RTLD_NEXT, #name);                                              \
        ok = ok && r->name;                                                                        \
    } while (0)
    LOAD(kvs_open);
    LOAD(kvs_close);
    LOAD(kvs_put);
    LOAD(kvs_get);
    LOAD(kvs_exists);
    LOAD(kvs_put_async);
    LOAD(kvs_get_async);
    LOAD(kvs_wait);
    LOAD(kvs_flush);
    LOAD(kvs_batch_put_async);
    LOAD(kvs_batch_get_async);
    LOAD(kvs_batch_exists_async);
    LOAD(kvs_remove);
    LOAD(kvs_batch_put);
    LOAD(kvs_batch_get);
    LOAD(kvs_batch_exists);
#undef LOAD
    /* Newer than the rest: a libkvstore without them only leaves its counters out, or
     * has no kvs_remove_matching for a program to call. */
    *(void **)&r->kvs_client_counters = dlsym(RTLD_NEXT, "kvs_client_counters");
    *(void **)&r->kvs_remove_matching = dlsym(RTLD_NEXT, "kvs_remove_matching");
    *(void **)&r->kvs_batch_putv = dlsym(RTLD_NEXT, "kvs_batch_putv");
    *(void **)&r->kvs_batch_getv = dlsym(RTLD_NEXT, "kvs_batch_getv");
    *(void **)&r->kvs_batch_putv_async = dlsym(RTLD_NEXT, "kvs_batch_putv_async");
    *(void **)&r->kvs_batch_getv_async = dlsym(RTLD_NEXT, "kvs_batch_getv_async");
    return ok;
}

/* KVBATCH_*: a bad variable is reported once, on stderr; KVBATCH_LOG=info lists the settings. */
static void load_config(bool have_lib)
{
    char err[2048];
    struct kvb_config *cfg = &shim.cfg;
    if (kvb_config_load(cfg, env_get, (long)getpid(), err, sizeof(err)) < 0) {
        ssize_t w = write(STDERR_FILENO, err, strlen(err));
        w = write(STDERR_FILENO, "\n", 1);
        (void)w;
    }
    if (!have_lib) {
        kvb_shim_log(KVS_LOG_ERROR, "kvbatch: libkvstore not found (%s); pass-through", dlerror());
        cfg->policy = KVB_POLICY_OFF;
    }
    shim.batching = cfg->policy != KVB_POLICY_OFF;
    if (cfg->log_level >= KVS_LOG_INFO) {
        char text[2048];
        kvb_config_describe(cfg, text, sizeof(text));
        for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
             l = strtok_r(NULL, "\n", &save))
            kvb_shim_log(KVS_LOG_INFO, "kvbatch: %s", l);
    }
}

void kvb_shim_init(void)
{
    if (atomic_load_explicit(&shim.ready, memory_order_acquire)) return;
    pthread_mutex_lock(&shim.init_lock);
    if (atomic_load_explicit(&shim.ready, memory_order_relaxed)) goto out;
    bool have_lib = load_real_calls(&shim.real);
    const struct kvb_real_calls *r = &shim.real;
    shim.kvs_calls = (struct kvb_kvs_calls){r->kvs_batch_put_async,
                                            r->kvs_batch_get_async,
                                            r->kvs_batch_exists_async,
                                            r->kvs_put,
                                            r->kvs_get,
                                            r->kvs_exists};
    kvb_stats_init(&shim.stats);
    shim.start_time = kvs_wall_s();
    load_config(have_lib);
    int rc = kvb_statsfile_init(&shim.statsfile, shim.cfg.stats_file, shim.cfg.stats_interval_ns,
                                shim.cfg.stats_at_exit == KVB_STATS_REMOVE, render_stats, NULL,
                                kvb_shim_log);
    if (rc < 0) kvb_shim_log(KVS_LOG_WARN, "kvbatch: no stats file: %s", strerror(-rc));
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
    kvb_statsfile_start(&shim.statsfile, atomic_load(&shim.fork_gen));
    atomic_store_explicit(&shim.ready, true, memory_order_release);
out:
    pthread_mutex_unlock(&shim.init_lock);
}

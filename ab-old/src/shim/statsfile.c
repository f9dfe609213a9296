/*
 * statsfile.c - the stats file's writer thread and its atomic write (see
 * statsfile.h). What the file says is the shim's render callback's
 * (shim/metrics.c formats it).
 */
#include "statsfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "file.h"

int kvb_statsfile_init(struct kvb_statsfile *sf, const char *path, uint64_t interval_ns,
                       bool remove_at_end, kvb_statsfile_render_fn render, void *arg,
                       kvb_statsfile_log_fn log)
{
    pthread_condattr_t ca;
    int rc;
    memset(sf, 0, sizeof(*sf));
    snprintf(sf->path, sizeof(sf->path), "%s", path);
    sf->interval_ns = interval_ns;
    sf->remove_at_end = remove_at_end;
    sf->render = render;
    sf->arg = arg;
    sf->log = log;
    sf->gen = ~0u;
    sf->lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* usable even if the rest fails */
    if ((rc = pthread_condattr_init(&ca)) == 0) {
        rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (!rc) rc = pthread_cond_init(&sf->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (rc) sf->path[0] = '\0'; /* no file, rather than a writer that cannot wait */
    return -rc;
}

/* Renders and replaces the file (final: the last write); lock held. */
static void write_locked(struct kvb_statsfile *sf, bool final)
{
    size_t n = sf->render(sf->arg, final, sf->text, sizeof(sf->text));
    if (n >= sizeof(sf->text)) {
        sf->log(KVS_LOG_WARN, "kvbatch: stats text too long; %s not written", sf->path);
        return;
    }
    int rc = kvs_file_replace(sf->path, sf->text, n, 0644);
    /*
     * A failure is a warning the first time it happens (a missing directory,
     * a path that is not a regular file, ...), then debug.
     */
    if (rc == -EEXIST)
        sf->log(rc == sf->write_err ? KVS_LOG_DEBUG : KVS_LOG_WARN,
                "kvbatch: %s exists and is not a regular file; no stats written there "
                "(KVBATCH_STATS_FILE)",
                sf->path);
    else if (rc < 0)
        sf->log(rc == sf->write_err ? KVS_LOG_DEBUG : KVS_LOG_WARN,
                "kvbatch: cannot write the stats file %s: %s; check that its directory exists "
                "and is writable (KVBATCH_STATS_FILE)",
                sf->path, strerror(-rc));
    sf->write_err = rc;
    if (rc == 0) sf->wrote = true;
}

static void *writer_main(void *arg)
{
    struct kvb_statsfile *sf = arg;
    pthread_mutex_lock(&sf->lock);
    while (!sf->stopped) {
        struct timespec ts = kvs_ns_to_timespec(kvs_now_ns() + sf->interval_ns);
        if (pthread_cond_timedwait(&sf->cv, &sf->lock, &ts) == ETIMEDOUT && !sf->stopped)
            write_locked(sf, false);
    }
    pthread_mutex_unlock(&sf->lock);
    return NULL;
}

void kvb_statsfile_start(struct kvb_statsfile *sf, unsigned gen)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_mutex_lock(&sf->lock);
    if (!sf->path[0] || sf->stopped || sf->gen == gen) goto out;
    sf->gen = gen;
    if (pthread_attr_init(&a) == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, writer_main, sf))
            sf->log(KVS_LOG_WARN, "kvbatch: cannot start the stats writer");
        pthread_attr_destroy(&a);
    }
    write_locked(sf, false);
out:
    pthread_mutex_unlock(&sf->lock);
}

void kvb_statsfile_stop(struct kvb_statsfile *sf)
{
    pthread_mutex_lock(&sf->lock);
    if (sf->path[0] && !sf->stopped) {
        sf->stopped = true;
        pthread_cond_broadcast(&sf->cv);
        if (!sf->remove_at_end)
            write_locked(sf, true);
        else if (sf->wrote && unlink(sf->path) < 0 && errno != ENOENT)
            sf->log(KVS_LOG_WARN, "kvbatch: cannot remove the stats file %s at exit: %s", sf->path,
                    strerror(errno));
    }
    pthread_mutex_unlock(&sf->lock);
}

void kvb_statsfile_fork_prepare(struct kvb_statsfile *sf)
{
    pthread_mutex_lock(&sf->lock);
}

void kvb_statsfile_fork_parent(struct kvb_statsfile *sf)
{
    pthread_mutex_unlock(&sf->lock);
}

void kvb_statsfile_fork_child(struct kvb_statsfile *sf, const char *path)
{
    snprintf(sf->path, sizeof(sf->path), "%s", path);
    sf->wrote = false;
    sf->write_err = 0;
    pthread_mutex_unlock(&sf->lock);
}

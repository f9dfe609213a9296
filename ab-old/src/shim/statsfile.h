/*
 * statsfile.h - the stats file (KVBATCH_STATS_FILE). A writer thread renders
 * it every interval and replaces it atomically (kvs_file_replace,
 * common/file.h: a temporary file beside it under an unguessable name,
 * created exclusively and never through a link, then rename()), so a scraper
 * never sees a half-written file (fsync-free: it is a snapshot, not a
 * journal). A path that exists and is not a regular file (a symbolic link,
 * a device, a fifo) is never replaced: one warning, no file. It is written
 * a last time when the writer stops (at exit); a forked child starts a
 * writer of its own, on its own file.
 */
#ifndef KVB_STATSFILE_H
#define KVB_STATSFILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/*
 * Renders the whole file into buf; returns the length it needs (complete if
 * < cap). final: the last write, at exit.
 */
typedef size_t (*kvb_statsfile_render_fn)(void *arg, bool final, char *buf, size_t cap);
/* Where the writer reports a failure (one line, as the shim logs). */
typedef void (*kvb_statsfile_log_fn)(enum kvs_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct kvb_statsfile {
    pthread_mutex_t lock; /* everything below; held while rendering and writing */
    pthread_cond_t cv;    /* on CLOCK_MONOTONIC: the writer's interval; signalled at stop */
    char path[KVB_STATS_PATH_MAX]; /* "" = no stats file */
    uint64_t interval_ns;
    kvb_statsfile_render_fn render;
    void *arg;
    kvb_statsfile_log_fn log;
    unsigned gen;       /* the fork generation whose writer runs; ~0u: none yet */
    int write_err;      /* the last write's result: a new failure is warned about once */
    bool wrote;         /* a write of this path succeeded */
    bool remove_at_end; /* at stop, remove the file rather than write it a last time */
    bool stopped;       /* the last write is done: no writer runs, none starts */
    char text[262144];
};

/*
 * Sets sf up to write path (%p already expanded; "" = never) every
 * interval_ns; remove_at_end: kvb_statsfile_stop removes the file instead of
 * writing it a last time (KVBATCH_STATS_AT_EXIT=remove). 0, or a negative
 * errno: then sf writes no file (but its lock, taken around fork, works).
 */
int kvb_statsfile_init(struct kvb_statsfile *sf, const char *path, uint64_t interval_ns,
                       bool remove_at_end, kvb_statsfile_render_fn render, void *arg,
                       kvb_statsfile_log_fn log);

/*
 * Starts the writer of fork generation gen, unless it runs already (or sf
 * is stopped or has no path), and writes the file once.
 */
void kvb_statsfile_start(struct kvb_statsfile *sf, unsigned gen);

/*
 * Stops the writer (at exit) and writes the file a last time (render's
 * final true) or, with remove_at_end, removes it if this writer wrote it.
 */
void kvb_statsfile_stop(struct kvb_statsfile *sf);

/* Around fork(): the parent holds sf->lock across it, so the child's copy is consistent. */
void kvb_statsfile_fork_prepare(struct kvb_statsfile *sf);
void kvb_statsfile_fork_parent(struct kvb_statsfile *sf);
/*
 * In the child: its own file (path, "" = none; the parent's file is the
 * parent's, never removed by the child); its writer starts with
 * kvb_statsfile_start.
 */
void kvb_statsfile_fork_child(struct kvb_statsfile *sf, const char *path);

#endif

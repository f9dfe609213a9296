/*
 * stats_reply.c - renders kvstored's STATS body (stats_reply.h) into one growing
 * buffer. An allocation failure is remembered and reported once, at the end.
 */
#include "stats_reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "wire.h"

struct text {
    char *buf;
    size_t len, cap;
    int failed;
};

static void appendf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends one formatted line; remembers an allocation failure for the caller. */
static void appendf(struct text *t, const char *fmt, ...)
{
    if (t->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap <= t->len + (size_t)n)
            cap *= 2;
        char *nb = realloc(t->buf, cap);
        if (!nb) {
            t->failed = 1;
            return;
        }
        t->buf = nb;
        t->cap = cap;
    }
}

/* "name value\n"; also the line callback handed to the stats_extra hook. */
static void line(void *text, const char *name, uint64_t value)
{
    appendf(text, "%s %llu\n", name, (unsigned long long)value);
}

/* This process's resident set (VmRSS), in bytes; 0 if /proc cannot tell. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f) return 0;
    char buf[128];
    const char *ok = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (!ok) return 0;
    char *end; /* "size resident shared ..." in pages */
    strtoull(buf, &end, 10);
    unsigned long long resident = strtoull(end, &end, 10);
    long page = sysconf(_SC_PAGESIZE);
    return *end == ' ' && page > 0 ? resident * (uint64_t)page : 0;
}

/* Who is answering (version, pid, RSS), then the server's own counters
   (struct kvsd_server_counters), after the uptime. */
static void counter_lines(struct text *t, const struct kvsd_server *srv)
{
    const struct kvsd_server_counters *k = &srv->counters;
    appendf(t, "version %s\n", KVS_VERSION_STRING);
    line(t, "pid", (uint64_t)getpid());
    line(t, "rss_bytes", rss_bytes());
    line(t, "uptime_seconds", (kvs_now_ns() - srv->started_ns) / 1000000000ull);
    line(t, "connections_current", k->conns_current);
    line(t, "connections_total", k->conns_total);
    line(t, "connections_refused", k->conns_refused);
    line(t, "connections_stalled", k->conns_stalled);
    line(t, "connections_local", k->conns_local);
    line(t, "connections_refused_peer", k->conns_refused_peer);
    line(t, "connection_memory", srv->conn_memory);
    for (uint8_t op = KVS_OP_PUT; op <= KVS_OP_HELLO; op++)
        appendf(t, "requests_%s %llu\n", kvs_wire_opcode_name(op),
                (unsigned long long)k->requests[op]);
    appendf(t, "requests_%s %llu\n", kvs_wire_opcode_name(KVS_OP_REMOVE_MATCHING),
            (unsigned long long)k->requests[KVS_OP_REMOVE_MATCHING]);
    appendf(t, "requests_%s %llu\n", kvs_wire_opcode_name(KVS_OP_CLIENTS),
            (unsigned long long)k->requests[KVS_OP_CLIENTS]);
    for (uint8_t op = KVS_OP_PUT; op <= KVS_OP_REMOVE; op++)
        appendf(t, "keys_%s %llu\n", kvs_wire_opcode_name(op), (unsigned long long)k->keys[op]);
    line(t, "removed_matching", k->removed_matching);
    line(t, "bytes_in", k->bytes_in);
    line(t, "bytes_out", k->bytes_out);
    line(t, "get_hits", k->get_hits);
    line(t, "get_misses", k->get_misses);
    line(t, "get_range", k->get_range);
    line(t, "put_too_big", k->put_too_big);
    line(t, "put_no_space", k->put_no_space);
    line(t, "put_expired", k->put_expired);
    line(t, "key_invalid", k->key_invalid);
    line(t, "errors_protocol", k->errors_protocol);
    line(t, "errors_unsupported", k->errors_unsupported);
    line(t, "errors_nomem", k->errors_nomem);
    line(t, "auth_ok", k->auth_ok);
    line(t, "auth_failures", k->auth_failures);
    line(t, "requests_shm_map", k->requests[KVS_OP_SHM_MAP]);
    line(t, "requests_shm_buf", k->requests[KVS_OP_SHM_BUF]);
    line(t, "requests_shm_put", k->requests[KVS_OP_SHM_PUT]);
    line(t, "requests_shm_get", k->requests[KVS_OP_SHM_GET]);
    line(t, "shm_maps", k->shm_maps);
    line(t, "shm_refused", k->shm_refused);
    line(t, "shm_bad_ranges", k->shm_bad_ranges);
}

/* The store's totals and the limits in force. */
static void store_lines(struct text *t, const struct kvsd_server *srv)
{
    struct kvsd_store_stats st;
    kvsd_store_stats(srv->store, &st);
    line(t, "items", st.items);
    line(t, "evictions", st.evictions);
    line(t, "page_reclaims", st.reclaims);
    line(t, "pinned_items", st.pinned);
    line(t, "value_bytes", st.value_bytes);
    line(t, "memory_used", st.memory_used);
    line(t, "memory_total", st.memory_total);
    line(t, "pages_total", st.pages_total);
    line(t, "pages_free", st.pages_free);
    line(t, "max_object", srv->limits.max_object);
    line(t, "max_frame", srv->limits.max_frame);
}

/* Per slab class, then the large runs; only those in use: a reader sees where the memory went. */
static void class_lines(struct text *t, const struct kvsd_store *store)
{
    int n = kvsd_pool_nclasses(kvsd_store_pool(store));
    for (int i = 0; i <= n; i++) {
        struct kvsd_store_class_stats cs;
        kvsd_store_class_stats(store, i, &cs);
        if (!cs.pages && !cs.items && !cs.evictions) continue;
        if (i == n) {
            appendf(t, "large_pages %u\nlarge_items %llu\nlarge_evictions %llu\n", cs.pages,
                    (unsigned long long)cs.items, (unsigned long long)cs.evictions);
        } else {
            appendf(t,
                    "class_%d_chunk_size %u\nclass_%d_pages %u\nclass_%d_items %llu\n"
                    "class_%d_evictions %llu\n",
                    i, cs.chunk_size, i, cs.pages, i, (unsigned long long)cs.items, i,
                    (unsigned long long)cs.evictions);
        }
    }
}

int kvsd_stats_text(struct kvsd_server *srv, char **out, size_t *out_len)
{
    struct text t = {0};
    counter_lines(&t, srv);
    store_lines(&t, srv);
    if (srv->stats_extra) srv->stats_extra(srv->stats_extra_arg, line, &t);
    class_lines(&t, srv->store);
    if (t.failed) {
        free(t.buf);
        return -ENOMEM;
    }
    *out = t.buf;
    *out_len = t.len;
    return 0;
}

/*
 * stats.c - what the client reports about its servers and its links to them:
 * kvs_server_stats (each server's STATS text, followed by this client's
 * transport counters for that server as "client_NAME VALUE" lines),
 * kvs_client_counters (the same counters to a callback, no request sent),
 * and the counters logged at kvs_close (debug level).
 */
#include "client_int.h"

#include "status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATS_TEXT_MAX (64 * 1024)

/* Appends text to buf (never past cap-1); returns the length it would have had. */
static size_t append(char *buf, size_t cap, size_t at, const char *text, size_t len)
{
    if (buf && cap > 0 && at < cap - 1) {
        size_t room = cap - 1 - at;
        memcpy(buf + at, text, len < room ? len : room);
    }
    return at + len;
}

/* Where a transport's counters are appended, as "client_NAME VALUE" lines. */
struct counter_sink {
    char *buf;
    size_t cap, at;
};

static void emit_counter(void *arg, const char *name, uint64_t value)
{
    struct counter_sink *k = arg;
    char line[160];
    int len = snprintf(line, sizeof(line), "client_%s %llu\n", name, (unsigned long long)value);
    if (len > 0 && (size_t)len < sizeof(line))
        k->at = append(k->buf, k->cap, k->at, line, (size_t)len);
}

/* Counts the STATS parts of a stats call (no per-key results). */
static void stats_done(struct kvs_req *req)
{
    struct kvs_op *op = req->arg;
    kvc_note_error(op->c, req->status);
    kvc_op_put(op, false);
}

/* Sends one STATS request per server, texts[s * STATS_TEXT_MAX] for server s, and waits for all. */
static void fetch_stats(kvs_client *c, struct kvs_op *op, char *texts)
{
    for (size_t s = 0; s < c->nservers; s++) {
        struct kvs_req *req = &op->reqs[s];
        memset(req, 0, sizeof(*req));
        req->opcode = KVS_OP_STATS;
        req->text = texts + s * STATS_TEXT_MAX;
        req->text_cap = STATS_TEXT_MAX;
        req->done = stats_done;
        req->arg = op;
    }
    kvc_op_run_per_server(op);
}

/*
 * Appends server sv's block at buf[at]: "# server NAME", its STATS text (or
 * "# error ..."), then this client's counters of the link to it. Returns
 * the length the text would have had so far.
 */
static size_t render_server(char *buf, size_t cap, size_t at, const struct server_link *sv,
                            const struct kvs_req *req)
{
    char line[400];
    int len = snprintf(line, sizeof(line), "# server %s\n", sv->ep.name);
    at = append(buf, cap, at, line, (size_t)len);
    if (req->status < 0) {
        len = snprintf(line, sizeof(line), "# error %s\n", kvs_status_text(req->status));
        at = append(buf, cap, at, line, (size_t)len);
    } else {
        size_t tlen = req->text_len < req->text_cap ? req->text_len : req->text_cap;
        at = append(buf, cap, at, req->text, tlen);
        if (tlen > 0 && req->text[tlen - 1] != '\n') at = append(buf, cap, at, "\n", 1);
    }
    /* This client's side of the link to that server: frames, syscalls, reconnects... */
    if (sv->ops->counters) {
        struct counter_sink sink = {buf, cap, at};
        sv->ops->counters(sv->conn, emit_counter, &sink);
        at = sink.at;
    }
    return at;
}

ssize_t kvs_server_stats(kvs_client *c, char *buf, size_t cap)
{
    if (!c || (!buf && cap > 0)) return -EINVAL;
    size_t ns = c->nservers;
    struct kvs_op *op = kvc_op_alloc(c, KVS_OP_STATS, 0);
    char *texts = malloc(ns * STATS_TEXT_MAX);
    if (!op || !texts) {
        free(op);
        free(texts);
        return -ENOMEM;
    }
    fetch_stats(c, op, texts);

    size_t at = 0;
    int failed = 0, first_err = 0;
    for (size_t s = 0; s < ns; s++) {
        const struct kvs_req *req = &op->reqs[s];
        at = render_server(buf, cap, at, &c->servers[s], req);
        if (req->status < 0) {
            failed++;
            if (!first_err) first_err = req->status;
        }
    }
    if (buf && cap > 0) buf[at < cap - 1 ? at : cap - 1] = '\0';
    free(texts);
    free(op);
    if ((size_t)failed == ns) return first_err;
    return (ssize_t)at;
}

/* Passes a transport's counters on to the caller's callback, with the server's name. */
struct named_sink {
    kvs_counter_cb emit;
    void *arg;
    const char *server;
};

static void emit_named(void *arg, const char *name, uint64_t value)
{
    struct named_sink *k = arg;
    k->emit(k->arg, k->server, name, value);
}

int kvs_client_counters(kvs_client *c, kvs_counter_cb emit, void *arg)
{
    if (!c || !emit) return -EINVAL;
    for (size_t s = 0; s < c->nservers; s++) {
        struct server_link *sv = &c->servers[s];
        struct named_sink k = {emit, arg, sv->ep.name};
        if (sv->ops->counters) sv->ops->counters(sv->conn, emit_named, &k);
    }
    return 0;
}

/* Logs one counter of the connection named arg. */
static void log_counter(void *arg, const char *name, uint64_t value)
{
    kvs_log(KVS_LOG_DEBUG, "  %s %s %llu", (const char *)arg, name, (unsigned long long)value);
}

void kvc_log_counters(kvs_client *c)
{
    if (!kvs_log_enabled(KVS_LOG_DEBUG)) return;
    for (size_t s = 0; s < c->nservers; s++)
        if (c->servers[s].ops->counters)
            c->servers[s].ops->counters(c->servers[s].conn, log_counter, c->servers[s].ep.name);
}

/*
 * client_int.h - inside libkvstore's client layer: the structures its files
 * share and the functions they call in each other. Not installed; nothing
 * declared here is exported (-fvisibility=hidden; client/libkvstore.map).
 * Internal functions shared between files are named kvc_*, so that no one
 * mistakes them for the API (kvs_*).
 *
 * Where each job lives:
 *   client.c   kvs_open / kvs_close, the public calls (single-key, async, batch), kvs_strerror
 *   submit.c   an op's way out: local checks, routing, one kvs_req per server
 *   op.c       an op's life: results, completion, the completion thread, waiting
 *   flush.c    ops in flight per epoch (kvs_flush, kvs_close's drain), first error
 *   stats.c    kvs_server_stats, kvs_server_clients texts; kvs_client_counters
 *   remove.c   kvs_remove_matching (one request to every server)
 *   config.c   the environment (timeouts, auth secret) and the server list
 *   fork.c     the live clients and the pthread_atfork handlers
 *   route.c    rendezvous hashing of keys onto servers
 *   buffer.c   kvs_alloc_buffer / kvs_free_buffer: memory shared with a same-host kvstored
 *
 * Internals never call the exported kvs_* functions: a shim interposing on
 * them sees only the application's calls.
 */
#ifndef KVS_CLIENT_INT_H
#define KVS_CLIENT_INT_H

/* The API is the only thing libkvstore exports (-fvisibility=hidden hides the rest). */
#pragma GCC visibility push(default)
#include "kvstore.h"
#pragma GCC visibility pop

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

/* One server of the client's list, as the client sees it: its name, its transport, its state. */
struct server_link {
    struct kvs_endpoint ep;
    const struct kvs_transport_ops *ops;
    struct kvs_conn *conn;
};

struct kvs_client {
    size_t nservers;
    struct server_link *servers;
    uint64_t *server_hashes; /* route.c's, one per server */
    struct kvs_transport_config cfg;

    /*
     * Ops in flight, for kvs_flush/kvs_close, counted per epoch (flush.c):
     * kvs_flush flips the epoch and waits for the old one to drain, so ops
     * started after it (a steady stream from other threads, a callback
     * chaining the next batch) cannot starve it.
     */
    atomic_long outstanding[2];
    atomic_int epoch;
    pthread_mutex_t flush_mu; /* one flusher at a time */
    atomic_int flush_waiters;
    atomic_int first_error; /* first transport error since the last kvs_flush */
    pthread_mutex_t mu;
    pthread_cond_t idle;

    /* Callbacks of async batches that completed inside the submitting call run here (op.c). */
    pthread_mutex_t defer_mu;
    pthread_cond_t defer_cv;
    struct kvs_op *defer_head, *defer_tail;
    bool defer_started, defer_stop;
    pthread_t defer_thread;

    struct kvs_client *next_client; /* all live clients, for fork (fork.c) */

    /* Buffers of kvs_alloc_buffer (buffer.c): ptr NULL for a free slot. */
    pthread_mutex_t buf_mu;
    struct kvc_buffer {
        void *ptr;
        size_t len;
        int fd;
    } bufs[KVS_MAX_SHARED_BUFFERS];
};

/* The largest region of shared memory a client makes: a ring (KVSTORE_SHM_SIZE) or a buffer. */
#define KVC_SHM_MAX (16ull << 30)

/*
 * buffer.c: at kvs_open, and at kvs_close once the connections are gone
 * (frees what the caller left allocated, with no round trip to unmap).
 */
void kvc_buffers_init(kvs_client *c);
void kvc_buffers_fini(kvs_client *c);

/* One call in flight over n keys (a kvs_op of the API). */
struct kvs_op {
    kvs_client *c;
    uint8_t opcode;
    bool heap; /* allocated: freed by kvs_wait or after the callback */
    size_t n;
    int *out_int;     /* PUT, EXISTS (and REMOVE): per-key results */
    ssize_t *out_ssz; /* GET: per-key results */
    struct kvs_key_io *keys;
    struct kvs_req *reqs;
    atomic_uint parts; /* reqs in flight + 1 while submitting */
    atomic_long nok;
    kvs_done_fn done;
    void *arg;
    atomic_int state; /* OP_PENDING, OP_SLEEPING (a waiter sleeps on it), OP_DONE */
    int epoch;        /* the client's epoch when the op started */
    struct kvs_op *defer_next;
    /* A single key needs no allocation: */
    ssize_t single_result;
    struct kvs_key_io key1;
    struct kvs_req req1;
};

enum { OP_PENDING, OP_SLEEPING, OP_DONE };

/* What a call asks for: n keys and, per opcode, their values or buffers. */
struct op_args {
    uint8_t opcode;
    size_t n;
    const char *const *keys;
    const void *const *vals; /* PUT */
    void *const *bufs;       /* GET */
    const size_t *lens;      /* PUT: lengths; GET: capacities (NULL with iovs) */
    /* kvs_batch_putv / _getv: key i's value is iovs[i][0..iovcnt[i]) (vals / bufs unused) */
    const struct iovec *const *iovs;
    const size_t *iovcnt;
};

/* ---- op.c ---- */

/* Sets up op (stack or heap) for a call on c. */
void kvc_op_init(struct kvs_op *op, kvs_client *c, uint8_t opcode, size_t n, bool heap);
/* A heap op with room for n keys and one req per server; NULL when out of memory. */
struct kvs_op *kvc_op_alloc(kvs_client *c, uint8_t opcode, size_t n);
void kvc_op_free(struct kvs_op *op);
/*
 * Drops one part of op; the last one completes it: its done callback runs at
 * once, or on the completion thread if this thread is inside a program's
 * call (between kvc_call_enter and _leave) that did not allow inline
 * callbacks (kvs_inline_callbacks).
 */
void kvc_op_put(struct kvs_op *op);
/* Brackets a program's call in which transports may complete ops (a launch). */
void kvc_call_enter(void);
void kvc_call_leave(void);
/* Writes key index's result to the caller's array and counts it. */
void kvc_op_set_result(struct kvs_op *op, uint32_t index, ssize_t result);
/* The transport's completion of one keyed per-server part (req->arg is the op). */
void kvc_req_done(struct kvs_req *req);
/* Blocks until op completes; returns nok for batches, the key's result for single ops. */
ssize_t kvc_op_wait(struct kvs_op *op);
/* The completion thread's queue, empty, no thread (a new client, or one in a forked child). */
void kvc_defer_init(kvs_client *c);
/* Stops and joins the completion thread, if it was started, and frees its queue's locks. */
void kvc_defer_fini(kvs_client *c);

/* ---- submit.c ---- */

/* Starts op; afterwards it completes on its own (callback, or kvc_op_wait). 0 or -ENOMEM. */
int kvc_op_launch(struct kvs_op *op, const struct op_args *a);
/*
 * Submits a heap op's reqs[s] to server s, for every server (the caller set
 * them up; op->done is NULL), and waits until all are done.
 */
void kvc_op_run_per_server(struct kvs_op *op);

/* ---- flush.c ---- */

/* The flush state of a new client (or of a client in a forked child): nothing in flight. */
void kvc_flush_init(kvs_client *c);
void kvc_flush_fini(kvs_client *c);
/* Counts an op in; returns the epoch it belongs to. */
int kvc_outstanding_inc(kvs_client *c);
/* Counts an op of epoch e out, waking kvs_flush/kvs_close when it was the last. */
void kvc_outstanding_dec(kvs_client *c, int e);
/* Ops in flight in epoch e (e < 0: in both). */
long kvc_in_flight(kvs_client *c, int e);
/* Waits until epoch e (e < 0: both) has no op in flight, at most until deadline_ms (0: no limit).
 */
int kvc_wait_drained(kvs_client *c, int e, uint64_t deadline_ms);
/* Remembers status if it is the first transport error since the last kvs_flush. */
void kvc_note_error(kvs_client *c, int status);

/* ---- stats.c ---- */

/* Logs every connection's transport counters (debug level). */
void kvc_log_counters(kvs_client *c);

/* ---- config.c ---- */

/*
 * Fills c->cfg from the environment and c->servers from the list (NULL:
 * $KVSTORE_SERVERS, else KVS_DEFAULT_SERVERS); logs what is wrong. 0 or a
 * negative code (-EINVAL, -ENOTSUP, -ENOMEM, the auth file's error).
 */
int kvc_config_load(kvs_client *c, const char *servers);

/* ---- fork.c ---- */

/* Adds c to the clients the fork handlers reach (registering them on first use). */
void kvc_fork_track(kvs_client *c);
void kvc_fork_untrack(kvs_client *c);

#endif /* KVS_CLIENT_INT_H */

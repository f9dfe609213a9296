/*
 * proto.h - kvstored's per-connection protocol state machine, kept apart
 * from socket I/O: it takes bytes in and hands reply bytes out as iovecs,
 * so tests and the fuzzer drive it without sockets.
 *
 * Input streams through a bounded read buffer; a PUT's value goes straight
 * into the slot reserved for it (kvsd_proto_recv_iov may point the caller's
 * next read right at that slot), never buffered whole. A GET reply refers to
 * the pool memory of the (pinned) item, which stays pinned until those bytes
 * have been handed to kvsd_proto_sent. Requests may be pipelined; replies go
 * out in request order. When more than out_limit reply bytes are queued the
 * connection stops taking input until they drain (back-pressure).
 *
 * A malformed frame gets a KVS_OP_ERROR reply and the connection closes once
 * its queued replies are out (kvsd_proto_closing). An unknown opcode with a
 * good header gets an ERROR (-ENOTSUP) reply, its body is skipped, and the
 * connection goes on.
 */
#ifndef KVSD_PROTO_H
#define KVSD_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "store.h"
#include "wire.h"

#define KVSD_PROTO_NOPS 8 /* counters are indexed by request opcode (1..6) */

struct kvsd_server_limits {
    uint64_t max_object; /* value bytes */
    uint32_t max_frame;  /* request (and reply) body bytes */
    size_t out_limit;    /* queued reply bytes above which input pauses */
    size_t rbuf_size;    /* per-connection read buffer */
};

/* Counters shared by all connections; STATS reports them (docs/server.md). */
struct kvsd_server_counters {
    uint64_t requests[KVSD_PROTO_NOPS]; /* frames per opcode */
    uint64_t keys[KVSD_PROTO_NOPS];     /* per-key operations per opcode */
    uint64_t bytes_in, bytes_out;
    uint64_t get_hits, get_misses, get_range;
    uint64_t put_too_big, put_no_space, key_invalid;
    uint64_t errors_protocol, errors_unsupported, errors_nomem;
    uint64_t conns_current, conns_total, conns_refused, conns_stalled;
    uint64_t auth_ok;       /* connections that passed AUTH */
    uint64_t auth_failures; /* closed for a wrong MAC or a request before AUTH */
};

/* What every connection of one kvstored shares. */
struct kvsd_server {
    struct kvsd_store *store;
    struct kvsd_server_limits limits;
    struct kvsd_server_counters counters;
    uint64_t started_ns;
    uint32_t features; /* KVS_FEAT_* announced in HELLO (main sets KVS_FEAT_RDMA) */
    /* More STATS lines, "name value" (kvstored's RDMA side sets it); NULL: none. */
    void (*stats_extra)(void *arg, void (*line)(void *text, const char *name, uint64_t value),
                        void *text);
    void *stats_extra_arg;
    /*
     * The shared secret (kvstored --auth-file), or NULL: no authentication.
     * With a secret, main also sets KVS_FEAT_AUTH and a connection serves
     * only HELLO and AUTH until it has authenticated (docs/SECURITY.md).
     */
    const uint8_t *auth_secret;
    size_t auth_secret_len;
};

struct kvsd_proto_conn;

/* Creates the store (memory_bytes of pool) and fills srv. 0 or a negative errno. */
int kvsd_server_init(struct kvsd_server *srv, size_t memory_bytes,
                     const struct kvsd_server_limits *limits);
void kvsd_server_fini(struct kvsd_server *srv);

/* STATS body: "name value\n" lines, malloc'ed into *text. 0 or -ENOMEM. */
int kvsd_server_stats_text(struct kvsd_server *srv, char **text, size_t *len);

struct kvsd_proto_conn *kvsd_proto_conn_new(struct kvsd_server *srv);
/* Drops everything the connection holds: pins, a half-written put, queued replies. */
void kvsd_proto_conn_free(struct kvsd_proto_conn *c);

/*
 * Where the next received bytes should go, in order (a readv): the rest of
 * the PUT value being read, straight into its slot, when no bytes are
 * buffered; then the read buffer's free space (only a few hundred bytes of
 * it while the connection sends values >= 16 KiB, so that the next value
 * also lands in its slot). Returns the number of iovecs (1 or 2), or 0: take
 * no input now (back-pressure or closing).
 */
int kvsd_proto_recv_iov(struct kvsd_proto_conn *c, struct iovec iov[2]);
/* n bytes were stored where kvsd_proto_recv_iov said: parse and answer them. */
void kvsd_proto_received(struct kvsd_proto_conn *c, size_t n);
/* Resumes parsing buffered input after back-pressure eased. */
void kvsd_proto_process(struct kvsd_proto_conn *c);
/* Copies data in as a socket read would; returns how many bytes were taken. */
size_t kvsd_proto_feed(struct kvsd_proto_conn *c, const void *data, size_t len);

/* Up to max iovecs of reply bytes ready to send; returns how many. */
int kvsd_proto_out_iov(const struct kvsd_proto_conn *c, struct iovec *iov, int max);
/* n reply bytes were sent: releases what they referred to. */
void kvsd_proto_sent(struct kvsd_proto_conn *c, size_t n);
/* Reply bytes queued and not yet sent. */
size_t kvsd_proto_out_pending(const struct kvsd_proto_conn *c);
/* True if the connection takes input now (no back-pressure, not closing). */
int kvsd_proto_want_input(const struct kvsd_proto_conn *c);
/*
 * True while a request frame has been partly read (a PUT slot may be
 * reserved), or while the connection still has to authenticate.
 */
int kvsd_proto_mid_frame(const struct kvsd_proto_conn *c);
/* True once the connection must close (after kvsd_proto_out_pending drains). */
int kvsd_proto_closing(const struct kvsd_proto_conn *c);
/* True if the server has no secret, or this connection passed AUTH. */
int kvsd_proto_authenticated(const struct kvsd_proto_conn *c);

#endif /* KVSD_PROTO_H */

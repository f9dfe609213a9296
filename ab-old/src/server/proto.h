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
 * out in request order.
 *
 * Memory: every allocation a connection makes is counted at what the heap
 * spends on it (in srv->conn_memory). When more than out_limit reply bytes
 * are queued, or their buffers and segments hold more than out_heap_limit
 * of heap (4 KiB before AUTH), the connection takes no more input, between
 * frames, until they drain (back-pressure). An entry frame also waits, once
 * its header is in, until the most heap its reply can take (known from the
 * header: statuses and segments, reserved at once) fits out_heap_limit
 * beside what is queued, so queued replies never hold more than that
 * (plus one HELLO/STATS/ERROR reply) whatever a frame holds. Before AUTH its read buffer is
 * 1 KiB; it gets the full one once authenticated.
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

#include "server.h"
#include "wire.h"

/*
 * Keys per request frame that kvstored serves (HELLO's max_keys; clients cut
 * batches to it). The whole reply of a frame is built before its first byte
 * goes out (its header carries the body length), so its heap is held at
 * once: at most 16 + 8 bytes of status and two 32-byte segments per key,
 * about 0.6 MiB at this count, which fits the 1 MiB reply heap budget. A
 * frame of more keys (up to the wire's 65536) is refused (-EMSGSIZE, closed).
 */
#define KVSD_PROTO_MAX_KEYS 8192u

struct kvsd_proto_conn;

struct kvsd_proto_conn *kvsd_proto_conn_new(struct kvsd_server *srv);
/*
 * Drops everything the connection holds: pins, a half-written put, queued
 * replies, its shared region's mapping and a descriptor not yet used.
 */
void kvsd_proto_conn_free(struct kvsd_proto_conn *c);
/* The connection is a local socket's: HELLO announces KVS_FEAT_SHM and SHM_MAP is served. */
void kvsd_proto_allow_shm(struct kvsd_proto_conn *c);
/*
 * A descriptor the peer passed (SCM_RIGHTS); the connection owns it now. It
 * waits for the next SHM_MAP, or is closed at once (counted in shm_refused)
 * when shared memory is not allowed, a region is mapped, one already waits,
 * or the peer has not authenticated.
 */
void kvsd_proto_take_fd(struct kvsd_proto_conn *c, int fd);

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

/* How long the PUT slot being filled had been reserved at now_ms (kvs_now_ms); 0 if none is. */
uint64_t kvsd_proto_put_age_ms(const struct kvsd_proto_conn *c, uint64_t now_ms);
/*
 * Throws the PUT slot being filled away as expired (kvsd_ops_put_expire:
 * counted in put_expired) and ends the connection: the caller closes it.
 */
void kvsd_proto_expire_put(struct kvsd_proto_conn *c);

#endif /* KVSD_PROTO_H */

/*
 * ops.h - kvstored's per-key rules: the one place that decides what a PUT,
 * GET, EXISTS or REMOVE of one key answers, and which STATS counters that
 * answer moves. Every path that serves keys calls it: the TCP protocol
 * (proto.c) and the RDMA one-sided protocol (rdma.c). A path adds only what
 * is its own (how bytes move, frame limits, tokens); it never calls
 * kvsd_store_reserve / _commit / _lookup / _remove itself.
 *
 * The rules:
 *   key      NULL, empty, longer than KVS_WIRE_MAX_KEY or holding a NUL
 *            byte: -EINVAL (key_invalid), before anything else.
 *   PUT      value over limits.max_object, or larger than the whole pool:
 *            -E2BIG (put_too_big); nothing evictable: -ENOSPC
 *            (put_no_space); heap exhausted: -ENOMEM (errors_nomem).
 *   GET      absent: -ENOENT (get_misses); found: get_hits, and when the
 *            value is longer than the caller's capacity -ERANGE with the
 *            value's length (get_range too) and nothing pinned.
 *   EXISTS   1 or 0.  REMOVE  0 or -ENOENT.
 * Every call counts its key once in keys[opcode] (a batch of 64 counts 64),
 * whatever the outcome. Frames (requests[]) are the paths' to count.
 *
 * How each path uses it:
 *
 *   TCP, PUT entry    kvsd_ops_put_reserve once the key is in; the value
 *                     streams into kvsd_item_data() of the reserved item;
 *                     kvsd_ops_put_commit after its last byte (the old value
 *                     stays visible until then), kvsd_ops_put_abort if the
 *                     connection goes first, kvsd_ops_put_expire if the
 *                     value is not in within --put-timeout. A refused value
 *                     is skipped.
 *   TCP, GET entry    kvsd_ops_get with the entry's capacity; a hit's item
 *                     stays pinned while the reply bytes that point into it
 *                     are queued, then kvsd_ops_get_done.
 *   TCP, EXISTS / REMOVE  kvsd_ops_exists / kvsd_ops_remove.
 *   RDMA, RESERVE / PULL  kvsd_ops_put_reserve per key; the reserved item is
 *                     held by a reservation lease while the peer WRITEs (or
 *                     the server READs) the value into it; COMMIT or the
 *                     PULL's completion calls kvsd_ops_put_commit, an abort
 *                     flag or a cut connection kvsd_ops_put_abort, a
 *                     reservation older than --rdma-lease-ms
 *                     kvsd_ops_put_expire.
 *   RDMA, LEASE / PUSH  kvsd_ops_get with the peer's capacity; the pinned
 *                     item is held by a read lease while the peer READs it
 *                     (or the server WRITEs it out); RELEASE, the PUSH
 *                     reply's completion, expiry or a cut connection call
 *                     kvsd_ops_get_done.
 *   A key a path turns away for a reason of its own before any rule applies
 *   (RDMA: the connection's lease table is full) is counted with
 *   kvsd_ops_refused, so keys[] still counts every key received.
 *
 * Single-threaded, like the store: kvstored's event loop calls it.
 */
#ifndef KVSD_OPS_H
#define KVSD_OPS_H

#include <stdint.h>

#include "server.h"

/*
 * Reserves a new pinned item with a len-byte slot for key (unlinked: GETs
 * still see the old value). 0 and *out; or -EINVAL, -E2BIG, -ENOSPC, -ENOMEM
 * and *out = NULL.
 */
int kvsd_ops_put_reserve(struct kvsd_server *srv, const uint8_t *key, uint16_t klen, uint32_t len,
                         struct kvsd_item **out);
/*
 * Publishes a reserved item whose slot is filled, replacing the key's old
 * value, and drops its pin. 0, or -ENOMEM (thrown away; the old value stays).
 */
int kvsd_ops_put_commit(struct kvsd_server *srv, struct kvsd_item *it);
/* Throws away a reserved item that will not be committed. */
void kvsd_ops_put_abort(struct kvsd_server *srv, struct kvsd_item *it);
/* The same for a reserved item whose value did not arrive in time (put_expired). */
void kvsd_ops_put_expire(struct kvsd_server *srv, struct kvsd_item *it);

/*
 * Looks key up for a reader with room for cap bytes. 0: *out is the item,
 * pinned (the caller must kvsd_ops_get_done it) and most recently used, and
 * *len its value's length. -ERANGE: *len is the value's length, *out NULL.
 * -ENOENT or -EINVAL: *len 0, *out NULL.
 */
int kvsd_ops_get(struct kvsd_server *srv, const uint8_t *key, uint16_t klen, uint32_t cap,
                 struct kvsd_item **out, uint32_t *len);
/* Drops the pin kvsd_ops_get took. */
void kvsd_ops_get_done(struct kvsd_server *srv, struct kvsd_item *it);

/* 1 if key is stored, 0 if not, -EINVAL for a bad key. */
int kvsd_ops_exists(struct kvsd_server *srv, const uint8_t *key, uint16_t klen);
/* 0, -ENOENT, or -EINVAL for a bad key. A pinned item stays readable by its holders. */
int kvsd_ops_remove(struct kvsd_server *srv, const uint8_t *key, uint16_t klen);

/*
 * Removes every key that the POSIX extended regular expression pattern
 * (plen bytes, no NUL) matches anywhere, as kvsd_ops_remove would each; *removed is how many
 * (saturated at UINT32_MAX). 0, or -EINVAL for a pattern that is empty, too long, holds a NUL
 * or does not compile (*removed 0).
 */
int kvsd_ops_remove_matching(struct kvsd_server *srv, const uint8_t *pattern, uint16_t plen,
                             uint32_t *removed);

/* Counts a key of opcode (KVS_OP_PUT .. KVS_OP_REMOVE) that its path refused before any rule. */
void kvsd_ops_refused(struct kvsd_server *srv, uint8_t opcode);

#endif /* KVSD_OPS_H */

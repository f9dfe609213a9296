/*
 * transport.h - the internal interface between libkvstore's client layer and
 * its transports (tcp.c, rdma*.c, auto.c). Not installed, not exported.
 *
 * Shape (as Redis' ae.c over ae_epoll.c / ae_kqueue.c): one small vtable,
 * struct kvs_transport_ops, with one implementation per file. The client
 * layer (client/) parses the server list, routes keys, splits a batch per
 * server, validates keys and values, and hands each per-server sub-batch to
 * the server's transport as one struct kvs_req. Nothing above this header
 * knows whether bytes travel over TCP or RDMA.
 *
 * Unit of work: one struct kvs_req = one opcode, n keys for ONE server, a
 * result slot per key, and a completion callback. The transport may send it
 * as several wire frames (to respect the server's max_frame / max_keys learned
 * from HELLO); it calls req->done exactly once, after every key's result slot
 * is final. After done has been called the transport never touches the req,
 * its keys, values or buffers again (this is what makes a timed-out request
 * safe: the caller may free its buffers once its request has completed).
 *
 * Threads: every op may be called from many threads at once on the same
 * connection, except create/destroy (one thread, nothing in flight from
 * others) and the fork hooks (see below).
 */
#ifndef KVS_TRANSPORT_H
#define KVS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "auth.h"
#include "clock.h"
#include "log.h"
#include "parse.h" /* struct kvs_endpoint: one kvstored node, as named in the server list */
#include "wire.h"

/* Client-wide settings every transport honours (from the environment). */
struct kvs_transport_config {
    int timeout_ms; /* KVSTORE_TIMEOUT_MS: a request not completed by then fails -ETIMEDOUT */
    int connect_timeout_ms; /* KVSTORE_CONNECT_TIMEOUT_MS: connect + HELLO */
    /*
     * KVSTORE_AUTH_FILE's secret (auth_secret_len 0: none). With one, a
     * transport authenticates every connection (AUTH after HELLO) and refuses
     * a server that does not ask for it; without one, it refuses a server
     * that does. Either refusal is -EACCES.
     */
    size_t auth_secret_len;
    uint8_t auth_secret[KVS_AUTH_MAX_SECRET];
    /*
     * KVSTORE_SHM_SIZE: bytes of the region a connection over kvstored's
     * local socket shares with it for values (docs/shm.md); 0: none, values
     * travel in the socket.
     */
    uint64_t shm_size;
};

/* The server's limits, learned from HELLO on each (re)connection. */
struct kvs_limits {
    uint32_t max_key;    /* key bytes */
    uint64_t max_object; /* value bytes: larger values are refused locally with -E2BIG */
    uint64_t max_frame;  /* body bytes per wire frame */
    uint32_t max_keys;   /* keys per wire frame */
    uint32_t features;   /* KVS_FEAT_* */
};

/*
 * One key of a request. The client fills the inputs; the transport fills
 * status (and vlen) before it calls req->done.
 */
struct kvs_key_io {
    /* inputs */
    const char *key;
    uint32_t klen;   /* strlen(key), 1..max_key */
    uint32_t index;  /* the caller's own (the client: position in the user's arrays) */
    const void *val; /* PUT: the value (may be NULL when len is 0) */
    void *buf;       /* GET: where the value goes (may be NULL when len is 0) */
    uint64_t len;    /* PUT: value length; GET: buf capacity; else 0 */
    /*
     * Scatter-gather (kvs_batch_putv / _getv): with iovcnt > 1 the value is
     * iov[0..iovcnt) in order instead of val / buf, and len is their total.
     * (The client passes a one-segment key as val / buf.) Every transport
     * carries such keys; kvs_key_gather / kvs_key_scatter are the copies
     * for one that must stage a value.
     */
    const struct iovec *iov;
    uint32_t iovcnt;
    /* outputs */
    int32_t status; /* 0, 1 (EXISTS: present), or a negative errno (server's or transport's) */
    uint64_t vlen;  /* GET with status 0: bytes written to buf; with -ERANGE: the value's length */
};

/* Copies k's PUT value (k->len bytes, from val or its segments) to dst. */
void kvs_key_gather(const struct kvs_key_io *k, void *dst);
/* Copies len <= k->len bytes of a GET value from src into k's buf or, in order, its segments. */
void kvs_key_scatter(const struct kvs_key_io *k, const void *src, size_t len);

struct kvs_req;
typedef void (*kvs_req_done_fn)(struct kvs_req *req);

/*
 * A sub-batch for one server. Keyed opcodes (PUT, GET, EXISTS, REMOVE) use
 * keys[0..n). STATS and CLIENTS (kvs_wire_opcode_text) use n = 0 and the
 * text fields. The transport
 * owns the req from a successful submit until it calls done.
 */
struct kvs_req {
    uint8_t opcode; /* enum kvs_wire_opcode */
    uint32_t n;
    struct kvs_key_io *keys;
    /* STATS, CLIENTS: the reply text (not NUL-terminated) goes to text[0..text_cap) */
    char *text;
    size_t text_cap;
    size_t text_len; /* out: the whole reply's length (may exceed text_cap: truncated) */
    int status; /* out: STATS / CLIENTS result; for keyed requests, the first transport error or 0
                 */
    kvs_req_done_fn done;
    void *arg; /* the caller's */
};

/*
 * The handle of a transport's per-server state: each transport converts it
 * to its own (tcp: struct tcp_conn; rdma: struct kvs_rdma_conn; auto:
 * struct auto_conn).
 */
struct kvs_conn;

/* Receives one counter (see counters below). */
typedef void (*kvs_counter_fn)(void *arg, const char *name, uint64_t value);

struct kvs_transport_ops {
    const char *name; /* "tcp", "rdma", "auto": the scheme it serves */

    /*
     * Allocates the state for one server. Does not connect (connections are
     * made lazily, on first use). 0 or a negative code.
     */
    int (*create)(const struct kvs_endpoint *ep, const struct kvs_transport_config *cfg,
                  struct kvs_conn **out);

    /*
     * Makes sure the connection is up (connect + HELLO, bounded by
     * connect_timeout_ms) and copies the server's limits to *lim. Cheap when
     * already connected. After a failed attempt, calls within a short backoff
     * fail at once with the same error, so a down server is not hammered.
     * Returns 0, or -ECONNREFUSED / -ETIMEDOUT / -EPROTO / -EIO ...
     */
    int (*connect)(struct kvs_conn *c, struct kvs_limits *lim);

    /*
     * Sends req (connecting first if needed) and arranges for req->done to be
     * called exactly once. Always "succeeds": every failure (server down,
     * connection lost, timeout, key too large for one frame) is reported in
     * the keys' status slots (and req->status). done may run before submit
     * returns, on the calling thread, or later on a transport thread; it must
     * not block for long. The caller guarantees that keys passed the client's
     * validation (klen 1..max_key, non-NULL val/buf when len > 0, PUT values
     * <= max_object) against the limits connect() returned.
     * A key's status: the server's, or -ECONNREFUSED (could not connect),
     * -ECONNRESET (connection lost with the key in flight), -ETIMEDOUT,
     * -EPROTO (the server broke the protocol), -EIO (other transport errors).
     */
    void (*submit)(struct kvs_conn *c, struct kvs_req *req);

    /*
     * Drops the connection: requests in flight fail with -ECONNRESET; the
     * next connect/submit reconnects. Idempotent.
     */
    void (*disconnect)(struct kvs_conn *c);

    /* Disconnects, joins the transport's threads, frees c. Nothing may be in flight from others. */
    void (*destroy)(struct kvs_conn *c);

    /*
     * Optional (NULL: a no-op returning 0). Registers [ptr, ptr+len) for
     * zero-copy transfers; the client caches registrations per client.
     */
    int (*reg_mem)(struct kvs_conn *c, void *ptr, size_t len);
    int (*unreg_mem)(struct kvs_conn *c, void *ptr);

    /*
     * Optional (NULL: nothing to do). [ptr, ptr+len) is a mapping of the
     * sealed memfd fd that the client made to share (kvs_alloc_buffer); fd
     * stays open until unshare_mem has returned. A transport whose server
     * can map it too (tcp on a local socket) has it do so, and then moves
     * values from and into it without a copy of its own. share_mem: 0, or
     * -ENOMEM (nothing kept); a server that refuses the mapping is no
     * error (values then travel as for any memory).
     */
    int (*share_mem)(struct kvs_conn *c, void *ptr, size_t len, int fd);
    void (*unshare_mem)(struct kvs_conn *c, void *ptr);

    /*
     * Optional. Reports the transport's counters, one emit() per counter,
     * with stable names (each transport's counters function lists its own;
     * docs/client.md names them all). Values are monotonic.
     */
    void (*counters)(struct kvs_conn *c, kvs_counter_fn emit, void *arg);

    /*
     * Optional fork hooks, called from the client's pthread_atfork handlers
     * for every connection of every live client. prepare/parent bracket the
     * fork in the parent; child runs in the child (one thread) and must leave
     * the connection "dead, reconnect on first use" WITHOUT touching the
     * parent's threads or shutting the shared socket down (close the fd
     * copy only). Requests in flight in the parent are forgotten by the
     * child: their callbacks are not called there.
     */
    void (*fork_prepare)(struct kvs_conn *c);
    void (*fork_parent)(struct kvs_conn *c);
    void (*fork_child)(struct kvs_conn *c);
};

/*
 * The transports. rdma and auto (rdma when it works, else tcp:
 * transport/auto.c) are weak: libkvstore builds without the rdma files.
 */
extern const struct kvs_transport_ops kvs_tcp_transport;
extern const struct kvs_transport_ops kvs_rdma_transport __attribute__((weak));
extern const struct kvs_transport_ops kvs_auto_transport __attribute__((weak));
/* True if this machine has an RDMA device (in builds with the rdma transport). */
int kvs_rdma_device_present(void) __attribute__((weak));

#endif /* KVS_TRANSPORT_H */

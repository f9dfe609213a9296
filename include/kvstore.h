/*
 * kvstore.h - client API of the kvbatch KV-cache store (libkvstore.so).
 *
 * A kvs_client talks to one or more kvstored nodes; keys are routed to a node
 * by a stable (rendezvous) hash. Every call is thread-safe: one client is
 * meant to be shared by all the threads of a process.
 *
 * Results are 0 (or a length, for gets) on success, else a negative
 * errno-style code; kvs_strerror() names each:
 *   -ENOENT        key not found
 *   -ERANGE        get buffer smaller than the value (nothing is truncated)
 *   -E2BIG         key or value over the limit
 *   -ENOSPC        store full and nothing can be evicted
 *   -EINVAL        bad argument (NULL/empty key, NULL buffer with length...)
 *   -ENOMEM        out of memory in the client
 *   -ECONNREFUSED, -ECONNRESET, -ETIMEDOUT, -EIO, -EPROTO  transport failures
 *
 * Keys are NUL-terminated strings of 1..KVS_MAX_KEY bytes. Values are
 * 0 bytes up to the server's maximum object size.
 *
 * Without the kvbatch shim, kvs_put/kvs_get cost one round trip per key;
 * kvs_batch_* send one request frame per server for all their keys.
 */
#ifndef KVSTORE_H
#define KVSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_MAX_KEY         512 /* bytes, without the NUL */
#define KVS_DEFAULT_SERVERS "127.0.0.1:7070"

typedef struct kvs_client kvs_client;
typedef struct kvs_op kvs_op;

/*
 * servers: "host:port[,host:port...]", each optionally prefixed "tcp://" or
 * "rdma://". NULL: $KVSTORE_SERVERS, else KVS_DEFAULT_SERVERS. Connections are
 * made lazily; kvs_open fails (NULL, errno set) only on a bad server list,
 * out of memory, or an unusable $KVSTORE_AUTH_FILE (the shared secret of
 * servers started with --auth-file: missing, empty, or group/world-readable).
 */
kvs_client *kvs_open(const char *servers);
/* Waits for outstanding ops (bounded by the client timeout), then frees c. */
void kvs_close(kvs_client *c);

/* Synchronous single-key calls: one round trip each. */
int kvs_put(kvs_client *c, const char *key, const void *val, size_t len);
/* Returns the value's length. kvs_get(c, key, NULL, 0) probes the length. */
ssize_t kvs_get(kvs_client *c, const char *key, void *buf, size_t cap);
int kvs_exists(kvs_client *c, const char *key); /* 1, 0, or < 0 */
int kvs_remove(kvs_client *c, const char *key);

/*
 * Asynchronous single-key calls. On success (0) *op is set and the call is in
 * flight: key, val and buf must stay valid until kvs_wait(op) returns. A
 * negative return means nothing was started and *op is NULL.
 */
int kvs_put_async(kvs_client *c, const char *key, const void *val, size_t len, kvs_op **op);
int kvs_get_async(kvs_client *c, const char *key, void *buf, size_t cap, kvs_op **op);
/* Blocks until op completes; returns its result (as the sync call would) and frees op. */
ssize_t kvs_wait(kvs_op *op);

/*
 * Batch calls: one status per key, and the number of keys that succeeded, or
 * a negative code if the call itself is invalid (c NULL, an array NULL with
 * n > 0). One key's failure never fails another key. For gets, results[i] is
 * the value's length or a negative code; for exists, 1, 0 or a negative code.
 */
int kvs_batch_put(kvs_client *c, size_t n, const char *const keys[], const void *const vals[],
                  const size_t lens[], int status[]);
int kvs_batch_get(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                  const size_t caps[], ssize_t results[]);
int kvs_batch_exists(kvs_client *c, size_t n, const char *const keys[], int results[]);

/*
 * Asynchronous batches: what a batcher drives. Every array (and every key,
 * value and buffer they point to) must stay valid until the batch completes.
 * Completion fills the per-key array, then:
 *   - done != NULL: done(arg, nok) runs once, on a library thread (see
 *     kvs_inline_callbacks for the exception), with the
 *     number of keys that succeeded; the library frees the op itself and
 *     *op (if op is not NULL) must not be waited on. done must not block and
 *     must not call synchronous kvs_* functions.
 *   - done == NULL: the caller calls kvs_wait(*op), which returns nok.
 * Returns 0 when the batch is in flight, or a negative code if the call is
 * invalid (then nothing is in flight and done is not called). Per-key
 * problems (bad key, too large...) are reported in the per-key array, never
 * as a call failure. Several batches may be in flight on one client.
 */
typedef void (*kvs_done_fn)(void *arg, ssize_t nok);

/*
 * For the calling thread: on (non-zero) lets the done callback of a batch
 * that completes inside one of this thread's kvs_* calls (its reply came
 * before the submitting call returned: every time on RDMA) run there, on this
 * thread, instead of on the library's completion thread, saving a thread
 * hand-off per batch. Only for a caller that holds no lock its callbacks take
 * and whose callbacks may run nested in its own calls (a batcher: the kvbatch
 * shim turns it on around the calls it makes). Returns the previous setting.
 */
int kvs_inline_callbacks(int on);

int kvs_batch_put_async(kvs_client *c, size_t n, const char *const keys[], const void *const vals[],
                        const size_t lens[], int status[], kvs_done_fn done, void *arg,
                        kvs_op **op);
int kvs_batch_get_async(kvs_client *c, size_t n, const char *const keys[], void *const bufs[],
                        const size_t caps[], ssize_t results[], kvs_done_fn done, void *arg,
                        kvs_op **op);
int kvs_batch_exists_async(kvs_client *c, size_t n, const char *const keys[], int results[],
                           kvs_done_fn done, void *arg, kvs_op **op);

/*
 * Scatter-gather batches: key i's value is the concatenation of its segments
 * iovs[i][0..iovcnt[i]) (segments may be empty; iovcnt[i] 0 is an empty
 * value, or for a get the length probe of kvs_get(c, key, NULL, 0)). A put sends the segments as
 * they lie (no staging copy); a get writes the value into them in order, filling each before the
 * next, and results[i] is the value's length; a value longer than the segments' total is -ERANGE
 * for its key, with nothing written. A key's total over the server's maximum value is -E2BIG; over
 * KVS_MAX_IOV segments, -EINVAL. Otherwise as kvs_batch_put / kvs_batch_get
 * and their async forms (the segment arrays too must stay valid until an
 * async batch completes). A key with one segment is a plain key: the forms
 * mix freely.
 */
#define KVS_MAX_IOV 1024 /* segments per key */

int kvs_batch_putv(kvs_client *c, size_t n, const char *const keys[],
                   const struct iovec *const iovs[], const size_t iovcnt[], int status[]);
int kvs_batch_getv(kvs_client *c, size_t n, const char *const keys[],
                   const struct iovec *const iovs[], const size_t iovcnt[], ssize_t results[]);
int kvs_batch_putv_async(kvs_client *c, size_t n, const char *const keys[],
                         const struct iovec *const iovs[], const size_t iovcnt[], int status[],
                         kvs_done_fn done, void *arg, kvs_op **op);
int kvs_batch_getv_async(kvs_client *c, size_t n, const char *const keys[],
                         const struct iovec *const iovs[], const size_t iovcnt[], ssize_t results[],
                         kvs_done_fn done, void *arg, kvs_op **op);

/* Waits for this client's outstanding ops; 0, or the first transport error seen. */
int kvs_flush(kvs_client *c);

/*
 * Memory registration for zero-copy RDMA transfers from/into [ptr, ptr+len).
 * Cached per client; no-ops (returning 0) on TCP.
 */
int kvs_register_buffer(kvs_client *c, void *ptr, size_t len);
int kvs_unregister_buffer(kvs_client *c, void *ptr);

/*
 * Memory a kvstored on this host can reach (docs/shm.md "Buffer regions"):
 * *out gets len bytes (rounded up to the page size), zeroed and
 * page-aligned. Over shared memory, a value put from such a buffer or got
 * into it crosses memory once (kvstored's copy) instead of twice; over TCP
 * or RDMA it is ordinary memory, registered as by kvs_register_buffer. A
 * forked child shares it with its parent (MAP_SHARED). 0, -EINVAL (len 0
 * or over 16 GiB), -ENOMEM (no memory, or KVS_MAX_SHARED_BUFFERS in use).
 */
#define KVS_MAX_SHARED_BUFFERS 64
int kvs_alloc_buffer(kvs_client *c, size_t len, void **out);
/*
 * Frees a buffer of kvs_alloc_buffer; no op may be in flight from or into
 * it. kvs_close frees those left. 0, or -EINVAL (not such a buffer).
 */
int kvs_free_buffer(kvs_client *c, void *ptr);

/*
 * Removes every key, on every server, that the POSIX extended regular
 * expression pattern matches anywhere in the key (regexec's search; "^"
 * matches every key). Returns how many keys were removed, or a negative
 * code: -EINVAL for an empty pattern, one over KVS_MAX_KEY bytes, or one a
 * server cannot compile; a transport error if a server could not answer
 * (the others may have removed their keys). A read in flight keeps its copy.
 */
ssize_t kvs_remove_matching(kvs_client *c, const char *pattern);

/*
 * Server counters as "name value\n" lines, one server after another, each
 * block preceded by "# server host:port\n" and ending with this client's own
 * transport counters for that server ("client_frames_sent 12"...; a server
 * that could not answer gets "# error ..." instead of its counters). Returns
 * the text length (the text is truncated to cap-1 and NUL-terminated) or a
 * negative code.
 */
ssize_t kvs_server_stats(kvs_client *c, char *buf, size_t cap);

/*
 * Every server's connections (redis's CLIENT LIST), in blocks as
 * kvs_server_stats: "# server host:port\n", then one line per connection of
 * space-separated key=value fields ("id=7 addr=127.0.0.1:51234
 * transport=tcp ... auth=1"; docs/server.md "Clients" names them), at most
 * 1024, then "# listed N omitted M" (M: those left out). A server that could
 * not answer gets "# error ..." instead. Returns the text length (truncated
 * to cap-1, NUL-terminated) or a negative code: -ENOTSUP from a kvstored
 * that has no CLIENTS.
 */
ssize_t kvs_server_clients(kvs_client *c, char *buf, size_t cap);

/*
 * This client's own transport counters, read locally (nothing is sent): emit
 * is called once per server and counter, e.g. ("127.0.0.1:7070",
 * "send_syscalls", 1234). Over TCP: frames_sent, send_syscalls,
 * recv_syscalls, bytes_sent, bytes_received, connects, connections_lost,
 * timeouts. Over RDMA: doorbells (ibv_post_send calls), work_requests,
 * completions, round_trips, bounce_bytes, zero_copy_bytes, split_chains,
 * reconnects. Values only grow. Safe while other threads use c, not
 * concurrently with kvs_close(c). 0, or -EINVAL.
 */
typedef void (*kvs_counter_cb)(void *arg, const char *server, const char *name, uint64_t value);
int kvs_client_counters(kvs_client *c, kvs_counter_cb emit, void *arg);

const char *kvs_strerror(int status);

/* The library's version ("0.1.0"), the same string as every kvbatch binary's --version. */
const char *kvs_version(void);

#ifdef __cplusplus
}
#endif
#endif /* KVSTORE_H */

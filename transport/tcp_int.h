/*
 * tcp_int.h - inside the TCP transport: the state its files share and the
 * functions they call in each other. Private to transport/tcp*.c.
 *
 *   tcp.c            the vtable; a connection's life: create, bring up (with
 *                    backoff), disconnect, destroy, fork; counters
 *   tcp_handshake.c  opening one connection: resolve, connect, HELLO, AUTH
 *   tcp_send.c       sending a request: register, sendmsg, the writer thread
 *   tcp_recv.c       the reader thread: replies, values, timeouts
 *   tcp_pending.c    the pending table of frames on the wire; connection loss
 *   tcp_frames.c     jobs and frames: cutting a request into wire frames,
 *                    their iovecs and scratch, and how they end
 *   tcp_io.c         blocking sends and receives on a socket
 *   tcp_shm.c        values through a region shared with kvstored (local
 *                    socket): the region, its ring, SHM_PUT / SHM_GET jobs
 *
 * Each file calls only files below it in this list (tcp_send.c reads
 * tcp_recv.c's tcp_on_reader_thread).
 *
 * One connection per (client, server). Sending: a request (one per-server
 * sub-batch) becomes one job of one or more wire frames (split by the
 * server's max_frame / max_keys), all sent with one sendmsg loop whose
 * iovecs point at the caller's values; only the frame and entry headers and
 * the keys are copied into a small scratch area.
 *
 * Receiving: one reader thread per connection, started on the first
 * connection and kept for the conn's life (it waits for the next connection
 * after a loss). It matches replies to frames by id through a pending table
 * and reads GET values straight into the caller's buffers. Many frames may be
 * in flight on one connection (pipelining), from many threads.
 *
 * Lifetimes, the invariants that make timeouts and lost connections safe:
 *  - a frame is in the pending table until the reader takes it (to read its
 *    reply), the reader expires it (timeout), or the connection dies; whoever
 *    removes it under conn->mu is the only one to touch its keys from then on;
 *  - a job (one request) holds one reference per frame plus one for the
 *    sender; req->done runs when the last is dropped, so it never runs while
 *    sendmsg may still read the caller's values;
 *  - the socket fd is closed only by the reader, holding send_mu, after the
 *    connection is marked down, so no sender writes to a reused fd number.
 *
 * A reader thread never blocks in a send: a callback it runs may submit more
 * work (to this server or another), and a reader blocked in sendmsg while its
 * server waits for it to read replies would deadlock. A reader's submission
 * tries a non-blocking send (only if the socket is free: trylock of send_mu
 * and nothing queued); whatever does not go at once - all of it, or the rest
 * of a partly sent job - is queued for a per-connection writer thread,
 * started on first need. Other threads send inline, unless jobs are queued:
 * then they queue behind them, so a partly sent frame is always finished
 * before any other byte goes on the socket. The writer leaves a job at the
 * head of the queue until it is sent, and pops it holding send_mu.
 *
 * Lock order: connect_mu -> send_mu -> mu.
 */
#ifndef KVS_TCP_INT_H
#define KVS_TCP_INT_H

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <uthash.h>

#include "transport.h"

#define TCP_RX_BUF (64 * 1024)
#define TCP_DIRECT_READ                                                                            \
    (16 * 1024)             /* larger remainders are read straight into the caller's buffer */
#define TCP_TICK_MS     100 /* reader wake-up period for timeout checks */
#define TCP_BACKOFF_MIN 20
#define TCP_BACKOFF_MAX 1000
#define TCP_ERRTEXT_MAX 256
#define KEY_PENDING     INT32_MIN /* a key's status while it is on the wire */

struct tcp_job;

/* One wire frame in flight: a contiguous range of a request's keys. */
struct tcp_frame {
    UT_hash_handle hh;
    uint64_t id;
    struct tcp_job *job;
    uint32_t first, end; /* keys[first..end) of the request */
    uint32_t nsent;      /* keys in that range actually sent (status KEY_PENDING) */
    uint64_t deadline_ms;
};

/* One submitted request; frames, iovecs and scratch follow in the same allocation. */
struct tcp_job {
    struct kvs_req *req;
    struct tcp_job *next_send; /* in the writer's queue */
    uint64_t gen;              /* the connection it was registered on */
    atomic_uint refs;          /* one per frame + one for the sender */
    atomic_int first_error;
    uint32_t nframes;
    struct tcp_frame *frames;
    struct iovec *iov;
    int niov;
    uint8_t *scratch;
    /*
     * SHM_PUT / SHM_GET jobs (tcp_shm.c): the region (a reference) and each
     * key's offset in its ring, or TCP_SHM_IN_PLACE for a key whose memory
     * is in a buffer region (nothing to copy when the reply comes).
     */
    struct tcp_shm *shm;
    uint64_t *shm_off;
    int pass_fd; /* a descriptor to go with the job's first byte (SHM_BUF), or -1 */
};

#define TCP_SHM_IN_PLACE UINT64_MAX

/* Memory of the caller's that kvstored may map (kvs_alloc_buffer): buffer region n is bufs[n - 1].
 */
struct tcp_buf {
    uint8_t *base; /* NULL: the number is free */
    uint64_t size;
    int fd; /* its memfd, the client's (client/buffer.c) */
};

/* The TCP transport's state for one server (the struct kvs_conn handle of transport.h). */
struct tcp_conn {
    struct kvs_endpoint ep;
    struct kvs_transport_config cfg;

    pthread_mutex_t connect_mu; /* one (re)connection attempt at a time */
    pthread_mutex_t send_mu;    /* one sender on the socket at a time */
    pthread_mutex_t mu;         /* everything below */
    pthread_cond_t cv;          /* the reader waits here for a connection */
    pthread_cond_t send_cv;     /* the writer waits here for work */

    bool up;
    bool stop;
    bool dropping; /* the next kill is the client's own disconnect, not a loss (tcp_disconnect) */
    int fd;        /* the current connection's socket, -1 once the reader closed it */
    int reader_fd; /* the socket the reader is using (may be an older one), or -1 */
    uint64_t gen;  /* bumped at every new connection */
    struct kvs_limits lim;
    struct tcp_shm *shm;     /* the current connection's shared region, or NULL */
    struct tcp_shm *shm_new; /* the region of the connection being opened (connect_mu) */
    struct tcp_buf bufs[KVS_WIRE_SHM_BUFFERS]; /* mapped on every connection with a ring (mu) */
    struct tcp_frame *pending;                 /* uthash by id */
    atomic_ullong next_id;
    int last_err;         /* of the last failed connection attempt */
    uint64_t retry_after; /* ms: no new attempt before, fail with last_err */
    unsigned backoff_ms;
    bool reader_started;
    pthread_t reader;
    /* Jobs submitted from a reader thread, sent by the writer thread. */
    struct tcp_job *sendq_head, *sendq_tail;
    bool writer_started;
    pthread_t writer;

    /* reader-only state */
    uint8_t *rx;
    size_t rx_pos, rx_len;
    struct tcp_frame *rx_frame; /* the frame whose reply the reader is reading */
    struct tcp_shm *rx_shm;     /* the region of the connection the reader reads (a reference) */
    uint64_t next_scan_ms;

    /* counters */
    atomic_ullong n_frames, n_send_calls, n_recv_calls, n_bytes_sent, n_bytes_recv;
    atomic_ullong n_connects, n_timeouts, n_conn_lost;
    atomic_ullong n_local_connects; /* connections made over the local socket */
    atomic_ullong n_shm_connects;   /* of those, with a shared region kvstored mapped */
    atomic_ullong n_shm_fallbacks;  /* PUT/GET requests sent in the stream: no room in the region */
    atomic_ullong n_shm_in_place;   /* keys whose value moved in a buffer region: no copy here */
    int local_logged;               /* auto: 1 local, 2 TCP was last said at info (connect_mu) */
};

/* A socket errno as the transport's code (-ECONNRESET, -ETIMEDOUT, -EIO ...): always < 0. */
static inline int tcp_sock_error(int err)
{
    switch (err) {
    case ENOENT: /* no local socket at the path: nobody listens */
        return -ECONNREFUSED;
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ETIMEDOUT:
    case EPROTO:
        return -err;
    case EPIPE:
    case ENOTCONN:
    case ECONNABORTED:
        return -ECONNRESET;
    case ENETUNREACH:
        return -EHOSTUNREACH;
    case EAGAIN:
        return -ETIMEDOUT;
    default:
        return -EIO;
    }
}

/* ---- tcp.c ---- */

/*
 * Brings the connection up if it is down; *gen gets the connection's
 * generation and *lim its limits. 0 or a negative code.
 */
int tcp_conn_up(struct tcp_conn *c, struct kvs_limits *lim, uint64_t *gen);

/* ---- tcp_handshake.c ---- */

/* Opens a connection and does HELLO (and AUTH); fills *lim. The fd or a negative code. */
int tcp_open_connection(struct tcp_conn *c, struct kvs_limits *lim);

/* ---- tcp_local.c: kvstored's same-host socket (common/local.h) ---- */

/* A sockaddr_un for path wrapped in an addrinfo, for connect_addr. */
struct tcp_local_addr {
    struct sockaddr_un un;
    struct addrinfo ai;
};
/* Fills *la for path; 0 or -ECONNREFUSED (a path that does not fit). */
int tcp_local_addr(const char *path, struct tcp_local_addr *la);
/* The server at the other end of fd is trusted (kvs_local_peer_trusted): 0 or -EACCES. */
int tcp_local_check_server(struct tcp_conn *c, int fd);
/*
 * KVSTORE_TRANSPORT=auto: 1 when one of res's addresses is this host's and
 * its default local socket (kvs_local_default_path of the port) exists, with
 * that path in path; else 0.
 */
int tcp_local_find(struct tcp_conn *c, const struct addrinfo *res, char *path, size_t len);
/* Says at info which way auto went (fd: open_local's result; < 0: TCP), once per change. */
void tcp_local_chosen(struct tcp_conn *c, const char *path, int fd);

/* ---- tcp_shm.c: values through shared memory (docs/shm.md) ---- */

struct tcp_shm;
/*
 * On a fresh local connection whose server announced KVS_FEAT_SHM: makes
 * a region of cfg.shm_size bytes and has kvstored map it (SHM_MAP). *out
 * gets it, or NULL (shm_size 0, no memory, kvstored refused: values go in
 * the stream). 0, or a negative code when the connection itself failed.
 */
int tcp_shm_attach(struct tcp_conn *c, int sock, uint64_t deadline, struct tcp_shm **out);
struct tcp_shm *tcp_shm_ref(struct tcp_shm *r); /* r may be NULL */
void tcp_shm_unref(struct tcp_shm *r);          /* the last one unmaps; r may be NULL */
uint8_t *tcp_shm_base(const struct tcp_shm *r);
/*
 * The job that sends a PUT or GET req through region r (NULL: none), as
 * tcp_job_new does through the stream; PUT values are copied into the
 * region here. 0 with *job NULL when it cannot (another opcode, no room):
 * then the stream job. 0 or -ENOMEM.
 */
int tcp_shm_job_new(struct tcp_conn *c, struct tcp_shm *r, struct kvs_req *req,
                    const struct kvs_limits *lim, struct tcp_job **job);
/* kvstored answered frame id (r: the reader's region, may be NULL): its job's room may go back. */
void tcp_shm_answered(struct tcp_shm *r, uint64_t id);
/*
 * On the fresh connection of region r (handshake, connect_mu held): has
 * kvstored map every buffer of c->bufs. A refusal leaves that buffer to
 * the ring (logged); 0, or a negative code when the connection failed.
 */
int tcp_shm_map_buffers(struct tcp_conn *c, int sock, uint64_t deadline, struct tcp_shm *r);
/*
 * The one-frame job of req (opcode SHM_BUF, no keys) that maps c->bufs
 * [region - 1] (map) or unmaps it. 0 or -ENOMEM.
 */
int tcp_shm_buf_job_new(struct tcp_conn *c, struct kvs_req *req, uint32_t region, bool map,
                        struct tcp_job **job);
/* Buffer region n is mapped (or no longer) on r's connection: keys in it go in place (or not). */
void tcp_shm_buf_mapped(struct tcp_shm *r, uint32_t region, const struct tcp_buf *b, bool mapped);

/* ---- tcp_send.c ---- */

/*
 * Sends req on connection gen, whose limits are lim; req->done runs exactly
 * once, here or later (every failure is reported per key).
 */
void tcp_send_req(struct tcp_conn *c, struct kvs_req *req, const struct kvs_limits *lim,
                  uint64_t gen);
/* Sends a job already built (tcp_send_req's second half); its req->done runs exactly once. */
void tcp_send_job(struct tcp_conn *c, struct tcp_job *job, uint64_t gen);

/* ---- tcp_recv.c ---- */

/* True on tcp reader threads (of any connection): they must never block in a send. */
extern __thread bool tcp_on_reader_thread;
/* The reader thread of connection arg (a struct tcp_conn). */
void *tcp_reader_main(void *arg);

/* ---- tcp_pending.c ---- */

/* With c->mu held: job's frames go into the pending table (and the frames_sent counter). */
void tcp_pending_add(struct tcp_conn *c, struct tcp_job *job);
/* Takes the frame with this id out of the pending table (NULL: expired or unknown). */
struct tcp_frame *tcp_pending_take(struct tcp_conn *c, uint64_t id);
/* Fails the frames whose deadline has passed; called by the reader. */
void tcp_pending_expire(struct tcp_conn *c, uint64_t now);
/*
 * Marks connection gen down (if it still is the current one) and fails every
 * frame still pending on it with status. Callbacks run without locks held.
 */
void tcp_conn_kill(struct tcp_conn *c, uint64_t gen, int status);
/* In a forked child: empties the table without touching the frames (the parent's). */
void tcp_pending_forget(struct tcp_conn *c);

/* ---- tcp_frames.c ---- */

/*
 * The job that sends req within lim: its frames (ids and deadlines set),
 * headers, entries and iovecs, built without any lock. Keys that no frame
 * can hold get -E2BIG. 0 with *job NULL when no key is left to send, or
 * -ENOMEM.
 */
int tcp_job_new(struct tcp_conn *c, struct kvs_req *req, const struct kvs_limits *lim,
                struct tcp_job **job);
/* Drops one reference to job; the last one completes its request. */
void tcp_job_put(struct tcp_job *job);
/* Ends a frame: keys still on the wire get status; drops the frame's job reference. */
void tcp_frame_finish(struct tcp_frame *f, int status);
/* Fails every key of req with status and completes it (nothing was sent). */
void tcp_fail_req(struct kvs_req *req, int status);

/* ---- tcp_io.c ---- */

/*
 * Sends *iov[0..*niov), advancing *iov and *niov past what went (the iovecs
 * are modified in place). 0 once all is sent, a negative code on error; with
 * MSG_DONTWAIT in flags, -EAGAIN when the socket buffer is full. A
 * descriptor in *pass_fd (>= 0; pass_fd may be NULL) goes with the first
 * byte sent (SCM_RIGHTS), and *pass_fd becomes -1 once it has.
 */
int tcp_send_iov(struct tcp_conn *c, int fd, struct iovec **iovp, int *niovp, int *pass_fd,
                 int flags);
/* Sends all of iov[0..niov) (modified in place); 0 or a negative code. */
int tcp_send_all(struct tcp_conn *c, int fd, struct iovec *iov, int niov);
/* Receives exactly n bytes before deadline (ms); the socket has a short SO_RCVTIMEO. */
int tcp_recv_exact(int fd, void *buf, size_t n, uint64_t deadline);

#endif /* KVS_TCP_INT_H */

/*
 * proto.c - request parsing and reply building for one connection, with no
 * socket in sight. See proto.h for the contract and docs/server.md for the
 * streaming rules.
 *
 * The reply to an entry-carrying request (PUT/GET/EXISTS/REMOVE) is built
 * while the request streams in: one "meta" buffer per frame holds the reply
 * header and the count fixed-size statuses, and a GET hit adds a segment
 * pointing into pool memory between two statuses. The header's body_len is
 * known only at the end, so the frame's segments become sendable
 * (committed) only when the whole request frame has been read.
 */
#include "proto.h"

#include "auth.h"
#include "clients_reply.h"
#include "ops.h"
#include "shm.h"
#include "stats_reply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

/* Below this much free tail, the read buffer is compacted before reading. */
#define RBUF_MIN_ROOM (KVS_WIRE_ENTRY_LEN + KVS_WIRE_MAX_KEY + KVS_WIRE_HDR_LEN)
/*
 * PUT values of at least this size are "big": while a connection sends them,
 * reads into the read buffer are capped at RBUF_BIG_PUT_READ bytes (a frame
 * header, an entry header and a typical key), so that a value's bytes are
 * received straight into its slot instead of into the read buffer and then
 * copied (the copy was 41 % of kvstored's CPU with 64 KiB puts). Small values
 * keep full-buffer reads: there one read serves many entries.
 */
#define BIG_PUT_VALUE     (16u * 1024)
#define RBUF_BIG_PUT_READ 256u
/*
 * Before AUTH (with a secret) a peer may send only HELLO and AUTH: its read
 * buffer is this small until it has authenticated, and the heap its queued
 * replies may hold is PREAUTH_HEAP instead of limits.out_heap_limit.
 */
#define PREAUTH_RBUF (2 * RBUF_MIN_ROOM)
#define PREAUTH_HEAP 4096u
/* A drained segment array larger than this is freed, not kept for the connection's life. */
#define SEGS_KEEP 64u

enum rstate {
    RS_HDR,     /* waiting for a frame header */
    RS_ENTRY,   /* waiting for an entry header and its key */
    RS_VALUE,   /* a PUT value: into its slot, or discarded */
    RS_SKIP,    /* the body of an unknown opcode */
    RS_AUTH,    /* waiting for an AUTH body */
    RS_ADMIT,   /* an entry frame's header is in; its reply waits for heap (frame_fits) */
    RS_SHM,     /* waiting for an SHM_MAP body */
    RS_SHM_BUF, /* waiting for an SHM_BUF body */
    RS_CLOSED,  /* a malformed frame was seen: no more input */
};

/* A piece of reply: bytes to send, and what to release once they are sent. */
struct out_seg {
    const uint8_t *ptr;
    uint32_t len;          /* a value (<= max_object) or part of one buffer: < 4 GiB */
    uint32_t cost;         /* heap_cost of owned, 0 without */
    struct kvsd_item *pin; /* unpinned when sent */
    void *owned;           /* freed when sent */
};

struct kvsd_proto_conn {
    struct kvsd_server *srv;

    uint8_t *rbuf;
    size_t rcap, rpos, rend; /* unparsed input is rbuf[rpos..rend) */
    enum rstate st;
    int recv_direct; /* the last kvsd_proto_recv_iov pointed into a PUT slot first */
    int big_puts;    /* the last PUT value was >= BIG_PUT_VALUE: cap buffered reads */

    /* The request frame being read. */
    struct kvs_wire_hdr hdr;
    uint64_t body_left;
    uint32_t entries_left;
    uint32_t index;

    /* The PUT value being read. */
    struct kvsd_item *put_item; /* NULL: the value is being skipped */
    uint64_t put_since_ms;      /* when put_item was reserved */
    uint8_t *put_dst;
    int32_t put_status;
    uint64_t value_left;
    uint64_t skip_left;

    /* The reply being built for the frame being read. */
    uint8_t *meta;
    size_t meta_cost; /* heap_cost of meta */
    uint64_t reply_body;

    /* Segments [seg_head, seg_committed) may be sent; the rest belong to the frame being read. */
    struct out_seg *segs;
    size_t seg_cap, seg_head, seg_committed, nsegs;
    size_t head_sent;   /* bytes of segs[seg_head] already sent */
    size_t out_pending; /* reply bytes queued, pool values included */
    size_t out_heap;    /* heap they hold: owned buffers, the meta being built, segs[] */
    int closing;

    /* Shared memory (docs/shm.md): only on a local connection (kvsd_proto_allow_shm). */
    int shm_allowed;
    int shm_fd;          /* the descriptor the peer passed last, not yet used by SHM_MAP/BUF; -1 */
    struct kvsd_shm shm; /* the ring SHM_MAP mapped (region 0); unmapped when the connection goes */
    struct kvsd_shm *bufs; /* buffer regions 1..KVS_WIRE_SHM_BUFFERS (SHM_BUF), from the first */
    uint64_t shm_mapped;   /* bytes of ring and buffers mapped: at most --shm-max */

    /* Authentication (only with srv->auth_secret). */
    int authed;
    int nonce_ready; /* nonce was sent in HELLO and no AUTH has used it yet */
    uint8_t nonce[KVS_WIRE_NONCE_LEN];

    /* What CLIENTS lists (kvsd_proto_info): plain fields, the loop's thread alone touches them. */
    uint64_t id;
    struct kvsd_peer peer;
    uint64_t made_ms, last_request_ms;
    uint64_t requests, keys_put, keys_get, bytes_in, bytes_out;
    struct kvsd_proto_conn *prev, *next; /* srv->conns */
};

/* ---- memory ---- */

/*
 * What the heap really spends on an allocation of len bytes: glibc's chunk
 * (8 bytes of header, 16-byte granules, 32 bytes at least). Budgets count
 * this, not payload: a 24-byte reply costs a 32-byte chunk and a 32-byte
 * segment, so counting payload let 4 MiB of "replies" hold 11 MiB.
 */
static size_t heap_cost(size_t len)
{
    size_t cost = (len + 8 + 15) & ~(size_t)15;
    return cost < 32 ? 32 : cost;
}

/* srv->conn_memory: heap of every connection, and its peak since net last trimmed. */
static void mem_add(struct kvsd_server *srv, size_t bytes)
{
    srv->conn_memory += bytes;
    if (srv->conn_memory > srv->conn_memory_peak) srv->conn_memory_peak = srv->conn_memory;
}

static void mem_sub(struct kvsd_server *srv, size_t bytes)
{
    srv->conn_memory -= bytes;
}

/* Output heap of c: counted against its budget and in srv->conn_memory. */
static void out_charge(struct kvsd_proto_conn *c, size_t cost)
{
    c->out_heap += cost;
    mem_add(c->srv, cost);
}

static void out_refund(struct kvsd_proto_conn *c, size_t cost)
{
    c->out_heap -= cost;
    mem_sub(c->srv, cost);
}

/* Read buffer size: small until the peer has authenticated (when there is a secret). */
static size_t rbuf_size(const struct kvsd_server *srv, int authed)
{
    if (srv->auth_secret && !authed) return PREAUTH_RBUF;
    return srv->limits.rbuf_size > 2 * RBUF_MIN_ROOM ? srv->limits.rbuf_size : 2 * RBUF_MIN_ROOM;
}

/* The full read buffer once the peer has authenticated; the small one still works if no memory. */
static void grow_rbuf(struct kvsd_proto_conn *c)
{
    size_t want = rbuf_size(c->srv, 1);
    if (want <= c->rcap) return;
    uint8_t *nb = realloc(c->rbuf, want);
    if (!nb) return;
    mem_sub(c->srv, heap_cost(c->rcap));
    mem_add(c->srv, heap_cost(want));
    c->rbuf = nb;
    c->rcap = want;
}

/* ---- connection life ---- */

struct kvsd_proto_conn *kvsd_proto_conn_new(struct kvsd_server *srv)
{
    struct kvsd_proto_conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->srv = srv;
    c->rcap = rbuf_size(srv, 0);
    c->rbuf = malloc(c->rcap);
    if (!c->rbuf) {
        free(c);
        return NULL;
    }
    mem_add(srv, heap_cost(sizeof(*c)) + heap_cost(c->rcap));
    c->st = RS_HDR;
    c->shm_fd = -1;
    c->id = ++srv->conns_made;
    c->peer = (struct kvsd_peer){.kind = KVSD_PEER_UNKNOWN, .addr = "unknown", .pid = -1};
    c->made_ms = kvs_now_ms();
    c->next = srv->conns;
    if (srv->conns) srv->conns->prev = c;
    srv->conns = c;
    return c;
}

void kvsd_proto_set_peer(struct kvsd_proto_conn *c, const struct kvsd_peer *p)
{
    c->peer = *p;
    c->peer.addr[sizeof(c->peer.addr) - 1] = '\0';
}

const struct kvsd_proto_conn *kvsd_proto_next(const struct kvsd_server *srv,
                                              const struct kvsd_proto_conn *c)
{
    return c ? c->next : srv->conns;
}

void kvsd_proto_info(const struct kvsd_proto_conn *c, uint64_t now_ms, struct kvsd_conn_info *out)
{
    static const char *const kinds[] = {"unknown", "tcp", "local", "rdma"};
    uint64_t last = c->last_request_ms > c->made_ms ? c->last_request_ms : c->made_ms;
    *out = (struct kvsd_conn_info){
        .id = c->id,
        .transport = c->peer.kind == KVSD_PEER_LOCAL && c->shm.base ? "shm" : kinds[c->peer.kind],
        .peer = &c->peer,
        .age_ms = now_ms > c->made_ms ? now_ms - c->made_ms : 0,
        .idle_ms = now_ms > last ? now_ms - last : 0,
        .requests = c->requests,
        .keys_put = c->keys_put,
        .keys_get = c->keys_get,
        .bytes_in = c->bytes_in,
        .bytes_out = c->bytes_out,
        .reply_queue = c->out_pending,
        .authenticated = kvsd_proto_authenticated(c),
    };
}

static void release_seg(struct kvsd_proto_conn *c, struct out_seg *s)
{
    if (s->pin) kvsd_ops_get_done(c->srv, s->pin);
    if (s->owned) out_refund(c, s->cost);
    free(s->owned);
    s->pin = NULL;
    s->owned = NULL;
    s->cost = 0;
}

/* The meta buffer of the frame being built: charged while it is held. */
static void free_meta(struct kvsd_proto_conn *c)
{
    if (!c->meta) return;
    out_refund(c, c->meta_cost);
    free(c->meta);
    c->meta = NULL;
    c->meta_cost = 0;
}

/* The segment array, once nothing is queued: a big one goes back to the heap. */
static void shrink_segs(struct kvsd_proto_conn *c)
{
    if (c->seg_cap <= SEGS_KEEP) return;
    out_refund(c, heap_cost(c->seg_cap * sizeof(*c->segs)));
    free(c->segs);
    c->segs = NULL;
    c->seg_cap = 0;
}

/* Forgets the reply of the frame being read (its segments are not committed). */
static void drop_frame(struct kvsd_proto_conn *c)
{
    for (size_t i = c->seg_committed; i < c->nsegs; i++)
        release_seg(c, &c->segs[i]);
    c->nsegs = c->seg_committed;
    free_meta(c);
    if (c->put_item) {
        kvsd_ops_put_abort(c->srv, c->put_item);
        c->put_item = NULL;
    }
}

void kvsd_proto_conn_free(struct kvsd_proto_conn *c)
{
    if (!c) return;
    drop_frame(c);
    for (size_t i = c->seg_head; i < c->seg_committed; i++)
        release_seg(c, &c->segs[i]);
    if (c->segs) out_refund(c, heap_cost(c->seg_cap * sizeof(*c->segs)));
    free(c->segs);
    free(c->rbuf);
    if (c->shm_fd >= 0) close(c->shm_fd);
    kvsd_shm_unmap(&c->shm);
    for (size_t i = 0; c->bufs && i < KVS_WIRE_SHM_BUFFERS; i++)
        kvsd_shm_unmap(&c->bufs[i]);
    if (c->bufs) mem_sub(c->srv, heap_cost(KVS_WIRE_SHM_BUFFERS * sizeof(*c->bufs)));
    free(c->bufs);
    mem_sub(c->srv, heap_cost(sizeof(*c)) + heap_cost(c->rcap));
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

void kvsd_proto_allow_shm(struct kvsd_proto_conn *c)
{
    c->shm_allowed = c->srv->limits.shm_max >= KVSD_SHM_MIN; /* --shm-max 0: none */
}

void kvsd_proto_take_fd(struct kvsd_proto_conn *c, int fd)
{
    /* One descriptor waits for its SHM_MAP or SHM_BUF; any other is closed at once. */
    if (!c->shm_allowed || c->shm_fd >= 0 || !kvsd_proto_authenticated(c)) {
        c->srv->counters.shm_refused++;
        close(fd);
        return;
    }
    c->shm_fd = fd;
}

/* ---- output ---- */

/*
 * The segment array capacity that holds extra more segments after the unsent
 * ones (seg_cap itself when it already does): at least 16, and half as much
 * again, so that pipelined small frames do not realloc each time.
 */
static size_t segs_cap_for(const struct kvsd_proto_conn *c, size_t extra)
{
    size_t need = c->nsegs - c->seg_head + extra;
    if (need <= c->seg_cap) return c->seg_cap;
    size_t grown = c->seg_cap < 16 ? 16 : c->seg_cap + c->seg_cap / 2;
    return need > grown ? need : grown;
}

/* Makes room for extra more segments at once, so a frame's reply never grows the array. */
static int reserve_segs(struct kvsd_proto_conn *c, size_t extra)
{
    size_t cap = segs_cap_for(c, extra);
    if (c->nsegs + extra <= c->seg_cap) return 0;
    if (c->seg_head > 0) { /* slide the unsent segments down first */
        memmove(c->segs, c->segs + c->seg_head, (c->nsegs - c->seg_head) * sizeof(*c->segs));
        c->nsegs -= c->seg_head;
        c->seg_committed -= c->seg_head;
        c->seg_head = 0;
        if (c->nsegs + extra <= c->seg_cap) return 0;
    }
    struct out_seg *ns = realloc(c->segs, cap * sizeof(*ns));
    if (!ns) return -ENOMEM;
    if (c->segs) out_refund(c, heap_cost(c->seg_cap * sizeof(*ns)));
    out_charge(c, heap_cost(cap * sizeof(*ns)));
    c->segs = ns;
    c->seg_cap = cap;
    return 0;
}

/*
 * Appends a segment to the frame being built, merging it with a contiguous
 * plain predecessor. owned (freed once sent) was charged cost.
 */
static int push_seg(struct kvsd_proto_conn *c, const uint8_t *ptr, size_t len,
                    struct kvsd_item *pin, void *owned, size_t cost)
{
    if (!pin && !owned && c->nsegs > c->seg_committed) {
        struct out_seg *last = &c->segs[c->nsegs - 1];
        if (!last->pin && !last->owned && last->ptr + last->len == ptr) {
            last->len += (uint32_t)len;
            return 0;
        }
    }
    if (c->nsegs == c->seg_cap && reserve_segs(c, 1) < 0) return -ENOMEM;
    c->segs[c->nsegs++] = (struct out_seg){
        .ptr = ptr, .len = (uint32_t)len, .cost = (uint32_t)cost, .pin = pin, .owned = owned};
    return 0;
}

/* Makes every segment pushed so far sendable. */
static void commit_segs(struct kvsd_proto_conn *c, size_t bytes)
{
    c->seg_committed = c->nsegs;
    c->out_pending += bytes;
}

/* Queues a whole reply frame held in buf (malloc'ed; freed once sent). */
static int queue_owned_frame(struct kvsd_proto_conn *c, uint8_t *buf, size_t len)
{
    size_t cost = heap_cost(len);
    out_charge(c, cost);
    if (push_seg(c, buf, len, NULL, buf, cost) < 0) {
        out_refund(c, cost);
        free(buf);
        return -ENOMEM;
    }
    commit_segs(c, len);
    return 0;
}

/* Builds a reply frame of opcode|REPLY with body[0..len) and queues it. */
static int queue_reply(struct kvsd_proto_conn *c, uint8_t opcode, uint64_t id, const void *body,
                       size_t len)
{
    uint8_t *buf = malloc(KVS_WIRE_HDR_LEN + len);
    if (!buf) return -ENOMEM;
    struct kvs_wire_hdr h = {
        .opcode = opcode | KVS_OP_REPLY, .count = 0, .body_len = (uint32_t)len, .id = id};
    kvs_wire_hdr_encode(buf, &h);
    if (len) memcpy(buf + KVS_WIRE_HDR_LEN, body, len);
    return queue_owned_frame(c, buf, KVS_WIRE_HDR_LEN + len);
}

/* Queues an ERROR frame: i32 status, then a short text. */
static int queue_error(struct kvsd_proto_conn *c, uint64_t id, int status, const char *text)
{
    uint8_t body[4 + 96];
    size_t tlen = strlen(text);
    if (tlen > sizeof(body) - 4) tlen = sizeof(body) - 4;
    kvs_put_u32(body, (uint32_t)status);
    memcpy(body + 4, text, tlen);
    return queue_reply(c, KVS_OP_ERROR, id, body, 4 + tlen);
}

/*
 * Ends the connection's input: the partial frame's reply is dropped, an
 * ERROR reply goes after the replies already queued, then the connection
 * closes.
 */
static void fail_conn(struct kvsd_proto_conn *c, uint64_t id, int status, const char *text)
{
    if (status == -ENOMEM)
        c->srv->counters.errors_nomem++;
    else if (status == -EACCES)
        c->srv->counters.auth_failures++;
    else
        c->srv->counters.errors_protocol++;
    drop_frame(c);
    queue_error(c, id, status, text); /* best effort: closing anyway */
    c->st = RS_CLOSED;
    c->closing = 1;
}

int kvsd_proto_out_iov(const struct kvsd_proto_conn *c, struct iovec *iov, int max)
{
    int n = 0;
    for (size_t i = c->seg_head; i < c->seg_committed && n < max; i++) {
        size_t skip = i == c->seg_head ? c->head_sent : 0;
        iov[n].iov_base = (void *)(c->segs[i].ptr + skip);
        iov[n].iov_len = c->segs[i].len - skip;
        n++;
    }
    return n;
}

void kvsd_proto_sent(struct kvsd_proto_conn *c, size_t n)
{
    c->srv->counters.bytes_out += n;
    c->bytes_out += n;
    c->out_pending -= n;
    while (n > 0 && c->seg_head < c->seg_committed) {
        struct out_seg *s = &c->segs[c->seg_head];
        size_t left = s->len - c->head_sent;
        if (n < left) {
            c->head_sent += n;
            return;
        }
        n -= left;
        release_seg(c, s);
        c->seg_head++;
        c->head_sent = 0;
    }
    /* Zero-length segments (a frame whose last piece is empty) release at once too. */
    while (c->seg_head < c->seg_committed && c->segs[c->seg_head].len == 0) {
        release_seg(c, &c->segs[c->seg_head]);
        c->seg_head++;
    }
    if (c->seg_head == c->nsegs) {
        c->seg_head = c->seg_committed = c->nsegs = 0;
        shrink_segs(c);
    }
}

size_t kvsd_proto_out_pending(const struct kvsd_proto_conn *c)
{
    return c->out_pending;
}

/*
 * Over the connection's output budget: more than out_limit reply bytes
 * queued, or more than out_heap_limit (PREAUTH_HEAP before AUTH) of heap
 * held by them. Input then waits, between frames, until replies drain; with
 * nothing queued there is nothing to wait for.
 */
static int over_budget(const struct kvsd_proto_conn *c)
{
    const struct kvsd_server_limits *l = &c->srv->limits;
    size_t heap_limit = kvsd_proto_authenticated(c) ? l->out_heap_limit : PREAUTH_HEAP;
    return c->out_pending > 0 && (c->out_pending > l->out_limit || c->out_heap > heap_limit);
}

static int frame_fits(const struct kvsd_proto_conn *c);

int kvsd_proto_want_input(const struct kvsd_proto_conn *c)
{
    if (c->closing) return 0;
    if (c->st == RS_ADMIT) return frame_fits(c);
    return !(c->st == RS_HDR && over_budget(c));
}

int kvsd_proto_mid_frame(const struct kvsd_proto_conn *c)
{
    /* Not yet authenticated counts too: --stall-timeout then cuts an idle stranger. */
    return c->st != RS_HDR || c->rend > c->rpos || !kvsd_proto_authenticated(c);
}

int kvsd_proto_closing(const struct kvsd_proto_conn *c)
{
    return c->closing;
}

uint64_t kvsd_proto_put_age_ms(const struct kvsd_proto_conn *c, uint64_t now_ms)
{
    if (!c->put_item) return 0;
    return now_ms > c->put_since_ms ? now_ms - c->put_since_ms : 0;
}

void kvsd_proto_expire_put(struct kvsd_proto_conn *c)
{
    if (c->put_item) {
        kvsd_ops_put_expire(c->srv, c->put_item);
        c->put_item = NULL;
        c->put_dst = NULL;
    }
    c->st = RS_CLOSED;
    c->closing = 1;
}

int kvsd_proto_authenticated(const struct kvsd_proto_conn *c)
{
    return !c->srv->auth_secret || c->authed;
}

/* ---- requests ---- */

/* Limits; with authentication on, also a fresh nonce that the next AUTH must answer. */
static void reply_hello(struct kvsd_proto_conn *c)
{
    uint8_t body[KVS_WIRE_HELLO_AUTH_LEN];
    size_t len = KVS_WIRE_HELLO_LEN;
    struct kvs_wire_hello h = {
        .version = KVS_WIRE_VERSION,
        .max_key = KVS_WIRE_MAX_KEY,
        .max_object = c->srv->limits.max_object,
        .max_frame = c->srv->limits.max_frame,
        .max_keys = KVSD_PROTO_MAX_KEYS,
        .features = c->srv->features | (c->shm_allowed ? KVS_FEAT_SHM : 0),
    };
    kvs_wire_hello_encode(body, &h);
    if (c->srv->auth_secret) {
        kvs_auth_nonce(c->nonce);
        c->nonce_ready = 1;
        memcpy(body + KVS_WIRE_HELLO_LEN, c->nonce, KVS_WIRE_NONCE_LEN);
        len = KVS_WIRE_HELLO_AUTH_LEN;
    }
    if (queue_reply(c, KVS_OP_HELLO, c->hdr.id, body, len) < 0)
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
}

static void reply_stats(struct kvsd_proto_conn *c)
{
    char *text = NULL;
    size_t len = 0;
    int rc = kvsd_stats_text(c->srv, &text, &len);
    if (rc == 0) rc = queue_reply(c, KVS_OP_STATS, c->hdr.id, text, len);
    free(text);
    if (rc < 0) fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
}

/*
 * The most body a CLIENTS reply of c may take: all KVS_WIRE_CLIENTS_MAX
 * lines, within the connection's reply heap (out_heap_limit) and, on an
 * RDMA connection, within one control message.
 */
static size_t clients_budget(const struct kvsd_proto_conn *c)
{
    size_t budget = (size_t)KVS_WIRE_CLIENTS_MAX * KVSD_CLIENTS_LINE_MAX + KVSD_CLIENTS_TRAILER_MAX;
    size_t heap = c->srv->limits.out_heap_limit;
    size_t room = heap > 2 * KVS_WIRE_HDR_LEN ? heap - 2 * KVS_WIRE_HDR_LEN : 0;
    if (budget > room) budget = room;
    if (c->peer.kind == KVSD_PEER_RDMA && budget > KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN)
        budget = KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN;
    return budget < KVSD_CLIENTS_TRAILER_MAX ? KVSD_CLIENTS_TRAILER_MAX : budget;
}

/* The connections, as many as the budget holds (clients_reply.c), admitted by frame_fits. */
static void reply_clients(struct kvsd_proto_conn *c)
{
    c->srv->counters.requests[KVS_OP_CLIENTS]++;
    c->st = RS_HDR;
    size_t budget = clients_budget(c);
    uint8_t *buf = malloc(KVS_WIRE_HDR_LEN + budget);
    if (!buf) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    size_t len = kvsd_clients_text(c->srv, kvs_now_ms(), (char *)buf + KVS_WIRE_HDR_LEN, budget);
    struct kvs_wire_hdr h = {
        .opcode = KVS_OP_CLIENTS | KVS_OP_REPLY, .body_len = (uint32_t)len, .id = c->hdr.id};
    kvs_wire_hdr_encode(buf, &h);
    uint8_t *fit = realloc(buf, KVS_WIRE_HDR_LEN + len);
    if (queue_owned_frame(c, fit ? fit : buf, KVS_WIRE_HDR_LEN + len) < 0)
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
}

/*
 * Segments the reply of the entry frame in c->hdr may need: its header, then
 * per key a status and, for a GET hit, the value (contiguous statuses merge,
 * so this is an upper bound).
 */
static size_t frame_segs(const struct kvsd_proto_conn *c)
{
    return 1 + (size_t)c->hdr.count * (c->hdr.opcode == KVS_OP_GET ? 2 : 1);
}

/*
 * The most heap the reply of the entry frame in c->hdr can add: its meta
 * buffer (header and statuses) and the growth of the segment array that
 * begin_frame reserves. Known from the header alone, before any key is read.
 */
static size_t frame_heap(const struct kvsd_proto_conn *c)
{
    size_t meta = c->hdr.opcode == KVS_OP_CLIENTS
                      ? heap_cost(KVS_WIRE_HDR_LEN + clients_budget(c))
                      : heap_cost(KVS_WIRE_HDR_LEN + (size_t)c->hdr.count * KVS_WIRE_STATUS_LEN);
    size_t cap = segs_cap_for(c, frame_segs(c));
    if (cap == c->seg_cap) return meta;
    size_t old = c->segs ? heap_cost(c->seg_cap * sizeof(*c->segs)) : 0;
    return meta + heap_cost(cap * sizeof(*c->segs)) - old;
}

/*
 * Whether the entry frame whose header is in may start its reply now: with
 * replies queued, only if its worst-case heap keeps the connection within
 * out_heap_limit; else it waits (RS_ADMIT) until they drain. With nothing
 * queued it always may: a frame of at most KVSD_PROTO_MAX_KEYS keys needs
 * at most about 0.6 MiB (16 + 8 * 8192 bytes of statuses, 16385 segments
 * of 32 bytes), within the default 1 MiB.
 */
static int frame_fits(const struct kvsd_proto_conn *c)
{
    return c->out_pending == 0 || c->out_heap + frame_heap(c) <= c->srv->limits.out_heap_limit;
}

/*
 * Starts the reply of an entry-carrying frame: header space, count
 * statuses, and every segment it may need, reserved now.
 */
static int begin_frame(struct kvsd_proto_conn *c)
{
    size_t meta_len = KVS_WIRE_HDR_LEN + (size_t)c->hdr.count * KVS_WIRE_STATUS_LEN;
    if (reserve_segs(c, frame_segs(c)) < 0) return -ENOMEM;
    c->meta = malloc(meta_len);
    if (!c->meta) return -ENOMEM;
    c->meta_cost = heap_cost(meta_len);
    out_charge(c, c->meta_cost);
    c->reply_body = (uint64_t)c->hdr.count * KVS_WIRE_STATUS_LEN;
    c->body_left = c->hdr.body_len;
    c->entries_left = c->hdr.count;
    c->index = 0;
    return push_seg(c, c->meta, KVS_WIRE_HDR_LEN, NULL, NULL, 0);
}

/* The whole request frame is in: fill in the reply header and let it go out. */
static void end_frame(struct kvsd_proto_conn *c)
{
    struct kvs_wire_hdr h = {.opcode = c->hdr.opcode | KVS_OP_REPLY,
                             .count = c->hdr.count,
                             .body_len = (uint32_t)c->reply_body,
                             .id = c->hdr.id};
    kvs_wire_hdr_encode(c->meta, &h);
    /* The last segment of the frame frees the meta buffer: all before it are sent by then. */
    c->segs[c->nsegs - 1].owned = c->meta;
    c->segs[c->nsegs - 1].cost = (uint32_t)c->meta_cost;
    c->meta = NULL;
    c->meta_cost = 0;
    commit_segs(c, KVS_WIRE_HDR_LEN + c->reply_body);
    c->st = RS_HDR;
}

/* Records entry index's status; a GET hit also queues its value. */
static int set_status(struct kvsd_proto_conn *c, int32_t status, uint32_t len,
                      struct kvsd_item *data)
{
    uint8_t *p = c->meta + KVS_WIRE_HDR_LEN + (size_t)c->index * KVS_WIRE_STATUS_LEN;
    kvs_wire_status_encode(p, status, len);
    if (push_seg(c, p, KVS_WIRE_STATUS_LEN, NULL, NULL, 0) < 0) return -ENOMEM;
    if (data) {
        if (push_seg(c, kvsd_item_data(c->srv->store, data), len, data, NULL, 0) < 0)
            return -ENOMEM;
        c->reply_body += len;
    }
    return 0;
}

/* Moves to the next entry, or ends the frame after the last one. */
static void next_entry(struct kvsd_proto_conn *c)
{
    c->index++;
    if (--c->entries_left > 0) {
        c->st = RS_ENTRY;
        return;
    }
    if (c->body_left != 0) {
        fail_conn(c, c->hdr.id, -EBADMSG, "entries do not fill the body");
        return;
    }
    end_frame(c);
}

static void do_get(struct kvsd_proto_conn *c, const uint8_t *key, uint16_t klen, uint32_t cap)
{
    struct kvsd_item *it = NULL;
    uint32_t len = 0;
    int32_t status = kvsd_ops_get(c->srv, key, klen, cap, &it, &len);
    if (status == 0 && c->reply_body + len > c->srv->limits.max_frame) {
        /* The reply would outgrow a frame: this key must be fetched on its own. */
        status = -EMSGSIZE;
        len = 0;
    }
    if (it && (status != 0 || len == 0)) {
        kvsd_ops_get_done(c->srv, it);
        it = NULL;
    }
    if (set_status(c, status, len, it) < 0) {
        if (it) kvsd_ops_get_done(c->srv, it);
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    next_entry(c);
}

/* A PUT entry's key is in: reserve its slot (or decide to skip its value). */
static void begin_put(struct kvsd_proto_conn *c, const uint8_t *key, uint16_t klen, uint32_t len)
{
    c->put_status = kvsd_ops_put_reserve(c->srv, key, klen, len, &c->put_item);
    c->put_dst = c->put_item ? kvsd_item_data(c->srv->store, c->put_item) : NULL;
    if (c->put_item) c->put_since_ms = kvs_now_ms();
    c->value_left = len;
    c->big_puts = len >= BIG_PUT_VALUE;
    c->st = RS_VALUE;
}

/* The PUT value is all in: publish it (the old value stays visible until now). */
static void end_put(struct kvsd_proto_conn *c)
{
    int32_t status = c->put_status;
    if (c->put_item) {
        status = kvsd_ops_put_commit(c->srv, c->put_item);
        c->put_item = NULL;
    }
    if (set_status(c, status, 0, NULL) < 0) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    next_entry(c);
}

static void do_simple(struct kvsd_proto_conn *c, const uint8_t *key, uint16_t klen)
{
    int32_t status;
    uint32_t removed = 0; /* REMOVE_MATCHING answers its count in the entry's length */
    if (c->hdr.opcode == KVS_OP_EXISTS)
        status = kvsd_ops_exists(c->srv, key, klen);
    else if (c->hdr.opcode == KVS_OP_REMOVE)
        status = kvsd_ops_remove(c->srv, key, klen);
    else
        status = kvsd_ops_remove_matching(c->srv, key, klen, &removed);
    if (set_status(c, status, removed, NULL) < 0) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    next_entry(c);
}

/*
 * An SHM_PUT entry: the value is copied out of the peer's region into a
 * newly reserved slot and published; an SHM_GET entry: the value (if it
 * fits the capacity) is copied into the region. Either copy is done before
 * the next byte of input is looked at, so no pin or slot outlives the entry
 * and the peer can go at any instant. A range outside the region fails that
 * key alone (-EINVAL, counted in shm_bad_ranges).
 */
static void do_shm(struct kvsd_proto_conn *c, const uint8_t *key, uint16_t klen, uint32_t len,
                   uint32_t region, uint64_t off)
{
    struct kvsd_server *srv = c->srv;
    /* The decoder bounds region to 0..KVS_WIRE_SHM_BUFFERS; an unmapped one fails the range. */
    static const struct kvsd_shm none;
    const struct kvsd_shm *r = region == 0 ? &c->shm : c->bufs ? &c->bufs[region - 1] : &none;
    int32_t status;
    uint32_t vlen = 0;
    if (!kvsd_shm_range_ok(r, off, len)) {
        srv->counters.shm_bad_ranges++;
        status = -EINVAL;
    } else if (c->hdr.opcode == KVS_OP_SHM_PUT) {
        struct kvsd_item *it = NULL;
        status = kvsd_ops_put_reserve(srv, key, klen, len, &it);
        if (it) {
            memcpy(kvsd_item_data(srv->store, it), r->base + off, len);
            status = kvsd_ops_put_commit(srv, it);
        }
    } else {
        struct kvsd_item *it = NULL;
        status = kvsd_ops_get(srv, key, klen, len, &it, &vlen);
        if (status == 0 && it && vlen > 0)
            memcpy(r->base + off, kvsd_item_data(srv->store, it), vlen);
        if (it) kvsd_ops_get_done(srv, it);
    }
    if (set_status(c, status, vlen, NULL) < 0) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    next_entry(c);
}

/* The reply to an SHM_MAP or SHM_BUF (rc 0: done; else refused for why), counted. */
static void answer_shm_map(struct kvsd_proto_conn *c, int rc, const char *why)
{
    struct kvsd_server *srv = c->srv;
    if (rc == 0) {
        srv->counters.shm_maps++;
        rc = queue_reply(c, c->hdr.opcode, c->hdr.id, NULL, 0);
    } else {
        srv->counters.shm_refused++;
        rc = queue_error(c, c->hdr.id, rc, why);
    }
    if (rc < 0) fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
}

/*
 * An SHM_MAP body (the region's size) with the descriptor that came with
 * it: checked and mapped (shm.c). A refusal is an ERROR reply and the
 * connection goes on (its values then travel in the byte stream).
 */
static void on_shm_map(struct kvsd_proto_conn *c, const uint8_t *body)
{
    struct kvsd_server *srv = c->srv;
    int fd = c->shm_fd;
    c->shm_fd = -1;
    c->st = RS_HDR;
    const char *why = "no descriptor came with it";
    int rc = -EINVAL;
    if (c->shm.base) {
        why = "a region is mapped already";
        rc = -EBUSY;
    } else if (fd >= 0) {
        rc = kvsd_shm_map(fd, kvs_wire_shm_map_decode(body), srv->limits.shm_max - c->shm_mapped,
                          &c->shm, &why);
    }
    if (fd >= 0) close(fd); /* the mapping keeps the memory */
    if (rc == 0) c->shm_mapped += c->shm.size;
    answer_shm_map(c, rc, why);
}

/*
 * An SHM_BUF body: buffer region n mapped from the descriptor that came
 * with it (checked as the ring is, within what --shm-max leaves), or, with
 * size 0 and no descriptor, unmapped. Refusals as SHM_MAP's; the entries
 * that name an unmapped region fail alone (do_shm).
 */
static void on_shm_buf(struct kvsd_proto_conn *c, const uint8_t *body)
{
    struct kvsd_server *srv = c->srv;
    int fd = c->shm_fd;
    c->shm_fd = -1;
    c->st = RS_HDR;
    uint32_t region;
    uint64_t size;
    const char *why = "no descriptor came with it";
    int rc = -EINVAL;
    if (kvs_wire_shm_buf_decode(body, &region, &size) < 0) {
        if (fd >= 0) close(fd);
        fail_conn(c, c->hdr.id, -EBADMSG, "bad buffer region number");
        return;
    }
    if (c->shm.base && !c->bufs && (c->bufs = calloc(KVS_WIRE_SHM_BUFFERS, sizeof(*c->bufs))))
        mem_add(srv, heap_cost(KVS_WIRE_SHM_BUFFERS * sizeof(*c->bufs)));
    struct kvsd_shm *r = c->bufs ? &c->bufs[region - 1] : NULL;
    if (!c->shm.base) {
        why = "no ring is mapped";
        rc = -ENOTSUP;
    } else if (!r) {
        why = "out of memory";
        rc = -ENOMEM;
    } else if (size == 0 && fd < 0) {
        c->shm_mapped -= r->size;
        kvsd_shm_unmap(r);
        rc = 0;
    } else if (r->base) {
        why = "that region number is mapped already";
        rc = -EBUSY;
    } else if (fd >= 0 && size > srv->limits.shm_max - c->shm_mapped) {
        why = "the connection's shared regions would pass --shm-max";
    } else if (fd >= 0) {
        rc = kvsd_shm_map(fd, size, srv->limits.shm_max - c->shm_mapped, r, &why);
        if (rc == 0) c->shm_mapped += r->size;
    }
    if (fd >= 0) close(fd);
    answer_shm_map(c, rc, why);
}

/*
 * An AUTH body (KVS_WIRE_AUTH_LEN bytes at body): checks the client's MAC
 * against the nonce of this connection's last HELLO, in constant time. The
 * nonce answers one AUTH only, so a replayed frame meets a nonce it was not
 * made for. Right: the server's own proof goes back; wrong: -EACCES, closed.
 */
static void on_auth(struct kvsd_proto_conn *c, const uint8_t *body)
{
    const struct kvsd_server *srv = c->srv;
    uint8_t client_nonce[KVS_WIRE_NONCE_LEN], mac[KVS_WIRE_MAC_LEN], want[KVS_WIRE_MAC_LEN];
    c->st = RS_HDR;
    int ok =
        c->nonce_ready && kvs_wire_auth_decode(body, KVS_WIRE_AUTH_LEN, client_nonce, mac) == 0;
    c->nonce_ready = 0;
    if (ok) {
        kvs_auth_client_mac(srv->auth_secret, srv->auth_secret_len, c->nonce, client_nonce, want);
        ok = kvs_auth_mac_equal(mac, want);
    }
    if (!ok) {
        fail_conn(c, c->hdr.id, -EACCES, "authentication failed");
        return;
    }
    c->authed = 1;
    c->srv->counters.auth_ok++;
    grow_rbuf(c); /* body (in the read buffer) is not read after this */
    kvs_auth_server_mac(srv->auth_secret, srv->auth_secret_len, client_nonce, c->nonce, want);
    if (queue_reply(c, KVS_OP_AUTH, c->hdr.id, want, sizeof(want)) < 0)
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
}

/*
 * Answers the frame whose header is in hand with -ENOTSUP and skips its body,
 * so the stream stays in step and the connection goes on.
 */
static void refuse_and_skip(struct kvsd_proto_conn *c, const char *why)
{
    c->srv->counters.errors_unsupported++;
    if (queue_error(c, c->hdr.id, -ENOTSUP, why) < 0) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    c->skip_left = c->hdr.body_len;
    c->st = RS_SKIP;
}

/*
 * Decodes the frame header at p and says whether its frame may be served
 * (1). A bad header, a reply sent as a request or a request before AUTH
 * ends the connection; an unknown opcode is refused and its body skipped
 * (0 for both: nothing more to do with this header).
 */
static int admit_header(struct kvsd_proto_conn *c, const uint8_t *p)
{
    int rc = kvs_wire_hdr_decode(p, &c->hdr, c->srv->limits.max_frame);
    if (rc == -ENOTSUP && !kvsd_proto_authenticated(c)) {
        fail_conn(c, c->hdr.id, -EACCES, "not authenticated: HELLO, then AUTH");
        return 0;
    }
    if (rc == -ENOTSUP) {
        refuse_and_skip(c, "unknown opcode");
        return 0;
    }
    if (rc == -EPROTO) {
        fail_conn(c, 0, rc, "bad magic or version");
        return 0;
    }
    if (rc < 0) {
        fail_conn(c, c->hdr.id, rc, rc == -EMSGSIZE ? "frame too large" : "malformed header");
        return 0;
    }
    if (c->hdr.opcode & KVS_OP_REPLY) {
        fail_conn(c, c->hdr.id, -EBADMSG, "a reply sent as a request");
        return 0;
    }
    if (c->hdr.count > KVSD_PROTO_MAX_KEYS) {
        /* HELLO's max_keys: a frame of more could not be answered within the reply budget. */
        fail_conn(c, c->hdr.id, -EMSGSIZE, "more keys than HELLO's max_keys");
        return 0;
    }
    if (!kvsd_proto_authenticated(c) && c->hdr.opcode != KVS_OP_HELLO &&
        c->hdr.opcode != KVS_OP_AUTH) {
        fail_conn(c, c->hdr.id, -EACCES, "not authenticated: HELLO, then AUTH");
        return 0;
    }
    return 1;
}

/* A PUT/GET/EXISTS/REMOVE header: counts the frame, starts its reply, reads its entries next. */
static void begin_entries(struct kvsd_proto_conn *c)
{
    c->srv->counters.requests[c->hdr.opcode]++;
    /* requests_put / requests_get count every PUT and GET, whichever way its values travel. */
    if (c->hdr.opcode == KVS_OP_SHM_PUT) c->srv->counters.requests[KVS_OP_PUT]++;
    if (c->hdr.opcode == KVS_OP_SHM_GET) c->srv->counters.requests[KVS_OP_GET]++;
    if (c->hdr.opcode == KVS_OP_PUT || c->hdr.opcode == KVS_OP_SHM_PUT)
        c->keys_put += c->hdr.count;
    else if (c->hdr.opcode == KVS_OP_GET || c->hdr.opcode == KVS_OP_SHM_GET)
        c->keys_get += c->hdr.count;
    /* GET, EXISTS and REMOVE entries carry no value: a buffer per read again. */
    if (c->hdr.opcode != KVS_OP_PUT) c->big_puts = 0;
    if (begin_frame(c) < 0) {
        fail_conn(c, c->hdr.id, -ENOMEM, "out of memory");
        return;
    }
    if (c->hdr.count == 0) {
        if (c->hdr.body_len != 0) {
            fail_conn(c, c->hdr.id, -EBADMSG, "body without entries");
            return;
        }
        end_frame(c);
        return;
    }
    c->st = RS_ENTRY;
}

/* Parses a frame header at p (KVS_WIRE_HDR_LEN bytes, already consumed) and starts its frame. */
static void on_header(struct kvsd_proto_conn *c, const uint8_t *p)
{
    if (!admit_header(c, p)) return;
    c->requests++;
    c->last_request_ms = c->srv->loop_ms;
    if (c->hdr.opcode == KVS_OP_AUTH && c->srv->auth_secret) {
        c->st = RS_AUTH; /* its body may not be buffered yet */
        return;
    }
    switch (c->hdr.opcode) {
    case KVS_OP_SHM_MAP:
        if (!c->shm_allowed) break;
        c->srv->counters.requests[KVS_OP_SHM_MAP]++;
        c->st = RS_SHM;
        return;
    case KVS_OP_SHM_BUF:
        if (!c->shm_allowed) break;
        c->srv->counters.requests[KVS_OP_SHM_BUF]++;
        c->st = RS_SHM_BUF;
        return;
    case KVS_OP_SHM_PUT:
    case KVS_OP_SHM_GET:
        if (!c->shm.base) break;
        c->st = RS_ADMIT; /* begin_entries once its reply fits (frame_fits) */
        return;
    case KVS_OP_HELLO:
        c->srv->counters.requests[KVS_OP_HELLO]++;
        reply_hello(c);
        return;
    case KVS_OP_STATS:
        c->srv->counters.requests[KVS_OP_STATS]++;
        reply_stats(c);
        return;
    case KVS_OP_PUT:
    case KVS_OP_GET:
    case KVS_OP_EXISTS:
    case KVS_OP_REMOVE:
    case KVS_OP_REMOVE_MATCHING:
    case KVS_OP_CLIENTS:
        /* begin_entries (CLIENTS: reply_clients) once its reply fits (frame_fits) */
        c->st = RS_ADMIT;
        return;
    default:
        break;
    }
    /* Known to the codec but not served here (RDMA control; SHM without a local socket/region). */
    refuse_and_skip(c, "opcode not served here");
}

/*
 * Where the frame's next entry is buffered already, its key's index slot is
 * fetched while this entry is served: a frame of many keys then waits for
 * one cache miss at a time less (the index is larger than the caches once
 * there are many keys). Only a hint: the entry is parsed and checked when
 * its turn comes.
 */
static void prefetch_next_entry(const struct kvsd_proto_conn *c)
{
    uint8_t op = c->hdr.opcode;
    /* frames whose entries follow one another (a PUT's value comes between them) */
    if (op != KVS_OP_GET && op != KVS_OP_EXISTS && op != KVS_OP_SHM_GET && op != KVS_OP_SHM_PUT)
        return;
    size_t avail = c->rend - c->rpos;
    struct kvs_wire_entry e;
    if (c->body_left < KVS_WIRE_ENTRY_LEN || avail < KVS_WIRE_ENTRY_LEN ||
        kvs_wire_entry_decode(c->rbuf + c->rpos, &e) < 0 || avail - KVS_WIRE_ENTRY_LEN < e.klen)
        return;
    kvsd_store_prefetch(c->srv->store, c->rbuf + c->rpos + KVS_WIRE_ENTRY_LEN, e.klen);
}

/*
 * Parses one entry header + key if they are all buffered. Returns 1 if it
 * made progress, 0 if it needs more input.
 */
static int on_entry(struct kvsd_proto_conn *c)
{
    if (c->body_left < KVS_WIRE_ENTRY_LEN) {
        fail_conn(c, c->hdr.id, -EBADMSG, "count larger than the body");
        return 1;
    }
    size_t avail = c->rend - c->rpos;
    if (avail < KVS_WIRE_ENTRY_LEN) return 0;
    const uint8_t *p = c->rbuf + c->rpos;
    struct kvs_wire_entry e;
    if (kvs_wire_entry_decode(p, &e) < 0) {
        fail_conn(c, c->hdr.id, -EBADMSG, "bad entry");
        return 1;
    }
    if (kvs_wire_entry_size(c->hdr.opcode, &e) > c->body_left) {
        fail_conn(c, c->hdr.id, -EBADMSG, "entry past the end of the body");
        return 1;
    }
    if (!kvs_wire_opcode_sized(c->hdr.opcode) && e.len != 0) {
        fail_conn(c, c->hdr.id, -EBADMSG, "length on a key-only entry");
        return 1;
    }
    int shm = c->hdr.opcode == KVS_OP_SHM_PUT || c->hdr.opcode == KVS_OP_SHM_GET;
    size_t need = KVS_WIRE_ENTRY_LEN + (size_t)e.klen + (shm ? KVS_WIRE_SHM_OFF_LEN : 0);
    if (avail < need) return 0;

    const uint8_t *key = p + KVS_WIRE_ENTRY_LEN;
    c->rpos += need;
    c->body_left -= need;
    prefetch_next_entry(c);
    if (shm) {
        uint64_t off;
        uint32_t region;
        if (kvs_wire_shm_off_decode(key + e.klen, &region, &off) < 0) {
            fail_conn(c, c->hdr.id, -EBADMSG, "bad shared-memory entry");
            return 1;
        }
        do_shm(c, key, e.klen, e.len, region, off);
        return 1;
    }
    switch (c->hdr.opcode) {
    case KVS_OP_PUT:
        begin_put(c, key, e.klen, e.len);
        break;
    case KVS_OP_GET:
        do_get(c, key, e.klen, e.len);
        break;
    default:
        do_simple(c, key, e.klen);
        break;
    }
    return 1;
}

/*
 * Moves the buffered bytes of the PUT value being read into its slot (or
 * past them, for a refused value) and commits it once it is all in.
 * Returns 1 if the value is done, 0 if it needs more input.
 */
static int on_value(struct kvsd_proto_conn *c)
{
    size_t avail = c->rend - c->rpos;
    size_t n = avail < c->value_left ? avail : (size_t)c->value_left;
    if (n > 0) {
        if (c->put_dst) {
            memcpy(c->put_dst, c->rbuf + c->rpos, n);
            c->put_dst += n;
        }
        c->rpos += n;
        c->value_left -= n;
        c->body_left -= n;
    }
    if (c->value_left > 0) return 0;
    end_put(c);
    return 1;
}

/* Drops the buffered bytes of a skipped body. Returns 1 once it is all gone, 0 if it needs more. */
static int on_skip(struct kvsd_proto_conn *c)
{
    size_t avail = c->rend - c->rpos;
    size_t n = avail < c->skip_left ? avail : (size_t)c->skip_left;
    c->rpos += n;
    c->skip_left -= n;
    if (c->skip_left > 0) return 0;
    c->st = RS_HDR;
    return 1;
}

void kvsd_proto_process(struct kvsd_proto_conn *c)
{
    for (;;) {
        size_t avail = c->rend - c->rpos;
        switch (c->st) {
        case RS_HDR:
            if (over_budget(c)) return; /* back-pressure */
            if (avail < KVS_WIRE_HDR_LEN) return;
            c->rpos += KVS_WIRE_HDR_LEN;
            on_header(c, c->rbuf + c->rpos - KVS_WIRE_HDR_LEN);
            break;
        case RS_ENTRY:
            if (!on_entry(c)) return;
            break;
        case RS_VALUE:
            if (!on_value(c)) return;
            break;
        case RS_SKIP:
            if (!on_skip(c)) return;
            break;
        case RS_ADMIT:
            if (!frame_fits(c)) return; /* back-pressure: replies must drain first */
            if (c->hdr.opcode == KVS_OP_CLIENTS)
                reply_clients(c);
            else
                begin_entries(c);
            break;
        case RS_AUTH:
            if (avail < KVS_WIRE_AUTH_LEN) return;
            c->rpos += KVS_WIRE_AUTH_LEN;
            on_auth(c, c->rbuf + c->rpos - KVS_WIRE_AUTH_LEN);
            break;
        case RS_SHM:
            if (avail < KVS_WIRE_SHM_MAP_LEN) return;
            c->rpos += KVS_WIRE_SHM_MAP_LEN;
            on_shm_map(c, c->rbuf + c->rpos - KVS_WIRE_SHM_MAP_LEN);
            break;
        case RS_SHM_BUF:
            if (avail < KVS_WIRE_SHM_BUF_LEN) return;
            c->rpos += KVS_WIRE_SHM_BUF_LEN;
            on_shm_buf(c, c->rbuf + c->rpos - KVS_WIRE_SHM_BUF_LEN);
            break;
        case RS_CLOSED:
            c->rpos = c->rend;
            return;
        }
    }
}

int kvsd_proto_recv_iov(struct kvsd_proto_conn *c, struct iovec iov[2])
{
    c->recv_direct = 0;
    if (!kvsd_proto_want_input(c)) return 0;

    int n = 0;
    size_t avail = c->rend - c->rpos;
    if (c->st == RS_VALUE && c->put_dst && avail == 0) {
        /* The rest of the value straight into its slot, whatever follows into the buffer. */
        iov[n].iov_base = c->put_dst;
        iov[n].iov_len = c->value_left;
        n++;
        c->recv_direct = 1;
    }
    if (avail == 0) {
        c->rpos = c->rend = 0;
    } else if (c->rcap - c->rend < RBUF_MIN_ROOM && c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, avail);
        c->rpos = 0;
        c->rend = avail;
    }
    iov[n].iov_base = c->rbuf + c->rend;
    iov[n].iov_len = c->rcap - c->rend;
    /* Capped only where headers and a value with a slot come next; skipped bytes read whole. */
    int slot_ahead = c->st == RS_HDR || c->st == RS_ENTRY || (c->st == RS_VALUE && c->put_dst);
    if (c->big_puts && slot_ahead && iov[n].iov_len > RBUF_BIG_PUT_READ)
        iov[n].iov_len = RBUF_BIG_PUT_READ;
    return n + 1;
}

void kvsd_proto_received(struct kvsd_proto_conn *c, size_t n)
{
    c->srv->counters.bytes_in += n;
    c->bytes_in += n;
    if (c->recv_direct) {
        c->recv_direct = 0;
        size_t k = n < c->value_left ? n : (size_t)c->value_left;
        c->put_dst += k;
        c->value_left -= k;
        c->body_left -= k;
        n -= k;
    }
    c->rend += n;
    kvsd_proto_process(c);
}

size_t kvsd_proto_feed(struct kvsd_proto_conn *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        struct iovec iov[2];
        int cnt = kvsd_proto_recv_iov(c, iov);
        if (cnt == 0) break;
        size_t n = 0;
        for (int i = 0; i < cnt && done + n < len; i++) {
            size_t k = len - done - n < iov[i].iov_len ? len - done - n : iov[i].iov_len;
            memcpy(iov[i].iov_base, p + done + n, k);
            n += k;
        }
        kvsd_proto_received(c, n);
        done += n;
    }
    return done;
}

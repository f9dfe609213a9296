/*
 * tcp_shm.c - values through a region shared with kvstored, on a connection
 * over its local socket (docs/shm.md). The frames stay the wire protocol on
 * the socket; only the values move through the region:
 *
 *   - at connection time (tcp_shm_attach, after HELLO and AUTH), when the
 *     server announces KVS_FEAT_SHM: a memfd of KVSTORE_SHM_SIZE bytes is
 *     created, sealed (no shrinking, no growing, no more seals), mapped, and
 *     passed to kvstored with SHM_MAP (SCM_RIGHTS); kvstored checks and maps
 *     it. Refused: the connection goes on with values in the stream.
 *   - a PUT or GET request becomes one job of SHM_PUT / SHM_GET frames
 *     (tcp_shm_job_new): its values' room is taken from the region in one
 *     piece, PUT values are copied in before the frames go, each entry names
 *     its value's offset. kvstored copies PUT values out into its pool and
 *     GET values in; the reader copies GET values out to the caller's
 *     buffers when the reply comes (tcp_recv.c).
 *   - the room goes back when every frame of the job has been answered
 *     (tcp_shm_answered, called by the reader for each reply, even for a
 *     frame that timed out: kvstored may still be copying until it answers),
 *     or with the whole region when its connection is gone.
 *
 * A request whose values do not fit the free room goes in the stream
 * (tcp_job_new) as before, so the region bounds memory, never correctness.
 *
 * Buffer regions (kvs_alloc_buffer): memfd memory of the caller's that
 * kvstored maps too (SHM_BUF, at connection time for those allocated
 * before, in the stream for those allocated after). A key whose whole value
 * or capacity lies in a mapped buffer region names its place there: no room
 * in the ring, no copy on this side; kvstored's copy is the only one.
 *
 * The region is a ring: jobs take room at its head, in any order of threads,
 * and give it back in any order; the tail advances over room given back in
 * order of taking. A job's room is one contiguous run, each value aligned.
 */
#include "tcp_int.h"

#include "memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define SHM_VALUE_ALIGN    64u        /* each value starts on a cache line */
#define SHM_MAX_RUNS       4096u      /* jobs holding room at once; more go in the stream */
#define SHM_EARLY_WRAP_MIN (1u << 20) /* the head goes back to the start no sooner (ring_take) */

/* Room taken by one job: frames [first_id, first_id + nframes). */
struct shm_run {
    uint64_t first_id;
    uint32_t nframes, answered;
    uint64_t off, len;
};

/* A mapped buffer region, as a job's view holds it. */
struct shm_buf {
    uintptr_t base;
    uint64_t size;
};

/* The mapped buffer regions, read once per job (shm_view_take), so its measure and fill agree. */
struct shm_view {
    uint64_t mask; /* bit n - 1: region n, b[n - 1] */
    struct shm_buf b[KVS_WIRE_SHM_BUFFERS];
};

struct tcp_shm {
    atomic_uint refs; /* the connection's, and one per job and reader using it */
    uint8_t *base;
    uint64_t size;
    /*
     * Bit n - 1: buffer region n is mapped, at buf_base/buf_size[n - 1]. A
     * slot is rewritten (a freed number given to a new buffer) while a job
     * that read the mask before the free may be reading it, so the table is
     * a seqlock: buf_seq is odd while a slot is written (by one writer at a
     * time: connect_mu, or a handshake's region no job sees yet).
     */
    atomic_ullong buf_mask;
    atomic_uint buf_seq;
    _Atomic uintptr_t buf_base[KVS_WIRE_SHM_BUFFERS];
    atomic_ullong buf_size[KVS_WIRE_SHM_BUFFERS];
    pthread_mutex_t mu;                /* the ring below */
    uint64_t head;                     /* where the next run starts (0 when none is held) */
    uint64_t held;                     /* bytes of the runs held */
    uint64_t held_peak;                /* the most held lately (decays by 1/1024 a take) */
    struct shm_run runs[SHM_MAX_RUNS]; /* circular, in order of taking */
    uint32_t first, nruns;
};

static void shm_free(struct tcp_shm *r)
{
    munmap(r->base, r->size);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

struct tcp_shm *tcp_shm_ref(struct tcp_shm *r)
{
    if (r) atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void tcp_shm_unref(struct tcp_shm *r)
{
    if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) shm_free(r);
}

/* A new region of size bytes (kvs_memfd_map); *memfd gets its descriptor. 0 or a negative errno. */
static int shm_create(uint64_t size, int *memfd, struct tcp_shm **out)
{
    struct tcp_shm *r = calloc(1, sizeof(*r));
    if (!r) return -ENOMEM;
    void *p;
    int rc = kvs_memfd_map("kvstore-shm", size, memfd, &p);
    if (rc < 0) {
        free(r);
        return rc;
    }
    /* A forked child must not write into its parent's region (tcp_fork_child forgets it). */
    (void)madvise(p, size, MADV_DONTFORK);
    r->base = p;
    r->size = size;
    r->held_peak = size / 4; /* until runs show what they hold (ring_take) */
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return 0;
}

/*
 * On a connection nobody else uses yet: sends the map frame out[0..len)
 * with fd, and reads kvstored's answer. 0 when it mapped the region, 1 when
 * it refused (its reason logged with what), or a negative code when the
 * connection failed.
 */
static int map_sync(struct tcp_conn *c, int sock, uint64_t deadline, uint8_t *out, size_t len,
                    int fd, uint8_t opcode, const char *what)
{
    struct iovec iov = {.iov_base = out, .iov_len = len}, *iovp = &iov;
    int niov = 1, pass = fd; /* the caller's descriptor stays the caller's to close */
    int rc = tcp_send_iov(c, sock, &iovp, &niov, &pass, 0);
    uint8_t in[KVS_WIRE_HDR_LEN], body[256] = {0};
    struct kvs_wire_hdr h = {0};
    if (rc == 0) rc = tcp_recv_exact(sock, in, sizeof(in), deadline);
    if (rc == 0 && kvs_wire_hdr_decode(in, &h, sizeof(body)) < 0) rc = -EPROTO;
    if (rc == 0) rc = tcp_recv_exact(sock, body, h.body_len, deadline);
    if (rc < 0) return rc;
    if (h.opcode == (opcode | KVS_OP_REPLY) && h.body_len == 0) return 0;
    if (h.opcode != (KVS_OP_ERROR | KVS_OP_REPLY)) return -EPROTO;
    int32_t st;
    const char *text;
    size_t tlen;
    if (kvs_wire_error_decode(body, h.body_len, &st, &text, &tlen) < 0) return -EPROTO;
    kvs_log(KVS_LOG_WARN, "tcp %s: kvstored refused %s: %.*s; its values go through %s", c->ep.name,
            what, (int)tlen, text, opcode == KVS_OP_SHM_MAP ? "the socket" : "the ring");
    return 1;
}

int tcp_shm_attach(struct tcp_conn *c, int sock, uint64_t deadline, struct tcp_shm **out)
{
    *out = NULL;
    if (c->cfg.shm_size == 0) return 0;
    int memfd = -1;
    struct tcp_shm *r;
    int err = shm_create(c->cfg.shm_size, &memfd, &r);
    if (err < 0) {
        kvs_log(KVS_LOG_WARN,
                "tcp %s: cannot make a shared region of %llu bytes (%s); values go "
                "through the socket",
                c->ep.name, (unsigned long long)c->cfg.shm_size, strerror(-err));
        return 0;
    }
    uint8_t frame[KVS_WIRE_SHM_MAP_FRAME_LEN];
    kvs_wire_shm_map_encode(frame, 0, r->size);
    int rc = map_sync(c, sock, deadline, frame, sizeof(frame), memfd, KVS_OP_SHM_MAP,
                      "the shared region");
    close(memfd); /* kvstored has its own descriptor now; our mapping keeps the memory */
    if (rc == 0) {
        *out = r;
        return 0;
    }
    tcp_shm_unref(r);
    return rc < 0 ? rc : 0;
}

int tcp_shm_map_buffers(struct tcp_conn *c, int sock, uint64_t deadline, struct tcp_shm *r)
{
    for (uint32_t n = 1; r && n <= KVS_WIRE_SHM_BUFFERS; n++) {
        /* A copy, and a descriptor of our own: a reader thread may unshare it meanwhile. */
        pthread_mutex_lock(&c->mu);
        struct tcp_buf b = c->bufs[n - 1];
        if (b.base) b.fd = fcntl(b.fd, F_DUPFD_CLOEXEC, 0);
        pthread_mutex_unlock(&c->mu);
        if (!b.base || b.fd < 0) continue;
        uint8_t frame[KVS_WIRE_SHM_BUF_FRAME_LEN];
        kvs_wire_shm_buf_encode(frame, 0, n, b.size);
        int rc = map_sync(c, sock, deadline, frame, sizeof(frame), b.fd, KVS_OP_SHM_BUF,
                          "a buffer region");
        close(b.fd);
        if (rc < 0) return rc;
        if (rc == 0) tcp_shm_buf_mapped(r, n, &b, true);
    }
    return 0;
}

void tcp_shm_buf_mapped(struct tcp_shm *r, uint32_t region, const struct tcp_buf *b, bool mapped)
{
    uint64_t bit = 1ull << (region - 1);
    if (mapped) {
        unsigned seq = atomic_load_explicit(&r->buf_seq, memory_order_relaxed);
        /* Release stores, acquire loads (shm_view_take): a reader that sees one of these sees
         * the odd count before it (no fences: TSan does not model them). */
        atomic_store_explicit(&r->buf_seq, seq + 1, memory_order_relaxed);
        atomic_store_explicit(&r->buf_base[region - 1], (uintptr_t)b->base, memory_order_release);
        atomic_store_explicit(&r->buf_size[region - 1], b->size, memory_order_release);
        atomic_store_explicit(&r->buf_seq, seq + 2, memory_order_release);
        atomic_fetch_or_explicit(&r->buf_mask, bit, memory_order_release);
    } else {
        atomic_fetch_and_explicit(&r->buf_mask, ~bit, memory_order_release);
    }
}

/* v gets the mapped regions and their slots, read whole (retried while a slot is rewritten). */
static void shm_view_take(struct tcp_shm *r, struct shm_view *v)
{
    for (;;) {
        unsigned seq = atomic_load_explicit(&r->buf_seq, memory_order_acquire);
        v->mask = atomic_load_explicit(&r->buf_mask, memory_order_acquire);
        if (v->mask == 0) return; /* nothing to read: no slot can tear */
        if (seq & 1) {
            sched_yield(); /* a writer is between its two stores */
            continue;
        }
        for (uint64_t m = v->mask; m; m &= m - 1) {
            uint32_t i = (uint32_t)__builtin_ctzll(m);
            v->b[i].base = atomic_load_explicit(&r->buf_base[i], memory_order_acquire);
            v->b[i].size = atomic_load_explicit(&r->buf_size[i], memory_order_acquire);
        }
        if (atomic_load_explicit(&r->buf_seq, memory_order_relaxed) == seq) return;
    }
}

/*
 * The buffer region of view v that holds [p, p + len) whole, and p's
 * offset in it; false if none does.
 */
static bool buf_find(const struct shm_view *v, const void *p, uint64_t len, uint32_t *region,
                     uint64_t *off)
{
    uintptr_t at = (uintptr_t)p;
    for (uint64_t mask = v->mask; mask; mask &= mask - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(mask);
        uintptr_t base = v->b[i].base;
        uint64_t size = v->b[i].size;
        if (at >= base && at - base <= size && len <= size - (at - base)) {
            *region = i + 1;
            *off = at - base;
            return true;
        }
    }
    return false;
}

int tcp_shm_buf_job_new(struct tcp_conn *c, struct kvs_req *req, uint32_t region, bool map,
                        struct tcp_job **out)
{
    struct tcp_job *job = calloc(1, sizeof(*job) + sizeof(struct tcp_frame) + sizeof(struct iovec) +
                                        KVS_WIRE_SHM_BUF_FRAME_LEN);
    *out = job;
    if (!job) return -ENOMEM;
    const struct tcp_buf *b = &c->bufs[region - 1];
    job->req = req;
    job->nframes = 1;
    job->frames = (struct tcp_frame *)(job + 1);
    job->iov = (struct iovec *)(job->frames + 1);
    job->scratch = (uint8_t *)(job->iov + 1);
    job->pass_fd = map ? b->fd : -1;
    atomic_init(&job->refs, 2);
    atomic_init(&job->first_error, 0);
    struct tcp_frame *f = job->frames;
    f->id = atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed) + 1;
    f->job = job;
    f->deadline_ms = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms;
    kvs_wire_shm_buf_encode(job->scratch, f->id, region, map ? b->size : 0);
    job->iov[0] = (struct iovec){job->scratch, KVS_WIRE_SHM_BUF_FRAME_LEN};
    job->niov = 1;
    return 0;
}

uint8_t *tcp_shm_base(const struct tcp_shm *r)
{
    return r->base;
}

/* With r->mu held: the offset of len free bytes, taking them; -1 if there is no such run. */
static int64_t ring_take(struct tcp_shm *r, uint64_t len)
{
    if (r->nruns == SHM_MAX_RUNS) return -1;
    uint64_t tail = r->nruns ? r->runs[r->first].off : 0;
    if (r->nruns == 0) r->head = 0;
    uint64_t off;
    if (r->nruns == 0 || r->head > tail) {
        /*
         * Held: [tail, head). Free: [head, size), then [0, tail). Room at the
         * start that holds this job and twice the most held lately is taken
         * before the rest of the way to the end: the runs then cycle through
         * about three times the bytes in flight, which stay in the CPUs'
         * caches for both copies of a value, not through the whole region,
         * and a burst as big as the last ones still finds room.
         */
        bool early = r->nruns > 0 && r->head >= SHM_EARLY_WRAP_MIN && tail >= len &&
                     tail - len >= 2 * r->held_peak;
        if (!early && r->size - r->head >= len)
            off = r->head;
        else if (tail >= len && r->nruns > 0)
            off = 0;
        else
            return -1;
    } else if (r->head < tail) {
        /* Held: [tail, size) and [0, head). Free: [head, tail). */
        if (tail - r->head < len) return -1;
        off = r->head;
    } else {
        return -1; /* head == tail with runs held: full */
    }
    r->head = off + len;
    r->held += len;
    r->held_peak -= r->held_peak >> 10;
    if (r->held > r->held_peak) r->held_peak = r->held;
    return (int64_t)off;
}

/* Takes room for a job; 0 or -ENOSPC. */
static int shm_take(struct tcp_shm *r, uint64_t len, uint64_t first_id, uint32_t nframes,
                    uint64_t *off)
{
    pthread_mutex_lock(&r->mu);
    int64_t at = ring_take(r, len);
    if (at >= 0) {
        uint32_t slot = (r->first + r->nruns) % SHM_MAX_RUNS;
        r->runs[slot] = (struct shm_run){
            .first_id = first_id, .nframes = nframes, .off = (uint64_t)at, .len = len};
        r->nruns++;
        *off = (uint64_t)at;
    }
    pthread_mutex_unlock(&r->mu);
    return at >= 0 ? 0 : -ENOSPC;
}

void tcp_shm_answered(struct tcp_shm *r, uint64_t id)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < r->nruns; i++) {
        struct shm_run *run = &r->runs[(r->first + i) % SHM_MAX_RUNS];
        if (id >= run->first_id && id - run->first_id < run->nframes) {
            run->answered++;
            break;
        }
    }
    /* Room given back in order of taking moves the tail. */
    while (r->nruns > 0 && r->runs[r->first].answered == r->runs[r->first].nframes) {
        r->held -= r->runs[r->first].len;
        r->first = (r->first + 1) % SHM_MAX_RUNS;
        r->nruns--;
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- jobs ---- */

static uint64_t align_up(uint64_t n)
{
    return (n + SHM_VALUE_ALIGN - 1) / SHM_VALUE_ALIGN * SHM_VALUE_ALIGN;
}

/* A key's room in the region: its value (PUT) or its capacity, at most max_object (GET). */
static uint64_t key_room(const struct kvs_req *req, const struct kvs_key_io *k,
                         const struct kvs_limits *lim)
{
    if (req->opcode == KVS_OP_PUT) return k->len;
    return k->len < lim->max_object ? k->len : lim->max_object;
}

/* True when another key of rq request bytes does not fit a frame holding body bytes, count keys. */
static bool shm_frame_full(uint64_t body, uint32_t count, uint64_t rq, const struct kvs_limits *lim)
{
    return count == lim->max_keys || body + rq > lim->max_frame ||
           (uint64_t)(count + 1) * KVS_WIRE_STATUS_LEN > lim->max_frame;
}

/* Ends frame f (NULL: none begun yet) at key end: its header at hdr. */
static void frame_close(struct tcp_frame *f, uint8_t *hdr, uint8_t opcode, uint32_t count,
                        uint64_t body, uint32_t end)
{
    if (!f) return;
    f->end = end;
    f->nsent = count;
    struct kvs_wire_hdr h = {
        .opcode = opcode, .count = count, .body_len = (uint32_t)body, .id = f->id};
    kvs_wire_hdr_encode(hdr, &h);
}

/* What a request needs as SHM frames: how many, their header and entry bytes, its run's size. */
struct shm_plan {
    uint32_t nframes;
    size_t scratch;
    uint64_t room;
    uint64_t in_place; /* keys in a buffer region */
};

/* Where key k's value or capacity (len bytes) already lies in a buffer region, if it does. */
static bool key_in_place(const struct shm_view *v, const struct kvs_req *req,
                         const struct kvs_key_io *k, uint64_t len, uint32_t *region, uint64_t *off)
{
    if (v->mask == 0 || len == 0 || k->iovcnt != 0) return false;
    const void *p = req->opcode == KVS_OP_PUT ? k->val : k->buf;
    return buf_find(v, p, len, region, off);
}

static void shm_measure(const struct shm_view *v, const struct kvs_req *req,
                        const struct kvs_limits *lim, struct shm_plan *pl)
{
    uint32_t count = 0;
    uint64_t body = 0;
    *pl = (struct shm_plan){0};
    for (uint32_t i = 0; i < req->n; i++) {
        const struct kvs_key_io *k = &req->keys[i];
        uint64_t rq = KVS_WIRE_ENTRY_LEN + k->klen + KVS_WIRE_SHM_OFF_LEN;
        if (pl->nframes == 0 || shm_frame_full(body, count, rq, lim)) {
            pl->nframes++;
            pl->scratch += KVS_WIRE_HDR_LEN;
            body = 0;
            count = 0;
        }
        body += rq;
        count++;
        pl->scratch += rq;
        uint32_t region;
        uint64_t off, len = key_room(req, k, lim);
        if (key_in_place(v, req, k, len, &region, &off))
            pl->in_place++;
        else
            pl->room += align_up(len);
    }
}

/*
 * Writes the job's frames (header, then an entry per key naming its offset
 * in the run at base) into its scratch, and each PUT value into the region,
 * in key order; the same cuts as shm_measure.
 */
static void shm_fill(struct tcp_job *job, struct tcp_shm *r, const struct shm_view *v,
                     const struct kvs_limits *lim, uint64_t first_id, uint64_t deadline,
                     uint64_t base)
{
    struct kvs_req *req = job->req;
    uint8_t opcode = req->opcode == KVS_OP_PUT ? KVS_OP_SHM_PUT : KVS_OP_SHM_GET;
    uint8_t *p = job->scratch, *hdr = NULL;
    struct tcp_frame *f = NULL;
    uint64_t at = base, body = 0;
    uint32_t count = 0;
    for (uint32_t i = 0; i < req->n; i++) {
        struct kvs_key_io *k = &req->keys[i];
        uint64_t rq = KVS_WIRE_ENTRY_LEN + k->klen + KVS_WIRE_SHM_OFF_LEN;
        if (!f || shm_frame_full(body, count, rq, lim)) {
            frame_close(f, hdr, opcode, count, body, i);
            f = f ? f + 1 : job->frames;
            f->id = first_id + (uint64_t)(f - job->frames);
            f->job = job;
            f->deadline_ms = deadline;
            f->first = i;
            hdr = p;
            p += KVS_WIRE_HDR_LEN;
            body = 0;
            count = 0;
        }
        uint64_t len = key_room(req, k, lim), off;
        uint32_t region;
        k->status = KEY_PENDING;
        if (key_in_place(v, req, k, len, &region, &off)) {
            job->shm_off[i] = TCP_SHM_IN_PLACE;
        } else {
            region = 0;
            off = at;
            job->shm_off[i] = at;
            if (req->opcode == KVS_OP_PUT && len > 0) kvs_key_gather(k, r->base + at);
            at += align_up(len);
        }
        kvs_wire_entry_encode(p, (uint16_t)k->klen, (uint32_t)len);
        memcpy(p + KVS_WIRE_ENTRY_LEN, k->key, k->klen);
        kvs_wire_shm_off_encode(p + KVS_WIRE_ENTRY_LEN + k->klen, region, off);
        p += rq;
        body += rq;
        count++;
    }
    frame_close(f, hdr, opcode, count, body, req->n);
    job->iov[0] = (struct iovec){job->scratch, (size_t)(p - job->scratch)};
    job->niov = 1;
}

int tcp_shm_job_new(struct tcp_conn *c, struct tcp_shm *r, struct kvs_req *req,
                    const struct kvs_limits *lim, struct tcp_job **out)
{
    *out = NULL;
    if (!r || (req->opcode != KVS_OP_PUT && req->opcode != KVS_OP_GET) || req->n == 0) return 0;
    struct shm_plan pl;
    struct shm_view v;
    shm_view_take(r, &v);
    shm_measure(&v, req, lim, &pl);
    if (pl.room > r->size / 2) { /* a request this large would starve the others */
        atomic_fetch_add_explicit(&c->n_shm_fallbacks, 1, memory_order_relaxed);
        return 0;
    }

    size_t size = sizeof(struct tcp_job) + pl.nframes * sizeof(struct tcp_frame) +
                  sizeof(struct iovec) + req->n * sizeof(uint64_t) + pl.scratch;
    struct tcp_job *job = calloc(1, size);
    if (!job) return -ENOMEM;
    uint64_t first_id =
        atomic_fetch_add_explicit(&c->next_id, pl.nframes, memory_order_relaxed) + 1;
    /* A job whose every key is in place takes no room (a run of 0 bytes would look like a full
     * ring). */
    uint64_t base = 0;
    if (pl.room > 0 && shm_take(r, pl.room, first_id, pl.nframes, &base) < 0) {
        free(job);
        atomic_fetch_add_explicit(&c->n_shm_fallbacks, 1, memory_order_relaxed);
        return 0;
    }
    job->req = req;
    job->pass_fd = -1;
    job->nframes = pl.nframes;
    job->frames = (struct tcp_frame *)(job + 1);
    job->iov = (struct iovec *)(job->frames + pl.nframes);
    job->shm_off = (uint64_t *)(job->iov + 1);
    job->scratch = (uint8_t *)(job->shm_off + req->n);
    job->shm = tcp_shm_ref(r);
    atomic_init(&job->refs, pl.nframes + 1);
    atomic_init(&job->first_error, 0);
    shm_fill(job, r, &v, lim, first_id, kvs_now_ms() + (uint64_t)c->cfg.timeout_ms, base);
    if (pl.in_place)
        atomic_fetch_add_explicit(&c->n_shm_in_place, pl.in_place, memory_order_relaxed);
    *out = job;
    return 0;
}

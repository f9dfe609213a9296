/*
 * tcp_frames.c - a request as wire frames. tcp_job_new cuts a request into
 * as few frames as the server's limits allow (both a frame's body and the
 * largest possible reply to it must fit max_frame, and at most max_keys
 * keys), in two passes over the keys: plan_count sizes the job, plan_fill
 * writes its frames, headers, entries and iovecs. The iovecs point at the
 * caller's values (each segment of a scatter-gather value its own);
 * headers, entries and keys go to the job's scratch, so a PUT of n values
 * (segments) is at most 2n+1 iovecs and a GET one.
 *
 * A job holds one reference per frame plus one for its sender; the last
 * one dropped completes the request.
 */
#include "tcp_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Drops one reference to job; the last one completes its request. */
void tcp_job_put(struct tcp_job *job)
{
    if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) != 1) return;
    struct kvs_req *req = job->req;
    if (!kvs_wire_opcode_text(req->opcode)) req->status = atomic_load(&job->first_error);
    tcp_shm_unref(job->shm);
    free(job);
    req->done(req);
}

/* Ends a frame: keys still on the wire get status; drops the frame's job reference. */
void tcp_frame_finish(struct tcp_frame *f, int status)
{
    struct kvs_req *req = f->job->req;
    if (status < 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&f->job->first_error, &expected, status);
        if (kvs_wire_opcode_text(req->opcode)) req->status = status;
    }
    for (uint32_t i = f->first; i < f->end; i++)
        if (req->keys[i].status == KEY_PENDING) req->keys[i].status = status;
    tcp_job_put(f->job);
}

/* Fails every key of req with status and completes it (nothing was sent). */
void tcp_fail_req(struct kvs_req *req, int status)
{
    for (uint32_t i = 0; i < req->n; i++)
        req->keys[i].status = status;
    req->status = status;
    req->done(req);
}

/* Wire size of key i in a request frame and (an upper bound of) in its reply. */
static void entry_sizes(const struct kvs_req *req, const struct kvs_key_io *k,
                        const struct kvs_limits *lim, uint64_t *rq, uint64_t *rp)
{
    *rq = KVS_WIRE_ENTRY_LEN + k->klen;
    *rp = KVS_WIRE_STATUS_LEN;
    if (req->opcode == KVS_OP_PUT) *rq += k->len;
    if (req->opcode == KVS_OP_GET) *rp += k->len < lim->max_object ? k->len : lim->max_object;
}

/* What a frame holds so far. */
struct frame_acc {
    uint64_t body, reply; /* request body bytes, reply bytes (an upper bound) */
    uint32_t count;       /* keys */
};

/* True when a key of wire sizes rq / rp does not fit the frame acc describes. */
static bool frame_full(const struct frame_acc *acc, const struct kvs_limits *lim, uint64_t rq,
                       uint64_t rp)
{
    return acc->count == lim->max_keys || acc->body + rq > lim->max_frame ||
           acc->reply + rp > lim->max_frame;
}

static void frame_add(struct frame_acc *acc, uint64_t rq, uint64_t rp)
{
    acc->body += rq;
    acc->reply += rp;
    acc->count++;
}

/* What a job needs room for. */
struct job_size {
    uint32_t nframes;
    int niov; /* an upper bound: one per value segment, one scratch run before each and at the end
               */
    size_t scratch; /* frame headers, entries and keys */
};

/*
 * First pass: marks the keys to send KEY_PENDING and those no frame can hold
 * -E2BIG, and sizes the job that sends them.
 */
static void plan_count(struct kvs_req *req, const struct kvs_limits *lim, struct job_size *sz)
{
    struct frame_acc acc = {0};
    uint32_t values = 0;
    *sz = (struct job_size){0};
    for (uint32_t i = 0; i < req->n; i++) {
        struct kvs_key_io *k = &req->keys[i];
        uint64_t rq, rp;
        entry_sizes(req, k, lim, &rq, &rp);
        if (rq > lim->max_frame || rp > lim->max_frame) {
            k->status = -E2BIG;
            continue;
        }
        k->status = KEY_PENDING;
        if (sz->nframes == 0 || frame_full(&acc, lim, rq, rp)) {
            sz->nframes++;
            sz->scratch += KVS_WIRE_HDR_LEN;
            acc = (struct frame_acc){0};
        }
        frame_add(&acc, rq, rp);
        sz->scratch += KVS_WIRE_ENTRY_LEN + k->klen;
        if (req->opcode == KVS_OP_PUT && k->len > 0) values += k->iovcnt ? k->iovcnt : 1;
    }
    if (req->n == 0) { /* STATS, CLIENTS: one empty frame */
        sz->nframes = 1;
        sz->scratch = KVS_WIRE_HDR_LEN;
    }
    sz->niov = (int)(2 * values + 1);
}

/* Writes a job's scratch and iovecs in order; consecutive scratch bytes share one iovec. */
struct job_writer {
    struct tcp_job *job;
    size_t used; /* scratch bytes written */
    bool open;   /* the last iovec is scratch and may grow */
};

/* The next len bytes of scratch, on the wire after what was written before. */
static uint8_t *scratch_take(struct job_writer *w, size_t len)
{
    struct tcp_job *job = w->job;
    uint8_t *p = job->scratch + w->used;
    if (!w->open) job->iov[job->niov++] = (struct iovec){p, 0};
    job->iov[job->niov - 1].iov_len += len;
    w->open = true;
    w->used += len;
    return p;
}

/* A key's entry (and a PUT's value, by reference) in the frame being written. */
static void write_entry(struct job_writer *w, const struct kvs_req *req, const struct kvs_key_io *k)
{
    bool sized = req->opcode == KVS_OP_PUT || req->opcode == KVS_OP_GET;
    uint32_t len = !sized ? 0 : k->len > UINT32_MAX ? UINT32_MAX : (uint32_t)k->len;
    uint8_t *e = scratch_take(w, KVS_WIRE_ENTRY_LEN + k->klen);
    kvs_wire_entry_encode(e, (uint16_t)k->klen, len);
    memcpy(e + KVS_WIRE_ENTRY_LEN, k->key, k->klen);
    if (req->opcode != KVS_OP_PUT || k->len == 0) return;
    struct tcp_job *job = w->job;
    if (k->iovcnt == 0) {
        job->iov[job->niov++] = (struct iovec){(void *)k->val, k->len};
    } else { /* scatter-gather: each segment is sent where it lies */
        for (uint32_t j = 0; j < k->iovcnt; j++)
            if (k->iov[j].iov_len > 0) job->iov[job->niov++] = k->iov[j];
    }
    w->open = false;
}

/* Ends frame f at key end: its header (at hdr) says what acc holds. */
static void frame_close(struct tcp_frame *f, uint8_t *hdr, const struct kvs_req *req,
                        const struct frame_acc *acc, uint32_t end)
{
    f->end = end;
    f->nsent = acc->count;
    struct kvs_wire_hdr h = {
        .opcode = req->opcode, .count = acc->count, .body_len = (uint32_t)acc->body, .id = f->id};
    kvs_wire_hdr_encode(hdr, &h);
}

/*
 * Second pass, over the keys plan_count marked KEY_PENDING: the same cuts
 * into frames, now written: each frame's key range and header, the entries
 * and keys in scratch, the iovecs.
 */
static void plan_fill(struct kvs_req *req, const struct kvs_limits *lim, struct tcp_job *job)
{
    struct job_writer w = {.job = job};
    struct frame_acc acc = {0};
    struct tcp_frame *f = NULL;
    uint8_t *hdr = NULL;
    job->niov = 0;
    for (uint32_t i = 0; i < req->n; i++) {
        struct kvs_key_io *k = &req->keys[i];
        if (k->status != KEY_PENDING) continue;
        uint64_t rq, rp;
        entry_sizes(req, k, lim, &rq, &rp);
        if (!f || frame_full(&acc, lim, rq, rp)) {
            if (f) frame_close(f, hdr, req, &acc, i);
            f = f ? f + 1 : job->frames;
            f->first = i;
            hdr = scratch_take(&w, KVS_WIRE_HDR_LEN);
            acc = (struct frame_acc){0};
        }
        frame_add(&acc, rq, rp);
        write_entry(&w, req, k);
    }
    if (!f) { /* STATS, CLIENTS: one empty frame */
        f = job->frames;
        f->first = 0;
        hdr = scratch_take(&w, KVS_WIRE_HDR_LEN);
    }
    frame_close(f, hdr, req, &acc, req->n);
}

int tcp_job_new(struct tcp_conn *c, struct kvs_req *req, const struct kvs_limits *lim,
                struct tcp_job **out)
{
    *out = NULL;
    struct job_size sz;
    plan_count(req, lim, &sz);
    if (sz.nframes == 0) return 0;
    size_t size = sizeof(struct tcp_job) + sz.nframes * sizeof(struct tcp_frame) +
                  (size_t)sz.niov * sizeof(struct iovec) + sz.scratch;
    struct tcp_job *job = calloc(1, size);
    if (!job) return -ENOMEM;
    job->pass_fd = -1;
    job->req = req;
    job->nframes = sz.nframes;
    job->frames = (struct tcp_frame *)(job + 1);
    job->iov = (struct iovec *)(job->frames + sz.nframes);
    job->scratch = (uint8_t *)(job->iov + sz.niov);
    atomic_init(&job->refs, sz.nframes + 1);
    atomic_init(&job->first_error, 0);
    uint64_t deadline = kvs_now_ms() + (uint64_t)c->cfg.timeout_ms;
    uint64_t first_id =
        atomic_fetch_add_explicit(&c->next_id, sz.nframes, memory_order_relaxed) + 1;
    for (uint32_t i = 0; i < sz.nframes; i++) {
        job->frames[i].id = first_id + i;
        job->frames[i].job = job;
        job->frames[i].deadline_ms = deadline;
    }
    plan_fill(req, lim, job);
    *out = job;
    return 0;
}

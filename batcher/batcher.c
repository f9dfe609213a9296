/*
 * batcher.c - queues, flush policy and completion of the window batcher.
 *
 * One mutex per batcher guards the forming ("open") batch of each op kind,
 * the FIFO of sealed batches waiting for an in-flight slot, the in-flight
 * list and the pending-put table. Batches are sent without a thread hop
 * whenever possible: by the calling thread whose op makes a batch due, by a
 * synchronous caller a completion wakes anyway (the "leader"), or by the
 * synchronous caller that opened a batch when its window ends. The flusher
 * thread (condvar, no spinning) is the fallback: async/write-behind ops and
 * batches nobody else will send. Callers sleep on their batch's futex word,
 * so a completion wakes all of them with one system call. Nothing spins.
 */
#include "batcher.h"

#include "clock.h"
#include "controller.h"
#include "futex.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

enum { OP_PENDING = 0, OP_DONE = 1 };

enum {
    OPF_ASYNC = 1,     /* freed by kvb_wait */
    OPF_WRITEBACK = 2, /* owns a key+value copy, nobody waits: freed on completion */
    OPF_TRACKED = 4,   /* counted in the pending table (a put, or an async get) */
    OPF_TIMER = 8,     /* opened its batch: its caller is the batch's window timer */
};

struct pending_key;
struct batch;

struct kvb_op {
    _Atomic int state;
    uint8_t kind;
    uint8_t flags;
    unsigned group; /* a put's (kvb_put_group): puts of two groups never share a batch */
    const char *key;
    const void *val; /* put */
    void *buf;       /* get */
    size_t len;      /* put: value length; get: capacity */
    ssize_t result;
    uint64_t t_enq;
    uint64_t t_done;        /* when its batch's completion began (done_cb) */
    uint64_t window_end;    /* OPF_TIMER: when the window of the batch it opened ends */
    struct pending_key *pk; /* OPF_TRACKED */
    struct kvb_batcher *b;
    struct batch *bt; /* the batch it is in; its callers sleep on bt->wake_word */
    bool leader;      /* set by a completion (not in flags: the caller reads those) */
};

/*
 * Ops of one key whose caller has moved on (async and write-behind puts,
 * async gets), not yet completed: later ops of the key are ordered behind
 * them - a get or exists behind the puts, a put behind the puts and gets.
 */
struct pending_key {
    UT_hash_handle hh;
    char *key;         /* in the same block */
    uint32_t puts;     /* tracked puts not yet completed */
    uint32_t gets;     /* tracked gets not yet completed */
    uint64_t last_seq; /* batch holding the newest of the puts */
    uint64_t get_seq;  /* batch holding the newest of the gets */
    struct kvb_op *wb; /* newest write-behind put (its copy serves gets), or NULL */
};

struct batch {
    struct batch *next, *prev; /* ready FIFO, in-flight list or free list */
    struct kvb_batcher *b;
    int kind;
    int reason;
    unsigned group; /* of its puts */
    uint32_t n;
    uint64_t bytes;
    uint64_t t_first;
    uint64_t window_end; /* t_first + the window in effect when it opened */
    uint64_t seq;
    struct kvb_op **ops;
    const char **keys;
    void **ptrs;   /* vals (put) or bufs (get) */
    size_t *lens;  /* lens (put) or caps (get) */
    int *ist;      /* put status, exists results */
    ssize_t *sres; /* get results */
    /*
     * Callers of this batch sleep on this futex word; its completion bumps it
     * and wakes them all with ONE system call (not one per op: fewer
     * syscalls, and the completing thread is not preempted N times by the
     * callers it wakes). Batches are recycled, never freed while the batcher
     * lives, so a late sleeper reads valid memory (and sees a new value).
     */
    _Atomic int wake_word;
    /*
     * The synchronous caller that opened the batch sleeps only until the
     * window ends and then seals it itself, so the flusher thread is not
     * woken to arm a timer for every batch. Cleared when that caller could
     * not send (no slot): a completion then takes over.
     */
    bool timer_owner;
};

struct kvb_batcher {
    pthread_mutex_t lock;
    pthread_cond_t flusher_cv; /* the flusher sleeps here */
    pthread_cond_t state_cv;   /* rare waits: flush, write-behind space, key order */
    struct kvb_params p;       /* as configured; under auto, window and in-flight are ceilings */
    struct kvb_backend be;
    struct kvb_stats *st;
    int slot;              /* this batcher's gauges in st->batcher[], or -1 */
    uint64_t window_ns;    /* the window in effect (auto: the controller's) */
    uint32_t max_inflight; /* the in-flight limit in effect (auto: the controller's) */
    bool tuned;            /* policy auto: ctl picks window_ns and max_inflight */
    struct kvb_ctl ctl;
    /* Auto: synchronous callers' time from done_cb to running again, summed lock-free for
     * done_cb to hand to the controller (kvb_ctl_resumed). */
    _Atomic uint64_t resume_ns, resume_ops;

    struct batch *open[KVB_OP_KINDS];
    struct batch *ready_head, *ready_tail;
    struct batch *inflight_head; /* doubly linked */
    uint32_t inflight;           /* batches sent + direct calls running */
    /*
     * Adaptive sizing (like NIC interrupt coalescing): `active` ops are
     * accepted and not completed; `peak` estimates how many callers are
     * active (the highest `active` seen, lowered when a window expires).
     * With a slot free but another batch in flight, a forming batch goes
     * once every expected caller has joined (active >= peak).
     */
    uint32_t active;
    uint32_t peak;
    struct batch *free_list;
    pthread_mutex_t free_lock; /* free_list only: completions recycle without the main lock */
    _Atomic int callbacks;     /* done_cb calls still touching b (destroy waits for 0) */
    uint64_t next_seq;

    struct pending_key *pending;
    uint64_t wb_bytes;
    int wb_first_error; /* the first write-behind failure not yet returned by kvb_flush */
    uint64_t wb_failed; /* write-behind failures since then (wb_first_error's included) */
    int state_waiters;

    pthread_t flusher;
    bool flusher_running;
    bool flusher_asleep;
    uint64_t flusher_deadline; /* when the flusher will wake by itself; UINT64_MAX = never */
    bool stopping;
};

/*
 * Blocks until op is done; the result is visible afterwards (acquire). The
 * word is read before the state, so a completion in between changes the
 * word and the futex wait returns at once.
 */
static void op_wait(struct kvb_op *op)
{
    for (;;) {
        if (atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE) return;
        int w = atomic_load_explicit(&op->bt->wake_word, memory_order_acquire);
        if (atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE) return;
        kvs_futex_wait(&op->bt->wake_word, w);
    }
}

/* Publishes op's result; its caller is woken by batch_wake. op may be gone afterwards. */
static void op_complete(struct kvb_op *op)
{
    atomic_store_explicit(&op->state, OP_DONE, memory_order_release);
}

/* Wakes every caller sleeping on bt (after their ops are complete). */
static void batch_wake(struct batch *bt)
{
    atomic_fetch_add_explicit(&bt->wake_word, 1, memory_order_release);
    kvs_futex_wake_all(&bt->wake_word);
}

int kvb_args_batchable(const char *key, const void *ptr, size_t len)
{
    if (!key || !key[0] || strnlen(key, KVS_MAX_KEY + 1) > KVS_MAX_KEY) return 0;
    if (!ptr && len > 0) return 0;
    return 1;
}

/* ---- batches ---- */

/* Allocates a batch with room for max_ops entries: one block, arrays carved from it. */
static struct batch *batch_alloc(struct kvb_batcher *b)
{
    size_t m = b->p.max_ops;
    size_t size =
        sizeof(struct batch) + m * (sizeof(struct kvb_op *) + sizeof(char *) + sizeof(void *) +
                                    sizeof(size_t) + sizeof(ssize_t) + sizeof(int));
    struct batch *bt = malloc(size);
    if (!bt) return NULL;
    char *p = (char *)(bt + 1);
    bt->ops = (struct kvb_op **)p, p += m * sizeof(struct kvb_op *);
    bt->keys = (const char **)p, p += m * sizeof(char *);
    bt->ptrs = (void **)p, p += m * sizeof(void *);
    bt->lens = (size_t *)p, p += m * sizeof(size_t);
    bt->sres = (ssize_t *)p, p += m * sizeof(ssize_t);
    bt->ist = (int *)p;
    bt->b = b;
    atomic_init(&bt->wake_word, 0);
    return bt;
}

/* A recycled or new batch of kind, empty. Called with b->lock held. */
static struct batch *batch_get(struct kvb_batcher *b, int kind, unsigned group, uint64_t now)
{
    pthread_mutex_lock(&b->free_lock);
    struct batch *bt = b->free_list;
    if (bt) b->free_list = bt->next;
    pthread_mutex_unlock(&b->free_lock);
    if (!bt && !(bt = batch_alloc(b))) return NULL;
    bt->next = bt->prev = NULL;
    bt->kind = kind;
    bt->group = group;
    bt->reason = KVB_FLUSH_WINDOW;
    bt->n = 0;
    bt->bytes = 0;
    bt->t_first = now;
    bt->window_end = now + b->window_ns;
    bt->seq = ++b->next_seq;
    bt->timer_owner = false;
    return bt;
}

static void batch_recycle(struct kvb_batcher *b, struct batch *bt)
{
    pthread_mutex_lock(&b->free_lock);
    bt->next = b->free_list;
    b->free_list = bt;
    pthread_mutex_unlock(&b->free_lock);
}

/* One more op accepted (queued or direct). Lock held. */
static void op_accepted(struct kvb_batcher *b)
{
    if (++b->active > b->peak) b->peak = b->active;
    if (b->tuned) kvb_ctl_outstanding(&b->ctl, b->active);
}

/* An in-flight slot is free: a sealed batch could be sent now. Lock held. */
static bool slot_free(const struct kvb_batcher *b)
{
    return b->inflight < b->max_inflight;
}

/* Shows the window and in-flight limit in effect (and, under auto, the controller's state). */
static void publish_setting(struct kvb_batcher *b)
{
    if (b->slot < 0) return;
    struct kvb_batcher_gauges *g = &b->st->batcher[b->slot];
    atomic_store_explicit(&g->window_ns, (int64_t)b->window_ns, memory_order_relaxed);
    atomic_store_explicit(&g->max_inflight, b->max_inflight, memory_order_relaxed);
    atomic_store_explicit(&g->levels, b->tuned ? b->ctl.nlevels : 0, memory_order_relaxed);
    if (!b->tuned) return;
    atomic_store_explicit(&g->level, b->ctl.cur, memory_order_relaxed);
    atomic_store_explicit(&g->reason, b->ctl.reason, memory_order_relaxed);
    atomic_store_explicit(&g->mean_ns, (int64_t)b->ctl.last.mean_ns, memory_order_relaxed);
    atomic_store_explicit(&g->p99_ns, (int64_t)b->ctl.last.p99_ns, memory_order_relaxed);
}

/*
 * Auto: lets the controller end its epoch at now and takes the setting it
 * picks. A higher in-flight limit lets the caller's next take_ready send
 * more; a lower one lets batches in flight drain; a changed window holds
 * for batches opened from now on. Lock held.
 */
static void tune(struct kvb_batcher *b, uint64_t now)
{
    uint64_t epoch = b->ctl.epoch_start;
    bool changed = kvb_ctl_tick(&b->ctl, now);
    if (changed) {
        const struct kvb_ctl_level *l = kvb_ctl_setting(&b->ctl);
        b->window_ns = l->window_ns;
        b->max_inflight = l->inflight;
        kvb_count(&b->st->tune_changes, 1);
    }
    if (changed || b->ctl.epoch_start != epoch) publish_setting(b);
}

/* Appends bt, sealed for reason, to the ready FIFO. Lock held. */
static void ready_push(struct kvb_batcher *b, struct batch *bt, int reason)
{
    bt->reason = reason;
    bt->next = NULL;
    if (b->ready_tail)
        b->ready_tail->next = bt;
    else
        b->ready_head = bt;
    b->ready_tail = bt;
}

/* Moves the open batch of kind to the ready FIFO. Lock held. */
static void seal(struct kvb_batcher *b, int kind, int reason)
{
    struct batch *bt = b->open[kind];
    if (!bt) return;
    b->open[kind] = NULL;
    ready_push(b, bt, reason);
}

/* Pops ready batches into *out while in-flight slots are free; returns how many. Lock held. */
static size_t take_ready(struct kvb_batcher *b, struct batch **out, size_t max)
{
    size_t n = 0;
    while (n < max && b->ready_head && slot_free(b)) {
        struct batch *bt = b->ready_head;
        b->ready_head = bt->next;
        if (!b->ready_head) b->ready_tail = NULL;
        bt->prev = NULL;
        bt->next = b->inflight_head;
        if (b->inflight_head) b->inflight_head->prev = bt;
        b->inflight_head = bt;
        b->inflight++;
        out[n++] = bt;
    }
    return n;
}

static bool any_open(const struct kvb_batcher *b)
{
    for (int k = 0; k < KVB_OP_KINDS; k++)
        if (b->open[k]) return true;
    return false;
}

/* Wakes the flusher if it sleeps past `by` (ns) or must act now. Lock held. */
static void nudge_flusher(struct kvb_batcher *b, uint64_t by)
{
    if (b->flusher_asleep && by < b->flusher_deadline) {
        b->flusher_deadline = by;
        pthread_cond_signal(&b->flusher_cv);
    }
}

/*
 * A slot freed: batches left forming without a timer (none could have been
 * sent when they were created) now need the flusher's window timer. Lock held.
 */
static void arm_window_timers(struct kvb_batcher *b)
{
    /* Read once, and only with a batch forming (not on a direct call's way out). */
    uint64_t now = 0;
    for (int k = 0; k < KVB_OP_KINDS; k++) {
        struct batch *bt = b->open[k];
        if (!bt) continue;
        if (!now) now = kvs_now_ns();
        if (slot_free(b) && now >= bt->window_end) {
            seal(b, k, KVB_FLUSH_WINDOW); /* its window passed while no slot was free */
            b->peak = b->active;
        } else if (!bt->timer_owner) {
            nudge_flusher(b, bt->window_end);
        }
    }
}

/*
 * Adaptive: seals forming batches that should go now - nothing is in flight
 * (the link is idle), or a slot is free and every caller expected has joined
 * (waiting longer would gain nothing) - unless sealed batches still wait to
 * go first. Both count as `idle` flushes. Lock held.
 */
static void seal_if_due(struct kvb_batcher *b)
{
    if (b->p.policy == KVB_BATCH_FIXED || !slot_free(b) || b->ready_head) return;
    if (b->inflight > 0 && b->active < b->peak) return;
    for (int k = 0; k < KVB_OP_KINDS; k++)
        seal(b, k, KVB_FLUSH_IDLE);
}

static void done_cb(void *arg, ssize_t nok);

/*
 * The backend's single-key call for kind: ptr is the value (put) or the
 * buffer (get), len its length or capacity. Returns what that call returns.
 */
static ssize_t call_one(struct kvb_batcher *b, int kind, unsigned group, const char *key, void *ptr,
                        size_t len)
{
    const struct kvb_backend_ops *ops = b->be.ops;
    if (kind == KVB_OP_PUT) return ops->put_one(b->be.ctx, group, key, ptr, len);
    if (kind == KVB_OP_GET) return ops->get_one(b->be.ctx, key, ptr, len);
    return ops->exists_one(b->be.ctx, key);
}

/*
 * Depth of submit() calls on this thread. A completion delivered inside one
 * (a refused batch, or a backend that completes inline) must not send the
 * next batch itself: sends would nest, as deep as the ready queue. A
 * completion on a library thread (TCP's reader, libkvstore's completion
 * thread) sends it directly: TCP never blocks a reader in a send
 * (non-blocking send, the rest handed to its writer thread).
 */
static __thread int submit_depth;

/*
 * Adds now - t_enq of every op of bt into h: one atomic update per bucket
 * touched, not one per op.
 */
static void observe_since_enqueue(struct kvb_hist *h, const struct batch *bt, uint64_t now)
{
    uint64_t cnt[KVB_HIST_MAX_BUCKETS + 1] = {0}, sum[KVB_HIST_MAX_BUCKETS + 1] = {0};
    for (uint32_t i = 0; i < bt->n; i++) {
        uint64_t d = now - bt->ops[i]->t_enq;
        size_t idx = kvb_hist_index(h, d);
        cnt[idx]++;
        sum[idx] += d;
    }
    for (size_t i = 0; i <= h->nbounds; i++)
        kvb_hist_add_bucket(h, i, cnt[i], sum[i]);
}

/* Counts bt as sent: its reason, size, the queue delay of its ops, the gauges. */
static void count_sent(struct kvb_stats *st, const struct batch *bt)
{
    observe_since_enqueue(&st->queue_delay, bt, kvs_now_ns());
    kvb_count(&st->flushes[bt->reason], 1);
    kvb_count(&st->batches[bt->kind], 1);
    kvb_hist_observe(&st->batch_ops, bt->n);
    kvb_hist_observe(&st->batch_bytes, bt->bytes);
    kvb_gauge(&st->queued_ops, -(int64_t)bt->n);
    kvb_gauge(&st->inflight_batches, 1);
}

/* The backend's batch call for bt's kind: 0 (done_cb follows), or refused as a whole. */
static int call_batch(struct kvb_batcher *b, struct batch *bt)
{
    const struct kvb_backend_ops *ops = b->be.ops;
    switch (bt->kind) {
    case KVB_OP_PUT:
        return ops->put(b->be.ctx, bt->group, bt->n, bt->keys, (const void *const *)bt->ptrs,
                        bt->lens, bt->ist, done_cb, bt);
    case KVB_OP_GET:
        return ops->get(b->be.ctx, bt->n, bt->keys, bt->ptrs, bt->lens, bt->sres, done_cb, bt);
    default:
        return ops->exists(b->be.ctx, bt->n, bt->keys, bt->ist, done_cb, bt);
    }
}

/* A batch call refused as a whole: every key gets the answer its own call gets. */
static void complete_key_by_key(struct kvb_batcher *b, struct batch *bt)
{
    ssize_t nok = 0;
    for (uint32_t i = 0; i < bt->n; i++) {
        ssize_t r = call_one(b, bt->kind, bt->group, bt->keys[i], bt->ptrs[i], bt->lens[i]);
        if (bt->kind == KVB_OP_GET)
            bt->sres[i] = r;
        else
            bt->ist[i] = (int)r;
        nok += r >= 0;
    }
    done_cb(bt, nok);
}

/* Sends one batch taken by take_ready (no lock held). Never fails: a refused
 * batch is completed key by key with the synchronous calls. */
static void submit(struct batch *bt)
{
    struct kvb_batcher *b = bt->b;
    count_sent(b->st, bt);
    submit_depth++;
    if (call_batch(b, bt) != 0) complete_key_by_key(b, bt);
    submit_depth--;
}

static void submit_all(struct batch **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        submit(v[i]);
}

/*
 * Takes up to KVB_SEND_BATCH ready batches for the caller to submit after
 * unlocking; if more could go, the flusher sends them. Lock held.
 */
#define KVB_SEND_BATCH 8
static size_t take_ready_or_nudge(struct kvb_batcher *b, struct batch **out)
{
    size_t n = take_ready(b, out, KVB_SEND_BATCH);
    if (b->ready_head && slot_free(b)) nudge_flusher(b, 0);
    return n;
}

/*
 * Submits every batch that may go now, dropping the lock while it does.
 * Lock held on entry and on return; true if anything was sent (the state
 * may have changed: the caller looks again).
 */
static bool drain_ready(struct kvb_batcher *b)
{
    struct batch *send[64];
    size_t n = take_ready(b, send, 64);
    if (!n) return false;
    pthread_mutex_unlock(&b->lock);
    submit_all(send, n);
    pthread_mutex_lock(&b->lock);
    return true;
}

/* Lock held: forgets tracked op of pk (and its write-behind copy if it is op). */
static void pending_done(struct kvb_batcher *b, struct pending_key *pk, struct kvb_op *op)
{
    if (pk->wb == op) pk->wb = NULL;
    if (op->kind == KVB_OP_PUT)
        pk->puts--;
    else
        pk->gets--;
    if (pk->puts == 0 && pk->gets == 0) {
        HASH_DEL(b->pending, pk);
        free(pk);
    }
}

/* Copies bt's per-key results into its ops and counts them, completed at now (no lock needed). */
static void deliver_results(struct kvb_stats *st, struct batch *bt, uint64_t now)
{
    uint64_t bytes = 0;
    observe_since_enqueue(&st->op_latency, bt, now);
    for (uint32_t i = 0; i < bt->n; i++) {
        ssize_t r = bt->kind == KVB_OP_GET ? bt->sres[i] : bt->ist[i];
        bt->ops[i]->result = r;
        bt->ops[i]->t_done = now;
        bytes += kvb_result_bytes(bt->kind, r, bt->lens[i]);
        kvb_count_result(st, bt->kind, r);
    }
    kvb_count(&st->ops[bt->kind], bt->n);
    kvb_count(&st->bytes[bt->kind], bytes);
    kvb_gauge(&st->inflight_batches, -1);
}

/*
 * Lock held: takes bt off the in-flight list and forgets its tracked puts;
 * a write-behind put gives back its bytes and, failed, is counted and kept
 * for the next kvb_flush.
 */
static void retire_batch(struct kvb_batcher *b, struct batch *bt)
{
    struct kvb_stats *st = b->st;
    uint64_t freed = 0;
    if (bt->prev)
        bt->prev->next = bt->next;
    else
        b->inflight_head = bt->next;
    if (bt->next) bt->next->prev = bt->prev;
    b->inflight--;
    b->active -= bt->n;
    for (uint32_t i = 0; i < bt->n; i++) {
        struct kvb_op *op = bt->ops[i];
        if (!(op->flags & OPF_TRACKED)) continue;
        if (op->flags & OPF_WRITEBACK) {
            freed += op->len;
            if (op->result < 0) {
                kvb_count(&st->writeback_errors, 1);
                if (!b->wb_first_error) b->wb_first_error = (int)op->result;
                b->wb_failed++;
            }
        }
        pending_done(b, op->pk, op);
    }
    b->wb_bytes -= freed;
    kvb_gauge(&st->writeback_bytes, -(int64_t)freed);
}

/*
 * Lock held, a slot just freed by bt: decides who sends what may go now. On
 * a library thread, this completion itself, right after waking bt's callers
 * (measured no slower than before them, and a transport that sends
 * synchronously, RDMA, does not delay the wake by a round trip): the ready
 * batches it takes go into send. Inside a submit (see submit_depth), a
 * synchronous caller of bt, woken anyway, becomes the leader and sends them;
 * failing one, the flusher. Returns how many it took.
 */
static size_t pick_sender(struct kvb_batcher *b, struct batch *bt, struct batch **send)
{
    size_t n = submit_depth == 0 ? take_ready_or_nudge(b, send) : 0;
    if (!b->ready_head || !slot_free(b)) return n;
    for (uint32_t i = 0; i < bt->n; i++)
        if (!(bt->ops[i]->flags & (OPF_ASYNC | OPF_WRITEBACK))) {
            bt->ops[i]->leader = true;
            return n;
        }
    nudge_flusher(b, 0);
    return n;
}

/* Marks bt's ops done (freeing write-behind ones) and wakes their callers with one system call. */
static void wake_callers(struct batch *bt)
{
    for (uint32_t i = 0; i < bt->n; i++) {
        struct kvb_op *op = bt->ops[i];
        if (op->flags & OPF_WRITEBACK)
            free(op); /* key and value live in the same block */
        else
            op_complete(op);
    }
    batch_wake(bt);
}

/*
 * Completion of a batch (library thread, or the submitter for refused or
 * synchronously completed batches): results to ops and counters, then the
 * bookkeeping under the lock, then the callers are woken, then the next
 * batch is sent (see pick_sender).
 */
static void done_cb(void *arg, ssize_t nok)
{
    struct batch *bt = arg;
    struct kvb_batcher *b = bt->b;
    struct batch *send[KVB_SEND_BATCH];
    (void)nok;
    atomic_fetch_add_explicit(&b->callbacks, 1, memory_order_relaxed);
    uint64_t now = kvs_now_ns();
    deliver_results(b->st, bt, now);

    pthread_mutex_lock(&b->lock);
    retire_batch(b, bt);
    if (b->tuned) {
        uint64_t resumed = atomic_exchange_explicit(&b->resume_ops, 0, memory_order_relaxed);
        kvb_ctl_resumed(&b->ctl, atomic_exchange_explicit(&b->resume_ns, 0, memory_order_relaxed),
                        resumed);
        for (uint32_t i = 0; i < bt->n; i++) {
            const struct kvb_op *op = bt->ops[i];
            if (op->flags & (OPF_ASYNC | OPF_WRITEBACK))
                kvb_ctl_op(&b->ctl, now - op->t_enq);
            else
                kvb_ctl_op_woken(&b->ctl, now - op->t_enq);
        }
        tune(b, now);
    }
    seal_if_due(b);
    arm_window_timers(b);
    size_t nsend = pick_sender(b, bt, send);
    if (b->state_waiters) pthread_cond_broadcast(&b->state_cv);
    pthread_mutex_unlock(&b->lock);

    wake_callers(bt);
    submit_all(send, nsend);
    batch_recycle(b, bt);
    atomic_fetch_sub_explicit(&b->callbacks, 1, memory_order_release);
}

/* ---- the flusher thread ---- */

/*
 * Sends batches whose window expired, batches that wait for a slot, and (adaptive)
 * forming batches once nothing is in flight; sleeps until the next window ends.
 */
static void *flusher_main(void *arg)
{
    struct kvb_batcher *b = arg;
    pthread_mutex_lock(&b->lock);
    while (!b->stopping) {
        uint64_t now = kvs_now_ns(), next = UINT64_MAX;
        for (int k = 0; k < KVB_OP_KINDS; k++) {
            struct batch *bt = b->open[k];
            if (!bt) continue;
            if (b->p.policy != KVB_BATCH_FIXED && b->inflight == 0) {
                seal(b, k, KVB_FLUSH_IDLE);
            } else if (now < bt->window_end) {
                if (bt->window_end < next) next = bt->window_end;
            } else if (slot_free(b)) {
                seal(b, k, KVB_FLUSH_WINDOW);
                b->peak = b->active; /* fewer callers than expected came */
            }
            /*
             * Else its window passed with every slot busy: sealing it now
             * would not send it sooner, only split it into more batches. The
             * completion that frees a slot seals it (arm_window_timers).
             */
        }
        if (drain_ready(b)) continue;
        b->flusher_asleep = true;
        b->flusher_deadline = next;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&b->flusher_cv, &b->lock);
        } else {
            struct timespec ts = kvs_ns_to_timespec(next);
            pthread_cond_timedwait(&b->flusher_cv, &b->lock, &ts);
        }
        b->flusher_asleep = false;
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

struct kvb_batcher *kvb_batcher_create(const struct kvb_params *p, const struct kvb_backend *be,
                                       struct kvb_stats *stats)
{
    pthread_condattr_t ca;
    struct kvb_batcher *b;
    const struct kvb_backend_ops *ops = be ? be->ops : NULL;
    if (!p || !ops || !stats || p->max_ops == 0 || p->max_inflight == 0 || p->max_bytes == 0 ||
        !ops->put || !ops->get || !ops->exists || !ops->put_one || !ops->get_one ||
        !ops->exists_one) {
        errno = EINVAL;
        return NULL;
    }
    b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->p = *p;
    b->be = *be;
    b->st = stats;
    b->slot = kvb_stats_claim_slot(stats);
    b->flusher_deadline = UINT64_MAX;
    b->window_ns = p->window_ns;
    b->max_inflight = p->max_inflight;
    if (p->policy == KVB_BATCH_AUTO) {
        b->tuned = true;
        kvb_ctl_init(&b->ctl, p->window_ns, p->max_inflight, p->latency_target_ns, kvs_now_ns());
        b->window_ns = kvb_ctl_setting(&b->ctl)->window_ns;
        b->max_inflight = kvb_ctl_setting(&b->ctl)->inflight;
    }
    publish_setting(b);
    /*
     * Every op takes the lock for a few hundred nanoseconds; with many
     * callers a waiter that sleeps at once pays a futex wait and its wake
     * (microseconds each on a virtual machine, where a wake is an IPI) for
     * a holder that was about to let go. An adaptive mutex spins briefly
     * first, then sleeps.
     */
    pthread_mutexattr_t ma;
    if (pthread_mutexattr_init(&ma)) goto err_free;
    (void)pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    int lock_rc = pthread_mutex_init(&b->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    if (lock_rc) goto err_free;
    if (pthread_mutex_init(&b->free_lock, NULL)) goto err_lock;
    if (pthread_condattr_init(&ca)) goto err_free_lock;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) || pthread_cond_init(&b->flusher_cv, &ca)) {
        pthread_condattr_destroy(&ca);
        goto err_free_lock;
    }
    if (pthread_cond_init(&b->state_cv, &ca)) {
        pthread_condattr_destroy(&ca);
        goto err_fcv;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_create(&b->flusher, NULL, flusher_main, b)) goto err_scv;
    b->flusher_running = true;
    return b;

err_scv:
    pthread_cond_destroy(&b->state_cv);
err_fcv:
    pthread_cond_destroy(&b->flusher_cv);
err_free_lock:
    pthread_mutex_destroy(&b->free_lock);
err_lock:
    pthread_mutex_destroy(&b->lock);
err_free:
    kvb_stats_release_slot(b->st, b->slot);
    free(b);
    errno = ENOMEM;
    return NULL;
}

/* Waits on state_cv until `deadline` (UINT64_MAX = none); false on timeout. Lock held. */
static bool state_wait(struct kvb_batcher *b, uint64_t deadline)
{
    int rc = 0;
    b->state_waiters++;
    if (deadline == UINT64_MAX) {
        pthread_cond_wait(&b->state_cv, &b->lock);
    } else {
        struct timespec ts = kvs_ns_to_timespec(deadline);
        rc = pthread_cond_timedwait(&b->state_cv, &b->lock, &ts);
    }
    b->state_waiters--;
    return rc != ETIMEDOUT;
}

/* True while a batch with seq <= upto is queued or in flight. Lock held. */
static bool older_pending(const struct kvb_batcher *b, uint64_t upto)
{
    for (int k = 0; k < KVB_OP_KINDS; k++)
        if (b->open[k] && b->open[k]->seq <= upto) return true;
    for (const struct batch *bt = b->ready_head; bt; bt = bt->next)
        if (bt->seq <= upto) return true;
    for (const struct batch *bt = b->inflight_head; bt; bt = bt->next)
        if (bt->seq <= upto) return true;
    return false;
}

static uint64_t deadline_after(uint64_t timeout_ns)
{
    if (timeout_ns == UINT64_MAX) return UINT64_MAX;
    uint64_t now = kvs_now_ns();
    return timeout_ns > UINT64_MAX - now ? UINT64_MAX - 1 : now + timeout_ns;
}

/*
 * Seals the forming batches up to seq `upto` (counted under reason), sends
 * what may go and waits until every batch up to `upto` has completed, or
 * until deadline. 0 or -ETIMEDOUT. Lock held; drops it while it sends and
 * sleeps. The one way the batcher waits for batches: kvb_flush (every batch
 * formed before it) and the order behind a key's pending puts (the batches
 * that hold them).
 */
static int complete_upto(struct kvb_batcher *b, uint64_t upto, int reason, uint64_t deadline)
{
    for (int k = 0; k < KVB_OP_KINDS; k++)
        if (b->open[k] && b->open[k]->seq <= upto) seal(b, k, reason);
    for (;;) {
        if (drain_ready(b)) continue;
        if (!older_pending(b, upto)) return 0;
        if (!state_wait(b, deadline) && older_pending(b, upto)) return -ETIMEDOUT;
    }
}

int kvb_flush_counted(struct kvb_batcher *b, enum kvb_flush_reason reason, uint64_t timeout_ns,
                      uint64_t *failed)
{
    uint64_t deadline = deadline_after(timeout_ns);
    pthread_mutex_lock(&b->lock);
    int rc = complete_upto(b, b->next_seq, (int)reason, deadline);
    uint64_t n = 0;
    if (rc == 0 && b->wb_first_error) {
        rc = b->wb_first_error;
        n = b->wb_failed;
        b->wb_first_error = 0;
        b->wb_failed = 0;
    }
    pthread_mutex_unlock(&b->lock);
    if (failed) *failed = n;
    return rc;
}

int kvb_flush(struct kvb_batcher *b, enum kvb_flush_reason reason, uint64_t timeout_ns)
{
    return kvb_flush_counted(b, reason, timeout_ns, NULL);
}

/* Frees b and everything it holds; nothing may touch it any more. */
static void batcher_free(struct kvb_batcher *b)
{
    struct pending_key *pk, *tmp;
    HASH_ITER(hh, b->pending, pk, tmp)
    {
        HASH_DEL(b->pending, pk);
        free(pk);
    }
    pthread_mutex_lock(&b->free_lock);
    struct batch *free_list = b->free_list;
    b->free_list = NULL;
    pthread_mutex_unlock(&b->free_lock);
    for (struct batch *bt = free_list, *next; bt; bt = next) {
        next = bt->next;
        free(bt);
    }
    pthread_cond_destroy(&b->state_cv);
    pthread_cond_destroy(&b->flusher_cv);
    pthread_mutex_destroy(&b->free_lock);
    pthread_mutex_destroy(&b->lock);
    kvb_backend_release(&b->be);
    kvb_stats_release_slot(b->st, b->slot);
    free(b);
}

int kvb_batcher_destroy(struct kvb_batcher *b, uint64_t timeout_ns)
{
    if (!b) return 0;
    int rc = kvb_flush(b, KVB_FLUSH_EXPLICIT, timeout_ns);
    pthread_mutex_lock(&b->lock);
    b->stopping = true;
    pthread_cond_signal(&b->flusher_cv);
    bool busy = b->inflight > 0 || b->ready_head || any_open(b);
    pthread_mutex_unlock(&b->lock);
    if (b->flusher_running) pthread_join(b->flusher, NULL);
    b->flusher_running = false;
    if (busy || rc == -ETIMEDOUT) return -EBUSY;
    /* A completion may still be waking its callers after the bookkeeping: let it finish. */
    for (int i = 0; atomic_load_explicit(&b->callbacks, memory_order_acquire) > 0; i++) {
        if (i > 100000) return -EBUSY;
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
    }

    batcher_free(b);
    return 0;
}

/* ---- enqueue ---- */

static uint64_t op_bytes(const struct kvb_op *op)
{
    return op->kind == KVB_OP_EXISTS ? 0 : op->len;
}

/* Puts op into bt's arrays (sz: its value bytes) and counts it accepted and queued. Lock held. */
static void batch_add(struct kvb_batcher *b, struct batch *bt, struct kvb_op *op, uint64_t sz)
{
    uint32_t i = bt->n++;
    bt->ops[i] = op;
    op->bt = bt;
    bt->keys[i] = op->key;
    bt->ptrs[i] = op->kind == KVB_OP_PUT ? (void *)op->val : op->buf;
    bt->lens[i] = op->len;
    bt->bytes += sz;
    op_accepted(b);
    kvb_gauge(&b->st->queued_ops, 1);
}

/*
 * bt, just opened by op, is still forming and a slot is free: it needs a
 * window timer - its opener's own wait if that is a synchronous caller, else
 * the flusher's. (With no slot free a completion arms it.) Lock held.
 */
static void arm_opener_timer(struct kvb_batcher *b, struct batch *bt, struct kvb_op *op)
{
    if (!(op->flags & (OPF_ASYNC | OPF_WRITEBACK))) {
        bt->timer_owner = true;
        op->flags |= OPF_TIMER;
        op->window_end = bt->window_end;
    } else {
        nudge_flusher(b, bt->window_end);
    }
}

/*
 * After ops joined bt, the forming batch of kind k: sealed when a size
 * limit is reached or its window is due; a batch just created (by opener)
 * that is still forming gets its opener's timer.
 */
static void after_add(struct kvb_batcher *b, int k, struct batch *bt, bool created,
                      struct kvb_op *opener)
{
    if (bt->n >= b->p.max_ops)
        seal(b, k, KVB_FLUSH_MAX_OPS);
    else if (bt->bytes >= b->p.max_bytes)
        seal(b, k, KVB_FLUSH_MAX_BYTES);
    else
        seal_if_due(b);
    if (created && b->open[k] == bt && slot_free(b)) arm_opener_timer(b, bt, opener);
}

/*
 * Appends op to the forming batch of its kind, sealing it at max_ops or
 * max_bytes; an op over max_bytes goes alone, behind the batches already
 * sealed. A put of another group than the forming batch's seals that batch
 * first. *seq is the batch's. Lock held. -ENOMEM if no batch could be made.
 */
static int append(struct kvb_batcher *b, struct kvb_op *op, uint64_t now, uint64_t *seq)
{
    int k = op->kind;
    uint64_t sz = op_bytes(op);
    if (b->open[k] && b->open[k]->group != op->group) seal(b, k, KVB_FLUSH_GROUP);
    if (sz > b->p.max_bytes) {
        struct batch *bt = batch_get(b, k, op->group, now);
        if (!bt) return -ENOMEM;
        batch_add(b, bt, op, sz);
        *seq = bt->seq;
        ready_push(b, bt, KVB_FLUSH_MAX_BYTES);
        return 0;
    }
    bool created = !b->open[k];
    if (created && !(b->open[k] = batch_get(b, k, op->group, now))) return -ENOMEM;
    struct batch *bt = b->open[k];
    batch_add(b, bt, op, sz);
    *seq = bt->seq;
    after_add(b, k, bt, created, op);
    return 0;
}

/*
 * A get or exists op the newest write-behind copy of its key can answer as
 * the store would: anything but a value that does not fit the buffer (what
 * the store says then is the library's own status; the op waits for it).
 */
static bool copy_serves(const struct kvb_op *wb, const struct kvb_op *op)
{
    return op->kind == KVB_OP_EXISTS || (!op->buf && op->len == 0) || op->len >= wb->len;
}

/*
 * The newest batch op must complete behind before it is queued, 0 if none:
 * for a get or exists op, the newest pending put of its key, unless the
 * write-behind copy can answer it (gets commute with gets); for a put, that
 * put unless it is in the open put batch of op's group (array order keeps
 * it), and the newest pending get (a get made first reads what was there).
 * Lock held.
 */
static uint64_t must_follow(const struct kvb_batcher *b, const struct pending_key *pk,
                            const struct kvb_op *op)
{
    const struct batch *open = b->open[KVB_OP_PUT];
    if (op->kind != KVB_OP_PUT)
        return pk->puts && !(pk->wb && copy_serves(pk->wb, op)) ? pk->last_seq : 0;
    uint64_t upto = 0;
    if (pk->puts && !(open && pk->last_seq == open->seq && open->group == op->group))
        upto = pk->last_seq;
    if (pk->gets && pk->get_seq > upto) upto = pk->get_seq;
    return upto;
}

/*
 * Waits until op may be queued behind the pending ops of its key
 * (must_follow), sending and completing the batches that hold them.
 * Returns the key's entry, if any. Lock held; may sleep.
 */
static struct pending_key *order_behind_pending(struct kvb_batcher *b, const char *key,
                                                const struct kvb_op *op)
{
    for (;;) {
        struct pending_key *pk = NULL;
        if (!b->pending) return NULL;
        HASH_FIND_STR(b->pending, key, pk);
        if (!pk) return NULL;
        uint64_t upto = must_follow(b, pk, op);
        if (!upto) return pk;
        /* Send the batches that hold the older ops and wait for them; then look again. */
        complete_upto(b, upto, KVB_FLUSH_EXPLICIT, UINT64_MAX);
    }
}

/*
 * The newest batch holding a pending put of one of keys - or, with gets,
 * a pending put or get - 0 if none (NULL keys are skipped). Lock held.
 */
static uint64_t newest_pending_of(const struct kvb_batcher *b, size_t n, const char *const keys[],
                                  bool gets)
{
    uint64_t upto = 0;
    for (size_t i = 0; i < n && b->pending; i++) {
        struct pending_key *pk = NULL;
        if (!keys[i]) continue;
        HASH_FIND_STR(b->pending, keys[i], pk);
        if (!pk) continue;
        if (pk->puts && pk->last_seq > upto) upto = pk->last_seq;
        if (gets && pk->gets && pk->get_seq > upto) upto = pk->get_seq;
    }
    return upto;
}

/* kvb_order_after_puts, and with gets kvb_order_after_ops. */
static void order_after(struct kvb_batcher *b, size_t n, const char *const keys[], bool gets)
{
    pthread_mutex_lock(&b->lock);
    uint64_t upto = keys ? newest_pending_of(b, n, keys, gets) : b->pending ? b->next_seq : 0;
    if (upto) complete_upto(b, upto, KVB_FLUSH_EXPLICIT, UINT64_MAX);
    pthread_mutex_unlock(&b->lock);
}

void kvb_order_after_puts(struct kvb_batcher *b, size_t n, const char *const keys[])
{
    order_after(b, n, keys, false);
}

void kvb_order_after_ops(struct kvb_batcher *b, size_t n, const char *const keys[])
{
    order_after(b, n, keys, true);
}

/* Registers tracked op (a put, or an async get) of op->key. Lock held. */
static int track_op(struct kvb_batcher *b, struct pending_key *pk, struct kvb_op *op)
{
    if (!pk) {
        size_t klen = strlen(op->key);
        pk = calloc(1, sizeof(*pk) + klen + 1);
        if (!pk) return -ENOMEM;
        pk->key = memcpy(pk + 1, op->key, klen + 1);
        HASH_ADD_KEYPTR(hh, b->pending, pk->key, klen, pk);
    }
    if (op->kind == KVB_OP_PUT)
        pk->puts++;
    else
        pk->gets++;
    if (op->flags & OPF_WRITEBACK) pk->wb = op;
    op->pk = pk;
    op->flags |= OPF_TRACKED;
    return 0;
}

/* Answers a get/exists from a pending write-behind copy. */
static ssize_t serve_from_copy(const struct kvb_op *wb, int kind, void *buf, size_t cap)
{
    if (kind == KVB_OP_EXISTS) return 1;
    if (!buf && cap == 0) return (ssize_t)wb->len;
    if (wb->len) memcpy(buf, wb->val, wb->len); /* it fits: copy_serves */
    return (ssize_t)wb->len;
}

/* Counts an op answered without a batch (from a write-behind copy, or refused). */
static void count_unbatched(struct kvb_stats *st, const struct kvb_op *op)
{
    kvb_count(&st->ops[op->kind], 1);
    kvb_count_result(st, op->kind, op->result);
    kvb_hist_observe(&st->op_latency, kvs_now_ns() - op->t_enq);
}

/*
 * Adaptive or auto: an op of kind goes at once as its caller's own
 * single-key call when the batch it would open would be sent alone, right
 * now - a slot is free, nothing of kind forms or waits for a slot, and no
 * company is expected within the window: nothing is in flight (the link is
 * idle), or the window is 0, or every caller seen is already in (with it,
 * active reaches peak). A batch of one through the batch API costs more
 * than the library's own call (a batch op, the batcher's completion on the
 * library's thread, a wake-up by it); the direct call costs what the call
 * without the shim costs. Lock held.
 */
static bool goes_direct(const struct kvb_batcher *b, int kind)
{
    if (b->p.policy == KVB_BATCH_FIXED || !slot_free(b) || b->ready_head || b->open[kind])
        return false;
    return b->inflight == 0 || b->window_ns == 0 || b->active + 1 >= b->peak;
}

/*
 * Queues op and sends whatever may go now from this thread. For a sync op
 * that would be sent alone at once (goes_direct), *direct is set instead:
 * the caller performs the real single-key call itself (no thread hand-off)
 * while holding an in-flight slot. Returns 0, 1 if op was answered at once
 * (result set), or a negative code.
 */
static int enqueue(struct kvb_batcher *b, struct kvb_op *op, bool track, bool *direct)
{
    struct batch *send[KVB_SEND_BATCH];
    size_t n = 0;
    uint64_t seq = 0;
    int rc = 0;
    op->t_enq = kvs_now_ns();
    pthread_mutex_lock(&b->lock);
    if (b->pending) {
        struct pending_key *pk = order_behind_pending(b, op->key, op);
        if (pk && op->kind != KVB_OP_PUT && pk->wb) {
            op->result = serve_from_copy(pk->wb, op->kind, op->buf, op->len);
            pthread_mutex_unlock(&b->lock);
            count_unbatched(b->st, op);
            return 1;
        }
        if (track && (rc = track_op(b, pk, op)) < 0) goto out;
    } else if (track && (rc = track_op(b, NULL, op)) < 0) {
        goto out;
    }
    if (direct && !track && goes_direct(b, op->kind)) {
        b->inflight++; /* the caller's own call holds the slot */
        op_accepted(b);
        *direct = true;
        goto out;
    }
    if ((rc = append(b, op, op->t_enq, &seq)) < 0) {
        if (op->flags & OPF_TRACKED) pending_done(b, op->pk, op);
        goto out;
    }
    if ((op->flags & OPF_TRACKED) && op->kind == KVB_OP_PUT) op->pk->last_seq = seq;
    if ((op->flags & OPF_TRACKED) && op->kind != KVB_OP_PUT) op->pk->get_seq = seq;
    n = take_ready_or_nudge(b, send);
out:
    pthread_mutex_unlock(&b->lock);
    submit_all(send, n);
    if (rc < 0) {
        op->result = rc;
        count_unbatched(b->st, op);
    }
    return rc;
}

/* A completion chose this caller to send what may go now (see done_cb). */
static void send_ready(struct kvb_batcher *b)
{
    struct batch *send[KVB_SEND_BATCH];
    pthread_mutex_lock(&b->lock);
    seal_if_due(b);
    size_t n = take_ready_or_nudge(b, send);
    pthread_mutex_unlock(&b->lock);
    submit_all(send, n);
}

/*
 * The caller that opened a batch waits for its op until the batch's window
 * ends; if the batch is still forming then, it seals and sends it (or, with
 * no slot free, leaves that to the next completion).
 */
static void window_wait(struct kvb_batcher *b, struct kvb_op *op)
{
    struct batch *send[KVB_SEND_BATCH];
    size_t n = 0;
    uint64_t deadline = op->window_end; /* op may complete, and its batch be reused, meanwhile */
    while (kvs_now_ns() < deadline) {
        if (atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE) return;
        int w = atomic_load_explicit(&op->bt->wake_word, memory_order_acquire);
        if (atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE) return;
        kvs_futex_wait_until(&op->bt->wake_word, w, deadline);
    }
    pthread_mutex_lock(&b->lock);
    /* Not done, so op->bt is still its batch (recycled only after op completes). */
    struct batch *bt = op->bt;
    if (atomic_load_explicit(&op->state, memory_order_acquire) != OP_DONE &&
        b->open[op->kind] == bt) {
        if (slot_free(b)) {
            seal(b, op->kind, KVB_FLUSH_WINDOW);
            b->peak = b->active; /* fewer callers than expected came */
            n = take_ready(b, send, KVB_SEND_BATCH);
        } else {
            bt->timer_owner = false;
        }
    }
    pthread_mutex_unlock(&b->lock);
    submit_all(send, n);
}

/* After a direct call: gives the slot back; sends what formed meanwhile if now idle. */
static void direct_done(struct kvb_batcher *b, int kind, ssize_t r, uint64_t t0, uint64_t bytes)
{
    struct kvb_stats *st = b->st;
    struct batch *send[KVB_SEND_BATCH];
    size_t n;
    uint64_t now = kvs_now_ns();
    kvb_count(&st->ops[kind], 1);
    kvb_count(&st->batches[kind], 1);
    kvb_count(&st->flushes[KVB_FLUSH_DIRECT], 1);
    kvb_count(&st->bytes[kind], bytes);
    kvb_count_result(st, kind, r);
    kvb_hist_observe(&st->batch_ops, 1);
    kvb_hist_observe(&st->batch_bytes, bytes);
    kvb_hist_observe(&st->queue_delay, 0);
    kvb_hist_observe(&st->op_latency, now - t0);
    pthread_mutex_lock(&b->lock);
    b->inflight--;
    b->active--;
    if (b->tuned) {
        kvb_ctl_op(&b->ctl, now - t0);
        tune(b, now);
    }
    seal_if_due(b);
    arm_window_timers(b);
    n = take_ready(b, send, KVB_SEND_BATCH);
    if (b->ready_head) nudge_flusher(b, 0);
    if (b->state_waiters) pthread_cond_broadcast(&b->state_cv);
    pthread_mutex_unlock(&b->lock);
    submit_all(send, n);
}

/* Runs a synchronous op through the batcher and returns its result. */
static ssize_t run_sync(struct kvb_batcher *b, struct kvb_op *op)
{
    bool direct = false;
    int rc = enqueue(b, op, false, &direct);
    if (rc < 0) return rc;
    if (rc == 1) return op->result;
    if (direct) {
        void *ptr = op->kind == KVB_OP_PUT ? (void *)op->val : op->buf;
        ssize_t r = call_one(b, op->kind, op->group, op->key, ptr, op->len);
        direct_done(b, op->kind, r, op->t_enq, kvb_result_bytes(op->kind, r, op->len));
        return r;
    }
    if (op->flags & OPF_TIMER) window_wait(b, op);
    op_wait(op);
    if (b->tuned && op->t_done) {
        uint64_t now = kvs_now_ns();
        atomic_fetch_add_explicit(&b->resume_ns, now > op->t_done ? now - op->t_done : 0,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&b->resume_ops, 1, memory_order_relaxed);
    }
    if (op->leader) send_ready(b);
    return op->result;
}

static void op_init(struct kvb_op *op, struct kvb_batcher *b, int kind, const char *key)
{
    atomic_init(&op->state, OP_PENDING);
    op->kind = (uint8_t)kind;
    op->flags = 0;
    op->group = 0;
    op->key = key;
    op->val = NULL;
    op->buf = NULL;
    op->len = 0;
    op->result = 0;
    op->t_done = 0;
    op->pk = NULL;
    op->b = b;
    op->bt = NULL;
    op->leader = false;
}

/* Write-behind put: copy key and value, reserve space (waiting for it), queue. */
/* A write-behind op: one block holding the op, its key and its value. */
static struct kvb_op *writeback_op(struct kvb_batcher *b, unsigned group, const char *key,
                                   const void *val, size_t len)
{
    size_t klen = strlen(key) + 1;
    struct kvb_op *op = malloc(sizeof(*op) + klen + len);
    if (!op) return NULL;
    char *kcopy = (char *)(op + 1);
    memcpy(kcopy, key, klen);
    if (len) memcpy(kcopy + klen, val, len);
    op_init(op, b, KVB_OP_PUT, kcopy);
    op->val = kcopy + klen;
    op->len = len;
    op->group = group;
    op->flags = OPF_WRITEBACK;
    return op;
}

/* Reserves len write-behind bytes, waiting while KVBATCH_WRITEBACK_BYTES are held. */
static void writeback_reserve(struct kvb_batcher *b, size_t len)
{
    pthread_mutex_lock(&b->lock);
    while (b->wb_bytes > 0 && b->wb_bytes + len > b->p.writeback_bytes) {
        /*
         * Back-pressure: get the forming puts moving if a slot is free. With
         * every slot busy a completion sends them; sealing here would only cut
         * the batch short once per blocked writer.
         */
        if (slot_free(b)) seal(b, KVB_OP_PUT, KVB_FLUSH_MAX_BYTES);
        nudge_flusher(b, 0);
        state_wait(b, UINT64_MAX);
    }
    b->wb_bytes += len;
    kvb_gauge(&b->st->writeback_bytes, (int64_t)len);
    pthread_mutex_unlock(&b->lock);
}

/* Gives back a reservation whose put was not queued, and wakes the writers waiting for it. */
static void writeback_unreserve(struct kvb_batcher *b, size_t len)
{
    pthread_mutex_lock(&b->lock);
    b->wb_bytes -= len;
    if (b->state_waiters) pthread_cond_broadcast(&b->state_cv);
    pthread_mutex_unlock(&b->lock);
    kvb_gauge(&b->st->writeback_bytes, -(int64_t)len);
}

/* Write-behind put: copy key and value, reserve space (waiting for it), queue. */
static int put_writeback(struct kvb_batcher *b, unsigned group, const char *key, const void *val,
                         size_t len)
{
    struct kvb_op *op = writeback_op(b, group, key, val, len);
    if (!op) return -ENOMEM;
    writeback_reserve(b, len);
    int rc = enqueue(b, op, true, NULL);
    if (rc < 0) {
        writeback_unreserve(b, len);
        free(op);
    }
    return rc;
}

int kvb_put_group(struct kvb_batcher *b, unsigned group, const char *key, const void *val,
                  size_t len)
{
    if (b->p.writeback) return put_writeback(b, group, key, val, len);
    struct kvb_op op;
    op_init(&op, b, KVB_OP_PUT, key);
    op.group = group;
    op.val = val;
    op.len = len;
    return (int)run_sync(b, &op);
}

int kvb_put(struct kvb_batcher *b, const char *key, const void *val, size_t len)
{
    return kvb_put_group(b, 0, key, val, len);
}

ssize_t kvb_get(struct kvb_batcher *b, const char *key, void *buf, size_t cap)
{
    struct kvb_op op;
    op_init(&op, b, KVB_OP_GET, key);
    op.buf = buf;
    op.len = cap;
    if (!buf && cap == 0) {
        /* Size probe: the batch API has no probe; order it, then ask the real call. */
        bool direct = false;
        pthread_mutex_lock(&b->lock);
        struct pending_key *pk = b->pending ? order_behind_pending(b, key, &op) : NULL;
        if (pk && pk->wb) op.result = serve_from_copy(pk->wb, KVB_OP_GET, NULL, 0), direct = true;
        pthread_mutex_unlock(&b->lock);
        if (direct) return op.result;
        kvb_count(&b->st->direct_ops[KVB_OP_GET], 1);
        ssize_t r = b->be.ops->get_one(b->be.ctx, key, NULL, 0);
        kvb_count(&b->st->ops[KVB_OP_GET], 1);
        kvb_count_result(b->st, KVB_OP_GET, r);
        return r;
    }
    return run_sync(b, &op);
}

int kvb_exists(struct kvb_batcher *b, const char *key)
{
    struct kvb_op op;
    op_init(&op, b, KVB_OP_EXISTS, key);
    return (int)run_sync(b, &op);
}

/* Heap op for the async calls; kvb_wait frees it. */
static int start_async(struct kvb_batcher *b, int kind, const char *key, const void *val, void *buf,
                       size_t len, struct kvb_op **out)
{
    struct kvb_op *op = malloc(sizeof(*op));
    *out = NULL;
    if (!op) return -ENOMEM;
    op_init(op, b, kind, key);
    op->val = val;
    op->buf = buf;
    op->len = len;
    op->flags = OPF_ASYNC;
    int rc = enqueue(b, op, true, NULL); /* its caller moves on: later ops of key go behind it */
    if (rc < 0) {
        free(op);
        return rc;
    }
    if (rc == 1) atomic_store_explicit(&op->state, OP_DONE, memory_order_release);
    *out = op;
    return 0;
}

int kvb_put_async(struct kvb_batcher *b, const char *key, const void *val, size_t len,
                  struct kvb_op **op)
{
    return start_async(b, KVB_OP_PUT, key, val, NULL, len, op);
}

int kvb_get_async(struct kvb_batcher *b, const char *key, void *buf, size_t cap, struct kvb_op **op)
{
    return start_async(b, KVB_OP_GET, key, NULL, buf, cap, op);
}

ssize_t kvb_wait(struct kvb_op *op)
{
    op_wait(op);
    ssize_t r = op->result;
    free(op);
    return r;
}

/* ---- small batch calls, merged ---- */

/*
 * Appends the n ops of one batch call (bytes: their value bytes) to the
 * forming batch of their kind, all into the same batch: a forming batch
 * they would overflow, or one of another group, is sealed first (n <
 * max_ops and bytes < max_bytes, so a new batch holds them). Then the size
 * and adaptive rules, as append applies them to one op. Lock held.
 * -ENOMEM if no batch could be made (nothing was added).
 */
static int append_call(struct kvb_batcher *b, struct kvb_op *ops, size_t n, uint64_t bytes,
                       uint64_t now)
{
    int k = ops[0].kind;
    struct batch *bt = b->open[k];
    if (bt && bt->group != ops[0].group)
        seal(b, k, KVB_FLUSH_GROUP);
    else if (bt && bt->n + n > b->p.max_ops)
        seal(b, k, KVB_FLUSH_MAX_OPS);
    else if (bt && bt->bytes + bytes > b->p.max_bytes)
        seal(b, k, KVB_FLUSH_MAX_BYTES);
    bool created = !b->open[k];
    if (created && !(b->open[k] = batch_get(b, k, ops[0].group, now))) return -ENOMEM;
    bt = b->open[k];
    for (size_t i = 0; i < n; i++)
        batch_add(b, bt, &ops[i], op_bytes(&ops[i]));
    after_add(b, k, bt, created, &ops[0]);
    return 0;
}

/* True if a batch call of n keys is one kvb_batch_call merges; its value bytes in *bytes. */
static bool call_mergeable(const struct kvb_batcher *b, int kind, size_t n,
                           const char *const keys[], void *const ptrs[], const size_t lens[],
                           const void *results, uint64_t *bytes)
{
    bool sized = kind != KVB_OP_EXISTS;
    if (n == 0 || n >= b->p.max_ops || !keys || !results || (sized && (!ptrs || !lens)))
        return false;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const void *p = sized ? ptrs[i] : NULL;
        size_t len = sized ? lens[i] : 0;
        if (!kvb_args_batchable(keys[i], p, len)) return false;
        if (kind == KVB_OP_GET && !p) return false; /* a size probe: the library's own call */
        if (len >= b->p.max_bytes - sum) return false;
        sum += len;
    }
    *bytes = sum;
    return true;
}

int kvb_batch_call(struct kvb_batcher *b, int kind, unsigned group, size_t n,
                   const char *const keys[], void *const ptrs[], const size_t lens[], int ist[],
                   ssize_t sres[], size_t *nok)
{
    uint64_t bytes = 0;
    const void *results = kind == KVB_OP_GET ? (const void *)sres : (const void *)ist;
    if (!call_mergeable(b, kind, n, keys, ptrs, lens, results, &bytes)) return 0;
    struct kvb_op *ops = malloc(n * sizeof(*ops));
    if (!ops) return 0;
    uint64_t now = kvs_now_ns();
    for (size_t i = 0; i < n; i++) {
        op_init(&ops[i], b, kind, keys[i]);
        ops[i].group = group;
        if (kind == KVB_OP_PUT) ops[i].val = ptrs[i];
        if (kind == KVB_OP_GET) ops[i].buf = ptrs[i];
        ops[i].len = kind == KVB_OP_EXISTS ? 0 : lens[i];
        ops[i].t_enq = now;
    }
    struct batch *send[KVB_SEND_BATCH];
    size_t nsend = 0;
    pthread_mutex_lock(&b->lock);
    /*
     * After this process's pending puts of the keys (a batch is not served
     * from their copies) and, for puts, its pending async gets of them.
     */
    uint64_t upto = b->pending ? newest_pending_of(b, n, keys, kind == KVB_OP_PUT) : 0;
    if (upto) complete_upto(b, upto, KVB_FLUSH_EXPLICIT, UINT64_MAX);
    int rc = append_call(b, ops, n, bytes, now);
    if (rc == 0) nsend = take_ready_or_nudge(b, send);
    pthread_mutex_unlock(&b->lock);
    if (rc < 0) {
        free(ops);
        return 0;
    }
    submit_all(send, nsend);
    if (ops[0].flags & OPF_TIMER) window_wait(b, &ops[0]);
    bool leader = false;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        op_wait(&ops[i]); /* one batch: all complete together */
        leader = leader || ops[i].leader;
        if (kind == KVB_OP_GET)
            sres[i] = ops[i].result;
        else
            ist[i] = (int)ops[i].result;
        ok += ops[i].result >= 0;
    }
    free(ops);
    if (leader) send_ready(b);
    *nok = ok;
    return 1;
}

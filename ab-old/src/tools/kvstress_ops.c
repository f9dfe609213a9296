/*
 * kvstress_ops.c - the workers: synchronous, async single and async batch
 * puts and gets of self-checking values on own and shared keys; every
 * key-op gets an id whose completions are counted, every result is counted
 * by status, every get is checked against what was acknowledged.
 */
#include "kvstress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hash.h"
#include "parse.h"
#include "values.h"

struct figures fig;

_Atomic(uint8_t) *completions; /* per key-op id */
atomic_uint_fast64_t next_id;

struct restarts rs;
atomic_int current_epoch = -1; /* index of the latest restart, -1 before any */
atomic_int kills_done;

unsigned long long t_start, t_end;
atomic_int corrupt_pending;
int wb_mode; /* under the shim with KVBATCH_PUT_MODE=writeback */

static int transport_error(int st)
{
    return st == -ECONNRESET || st == -ECONNREFUSED || st == -ETIMEDOUT || st == -EIO ||
           st == -EPIPE || st == -ENOTCONN;
}

/* Counts a result; an OK after a restart may be that restart's first success. */
static void count_result(enum opkind k, ssize_t r, int single)
{
    /* Recovery = the first op the restarted server answered (a miss counts; a write-behind
     * put returning 0 does not, it never reached the server). */
    int answered = r >= 0 || (k == OP_GET && r == -ENOENT);
    if (answered && !(wb_mode && k == OP_PUT)) {
        int e = atomic_load(&current_epoch);
        if (e >= 0) {
            unsigned long long zero = 0, now = kvs_now_ns();
            atomic_compare_exchange_strong(&rs.first_ok_ns[e], &zero, now);
        }
    }
    if (r >= 0) {
        atomic_fetch_add(&fig.ok[k], 1);
        return;
    }
    long code = -r < NSTATUS ? -r : NSTATUS - 1;
    atomic_fetch_add(&fig.err[k][code], 1);
    if (single) atomic_fetch_add(&fig.single_err[k][code], 1);
    int allowed = r == -ENOENT && k == OP_GET;
    if (!allowed && transport_error((int)r) && (opt.kills > 0 || opt.writeback_check)) allowed = 1;
    if (!allowed) atomic_fetch_add(&fig.unexpected_status, 1);
}

static void complete_id(uint64_t id)
{
    atomic_fetch_add(&completions[id], 1);
}

struct worker workers[MAX_THREADS];
char shared_names[SHARED_KEYS][64];
static atomic_uint shared_version;
kvs_client *client;

static uint64_t rnd(struct worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

size_t value_len(const char *key, unsigned version)
{
    uint64_t h = kvs_fnv1a(key, strlen(key));
    h = (h ^ version) * KVS_FNV1A_PRIME;
    return opt.min_len + (size_t)(h % (opt.max_len - opt.min_len + 1));
}

static uint64_t new_ids(uint64_t n)
{
    return atomic_fetch_add(&next_id, n);
}

/* Checks a get result for the worker's own key k; shared keys pass ks NULL. */
static void check_get(struct worker *w, const char *key, struct keystate *ks, ssize_t r,
                      const unsigned char *buf)
{
    if (r < 0) {
        if (r == -ENOENT && ks && ks->last_ok &&
            ks->ok_since_epoch == atomic_load(&current_epoch) + 1)
            atomic_fetch_add(&fig.missing_after_ok, 1);
        return;
    }
    unsigned v = 0;
    int damaged = 0;
    if (opt.corrupt_one && r >= 8 && atomic_exchange(&corrupt_pending, 0)) damaged = 1;
    if (damaged || !kvval_check(buf, (size_t)r, key, &v) || (size_t)r < 4) {
        atomic_fetch_add(&fig.wrong_values, 1);
        if (!opt.quiet)
            fprintf(stderr, "kvstress: WRONG value for %s (%zd bytes)%s\n", key, r,
                    damaged ? " [self-test corruption]" : "");
        return;
    }
    if (ks && (v < ks->last_ok || v > ks->max_issued)) {
        atomic_fetch_add(&fig.stale_values, 1);
        if (!opt.quiet)
            fprintf(stderr, "kvstress: STALE %s: version %u, acknowledged %u, issued %u\n", key, v,
                    ks->last_ok, ks->max_issued);
    }
    (void)w;
}

static void note_put(struct keystate *ks, unsigned v, int r)
{
    if (!ks) return;
    if (r == 0) {
        ks->last_ok = v;
        ks->ok_since_epoch = atomic_load(&current_epoch) + 1;
    }
}

/* One synchronous (or async single + kvs_wait) op on key; ks NULL for a shared key. */
static void single_op(struct worker *w, const char *key, struct keystate *ks, int do_put, int async)
{
    enum opkind k = do_put ? OP_PUT : OP_GET;
    uint64_t id = new_ids(1);
    atomic_fetch_add(&fig.issued[k], 1);
    atomic_fetch_add(&fig.single_issued[k], 1);
    ssize_t r;
    if (do_put) {
        unsigned v = ks ? ++ks->max_issued : atomic_fetch_add(&shared_version, 1) + 1;
        size_t len = value_len(key, v);
        kvval_fill(w->val, len, key, v);
        if (async) {
            kvs_op *op = NULL;
            r = kvs_put_async(client, key, w->val, len, &op);
            if (r == 0) r = kvs_wait(op);
        } else {
            r = kvs_put(client, key, w->val, len);
        }
        note_put(ks, v, (int)r);
    } else {
        if (async) {
            kvs_op *op = NULL;
            r = kvs_get_async(client, key, w->buf, opt.max_len, &op);
            if (r == 0) r = kvs_wait(op);
        } else {
            r = kvs_get(client, key, w->buf, opt.max_len);
        }
        check_get(w, key, ks, r, w->buf);
    }
    complete_id(id);
    count_result(k, r, 1);
    /* While the server is down, calls fail at once: pace the retries instead of spinning. */
    if (transport_error((int)r)) usleep(2000);
}

/* The memory one async batch needs until its callback; freed only if it completes. */
struct batch_ctx {
    int do_put;
    uint64_t base;
    size_t n;
    int kidx[BATCH_KEYS];
    unsigned ver[BATCH_KEYS];
    const char *keys[BATCH_KEYS];
    const void *vals[BATCH_KEYS];
    void *bufs[BATCH_KEYS];
    size_t lens[BATCH_KEYS];
    int status[BATCH_KEYS];
    ssize_t results[BATCH_KEYS];
    struct batch_slot *slot;
    struct worker *w;
    unsigned char data[];
};

/*
 * done callback of a batch: counts the call on the slot (never freed during
 * the run, so a second call is counted, not a use-after-free), then the ids.
 */
static void batch_done(void *arg, ssize_t nok)
{
    struct batch_ctx *b = arg;
    (void)nok;
    /* b itself stays allocated while its slot is not done; slot outlives it. */
    struct batch_slot *slot = b->slot;
    if (atomic_fetch_add(&slot->calls, 1) != 0) {
        atomic_fetch_add(&fig.double_callbacks, 1);
        return;
    }
    struct worker *w = b->w;
    for (size_t i = 0; i < b->n; i++)
        complete_id(b->base + i);
    pthread_mutex_lock(&w->lock);
    atomic_store(&slot->done, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->lock);
}

/*
 * A batch of BATCH_KEYS distinct own keys through kvs_batch_*_async with a
 * done callback (the shim passes it through, after the pending puts of its
 * keys). Waits for the callback at
 * most the client timeout + 5 s; a batch that never completes is counted and
 * its memory abandoned (the library might still write into it).
 */
/* A batch of n own keys from a random one on: puts get their next version, gets a buffer. */
static struct batch_ctx *batch_new(struct worker *w, struct batch_slot *slot, int do_put)
{
    size_t n = BATCH_KEYS < opt.keys ? BATCH_KEYS : (size_t)opt.keys;
    struct batch_ctx *b = calloc(1, sizeof(*b) + n * opt.max_len);
    if (!b) return NULL;
    b->do_put = do_put;
    b->n = n;
    b->slot = slot;
    b->w = w;
    int first = (int)(rnd(w) % (uint64_t)opt.keys);
    for (size_t i = 0; i < n; i++) {
        int ki = (first + (int)i) % opt.keys;
        b->kidx[i] = ki;
        b->keys[i] = w->names[ki];
        b->status[i] = INT32_MIN; /* must be overwritten */
        b->results[i] = INT32_MIN;
        unsigned char *p = b->data + i * opt.max_len;
        if (do_put) {
            unsigned v = ++w->ks[ki].max_issued;
            b->ver[i] = v;
            b->lens[i] = value_len(b->keys[i], v);
            kvval_fill(p, b->lens[i], b->keys[i], v);
            b->vals[i] = p;
        } else {
            b->bufs[i] = p;
            b->lens[i] = opt.max_len;
        }
    }
    return b;
}

/*
 * How long a batch's callback may take: the client's timeout
 * ($KVSTORE_TIMEOUT_MS, read as the client reads it; 10 s when unset) + 5 s.
 */
static unsigned long long batch_limit_ms(void)
{
    const char *t = getenv("KVSTORE_TIMEOUT_MS");
    uint64_t ms;
    if (!t || kvs_parse_duration_units(t, KVS_NS_PER_MS, &ms) < 0 || ms == 0) ms = 10000;
    return (unsigned long long)ms + 5000;
}

/* Waits for the batch's callback at most limit_ms; 1 if it came. */
static int batch_wait(struct worker *w, struct batch_slot *slot, unsigned long long limit_ms)
{
    struct timespec ts = kvs_realtime_in(limit_ms * KVS_NS_PER_MS);
    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&slot->done))
        if (pthread_cond_timedwait(&w->cv, &w->lock, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&w->lock);
    return atomic_load(&slot->done);
}

/* Each key's status of a completed batch: checked and counted like a single op's. */
static void batch_account(struct worker *w, const struct batch_ctx *b)
{
    enum opkind k = b->do_put ? OP_PUT : OP_GET;
    for (size_t i = 0; i < b->n; i++) {
        struct keystate *ks = &w->ks[b->kidx[i]];
        ssize_t r = b->do_put ? b->status[i] : b->results[i];
        if (r == INT32_MIN) {
            atomic_fetch_add(&fig.status_unset, 1);
            continue;
        }
        if (b->do_put)
            note_put(ks, b->ver[i], (int)r);
        else
            check_get(w, b->keys[i], ks, r, b->bufs[i]);
        count_result(k, r, 0);
    }
}

static void batch_op(struct worker *w, struct batch_slot *slot, int do_put)
{
    enum opkind k = do_put ? OP_PUT : OP_GET;
    struct batch_ctx *b = batch_new(w, slot, do_put);
    if (!b) return;
    size_t n = b->n;
    b->base = new_ids(n);
    atomic_fetch_add(&fig.issued[k], n);
    atomic_fetch_add(&fig.batches, 1);
    int rc = do_put ? kvs_batch_put_async(client, n, b->keys, b->vals, b->lens, b->status,
                                          batch_done, b, NULL)
                    : kvs_batch_get_async(client, n, b->keys, b->bufs, b->lens, b->results,
                                          batch_done, b, NULL);
    if (rc < 0) {
        /* Refused as a call: nothing in flight, done will not run. */
        for (size_t i = 0; i < n; i++) {
            complete_id(b->base + i);
            count_result(k, rc, 0);
        }
        free(b);
        return;
    }
    unsigned long long limit_ms = batch_limit_ms();
    if (!batch_wait(w, slot, limit_ms)) {
        atomic_fetch_add(&fig.abandoned_batches, 1);
        fprintf(stderr, "kvstress: a %s batch did not complete within %llu ms\n", opname[k],
                limit_ms);
        return; /* b is leaked on purpose: the library might still write into it */
    }
    batch_account(w, b);
    free(b);
}

void *worker_main(void *arg)
{
    struct worker *w = arg;
    /* Batch slots for this thread: one per batch it may issue. */
    size_t nslots = w->quota / BATCH_KEYS + 1, used = 0;
    struct batch_slot *slots = calloc(nslots, sizeof(*slots));
    w->slots = slots;
    if (!slots) nslots = 0;
    uint64_t done = 0;
    while (done < w->quota && kvs_now_ns() < t_end) {
        uint64_t dice = rnd(w) % 100;
        int ki = (int)(rnd(w) % (uint64_t)opt.keys);
        int do_put = rnd(w) % 2 == 0;
        if (dice < 10) {
            int s = (int)(rnd(w) % SHARED_KEYS);
            single_op(w, shared_names[s], NULL, do_put, 0);
            done++;
        } else if (dice < 20 && used < nslots && done + BATCH_KEYS <= w->quota) {
            batch_op(w, &slots[used++], do_put);
            done += BATCH_KEYS;
        } else {
            single_op(w, w->names[ki], &w->ks[ki], do_put, dice < 35);
            done++;
        }
    }
    atomic_store(&w->finished, 1);
    return NULL;
}

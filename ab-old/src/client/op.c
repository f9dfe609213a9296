/*
 * op.c - an op's life after it is launched: per-key results, completion
 * (callback or waking the waiter), the completion thread for callbacks that
 * must not run inside the submitting call, and waiting.
 *
 * An op counts its parts: one per kvs_req in flight plus one for the
 * submitter; whoever drops the last part completes it. A waiter sleeps on
 * op->state (a futex word): OP_PENDING -> OP_SLEEPING when it goes to sleep,
 * -> OP_DONE at completion, after which only the waiter touches the op.
 */
#include "client_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"

void kvc_op_init(struct kvs_op *op, kvs_client *c, uint8_t opcode, size_t n, bool heap)
{
    memset(op, 0, sizeof(*op));
    op->c = c;
    op->opcode = opcode;
    op->n = n;
    op->heap = heap;
    atomic_init(&op->parts, 1); /* the submitter's part */
    atomic_init(&op->nok, 0);
    atomic_init(&op->state, OP_PENDING);
}

struct kvs_op *kvc_op_alloc(kvs_client *c, uint8_t opcode, size_t n)
{
    size_t size = sizeof(struct kvs_op) + n * sizeof(struct kvs_key_io) +
                  c->nservers * sizeof(struct kvs_req);
    struct kvs_op *op = malloc(size);
    if (!op) return NULL;
    kvc_op_init(op, c, opcode, n, true);
    op->keys = (struct kvs_key_io *)(op + 1);
    op->reqs = (struct kvs_req *)(op->keys + n);
    return op;
}

void kvc_op_free(struct kvs_op *op)
{
    if (op->heap) free(op);
}

/* Runs a finished op's callback (or wakes its waiter) and retires it. */
static void op_complete(struct kvs_op *op)
{
    kvs_client *c = op->c;
    int epoch = op->epoch;
    if (op->done) {
        op->done(op->arg, atomic_load(&op->nok));
        kvc_op_free(op);
        kvc_outstanding_dec(c, epoch);
        return;
    }
    kvc_outstanding_dec(c, epoch);
    /* After this store the waiter may free op: touch nothing but the futex word. */
    if (atomic_exchange_explicit(&op->state, OP_DONE, memory_order_acq_rel) == OP_SLEEPING)
        kvs_futex_wake_all(&op->state);
}

/* ---- the completion thread ---- */

void kvc_defer_init(kvs_client *c)
{
    c->defer_head = c->defer_tail = NULL;
    c->defer_started = false;
    c->defer_stop = false;
    pthread_cond_init(&c->defer_cv, NULL);
}

void kvc_defer_fini(kvs_client *c)
{
    pthread_mutex_lock(&c->defer_mu);
    c->defer_stop = true;
    bool started = c->defer_started;
    pthread_cond_signal(&c->defer_cv);
    pthread_mutex_unlock(&c->defer_mu);
    if (started) pthread_join(c->defer_thread, NULL);
    pthread_cond_destroy(&c->defer_cv);
    pthread_mutex_destroy(&c->defer_mu);
}

static void *defer_main(void *arg)
{
    kvs_client *c = arg;
    pthread_mutex_lock(&c->defer_mu);
    for (;;) {
        while (!c->defer_head && !c->defer_stop)
            pthread_cond_wait(&c->defer_cv, &c->defer_mu);
        struct kvs_op *op = c->defer_head;
        if (!op) break;
        c->defer_head = op->defer_next;
        if (!c->defer_head) c->defer_tail = NULL;
        pthread_mutex_unlock(&c->defer_mu);
        op_complete(op);
        pthread_mutex_lock(&c->defer_mu);
    }
    pthread_mutex_unlock(&c->defer_mu);
    return NULL;
}

/*
 * A callback must run on a library thread, never inside the call that
 * submitted the batch (the caller may hold a lock its callback takes).
 */
static void op_defer(struct kvs_op *op)
{
    kvs_client *c = op->c;
    pthread_mutex_lock(&c->defer_mu);
    if (!c->defer_started) {
        if (pthread_create(&c->defer_thread, NULL, defer_main, c) != 0) {
            pthread_mutex_unlock(&c->defer_mu);
            kvs_log(KVS_LOG_ERROR, "cannot start the completion thread; running a callback inline");
            op_complete(op);
            return;
        }
        c->defer_started = true;
    }
    op->defer_next = NULL;
    if (c->defer_tail)
        c->defer_tail->defer_next = op;
    else
        c->defer_head = op;
    c->defer_tail = op;
    pthread_cond_signal(&c->defer_cv);
    pthread_mutex_unlock(&c->defer_mu);
}

void kvc_op_put(struct kvs_op *op, bool from_submitter)
{
    if (atomic_fetch_sub_explicit(&op->parts, 1, memory_order_acq_rel) != 1) return;
    if (from_submitter && op->done)
        op_defer(op);
    else
        op_complete(op);
}

/* ---- results ---- */

/* The caller-visible result of key k. */
static ssize_t key_result(const struct kvs_op *op, const struct kvs_key_io *k)
{
    int32_t st = k->status;
    switch (op->opcode) {
    case KVS_OP_GET:
        if (st == 0) return (ssize_t)k->vlen;
        /* The size probe, kvs_get(c, key, NULL, 0): the value's length is the answer. */
        if (st == -ERANGE && k->buf == NULL && k->iovcnt == 0 && k->len == 0)
            return (ssize_t)k->vlen;
        return st;
    case KVS_OP_EXISTS:
        if (st == 1) return 1;
        if (st == 0 || st == -ENOENT) return 0;
        return st;
    default:
        return st;
    }
}

void kvc_op_set_result(struct kvs_op *op, uint32_t index, ssize_t result)
{
    if (op->out_ssz)
        op->out_ssz[index] = result;
    else
        op->out_int[index] = (int)result;
    if (result >= 0)
        atomic_fetch_add_explicit(&op->nok, 1, memory_order_relaxed);
    else
        kvc_note_error(op->c, (int)result);
}

void kvc_req_done(struct kvs_req *req)
{
    struct kvs_op *op = req->arg;
    for (uint32_t i = 0; i < req->n; i++)
        kvc_op_set_result(op, req->keys[i].index, key_result(op, &req->keys[i]));
    kvc_op_put(op, false);
}

/* ---- waiting ---- */

ssize_t kvc_op_wait(struct kvs_op *op)
{
    int state = atomic_load_explicit(&op->state, memory_order_acquire);
    while (state != OP_DONE) {
        if (state == OP_PENDING && !atomic_compare_exchange_weak(&op->state, &state, OP_SLEEPING))
            continue;
        kvs_futex_wait(&op->state, OP_SLEEPING);
        state = atomic_load_explicit(&op->state, memory_order_acquire);
    }
    return op->out_ssz == &op->single_result ? op->single_result : atomic_load(&op->nok);
}

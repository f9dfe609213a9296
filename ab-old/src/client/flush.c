/*
 * flush.c - the ops a client has in flight, for kvs_flush and kvs_close.
 *
 * Ops are counted per epoch: kvs_flush flips the epoch and waits for the old
 * one to drain, so ops started after it (a steady stream from other threads,
 * a callback chaining the next batch) count in the next epoch and cannot
 * starve it. kvs_flush also returns the first transport error seen since the
 * previous flush.
 */
#include "client_int.h"

#include "status.h"

#include <errno.h>
#include <time.h>

void kvc_flush_init(kvs_client *c)
{
    atomic_store(&c->outstanding[0], 0);
    atomic_store(&c->outstanding[1], 0);
    atomic_store(&c->epoch, 0);
    pthread_mutex_init(&c->flush_mu, NULL);
    atomic_store(&c->flush_waiters, 0);
    atomic_store(&c->first_error, 0);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
}

void kvc_flush_fini(kvs_client *c)
{
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->flush_mu);
    pthread_mutex_destroy(&c->mu);
}

void kvc_note_error(kvs_client *c, int status)
{
    if (!kvs_status_is_transport(status)) return;
    int expected = 0;
    atomic_compare_exchange_strong(&c->first_error, &expected, status);
}

int kvc_outstanding_inc(kvs_client *c)
{
    int e = atomic_load(&c->epoch);
    atomic_fetch_add(&c->outstanding[e], 1);
    return e;
}

/* Wakes kvs_flush/kvs_close waiters when an epoch's last op ends (lock only if someone waits). */
void kvc_outstanding_dec(kvs_client *c, int e)
{
    if (atomic_fetch_sub(&c->outstanding[e], 1) != 1) return;
    if (atomic_load(&c->flush_waiters) == 0) return;
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
}

long kvc_in_flight(kvs_client *c, int e)
{
    if (e >= 0) return atomic_load(&c->outstanding[e]);
    return atomic_load(&c->outstanding[0]) + atomic_load(&c->outstanding[1]);
}

/* 0 or -ETIMEDOUT. */
int kvc_wait_drained(kvs_client *c, int e, uint64_t deadline_ms)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->flush_waiters, 1);
    while (kvc_in_flight(c, e) > 0) {
        if (deadline_ms == 0) {
            pthread_cond_wait(&c->idle, &c->mu);
            continue;
        }
        uint64_t now = kvs_now_ms();
        if (now >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        uint64_t wait_ms = deadline_ms - now < 100 ? deadline_ms - now : 100;
        struct timespec ts = kvs_realtime_in(wait_ms * KVS_NS_PER_MS);
        pthread_cond_timedwait(&c->idle, &c->mu, &ts);
    }
    atomic_fetch_sub(&c->flush_waiters, 1);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int kvs_flush(kvs_client *c)
{
    if (!c) return -EINVAL;
    /* Ops started from now on count in the other epoch; wait for this one's. */
    pthread_mutex_lock(&c->flush_mu);
    int e = atomic_load(&c->epoch);
    atomic_store(&c->epoch, !e);
    kvc_wait_drained(c, e, 0);
    pthread_mutex_unlock(&c->flush_mu);
    return atomic_exchange(&c->first_error, 0);
}

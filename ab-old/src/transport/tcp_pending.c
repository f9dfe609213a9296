/*
 * tcp_pending.c - a connection's pending table: its frames on the wire, by
 * id (uthash, under conn->mu). A frame leaves it once: taken by the reader
 * to read its reply, expired past its deadline, or failed with the rest when
 * the connection is lost; whoever removes it is the only one to touch its
 * keys from then on.
 */
#include "tcp_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

void tcp_pending_add(struct tcp_conn *c, struct tcp_job *job)
{
    for (uint32_t i = 0; i < job->nframes; i++)
        HASH_ADD(hh, c->pending, id, sizeof(job->frames[i].id), &job->frames[i]);
    atomic_fetch_add_explicit(&c->n_frames, job->nframes, memory_order_relaxed);
}

/* Takes the frame with this id out of the pending table (NULL: expired or unknown). */
struct tcp_frame *tcp_pending_take(struct tcp_conn *c, uint64_t id)
{
    struct tcp_frame *f = NULL;
    pthread_mutex_lock(&c->mu);
    HASH_FIND(hh, c->pending, &id, sizeof(id), f);
    if (f) HASH_DELETE(hh, c->pending, f);
    pthread_mutex_unlock(&c->mu);
    return f;
}

/* Fails the frames whose deadline has passed; called by the reader. */
void tcp_pending_expire(struct tcp_conn *c, uint64_t now)
{
    struct tcp_frame *expired = NULL, *f, *tmp;
    pthread_mutex_lock(&c->mu);
    HASH_ITER(hh, c->pending, f, tmp)
    {
        if (f->deadline_ms > now) continue;
        HASH_DELETE(hh, c->pending, f);
        HASH_ADD(hh, expired, id, sizeof(f->id), f);
    }
    pthread_mutex_unlock(&c->mu);
    HASH_ITER(hh, expired, f, tmp)
    {
        HASH_DELETE(hh, expired, f);
        atomic_fetch_add(&c->n_timeouts, 1);
        kvs_log(KVS_LOG_WARN, "tcp %s: request %llu timed out", c->ep.name,
                (unsigned long long)f->id);
        tcp_frame_finish(f, -ETIMEDOUT);
    }
}

void tcp_conn_kill(struct tcp_conn *c, uint64_t gen, int status)
{
    pthread_mutex_lock(&c->mu);
    if (!c->up || c->gen != gen) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->up = false;
    shutdown(c->fd, SHUT_RDWR); /* wakes the reader and any blocked sender */
    struct tcp_frame *list = c->pending;
    c->pending = NULL;
    /* Closing the client or dropping the connection on purpose is no loss: debug, not counted. */
    bool closing = c->stop || c->dropping;
    c->dropping = false;
    pthread_mutex_unlock(&c->mu);

    /* Said before it is counted: whoever sees the count can also read the line. */
    kvs_log(closing ? KVS_LOG_DEBUG : KVS_LOG_WARN, "tcp %s: connection %s (%s)", c->ep.name,
            closing ? "closed" : "lost", strerror(-status));
    if (!closing) atomic_fetch_add(&c->n_conn_lost, 1);
    struct tcp_frame *f, *tmp;
    HASH_ITER(hh, list, f, tmp)
    {
        HASH_DELETE(hh, list, f);
        tcp_frame_finish(f, status);
    }
}

void tcp_pending_forget(struct tcp_conn *c)
{
    HASH_CLEAR(hh, c->pending);
}

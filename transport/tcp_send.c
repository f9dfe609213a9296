/*
 * tcp_send.c - submitting a request on a TCP connection: its job's frames
 * are registered in the pending table, then sent by the submitting thread
 * in one sendmsg loop, or queued for the connection's writer thread (see
 * tcp_int.h: a reader thread never blocks in a send). Sends on a connection
 * are serialised by send_mu; many frames may be in flight.
 */
#include "tcp_int.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

/*
 * Writer thread: sends the queued jobs (the rest of them, if a reader sent a
 * part), in order. A job stays at the head of the queue until it is sent, so
 * an inline sender that finds the queue non-empty queues behind it instead
 * of writing into the middle of its frame.
 */
static void *writer_main(void *arg)
{
    struct tcp_conn *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->sendq_head && !c->stop)
            pthread_cond_wait(&c->send_cv, &c->mu);
        if (!c->sendq_head) break; /* stopping, and nothing left */
        pthread_mutex_unlock(&c->mu);

        pthread_mutex_lock(&c->send_mu);
        pthread_mutex_lock(&c->mu);
        struct tcp_job *job = c->sendq_head; /* only this thread pops: still there */
        bool live = c->up && c->gen == job->gen;
        int fd = c->fd;
        pthread_mutex_unlock(&c->mu);
        /* If the connection died meanwhile, its loss already failed the job's frames. */
        int rc = live ? tcp_send_iov(c, fd, &job->iov, &job->niov, &job->pass_fd, 0) : 0;
        pthread_mutex_lock(&c->mu);
        c->sendq_head = job->next_send;
        if (!c->sendq_head) c->sendq_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->send_mu);
        if (rc < 0) tcp_conn_kill(c, job->gen, rc);
        tcp_job_put(job);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* With c->mu held: hands job to the writer thread, at the tail or (the rest of a partly sent job)
 * the head. */
static void queue_job(struct tcp_conn *c, struct tcp_job *job, bool at_head)
{
    if (at_head) {
        job->next_send = c->sendq_head;
        c->sendq_head = job;
        if (!c->sendq_tail) c->sendq_tail = job;
    } else {
        job->next_send = NULL;
        if (c->sendq_tail)
            c->sendq_tail->next_send = job;
        else
            c->sendq_head = job;
        c->sendq_tail = job;
    }
    pthread_cond_signal(&c->send_cv);
}

/* Takes send_mu; a reader only if the socket is free right now (it must not wait for it). */
static bool lock_send(struct tcp_conn *c, bool reader)
{
    if (reader) return pthread_mutex_trylock(&c->send_mu) == 0;
    pthread_mutex_lock(&c->send_mu);
    return true;
}

enum { JOB_SEND_NOW, JOB_QUEUED };

/*
 * With c->mu held: registers job's frames in the pending table if connection
 * gen is still the current one, and says who sends it: this thread
 * (JOB_SEND_NOW: it holds send_mu and nothing is queued before it) or the
 * writer (JOB_QUEUED). A negative code when the connection is gone or a
 * reader cannot start the writer: nothing was registered.
 */
static int register_job(struct tcp_conn *c, struct tcp_job *job, uint64_t gen, bool reader,
                        bool have_send)
{
    if (!c->up || c->gen != gen) return -ECONNRESET;
    if (reader && !c->writer_started) {
        if (pthread_create(&c->writer, NULL, writer_main, c) != 0) return -ENOMEM;
        c->writer_started = true;
    }
    tcp_pending_add(c, job);
    job->gen = gen;
    /* Queued jobs go first (one may be partly sent): queue behind them. */
    if (!have_send || c->sendq_head) {
        queue_job(c, job, false);
        return JOB_QUEUED;
    }
    return JOB_SEND_NOW;
}

/*
 * Sends job on fd, holding send_mu: 0 once sent, a negative code if the
 * connection failed, or JOB_QUEUED. A reader does not wait for the socket:
 * when its buffer is full, the writer sends the rest. It goes at the head of
 * the queue (jobs queued meanwhile by other threads' readers have sent
 * nothing yet); we still hold send_mu, so nobody has written after our
 * partial frame.
 */
static int send_job(struct tcp_conn *c, struct tcp_job *job, int fd, bool reader)
{
    struct iovec *iov = job->iov;
    int niov = job->niov;
    int rc = tcp_send_iov(c, fd, &iov, &niov, &job->pass_fd, reader ? MSG_DONTWAIT : 0);
    if (rc != -EAGAIN) return rc;
    job->iov = iov;
    job->niov = niov;
    pthread_mutex_lock(&c->mu);
    queue_job(c, job, true);
    pthread_mutex_unlock(&c->mu);
    return JOB_QUEUED;
}

void tcp_send_req(struct tcp_conn *c, struct kvs_req *req, const struct kvs_limits *lim,
                  uint64_t gen)
{
    struct tcp_job *job = NULL;
    /* The region of connection gen, if it has one: values then go through it (tcp_shm.c). */
    pthread_mutex_lock(&c->mu);
    struct tcp_shm *shm = c->gen == gen ? tcp_shm_ref(c->shm) : NULL;
    pthread_mutex_unlock(&c->mu);
    /* Frames, headers and iovecs are built before taking any lock. */
    int rc = tcp_shm_job_new(c, shm, req, lim, &job);
    tcp_shm_unref(shm); /* a job through it holds its own reference */
    if (rc == 0 && !job) rc = tcp_job_new(c, req, lim, &job);
    if (rc < 0) {
        tcp_fail_req(req, rc);
        return;
    }
    if (!job) { /* every key refused (too big for any frame) */
        req->status = 0;
        req->done(req);
        return;
    }
    tcp_send_job(c, job, gen);
}

void tcp_send_job(struct tcp_conn *c, struct tcp_job *job, uint64_t gen)
{
    struct kvs_req *req = job->req;
    bool reader = tcp_on_reader_thread;
    bool have_send = lock_send(c, reader);
    pthread_mutex_lock(&c->mu);
    int how = register_job(c, job, gen, reader, have_send);
    int fd = c->fd;
    pthread_mutex_unlock(&c->mu);
    int sent = how == JOB_SEND_NOW ? send_job(c, job, fd, reader) : 0;
    if (have_send) pthread_mutex_unlock(&c->send_mu);

    if (how < 0) { /* nothing of it is known to the connection */
        /* Nothing of it was sent: its room in the region goes back at once. */
        for (uint32_t i = 0; job->shm && i < job->nframes; i++)
            tcp_shm_answered(job->shm, job->frames[i].id);
        tcp_shm_unref(job->shm);
        free(job);
        tcp_fail_req(req, how);
    } else if (how == JOB_SEND_NOW && sent != JOB_QUEUED) {
        if (sent < 0) tcp_conn_kill(c, gen, sent); /* fails our frames too, unless answered */
        tcp_job_put(job);                          /* the sender's reference */
    }
}

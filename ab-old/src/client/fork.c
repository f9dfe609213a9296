/*
 * fork.c - libkvstore across fork(): the list of live clients and the
 * pthread_atfork handlers, registered once, that reach their connections.
 *
 * In the parent nothing changes. The child has one thread: every connection
 * becomes "reconnect on first use" (each transport's fork_child closes its
 * socket copies, never shutting them down, which would cut the parent's
 * connection), the parent's ops in flight are forgotten (their waiters and
 * callbacks live in the parent), and the completion thread is started again
 * when needed.
 */
#include "client_int.h"

/* Every live client, so that the fork handlers can reach their connections. */
static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static kvs_client *clients;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&clients_mu);
    for (kvs_client *c = clients; c; c = c->next_client) {
        pthread_mutex_lock(&c->defer_mu);
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_prepare)
                c->servers[s].ops->fork_prepare(c->servers[s].conn);
    }
}

static void fork_parent(void)
{
    for (kvs_client *c = clients; c; c = c->next_client) {
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_parent) c->servers[s].ops->fork_parent(c->servers[s].conn);
        pthread_mutex_unlock(&c->defer_mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

static void fork_child(void)
{
    for (kvs_client *c = clients; c; c = c->next_client) {
        for (size_t s = 0; s < c->nservers; s++)
            if (c->servers[s].ops->fork_child) c->servers[s].ops->fork_child(c->servers[s].conn);
        kvc_flush_init(c);
        kvc_defer_init(c);
        pthread_mutex_unlock(&c->defer_mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

static void atfork_register(void)
{
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        kvs_log(KVS_LOG_WARN, "pthread_atfork failed: a forked child must open its own client");
}

void kvc_fork_track(kvs_client *c)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&clients_mu);
    c->next_client = clients;
    clients = c;
    pthread_mutex_unlock(&clients_mu);
}

void kvc_fork_untrack(kvs_client *c)
{
    pthread_mutex_lock(&clients_mu);
    for (kvs_client **pp = &clients; *pp; pp = &(*pp)->next_client) {
        if (*pp == c) {
            *pp = c->next_client;
            break;
        }
    }
    pthread_mutex_unlock(&clients_mu);
}

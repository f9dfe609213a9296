/*
 * server.c - a kvstored's shared state comes up with its store and goes
 * down with it.
 */
#include "server.h"

#include <string.h>

#include "clock.h"

int kvsd_server_init(struct kvsd_server *srv, size_t memory_bytes,
                     const struct kvsd_server_limits *limits)
{
    memset(srv, 0, sizeof(*srv));
    srv->limits = *limits;
    srv->started_ns = kvs_now_ns();
    return kvsd_store_create(memory_bytes, &srv->store);
}

void kvsd_server_fini(struct kvsd_server *srv)
{
    kvsd_store_destroy(srv->store);
    srv->store = NULL;
}

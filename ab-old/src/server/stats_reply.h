/*
 * stats_reply.h - kvstored's STATS reply: every counter of the server, the store
 * and its slab classes as "name value\n" lines, in the order and with the
 * names docs/server.md lists ("Counters"), then the lines of the
 * stats_extra hook (the RDMA side's).
 */
#ifndef KVSD_STATS_REPLY_H
#define KVSD_STATS_REPLY_H

#include <stddef.h>

#include "server.h"

/* The STATS body, malloc'ed into *text (*len bytes, no NUL). 0 or -ENOMEM. */
int kvsd_stats_text(struct kvsd_server *srv, char **text, size_t *len);

#endif /* KVSD_STATS_REPLY_H */

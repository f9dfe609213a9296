/*
 * clients_reply.h - kvstored's CLIENTS reply: one "key=value ..." line per
 * connection (docs/server.md "Clients" names the fields), newest first,
 * then "# listed N omitted M".
 */
#ifndef KVSD_CLIENTS_REPLY_H
#define KVSD_CLIENTS_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

#define KVSD_CLIENTS_LINE_MAX    400u /* the longest connection line, newline included */
#define KVSD_CLIENTS_TRAILER_MAX 64u  /* room kept for the "# listed N omitted M" line */

/*
 * Writes into buf[0..cap) (cap >= KVSD_CLIENTS_TRAILER_MAX; no NUL) the
 * lines of srv's connections at now_ms (kvs_now_ms), at most
 * KVS_WIRE_CLIENTS_MAX and as many as leave room for the trailer, then the
 * trailer counting those left out. Returns the bytes written.
 */
size_t kvsd_clients_text(const struct kvsd_server *srv, uint64_t now_ms, char *buf, size_t cap);

#endif /* KVSD_CLIENTS_REPLY_H */

/*
 * route.h - which server a key lives on: rendezvous (highest random weight)
 * hashing of (key, "host:port").
 *
 * Every key scores every server and goes to the highest score. The choice
 * depends only on the key and the servers' names, not on their order in the
 * list nor on the process: the same key goes to the same server in every
 * client. Removing a server moves only the keys that were on it.
 */
#ifndef KVS_ROUTE_H
#define KVS_ROUTE_H

#include <stddef.h>
#include <stdint.h>

/* Hash of a server's routing name ("host:port"); computed once per server. */
uint64_t kvs_route_server_hash(const char *name);
/* Hash of a key's bytes; computed once per key. */
uint64_t kvs_route_key_hash(const char *key, size_t klen);
/* Index in servers[0..n) of the server that owns the key (0 when n <= 1). */
size_t kvs_route_pick(const uint64_t *servers, size_t n, uint64_t key_hash);

#endif /* KVS_ROUTE_H */

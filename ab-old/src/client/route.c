/*
 * route.c - rendezvous hashing of keys onto servers (see route.h).
 *
 * Key and server names are hashed with 64-bit FNV-1a, and each (key, server)
 * pair is scored by a strong 64-bit finaliser (splitmix64's) of the two
 * hashes combined, so that scores of one key on different servers are
 * independent enough to spread keys evenly.
 */
#include "route.h"

#include <string.h>

#include "hash.h"

uint64_t kvs_route_server_hash(const char *name)
{
    return kvs_mix64(kvs_fnv1a(name, strlen(name)) + 0x9e3779b97f4a7c15ull);
}

uint64_t kvs_route_key_hash(const char *key, size_t klen)
{
    return kvs_mix64(kvs_fnv1a(key, klen));
}

size_t kvs_route_pick(const uint64_t *servers, size_t n, uint64_t key_hash)
{
    size_t best = 0;
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t score = kvs_mix64(key_hash ^ servers[i]);
        /* Ties (astronomically rare) go to the larger server hash: still order-independent. */
        if (i == 0 || score > best_score || (score == best_score && servers[i] > servers[best])) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

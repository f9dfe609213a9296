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

static uint64_t fnv1a(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* splitmix64's finaliser: a bijection that mixes every input bit into every output bit. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t kvs_route_server_hash(const char *name)
{
    return mix64(fnv1a(name, strlen(name)) + 0x9e3779b97f4a7c15ull);
}

uint64_t kvs_route_key_hash(const char *key, size_t klen)
{
    return mix64(fnv1a(key, klen));
}

size_t kvs_route_pick(const uint64_t *servers, size_t n, uint64_t key_hash)
{
    size_t best = 0;
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t score = mix64(key_hash ^ servers[i]);
        /* Ties (astronomically rare) go to the larger server hash: still order-independent. */
        if (i == 0 || score > best_score || (score == best_score && servers[i] > servers[best])) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/*
 * hash.h - the tree's one non-cryptographic hash: 64-bit FNV-1a over bytes,
 * and splitmix64's finaliser for where the low bits must mix (hash tables,
 * rendezvous scores). Client routing depends on these values staying as
 * they are: a change moves keys between servers.
 */
#ifndef KVBATCH_COMMON_HASH_H
#define KVBATCH_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KVS_FNV1A_OFFSET 14695981039346656037ull
#define KVS_FNV1A_PRIME  1099511628211ull

/* FNV-1a of data[0, len) continued from h (KVS_FNV1A_OFFSET to start). */
static inline uint64_t kvs_fnv1a_more(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * KVS_FNV1A_PRIME;
    return h;
}

static inline uint64_t kvs_fnv1a(const void *data, size_t len)
{
    return kvs_fnv1a_more(KVS_FNV1A_OFFSET, data, len);
}

/* splitmix64's finaliser: a bijection that mixes every input bit into every output bit. */
static inline uint64_t kvs_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif /* KVBATCH_COMMON_HASH_H */

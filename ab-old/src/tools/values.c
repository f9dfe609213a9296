/*
 * values.c - the self-checking values of values.h: one function gives the
 * byte at any offset of the value of (key, version, len); filling, stamping
 * the ends and both checks walk it.
 */
#include "values.h"

#include <stdint.h>
#include <string.h>

#include "hash.h"

#define HEADER 12 /* version (4 bytes) + tag (8 bytes) */

/* What every byte of one value derives from. */
struct pattern {
    unsigned char header[HEADER];
    uint64_t seed;
};

static struct pattern pattern_of(const char *key, unsigned version, size_t len)
{
    struct pattern p;
    p.seed = kvs_fnv1a(key, strlen(key)); /* FNV-1a: enough to catch torn or foreign bytes */
    p.seed = kvs_fnv1a_more(p.seed, &version, sizeof(version));
    uint64_t lenv = len;
    uint64_t tag = kvs_fnv1a_more(p.seed, &lenv, sizeof(lenv));
    memcpy(p.header, &version, 4);
    memcpy(p.header + 4, &tag, 8);
    return p;
}

static unsigned char byte_at(const struct pattern *p, size_t i)
{
    if (i < HEADER) return p->header[i];
    uint64_t x = p->seed + i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

void kvval_fill(void *buf, size_t len, const char *key, unsigned version)
{
    struct pattern p = pattern_of(key, version, len);
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        b[i] = byte_at(&p, i);
}

int kvval_check(const void *buf, size_t len, const char *key, unsigned *version)
{
    if (len < 4) return 1;
    unsigned v;
    memcpy(&v, buf, 4);
    struct pattern p = pattern_of(key, v, len);
    const unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        if (b[i] != byte_at(&p, i)) return 0;
    if (version) *version = v;
    return 1;
}

/* The offsets of the ends: [0, n) and [len - n, len), n = KVVAL_ENDS or less. */
static size_t ends_of(size_t len)
{
    return len < 2 * KVVAL_ENDS ? len : KVVAL_ENDS;
}

void kvval_stamp_ends(void *buf, size_t len, const char *key, unsigned version)
{
    struct pattern p = pattern_of(key, version, len);
    unsigned char *b = buf;
    size_t n = ends_of(len);
    for (size_t k = 0; k < n; k++) {
        b[k] = byte_at(&p, k);
        b[len - 1 - k] = byte_at(&p, len - 1 - k);
    }
}

int kvval_check_ends(const void *buf, size_t len, const char *key, unsigned version)
{
    struct pattern p = pattern_of(key, version, len);
    const unsigned char *b = buf;
    size_t n = ends_of(len);
    for (size_t k = 0; k < n; k++)
        if (b[k] != byte_at(&p, k) || b[len - 1 - k] != byte_at(&p, len - 1 - k)) return 0;
    return 1;
}

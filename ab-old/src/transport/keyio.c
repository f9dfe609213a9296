/*
 * keyio.c - a key's value as the transports see it: one buffer, or (a
 * scatter-gather key, kvs_batch_putv / _getv) a list of segments. The copies
 * for a transport that must stage a value (a bounce buffer) live here once.
 */
#include <string.h>

#include "transport.h"

void kvs_key_gather(const struct kvs_key_io *k, void *dst)
{
    if (k->iovcnt == 0) {
        if (k->len) memcpy(dst, k->val, k->len);
        return;
    }
    uint8_t *at = dst;
    for (uint32_t j = 0; j < k->iovcnt; j++) {
        if (k->iov[j].iov_len == 0) continue;
        memcpy(at, k->iov[j].iov_base, k->iov[j].iov_len);
        at += k->iov[j].iov_len;
    }
}

void kvs_key_scatter(const struct kvs_key_io *k, const void *src, size_t len)
{
    if (k->iovcnt == 0) {
        if (len) memcpy(k->buf, src, len);
        return;
    }
    const uint8_t *from = src;
    for (uint32_t j = 0; j < k->iovcnt && len > 0; j++) {
        size_t take = k->iov[j].iov_len < len ? k->iov[j].iov_len : len;
        if (take == 0) continue;
        memcpy(k->iov[j].iov_base, from, take);
        from += take;
        len -= take;
    }
}

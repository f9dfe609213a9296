/*
 * ops.c - the per-key rules of ops.h over the store, and the counters each
 * outcome moves.
 */
#include "ops.h"

#include <errno.h>
#include <regex.h>
#include <string.h>

#include "wire.h"

/* 0 for a key the store may hold; -EINVAL (counted) for any other. */
static int check_key(struct kvsd_server *srv, const uint8_t *key, uint16_t klen)
{
    if (key && klen > 0 && klen <= KVS_WIRE_MAX_KEY && !memchr(key, 0, klen)) return 0;
    srv->counters.key_invalid++;
    return -EINVAL;
}

int kvsd_ops_put_reserve(struct kvsd_server *srv, const uint8_t *key, uint16_t klen, uint32_t len,
                         struct kvsd_item **out)
{
    struct kvsd_server_counters *k = &srv->counters;
    *out = NULL;
    k->keys[KVS_OP_PUT]++;
    int rc = check_key(srv, key, klen);
    if (rc < 0) return rc;
    if (len > srv->limits.max_object) {
        k->put_too_big++;
        return -E2BIG;
    }
    rc = kvsd_store_reserve(srv->store, key, klen, len, out);
    if (rc == 0) return 0;
    *out = NULL;
    if (rc == -E2BIG) k->put_too_big++;
    if (rc == -ENOSPC) k->put_no_space++;
    if (rc == -ENOMEM) k->errors_nomem++;
    return rc;
}

int kvsd_ops_put_commit(struct kvsd_server *srv, struct kvsd_item *it)
{
    int rc = kvsd_store_commit(srv->store, it);
    if (rc == -ENOMEM) srv->counters.errors_nomem++;
    return rc;
}

void kvsd_ops_put_abort(struct kvsd_server *srv, struct kvsd_item *it)
{
    kvsd_store_abort(srv->store, it);
}

void kvsd_ops_put_expire(struct kvsd_server *srv, struct kvsd_item *it)
{
    srv->counters.put_expired++;
    kvsd_store_abort(srv->store, it);
}

int kvsd_ops_get(struct kvsd_server *srv, const uint8_t *key, uint16_t klen, uint32_t cap,
                 struct kvsd_item **out, uint32_t *len)
{
    struct kvsd_server_counters *k = &srv->counters;
    *out = NULL;
    *len = 0;
    k->keys[KVS_OP_GET]++;
    int rc = check_key(srv, key, klen);
    if (rc < 0) return rc;
    struct kvsd_item *it = kvsd_store_lookup(srv->store, key, klen, 1);
    if (!it) {
        k->get_misses++;
        return -ENOENT;
    }
    k->get_hits++;
    *len = kvsd_item_len(it);
    if (*len > cap) {
        k->get_range++;
        kvsd_store_unpin(srv->store, it);
        return -ERANGE;
    }
    *out = it;
    return 0;
}

void kvsd_ops_get_done(struct kvsd_server *srv, struct kvsd_item *it)
{
    kvsd_store_unpin(srv->store, it);
}

int kvsd_ops_exists(struct kvsd_server *srv, const uint8_t *key, uint16_t klen)
{
    srv->counters.keys[KVS_OP_EXISTS]++;
    int rc = check_key(srv, key, klen);
    if (rc < 0) return rc;
    return kvsd_store_lookup(srv->store, key, klen, 0) ? 1 : 0;
}

int kvsd_ops_remove(struct kvsd_server *srv, const uint8_t *key, uint16_t klen)
{
    srv->counters.keys[KVS_OP_REMOVE]++;
    int rc = check_key(srv, key, klen);
    if (rc < 0) return rc;
    return kvsd_store_remove(srv->store, key, klen);
}

/* kvsd_store_remove_if's test: the key (not NUL-terminated) against a compiled expression. */
static int key_matches(const uint8_t *key, uint16_t klen, void *arg)
{
    char k[KVS_WIRE_MAX_KEY + 1];
    memcpy(k, key, klen);
    k[klen] = '\0';
    return regexec(arg, k, 0, NULL, 0) == 0;
}

int kvsd_ops_remove_matching(struct kvsd_server *srv, const uint8_t *pattern, uint16_t plen,
                             uint32_t *removed)
{
    *removed = 0;
    srv->counters.keys[KVS_OP_REMOVE_MATCHING]++;
    int rc = check_key(srv, pattern, plen); /* a pattern travels as a key: the same limits */
    if (rc < 0) return rc;
    char text[KVS_WIRE_MAX_KEY + 1];
    memcpy(text, pattern, plen);
    text[plen] = '\0';
    regex_t re;
    if (regcomp(&re, text, REG_EXTENDED | REG_NOSUB) != 0) return -EINVAL;
    uint64_t n = kvsd_store_remove_if(srv->store, key_matches, &re);
    regfree(&re);
    srv->counters.removed_matching += n;
    *removed = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    return 0;
}

void kvsd_ops_refused(struct kvsd_server *srv, uint8_t opcode)
{
    if (opcode >= KVS_OP_PUT && opcode <= KVS_OP_REMOVE) srv->counters.keys[opcode]++;
}

/*
 * key_rules.h - one table of single-key requests with the status and the
 * STATS counters kvstored's per-key rules (server/ops.h) give them, for
 * every path that serves keys: test_server_raw sends them as TCP frames,
 * and an RDMA test can send the same ones as RESERVE/PULL and LEASE/PUSH
 * entries and expect the same answers and counters.
 *
 * Run against a kvstored started with KVT_KEY_RULES_ARGS, after a PUT of
 * KVT_KEY_RULES_PRESENT with a value of KVT_KEY_RULES_PRESENT_LEN bytes.
 * Each case moves keys_put or keys_get by one, the counters it names by
 * one, and no other of kvt_key_rule_counters.
 */
#ifndef KVT_KEY_RULES_H
#define KVT_KEY_RULES_H

#include <errno.h>
#include <stdint.h>

#include "wire.h"

#define KVT_KEY_RULES_MAX_OBJECT  65536u
#define KVT_KEY_RULES_ARGS        "--memory 16M --max-object 64K"
#define KVT_KEY_RULES_PRESENT     "present"
#define KVT_KEY_RULES_PRESENT_LEN 100u

struct kvt_key_rule {
    const char *what;
    uint8_t op; /* KVS_OP_PUT (len: value bytes) or KVS_OP_GET (len: capacity) */
    const char *key;
    uint16_t klen;
    uint32_t len;
    int32_t status;          /* the key's status */
    uint32_t reply_len;      /* the status's len field (a GET's value length, -ERANGE too) */
    const char *counters[2]; /* what it moves besides keys_*, NULL-padded */
};

/* Every STATS counter a per-key rule may move (besides keys_put, keys_get). */
static const char *const kvt_key_rule_counters[] = {
    "get_hits",     "get_misses",  "get_range",    "put_too_big",
    "put_no_space", "key_invalid", "errors_nomem",
};

static const struct kvt_key_rule kvt_key_rules[] = {
    {"PUT, a NUL inside the key", KVS_OP_PUT, "a\0b", 3, 4, -EINVAL, 0, {"key_invalid"}},
    {"PUT, a key of one NUL", KVS_OP_PUT, "\0", 1, 4, -EINVAL, 0, {"key_invalid"}},
    {"PUT, over --max-object",
     KVS_OP_PUT,
     "big",
     3,
     KVT_KEY_RULES_MAX_OBJECT + 1,
     -E2BIG,
     0,
     {"put_too_big"}},
    {"PUT, exactly --max-object", KVS_OP_PUT, "max", 3, KVT_KEY_RULES_MAX_OBJECT, 0, 0, {NULL}},
    {"GET, a NUL inside the key", KVS_OP_GET, "present\0", 8, 1000, -EINVAL, 0, {"key_invalid"}},
    {"GET, absent", KVS_OP_GET, "absent", 6, 1000, -ENOENT, 0, {"get_misses"}},
    {"GET, capacity one short",
     KVS_OP_GET,
     KVT_KEY_RULES_PRESENT,
     7,
     KVT_KEY_RULES_PRESENT_LEN - 1,
     -ERANGE,
     KVT_KEY_RULES_PRESENT_LEN,
     {"get_hits", "get_range"}},
    {"GET, capacity 0 (a length probe)",
     KVS_OP_GET,
     KVT_KEY_RULES_PRESENT,
     7,
     0,
     -ERANGE,
     KVT_KEY_RULES_PRESENT_LEN,
     {"get_hits", "get_range"}},
    {"GET, found",
     KVS_OP_GET,
     KVT_KEY_RULES_PRESENT,
     7,
     KVT_KEY_RULES_PRESENT_LEN,
     0,
     KVT_KEY_RULES_PRESENT_LEN,
     {"get_hits"}},
};

#endif /* KVT_KEY_RULES_H */

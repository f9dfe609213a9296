/*
 * fuzz_wire.c - libFuzzer target for the wire decoder.
 *
 * Feeds arbitrary bytes to the whole-frame request parser and to the
 * piecewise decoders a streaming reader uses. Every byte an accepted entry
 * points at is read (so ASan sees any overrun), and an accepted request
 * frame must re-encode to exactly the bytes it was parsed from.
 *
 * The same bytes, taken as one RDMA control message (header, then the body
 * one SEND delivered), go through kvs_wire_ctrl_hdr_decode and the decoder
 * of their opcode, as transport/rdma*.c and server/rdma*.c call them:
 * RESERVE/LEASE key entries, COMMIT/RELEASE tokens, PULL/PUSH remote
 * entries, the slots of RESERVE/LEASE replies, the status entries of the
 * other replies, ERROR bodies. Whatever a decoder accepts must re-encode,
 * with the matching encoder, to the bytes it was decoded from.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct rebuild {
    uint8_t *out;
    size_t len;
    uint8_t opcode;
    unsigned sum;
};

static int visit(void *arg, uint32_t index, const struct kvs_wire_item *item)
{
    struct rebuild *r = arg;
    (void)index;
    for (uint16_t i = 0; i < item->klen; i++)
        r->sum += item->key[i];
    if (item->val)
        for (uint32_t i = 0; i < item->len; i++)
            r->sum += item->val[i];
    kvs_wire_entry_encode(r->out + r->len, item->klen, item->len);
    r->len += KVS_WIRE_ENTRY_LEN;
    memcpy(r->out + r->len, item->key, item->klen);
    r->len += item->klen;
    if (item->val) {
        memcpy(r->out + r->len, item->val, item->len);
        r->len += item->len;
    }
    if (item->shm) {
        kvs_wire_shm_off_encode(r->out + r->len, item->shm_region, item->shm_off);
        r->len += KVS_WIRE_SHM_OFF_LEN;
    }
    return 0;
}

/* Walks a PULL/PUSH body as kvstored does; every accepted entry stays inside it. */
static void walk_remote_entries(const uint8_t *body, uint32_t body_len, uint32_t count)
{
    size_t off = 0;
    unsigned sum = 0;
    for (uint32_t i = 0; i < count && i < KVS_WIRE_PUSH_MAX_KEYS; i++) {
        size_t before = off;
        struct kvs_wire_remote_entry e;
        if (kvs_wire_remote_entry_decode(body, body_len, &off, &e) < 0) {
            if (off != before) abort(); /* a refused entry moves nothing */
            return;
        }
        if (off > body_len ||
            off - before != (size_t)KVS_WIRE_ENTRY_LEN + e.klen + KVS_WIRE_PUSH_DST_LEN ||
            e.klen == 0 || e.klen > KVS_WIRE_MAX_KEY || e.key != body + before + KVS_WIRE_ENTRY_LEN)
            abort();
        /* what the client's encoder makes of the decoded entry is the same bytes */
        uint8_t again[KVS_WIRE_ENTRY_LEN + KVS_WIRE_MAX_KEY + KVS_WIRE_PUSH_DST_LEN];
        if (kvs_wire_remote_entry_encode(again, &e) != off - before ||
            memcmp(again, body + before, off - before) != 0)
            abort();
        for (uint16_t j = 0; j < e.klen; j++)
            sum += e.key[j];
    }
    (void)sum;
}

/* Walks a RESERVE/LEASE body as kvstored does; each accepted entry re-encodes to its bytes. */
static void walk_key_entries(const uint8_t *body, uint32_t body_len, uint32_t count)
{
    size_t off = 0;
    unsigned sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t before = off;
        struct kvs_wire_item it;
        if (kvs_wire_key_entry_decode(body, body_len, &off, &it) < 0) {
            if (off != before) abort(); /* a refused entry moves nothing */
            return;
        }
        if (off > body_len || it.key != body + before + KVS_WIRE_ENTRY_LEN || it.val ||
            it.klen == 0 || it.klen > KVS_WIRE_MAX_KEY)
            abort();
        uint8_t again[KVS_WIRE_ENTRY_LEN + KVS_WIRE_MAX_KEY];
        if (kvs_wire_key_entry_encode(again, it.key, it.klen, it.len) != off - before ||
            memcmp(again, body + before, off - before) != 0)
            abort();
        for (uint16_t j = 0; j < it.klen; j++)
            sum += it.key[j];
    }
    (void)sum;
}

/*
 * Fixed-size entries (COMMIT/RELEASE tokens, reply slots and statuses):
 * count of them fill the body exactly or the message is not walked; each
 * accepted one re-encodes to its bytes.
 */
static void walk_fixed_entries(const struct kvs_wire_hdr *h, const uint8_t *body)
{
    uint8_t op = h->opcode & (uint8_t)~KVS_OP_REPLY;
    int reply = (h->opcode & KVS_OP_REPLY) != 0;
    int slots = reply && (op == KVS_OP_RDMA_RESERVE || op == KVS_OP_RDMA_LEASE);
    size_t size = !reply ? KVS_WIRE_TOKEN_LEN : slots ? KVS_WIRE_SLOT_LEN : KVS_WIRE_STATUS_LEN;
    if ((uint64_t)h->count * size != h->body_len) return;
    for (uint32_t i = 0; i < h->count; i++) {
        const uint8_t *in = body + (size_t)i * size;
        uint8_t again[KVS_WIRE_SLOT_LEN];
        if (!reply) {
            struct kvs_wire_token t;
            if (kvs_wire_token_decode(in, op, &t) < 0) continue;
            if (t.flags != 0 && !(op == KVS_OP_RDMA_COMMIT && t.flags == KVS_WIRE_TOKEN_COMMIT))
                abort();
            kvs_wire_token_encode(again, &t);
        } else if (slots) {
            struct kvs_wire_slot s;
            if (kvs_wire_slot_decode(in, op, &s) < 0) continue;
            if ((s.status == 0) == (s.token == KVS_WIRE_TOKEN_NONE)) abort();
            kvs_wire_slot_encode(again, &s);
        } else {
            struct kvs_wire_status s;
            if (kvs_wire_status_decode(in, op, &s) < 0) continue;
            if (!kvs_wire_status_known(s.status)) abort();
            kvs_wire_status_encode(again, s.status, s.len);
        }
        if (memcmp(again, in, size) != 0) abort();
    }
}

/* An ERROR body: re-encoded from a NUL-terminated copy of its text (when it holds no NUL). */
static void walk_error(const uint8_t *body, uint32_t body_len)
{
    int32_t st;
    const char *text;
    size_t tlen;
    if (kvs_wire_error_decode(body, body_len, &st, &text, &tlen) < 0) return;
    if (st >= 0 || text != (const char *)body + 4 || tlen != body_len - 4u) abort();
    if (memchr(text, '\0', tlen)) return;
    char *t = malloc(tlen + 1);
    uint8_t *out = malloc(body_len);
    if (t && out) {
        memcpy(t, text, tlen);
        t[tlen] = '\0';
        if (kvs_wire_error_encode(out, body_len, st, t) != body_len ||
            memcmp(out, body, body_len) != 0)
            abort();
    }
    free(t);
    free(out);
}

/* The bytes as one RDMA control message (one SEND), decoded as the RDMA code decodes it. */
static void walk_ctrl(const uint8_t *msg, size_t len)
{
    struct kvs_wire_hdr h;
    if (kvs_wire_ctrl_hdr_decode(msg, len, &h) < 0) return;
    uint8_t again[KVS_WIRE_HDR_LEN];
    kvs_wire_hdr_encode(again, &h);
    if (memcmp(again, msg, KVS_WIRE_HDR_LEN) != 0) abort();
    const uint8_t *body = msg + KVS_WIRE_HDR_LEN;
    switch (h.opcode) {
    case KVS_OP_RDMA_RESERVE:
    case KVS_OP_RDMA_LEASE:
        walk_key_entries(body, h.body_len, h.count);
        break;
    case KVS_OP_RDMA_PULL:
    case KVS_OP_RDMA_PUSH:
        walk_remote_entries(body, h.body_len, h.count);
        break;
    case KVS_OP_RDMA_COMMIT:
    case KVS_OP_RDMA_RELEASE:
    case KVS_OP_RDMA_RESERVE | KVS_OP_REPLY:
    case KVS_OP_RDMA_LEASE | KVS_OP_REPLY:
    case KVS_OP_RDMA_COMMIT | KVS_OP_REPLY:
    case KVS_OP_RDMA_RELEASE | KVS_OP_REPLY:
    case KVS_OP_RDMA_PULL | KVS_OP_REPLY:
    case KVS_OP_RDMA_PUSH | KVS_OP_REPLY:
        walk_fixed_entries(&h, body);
        break;
    case KVS_OP_ERROR | KVS_OP_REPLY:
        walk_error(body, h.body_len);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvs_wire_hdr h;
    uint8_t *out = malloc(size + KVS_WIRE_HDR_LEN);
    if (!out) return 0;
    struct rebuild r = {.out = out, .len = KVS_WIRE_HDR_LEN};

    long rc = kvs_wire_parse_request(data, size, 1u << 20, &h, visit, &r);
    if (rc > 0) {
        /* What was accepted must be exactly what an encoder would write. */
        kvs_wire_hdr_encode(out, &h);
        if (h.opcode == KVS_OP_AUTH) {
            uint8_t nonce[KVS_WIRE_NONCE_LEN], mac[KVS_WIRE_MAC_LEN];
            if (kvs_wire_auth_decode(data + KVS_WIRE_HDR_LEN, h.body_len, nonce, mac) < 0) abort();
            kvs_wire_auth_encode(out + r.len, nonce, mac);
            r.len += KVS_WIRE_AUTH_LEN;
        }
        if (h.opcode == KVS_OP_SHM_MAP) {
            /* The whole frame, as the client's encoder writes it from what kvstored decodes. */
            kvs_wire_shm_map_encode(out, h.id, kvs_wire_shm_map_decode(data + KVS_WIRE_HDR_LEN));
            r.len += KVS_WIRE_SHM_MAP_LEN;
        }
        uint32_t region;
        uint64_t bsize;
        if (h.opcode == KVS_OP_SHM_BUF) {
            if (kvs_wire_shm_buf_decode(data + KVS_WIRE_HDR_LEN, &region, &bsize) == 0) {
                kvs_wire_shm_buf_encode(out, h.id, region, bsize);
                if (region == 0 || region > KVS_WIRE_SHM_BUFFERS) abort();
            } else {
                memcpy(out + KVS_WIRE_HDR_LEN, data + KVS_WIRE_HDR_LEN, KVS_WIRE_SHM_BUF_LEN);
            }
            r.len += KVS_WIRE_SHM_BUF_LEN;
        }
        if ((size_t)rc != r.len || memcmp(out, data, r.len) != 0) abort();
    }
    free(out);

    /* The pieces a streaming reader uses, at every offset. */
    for (size_t off = 0; off + KVS_WIRE_STATUS_LEN <= size && off < 256; off++) {
        struct kvs_wire_entry e;
        struct kvs_wire_status s;
        if (kvs_wire_entry_decode(data + off, &e) == 0 &&
            (e.klen == 0 || e.klen > KVS_WIRE_MAX_KEY))
            abort();
        if (kvs_wire_status_decode(data + off, data[0] & 7, &s) == 0 &&
            !kvs_wire_status_known(s.status))
            abort();
    }
    if (size >= KVS_WIRE_HDR_LEN && kvs_wire_hdr_decode(data, &h, 1u << 20) == 0 &&
        h.body_len > (1u << 20))
        abort();
    walk_ctrl(data, size);
    struct kvs_wire_hello hello;
    if (kvs_wire_hello_decode(data, size, &hello) == 0) {
        uint8_t nonce[KVS_WIRE_NONCE_LEN];
        (void)kvs_wire_hello_nonce(data, size, &hello, nonce);
    }
    return 0;
}

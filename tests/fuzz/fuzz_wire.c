/*
 * fuzz_wire.c - libFuzzer target for the wire decoder.
 *
 * Feeds arbitrary bytes to the whole-frame request parser and to the
 * piecewise decoders a streaming reader uses. Every byte an accepted entry
 * points at is read (so ASan sees any overrun), and an accepted request
 * frame must re-encode to exactly the bytes it was parsed from. The body of
 * an RDMA PULL or PUSH frame (opcodes 12, 13: kvs_wire_parse_request refuses
 * them, they never come over TCP) is walked as server/rdma.c walks it, with
 * kvs_wire_remote_entry_decode, and each entry must re-encode (with the
 * client's kvs_wire_remote_entry_encode) to the bytes it was decoded from.
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
    if (size >= KVS_WIRE_HDR_LEN && (data[5] == KVS_OP_RDMA_PULL || data[5] == KVS_OP_RDMA_PUSH)) {
        /* server/rdma.c takes the body as the RDMA message delivered it. */
        uint32_t body_len = (uint32_t)(size - KVS_WIRE_HDR_LEN);
        walk_remote_entries(data + KVS_WIRE_HDR_LEN, body_len, kvs_get_u32(data + 8));
    }
    struct kvs_wire_hello hello;
    if (kvs_wire_hello_decode(data, size, &hello) == 0) {
        uint8_t nonce[KVS_WIRE_NONCE_LEN];
        (void)kvs_wire_hello_nonce(data, size, &hello, nonce);
    }
    return 0;
}

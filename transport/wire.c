/*
 * wire.c - encoders and checking decoders for the kvbatch wire protocol.
 *
 * Every decoder trusts nothing: it is fed bytes straight off a socket. See
 * wire.h for the frame layout and docs/PROTOCOL.md for the rules.
 */
#include "wire.h"

#include "status.h"

#include <errno.h>
#include <string.h>

int kvs_wire_opcode_known(uint8_t opcode)
{
    switch (opcode) {
    case KVS_OP_PUT:
    case KVS_OP_GET:
    case KVS_OP_EXISTS:
    case KVS_OP_REMOVE:
    case KVS_OP_STATS:
    case KVS_OP_HELLO:
    case KVS_OP_AUTH:
    case KVS_OP_REMOVE_MATCHING:
    case KVS_OP_SHM_MAP:
    case KVS_OP_SHM_PUT:
    case KVS_OP_SHM_GET:
    case KVS_OP_CLIENTS:
    case KVS_OP_SHM_BUF:
        return 1;
    default:
        return 0;
    }
}

int kvs_wire_opcode_text(uint8_t opcode)
{
    return opcode == KVS_OP_STATS || opcode == KVS_OP_CLIENTS;
}

const char *kvs_wire_opcode_name(uint8_t opcode)
{
    switch (opcode & (uint8_t)~KVS_OP_REPLY) {
    case KVS_OP_PUT:
        return "put";
    case KVS_OP_GET:
        return "get";
    case KVS_OP_EXISTS:
        return "exists";
    case KVS_OP_REMOVE:
        return "remove";
    case KVS_OP_STATS:
        return "stats";
    case KVS_OP_HELLO:
        return "hello";
    case KVS_OP_AUTH:
        return "auth";
    case KVS_OP_REMOVE_MATCHING:
        return "remove_matching";
    case KVS_OP_SHM_MAP:
        return "shm_map";
    case KVS_OP_SHM_PUT:
        return "shm_put";
    case KVS_OP_SHM_GET:
        return "shm_get";
    case KVS_OP_CLIENTS:
        return "clients";
    case KVS_OP_SHM_BUF:
        return "shm_buf";
    case KVS_OP_ERROR:
        return "error";
    default:
        return "unknown";
    }
}

/* Opcodes whose frames carry per-key entries. */
static int opcode_has_entries(uint8_t opcode)
{
    return opcode == KVS_OP_PUT || opcode == KVS_OP_GET || opcode == KVS_OP_EXISTS ||
           opcode == KVS_OP_REMOVE || opcode == KVS_OP_REMOVE_MATCHING ||
           opcode == KVS_OP_SHM_PUT || opcode == KVS_OP_SHM_GET;
}

int kvs_wire_opcode_sized(uint8_t opcode)
{
    return opcode == KVS_OP_PUT || opcode == KVS_OP_GET || opcode == KVS_OP_SHM_PUT ||
           opcode == KVS_OP_SHM_GET;
}

void kvs_wire_hdr_encode(uint8_t out[KVS_WIRE_HDR_LEN], const struct kvs_wire_hdr *h)
{
    kvs_put_u32(out, KVS_WIRE_MAGIC);
    out[4] = KVS_WIRE_VERSION;
    out[5] = h->opcode;
    kvs_put_u16(out + 6, h->flags);
    kvs_put_u32(out + 8, h->count);
    kvs_put_u32(out + 12, h->body_len);
    kvs_put_u64(out + 16, h->id);
}

int kvs_wire_hdr_decode(const uint8_t in[KVS_WIRE_HDR_LEN], struct kvs_wire_hdr *h,
                        uint32_t max_body)
{
    h->magic = kvs_get_u32(in);
    h->version = in[4];
    h->opcode = in[5];
    h->flags = kvs_get_u16(in + 6);
    h->count = kvs_get_u32(in + 8);
    h->body_len = kvs_get_u32(in + 12);
    h->id = kvs_get_u64(in + 16);

    if (h->magic != KVS_WIRE_MAGIC || h->version != KVS_WIRE_VERSION) return -EPROTO;
    if (h->flags != 0) return -EBADMSG;
    if (h->body_len > max_body) return -EMSGSIZE;

    uint8_t base = h->opcode & (uint8_t)~KVS_OP_REPLY;
    int is_reply = (h->opcode & KVS_OP_REPLY) != 0;
    if (base == KVS_OP_ERROR) {
        /* An error frame is a reply carrying at least its status. */
        if (!is_reply || h->count != 0 || h->body_len < 4) return -EBADMSG;
        return 0;
    }
    if (!kvs_wire_opcode_known(base)) return -ENOTSUP;
    if (!opcode_has_entries(base)) {
        if (h->count != 0) return -EBADMSG;
        /* Of the requests without entries, only AUTH and SHM_MAP/BUF have a body, of a fixed size.
         */
        uint32_t want = base == KVS_OP_AUTH      ? KVS_WIRE_AUTH_LEN
                        : base == KVS_OP_SHM_MAP ? KVS_WIRE_SHM_MAP_LEN
                        : base == KVS_OP_SHM_BUF ? KVS_WIRE_SHM_BUF_LEN
                                                 : 0;
        if (!is_reply && h->body_len != want) return -EBADMSG;
        return 0;
    }
    if (h->count > KVS_WIRE_MAX_KEYS) return -EBADMSG;
    uint64_t per_entry = is_reply ? KVS_WIRE_STATUS_LEN : KVS_WIRE_ENTRY_LEN + 1;
    if ((uint64_t)h->count * per_entry > h->body_len) return -EBADMSG;
    return 0;
}

void kvs_wire_entry_encode(uint8_t out[KVS_WIRE_ENTRY_LEN], uint16_t klen, uint32_t len)
{
    kvs_put_u16(out, klen);
    kvs_put_u16(out + 2, 0);
    kvs_put_u32(out + 4, len);
}

int kvs_wire_entry_decode(const uint8_t in[KVS_WIRE_ENTRY_LEN], struct kvs_wire_entry *e)
{
    e->klen = kvs_get_u16(in);
    e->flags = kvs_get_u16(in + 2);
    e->len = kvs_get_u32(in + 4);
    if (e->klen == 0 || e->klen > KVS_WIRE_MAX_KEY || e->flags != 0) return -EBADMSG;
    return 0;
}

uint64_t kvs_wire_entry_size(uint8_t opcode, const struct kvs_wire_entry *e)
{
    uint64_t size = KVS_WIRE_ENTRY_LEN + (uint64_t)e->klen;
    if (opcode == KVS_OP_PUT) size += e->len;
    if (opcode == KVS_OP_SHM_PUT || opcode == KVS_OP_SHM_GET) size += KVS_WIRE_SHM_OFF_LEN;
    return size;
}

void kvs_wire_status_encode(uint8_t out[KVS_WIRE_STATUS_LEN], int32_t status, uint32_t len)
{
    kvs_put_u32(out, (uint32_t)status);
    kvs_put_u32(out + 4, len);
}

int kvs_wire_status_known(int32_t status)
{
    return kvs_status_on_wire(status);
}

int kvs_wire_status_decode(const uint8_t in[KVS_WIRE_STATUS_LEN], uint8_t req_opcode,
                           struct kvs_wire_status *s)
{
    s->status = (int32_t)kvs_get_u32(in);
    s->len = kvs_get_u32(in + 4);
    if (!kvs_wire_status_known(s->status)) return -EBADMSG;
    if (s->status == 1 && req_opcode != KVS_OP_EXISTS) return -EBADMSG;
    /*
     * Only a GET (or an RDMA PUSH, whose entries are GET's without the data)
     * carries a length: its value's (0) or the one that did not fit (-ERANGE);
     * and a REMOVE_MATCHING its count of keys removed (0).
     */
    int has_len =
        req_opcode == KVS_OP_GET || req_opcode == KVS_OP_RDMA_PUSH || req_opcode == KVS_OP_SHM_GET;
    if (s->len != 0 && !(has_len && (s->status == 0 || s->status == -ERANGE)) &&
        !(req_opcode == KVS_OP_REMOVE_MATCHING && s->status == 0))
        return -EBADMSG;
    return 0;
}

void kvs_wire_hello_encode(uint8_t out[KVS_WIRE_HELLO_LEN], const struct kvs_wire_hello *h)
{
    kvs_put_u32(out, h->version);
    kvs_put_u32(out + 4, h->max_key);
    kvs_put_u64(out + 8, h->max_object);
    kvs_put_u64(out + 16, h->max_frame);
    kvs_put_u32(out + 24, h->max_keys);
    kvs_put_u32(out + 28, h->features);
}

int kvs_wire_hello_decode(const uint8_t *in, size_t len, struct kvs_wire_hello *h)
{
    if (len < KVS_WIRE_HELLO_LEN) return -EBADMSG;
    h->version = kvs_get_u32(in);
    h->max_key = kvs_get_u32(in + 4);
    h->max_object = kvs_get_u64(in + 8);
    h->max_frame = kvs_get_u64(in + 16);
    h->max_keys = kvs_get_u32(in + 24);
    h->features = kvs_get_u32(in + 28);
    if (h->version == 0 || h->max_key == 0 || h->max_frame == 0 || h->max_keys == 0)
        return -EBADMSG;
    return 0;
}

int kvs_wire_hello_nonce(const uint8_t *in, size_t len, const struct kvs_wire_hello *h,
                         uint8_t nonce[KVS_WIRE_NONCE_LEN])
{
    if (!(h->features & KVS_FEAT_AUTH) || len < KVS_WIRE_HELLO_AUTH_LEN) return -EBADMSG;
    memcpy(nonce, in + KVS_WIRE_HELLO_LEN, KVS_WIRE_NONCE_LEN);
    return 0;
}

void kvs_wire_auth_encode(uint8_t out[KVS_WIRE_AUTH_LEN], const uint8_t nonce[KVS_WIRE_NONCE_LEN],
                          const uint8_t mac[KVS_WIRE_MAC_LEN])
{
    memcpy(out, nonce, KVS_WIRE_NONCE_LEN);
    memcpy(out + KVS_WIRE_NONCE_LEN, mac, KVS_WIRE_MAC_LEN);
}

int kvs_wire_auth_decode(const uint8_t *in, size_t len, uint8_t nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN])
{
    if (len != KVS_WIRE_AUTH_LEN) return -EBADMSG;
    memcpy(nonce, in, KVS_WIRE_NONCE_LEN);
    memcpy(mac, in + KVS_WIRE_NONCE_LEN, KVS_WIRE_MAC_LEN);
    return 0;
}

long kvs_wire_parse_request(const uint8_t *buf, size_t len, uint32_t max_body,
                            struct kvs_wire_hdr *h, kvs_wire_item_fn fn, void *arg)
{
    if (len < KVS_WIRE_HDR_LEN) return 0;
    int rc = kvs_wire_hdr_decode(buf, h, max_body);
    if (rc < 0) return rc;
    if (h->opcode & KVS_OP_REPLY) return -EBADMSG; /* a request parser sees no replies */
    if (len - KVS_WIRE_HDR_LEN < h->body_len) return 0;

    const uint8_t *p = buf + KVS_WIRE_HDR_LEN;
    uint64_t left = h->body_len;
    if (!opcode_has_entries(h->opcode)) return KVS_WIRE_HDR_LEN + (long)h->body_len;

    for (uint32_t i = 0; i < h->count; i++) {
        struct kvs_wire_entry e;
        if (left < KVS_WIRE_ENTRY_LEN) return -EBADMSG;
        if (kvs_wire_entry_decode(p, &e) < 0) return -EBADMSG;
        uint64_t size = kvs_wire_entry_size(h->opcode, &e);
        if (size > left) return -EBADMSG;
        if (!kvs_wire_opcode_sized(h->opcode) && e.len != 0) return -EBADMSG;
        int shm = h->opcode == KVS_OP_SHM_PUT || h->opcode == KVS_OP_SHM_GET;
        uint64_t shm_off = 0;
        uint32_t shm_region = 0;
        if (shm &&
            kvs_wire_shm_off_decode(p + KVS_WIRE_ENTRY_LEN + e.klen, &shm_region, &shm_off) < 0)
            return -EBADMSG;
        if (fn) {
            struct kvs_wire_item item = {
                .key = p + KVS_WIRE_ENTRY_LEN,
                .klen = e.klen,
                .len = e.len,
                .val = h->opcode == KVS_OP_PUT ? p + KVS_WIRE_ENTRY_LEN + e.klen : NULL,
                .shm = shm,
                .shm_region = shm_region,
                .shm_off = shm_off,
            };
            rc = fn(arg, i, &item);
            if (rc) return rc;
        }
        p += size;
        left -= size;
    }
    if (left != 0) return -EBADMSG; /* trailing bytes: the count lies */
    return KVS_WIRE_HDR_LEN + (long)h->body_len;
}

void kvs_wire_shm_off_encode(uint8_t out[KVS_WIRE_SHM_OFF_LEN], uint32_t region, uint64_t off)
{
    kvs_put_u64(out, off);
    kvs_put_u32(out + 8, region);
}

int kvs_wire_shm_off_decode(const uint8_t in[KVS_WIRE_SHM_OFF_LEN], uint32_t *region, uint64_t *off)
{
    *off = kvs_get_u64(in);
    *region = kvs_get_u32(in + 8);
    return *region <= KVS_WIRE_SHM_BUFFERS ? 0 : -EBADMSG;
}

void kvs_wire_shm_map_encode(uint8_t out[KVS_WIRE_SHM_MAP_FRAME_LEN], uint64_t id, uint64_t size)
{
    struct kvs_wire_hdr h = {.opcode = KVS_OP_SHM_MAP, .body_len = KVS_WIRE_SHM_MAP_LEN, .id = id};
    kvs_wire_hdr_encode(out, &h);
    kvs_put_u64(out + KVS_WIRE_HDR_LEN, size);
}

uint64_t kvs_wire_shm_map_decode(const uint8_t in[KVS_WIRE_SHM_MAP_LEN])
{
    return kvs_get_u64(in);
}

void kvs_wire_shm_buf_encode(uint8_t out[KVS_WIRE_SHM_BUF_FRAME_LEN], uint64_t id, uint32_t region,
                             uint64_t size)
{
    struct kvs_wire_hdr h = {.opcode = KVS_OP_SHM_BUF, .body_len = KVS_WIRE_SHM_BUF_LEN, .id = id};
    kvs_wire_hdr_encode(out, &h);
    kvs_put_u64(out + KVS_WIRE_HDR_LEN, size);
    kvs_put_u32(out + KVS_WIRE_HDR_LEN + 8, region);
    kvs_put_u32(out + KVS_WIRE_HDR_LEN + 12, 0);
}

int kvs_wire_shm_buf_decode(const uint8_t in[KVS_WIRE_SHM_BUF_LEN], uint32_t *region,
                            uint64_t *size)
{
    *size = kvs_get_u64(in);
    *region = kvs_get_u32(in + 8);
    if (*region == 0 || *region > KVS_WIRE_SHM_BUFFERS || kvs_get_u32(in + 12) != 0)
        return -EBADMSG;
    return 0;
}

size_t kvs_wire_remote_entry_encode(uint8_t *out, const struct kvs_wire_remote_entry *e)
{
    kvs_wire_entry_encode(out, e->klen, e->len);
    memcpy(out + KVS_WIRE_ENTRY_LEN, e->key, e->klen);
    uint8_t *at = out + KVS_WIRE_ENTRY_LEN + e->klen;
    kvs_put_u64(at, e->addr);
    kvs_put_u32(at + 8, e->rkey);
    return (size_t)KVS_WIRE_ENTRY_LEN + e->klen + KVS_WIRE_PUSH_DST_LEN;
}

int kvs_wire_remote_entry_decode(const uint8_t *body, uint32_t body_len, size_t *off,
                                 struct kvs_wire_remote_entry *e)
{
    struct kvs_wire_entry h;
    size_t at = *off;
    if (at > body_len || body_len - at < KVS_WIRE_ENTRY_LEN ||
        kvs_wire_entry_decode(body + at, &h) < 0)
        return -EBADMSG;
    size_t need = (size_t)KVS_WIRE_ENTRY_LEN + h.klen + KVS_WIRE_PUSH_DST_LEN;
    if (body_len - at < need) return -EBADMSG;
    const uint8_t *key = body + at + KVS_WIRE_ENTRY_LEN;
    *e = (struct kvs_wire_remote_entry){.key = key,
                                        .klen = h.klen,
                                        .len = h.len,
                                        .addr = kvs_get_u64(key + h.klen),
                                        .rkey = kvs_get_u32(key + h.klen + 8)};
    *off = at + need;
    return 0;
}

int kvs_wire_ctrl_hdr_decode(const uint8_t *msg, size_t len, struct kvs_wire_hdr *h)
{
    if (len < KVS_WIRE_HDR_LEN) return -EBADMSG;
    h->magic = kvs_get_u32(msg);
    h->version = msg[4];
    h->opcode = msg[5];
    h->flags = kvs_get_u16(msg + 6);
    h->count = kvs_get_u32(msg + 8);
    h->body_len = kvs_get_u32(msg + 12);
    h->id = kvs_get_u64(msg + 16);
    if (h->magic != KVS_WIRE_MAGIC || h->version != KVS_WIRE_VERSION) return -EPROTO;
    if (len > KVS_WIRE_CTRL_MAX || h->body_len != len - KVS_WIRE_HDR_LEN || h->flags != 0 ||
        h->count > KVS_WIRE_MAX_KEYS)
        return -EBADMSG;
    return 0;
}

size_t kvs_wire_key_entry_encode(uint8_t *out, const uint8_t *key, uint16_t klen, uint32_t len)
{
    kvs_wire_entry_encode(out, klen, len);
    memcpy(out + KVS_WIRE_ENTRY_LEN, key, klen);
    return (size_t)KVS_WIRE_ENTRY_LEN + klen;
}

int kvs_wire_key_entry_decode(const uint8_t *body, uint32_t body_len, size_t *off,
                              struct kvs_wire_item *it)
{
    struct kvs_wire_entry e;
    size_t at = *off;
    if (at > body_len || body_len - at < KVS_WIRE_ENTRY_LEN ||
        kvs_wire_entry_decode(body + at, &e) < 0 || body_len - at - KVS_WIRE_ENTRY_LEN < e.klen)
        return -EBADMSG;
    *it = (struct kvs_wire_item){
        .key = body + at + KVS_WIRE_ENTRY_LEN, .klen = e.klen, .len = e.len, .val = NULL};
    *off = at + KVS_WIRE_ENTRY_LEN + e.klen;
    return 0;
}

void kvs_wire_slot_encode(uint8_t out[KVS_WIRE_SLOT_LEN], const struct kvs_wire_slot *s)
{
    kvs_put_u32(out, (uint32_t)s->status);
    kvs_put_u32(out + 4, s->token);
    kvs_put_u64(out + 8, s->addr);
    kvs_put_u32(out + 16, s->rkey);
    kvs_put_u32(out + 20, s->len);
}

int kvs_wire_slot_decode(const uint8_t in[KVS_WIRE_SLOT_LEN], uint8_t req_opcode,
                         struct kvs_wire_slot *s)
{
    *s = (struct kvs_wire_slot){.status = (int32_t)kvs_get_u32(in),
                                .token = kvs_get_u32(in + 4),
                                .addr = kvs_get_u64(in + 8),
                                .rkey = kvs_get_u32(in + 16),
                                .len = kvs_get_u32(in + 20)};
    if (req_opcode != KVS_OP_RDMA_RESERVE && req_opcode != KVS_OP_RDMA_LEASE) return -EBADMSG;
    if (s->status == 0) return s->token == KVS_WIRE_TOKEN_NONE ? -EBADMSG : 0;
    if (s->status > 0 || !kvs_wire_status_known(s->status)) return -EBADMSG;
    int range = s->status == -ERANGE && req_opcode == KVS_OP_RDMA_LEASE;
    if (s->token != KVS_WIRE_TOKEN_NONE || s->addr != 0 || s->rkey != 0 || (s->len && !range))
        return -EBADMSG;
    return 0;
}

void kvs_wire_token_encode(uint8_t out[KVS_WIRE_TOKEN_LEN], const struct kvs_wire_token *t)
{
    kvs_put_u32(out, t->token);
    kvs_put_u32(out + 4, t->flags);
}

int kvs_wire_token_decode(const uint8_t in[KVS_WIRE_TOKEN_LEN], uint8_t req_opcode,
                          struct kvs_wire_token *t)
{
    t->token = kvs_get_u32(in);
    t->flags = kvs_get_u32(in + 4);
    if (req_opcode == KVS_OP_RDMA_COMMIT)
        return t->flags == 0 || t->flags == KVS_WIRE_TOKEN_COMMIT ? 0 : -EBADMSG;
    if (req_opcode == KVS_OP_RDMA_RELEASE) return t->flags == 0 ? 0 : -EBADMSG;
    return -EBADMSG;
}

size_t kvs_wire_error_encode(uint8_t *out, size_t cap, int32_t status, const char *text)
{
    size_t tlen = strlen(text);
    if (tlen > cap - 4) tlen = cap - 4;
    kvs_put_u32(out, (uint32_t)status);
    memcpy(out + 4, text, tlen);
    return 4 + tlen;
}

int kvs_wire_error_decode(const uint8_t *body, size_t len, int32_t *status, const char **text,
                          size_t *tlen)
{
    if (len < 4) return -EBADMSG;
    *status = (int32_t)kvs_get_u32(body);
    if (*status >= 0) return -EBADMSG;
    *text = (const char *)body + 4;
    *tlen = len - 4;
    return 0;
}

/*
 * wire.h - the kvbatch wire protocol, shared by client and server.
 *
 * Every message is a frame: a fixed 24-byte header, then body_len bytes.
 * All integers are little-endian. docs/PROTOCOL.md is the prose version.
 *
 *   header  : u32 magic "KVB1" | u8 version | u8 opcode | u16 flags
 *             | u32 count | u32 body_len | u64 id
 *   request : count entries, each  u16 klen | u16 flags(0) | u32 len | key[klen]
 *             | value[len] (PUT only; for GET, len is the caller's capacity)
 *   reply   : opcode | KVS_OP_REPLY, same id and count; count entries, each
 *             i32 status | u32 len | data[len] (GET with status 0 only)
 *
 * The decoders below check one fixed-size piece at a time so that a
 * streaming reader (the server's event loop, the client's reply reader) can
 * read values straight into their final place; kvs_wire_parse_request()
 * checks a whole frame held in memory (tests, fuzzing).
 */
#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define KVS_WIRE_MAGIC      0x3142564bu /* bytes 'K' 'V' 'B' '1' */
#define KVS_WIRE_VERSION    1
#define KVS_WIRE_HDR_LEN    24
#define KVS_WIRE_ENTRY_LEN  8 /* request entry header */
#define KVS_WIRE_STATUS_LEN 8 /* reply entry header */
#define KVS_WIRE_MAX_KEYS   65536u
#define KVS_WIRE_MAX_KEY    512u
#define KVS_WIRE_HELLO_LEN  32 /* HELLO reply body */
#define KVS_WIRE_NONCE_LEN  32 /* AUTH: server and client nonces */
#define KVS_WIRE_MAC_LEN    32 /* AUTH: HMAC-SHA256 */
/* HELLO reply body of a server that requires AUTH: the 32 bytes, then its nonce. */
#define KVS_WIRE_HELLO_AUTH_LEN (KVS_WIRE_HELLO_LEN + KVS_WIRE_NONCE_LEN)
#define KVS_WIRE_AUTH_LEN       (KVS_WIRE_NONCE_LEN + KVS_WIRE_MAC_LEN) /* AUTH request body */

#define KVS_FEAT_RDMA 0x1u /* the server listens for RDMA too */
#define KVS_FEAT_AUTH 0x2u /* the server requires authentication */
#define KVS_FEAT_PULL 0x4u /* its RDMA connections serve PULL (opcode 12) */
#define KVS_FEAT_PUSH 0x8u /* its RDMA connections serve PUSH (opcode 13) */
/* Its RDMA connections take several control messages at once (docs/rdma.md "Threads"). */
#define KVS_FEAT_PIPELINE 0x20u
/* This connection (a local socket's) may map a shared region: SHM_MAP, SHM_PUT, SHM_GET. */
#define KVS_FEAT_SHM 0x10u

enum kvs_wire_opcode {
    KVS_OP_PUT = 1,
    KVS_OP_GET = 2,
    KVS_OP_EXISTS = 3,
    KVS_OP_REMOVE = 4,
    KVS_OP_STATS = 5, /* count 0; reply body: "name value\n" text */
    KVS_OP_HELLO = 6, /* count 0; reply body: struct kvs_wire_hello */
    /*
     * RDMA control messages (transport/rdma.c <-> server/rdma.c), carried
     * only as SEND/RECV on an RDMA connection, never over TCP; see
     * docs/rdma.md. A put is RESERVE, then RDMA WRITEs + COMMIT posted as
     * one chain; a get is LEASE, then RDMA READs + RELEASE as one chain.
     */
    KVS_OP_RDMA_RESERVE = 7,  /* entries as PUT without values (len = value length);
                                 reply entries: struct kvs_wire_slot */
    KVS_OP_RDMA_COMMIT = 8,   /* entries: u32 token | u32 flags (1 commit, 0 abort);
                                 reply entries: i32 status | u32 0 */
    KVS_OP_RDMA_LEASE = 9,    /* entries as GET (len = capacity); reply entries:
                                 struct kvs_wire_slot (len = the value's length) */
    KVS_OP_RDMA_RELEASE = 10, /* entries: u32 token | u32 0; reply: i32 status | u32 0 */
    /*
     * Shared-secret challenge-response (docs/PROTOCOL.md "Authentication"):
     * count 0; request body: client nonce | client MAC (KVS_WIRE_AUTH_LEN);
     * reply body: the server's MAC (KVS_WIRE_MAC_LEN).
     */
    KVS_OP_AUTH = 11,
    /*
     * RDMA only, a put in one round trip: entries as PUT without the value,
     * each followed by u64 addr | u32 rkey (KVS_WIRE_PULL_SRC_LEN): where the
     * server RDMA READs the value from. The server reserves, READs, commits;
     * reply entries: i32 status | u32 0.
     */
    KVS_OP_RDMA_PULL = 12,
    /*
     * RDMA only, a get in one round trip: entries as GET (len = capacity),
     * each followed by u64 addr | u32 rkey (KVS_WIRE_PUSH_DST_LEN): where the
     * value must land in the client's memory. The server pins each item,
     * RDMA WRITEs the values there, then answers (RC: after every WRITE has
     * landed); reply entries as GET's without data: i32 status | u32 len
     * (0 and the length, -ENOENT, or -ERANGE and the length, nothing written).
     */
    KVS_OP_RDMA_PUSH = 13,
    /*
     * Removes every key that a POSIX extended regular expression matches
     * (anywhere in the key, as regexec does; "^" matches every key). Entries
     * as REMOVE, the key field holding the pattern (1..KVS_WIRE_MAX_KEY
     * bytes, no NUL); reply entries: i32 status | u32 len, with len the
     * number of keys removed and no data (0), or -EINVAL (not a valid
     * expression, len 0). Served over TCP and on RDMA connections alike.
     */
    KVS_OP_REMOVE_MATCHING = 14,
    /*
     * Values through shared memory, on a local (Unix-domain) connection only
     * (docs/shm.md). SHM_MAP: count 0, body u64 region size
     * (KVS_WIRE_SHM_MAP_LEN); the region's sealed memfd travels with the
     * frame's first bytes (SCM_RIGHTS); reply: count 0, empty body, or ERROR.
     * SHM_PUT: entries as RDMA PULL's, the u64 naming the value's offset in
     * the region and the u32 0; reply entries i32 status | u32 0. SHM_GET:
     * entries as RDMA PUSH's (len = capacity), the u64 the offset where the
     * value must land; reply entries as PUSH's. The u32 after an SHM
     * entry's offset names the region: 0 the connection's ring (SHM_MAP),
     * n a buffer region SHM_BUF mapped as n.
     */
    KVS_OP_SHM_MAP = 15,
    KVS_OP_SHM_PUT = 16,
    KVS_OP_SHM_GET = 17,
    /*
     * The server's connections, one per line (redis's CLIENT LIST): count 0,
     * empty body; reply body "key=value ..." text, at most KVS_WIRE_CLIENTS_MAX
     * lines, then "# listed N omitted M" (docs/PROTOCOL.md "CLIENTS").
     */
    KVS_OP_CLIENTS = 18,
    /*
     * A buffer region (kvs_alloc_buffer) on a connection whose ring is
     * mapped: count 0, body u64 size | u32 region (1..KVS_WIRE_SHM_BUFFERS)
     * | u32 0 (KVS_WIRE_SHM_BUF_LEN); its memfd travels as SHM_MAP's. Size
     * 0 and no descriptor unmaps region n. Reply as SHM_MAP's.
     */
    KVS_OP_SHM_BUF = 19,
    KVS_OP_ERROR = 0x7f, /* reply only: body is i32 status | text */
    KVS_OP_REPLY = 0x80, /* flag or-ed into a reply's opcode */
};

struct kvs_wire_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    uint32_t count;
    uint32_t body_len;
    uint64_t id;
};

struct kvs_wire_entry {
    uint16_t klen;
    uint16_t flags;
    uint32_t len;
};

struct kvs_wire_status {
    int32_t status;
    uint32_t len;
};

/*
 * RDMA control messages (opcodes 7-10, 12, 13, and every other frame sent
 * on an RDMA connection) travel whole, one frame per SEND of at most
 * KVS_WIRE_CTRL_MAX bytes, header included; both ends post receive buffers
 * of that size.
 */
#define KVS_WIRE_CTRL_MAX (128u * 1024)

/*
 * An RDMA slot as RESERVE and LEASE replies give it: i32 status | u32 token
 * | u64 addr | u32 rkey | u32 len. addr/rkey name the slot in the server's
 * registered pool; token names the reservation or lease in COMMIT/RELEASE.
 * A failed slot carries token KVS_WIRE_TOKEN_NONE, addr and rkey 0, and len
 * 0 (LEASE's -ERANGE: the value's length).
 */
#define KVS_WIRE_SLOT_LEN      24
#define KVS_WIRE_TOKEN_LEN     8           /* COMMIT / RELEASE entry: u32 token | u32 flags */
#define KVS_WIRE_TOKEN_NONE    UINT32_MAX  /* the token of a failed slot */
#define KVS_WIRE_TOKEN_COMMIT  1u          /* COMMIT entry flags: link the item (0: abort it) */
#define KVS_WIRE_PULL_SRC_LEN  12          /* PULL: u64 addr | u32 rkey after each key */
#define KVS_WIRE_PULL_MAX_KEYS 256         /* keys per PULL message */
#define KVS_WIRE_PUSH_DST_LEN  12          /* PUSH: u64 addr | u32 rkey after each key */
#define KVS_WIRE_PUSH_MAX_KEYS 256         /* keys per PUSH message */
#define KVS_WIRE_SHM_MAP_LEN   8           /* SHM_MAP request body: u64 region size */
#define KVS_WIRE_SHM_BUF_LEN   16          /* SHM_BUF request body: u64 size | u32 region | u32 0 */
#define KVS_WIRE_SHM_BUFFERS   64          /* buffer regions per connection: numbers 1..64 */
#define KVS_WIRE_SHM_MIN       (64u << 10) /* the smallest region (ring or buffer) kvstored maps */
struct kvs_wire_slot {
    int32_t status;
    uint32_t token;
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
};

/* A COMMIT or RELEASE entry. */
struct kvs_wire_token {
    uint32_t token;
    uint32_t flags; /* COMMIT: KVS_WIRE_TOKEN_COMMIT or 0 (abort); RELEASE: 0 */
};

/* What the server tells a client in reply to HELLO. */
struct kvs_wire_hello {
    uint32_t version;    /* highest protocol version the server speaks */
    uint32_t max_key;    /* bytes */
    uint64_t max_object; /* bytes */
    uint64_t max_frame;  /* body bytes */
    uint32_t max_keys;   /* keys per frame */
    uint32_t features;   /* KVS_FEAT_* bits */
};

/* Integer codec, little-endian whatever the host. */
static inline void kvs_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void kvs_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kvs_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t kvs_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t kvs_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t kvs_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* True for a request opcode this version understands. */
int kvs_wire_opcode_known(uint8_t opcode);
/* The most connections a CLIENTS reply lists (the rest are counted as omitted). */
#define KVS_WIRE_CLIENTS_MAX 1024u

/* True for a request opcode whose entries carry a length (PUT, GET, SHM_PUT, SHM_GET). */
int kvs_wire_opcode_sized(uint8_t opcode);
/*
 * True for STATS and CLIENTS: a request without keys or body whose reply
 * body is text (a transport hands it to the caller's text buffer).
 */
int kvs_wire_opcode_text(uint8_t opcode);
/* "put", "get", ... or "unknown". */
const char *kvs_wire_opcode_name(uint8_t opcode);

void kvs_wire_hdr_encode(uint8_t out[KVS_WIRE_HDR_LEN], const struct kvs_wire_hdr *h);
/*
 * Decodes and checks a header: magic, version, a known opcode (a reply's
 * opcode with KVS_OP_REPLY set, or KVS_OP_ERROR|KVS_OP_REPLY), count <=
 * KVS_WIRE_MAX_KEYS, body_len <= max_body and large enough for count entry
 * headers. Returns 0, -EPROTO (bad magic or version), -EBADMSG (other
 * malformation), -ENOTSUP (unknown opcode: the frame can still be skipped
 * by body_len) or -EMSGSIZE (body_len over max_body). *h is filled whenever
 * the magic and version are right.
 */
int kvs_wire_hdr_decode(const uint8_t in[KVS_WIRE_HDR_LEN], struct kvs_wire_hdr *h,
                        uint32_t max_body);

void kvs_wire_entry_encode(uint8_t out[KVS_WIRE_ENTRY_LEN], uint16_t klen, uint32_t len);
/* Checks klen in 1..KVS_WIRE_MAX_KEY and flags 0; 0 or -EBADMSG. */
int kvs_wire_entry_decode(const uint8_t in[KVS_WIRE_ENTRY_LEN], struct kvs_wire_entry *e);
/* Bytes the entry occupies in a request of this opcode (header, key, value). */
uint64_t kvs_wire_entry_size(uint8_t opcode, const struct kvs_wire_entry *e);

void kvs_wire_status_encode(uint8_t out[KVS_WIRE_STATUS_LEN], int32_t status, uint32_t len);
/*
 * Checks that status is 0, 1 (EXISTS only) or one of the codes the protocol
 * carries, and that only a status that carries a length has one: GET's (and
 * RDMA PUSH's, whose reply entries are GET's without the data) 0 and
 * -ERANGE. req_opcode is the request's opcode. Returns 0 or -EBADMSG.
 */
int kvs_wire_status_decode(const uint8_t in[KVS_WIRE_STATUS_LEN], uint8_t req_opcode,
                           struct kvs_wire_status *s);
/* True if status is a code the protocol carries (0, 1, or a known -errno). */
int kvs_wire_status_known(int32_t status);

void kvs_wire_hello_encode(uint8_t out[KVS_WIRE_HELLO_LEN], const struct kvs_wire_hello *h);
int kvs_wire_hello_decode(const uint8_t *in, size_t len, struct kvs_wire_hello *h);
/*
 * The server nonce of a HELLO reply body in[0..len) that h (decoded from it)
 * says carries one (KVS_FEAT_AUTH). 0, or -EBADMSG if the body is too short.
 */
int kvs_wire_hello_nonce(const uint8_t *in, size_t len, const struct kvs_wire_hello *h,
                         uint8_t nonce[KVS_WIRE_NONCE_LEN]);

/* AUTH request body: client nonce, then the client's MAC. */
void kvs_wire_auth_encode(uint8_t out[KVS_WIRE_AUTH_LEN], const uint8_t nonce[KVS_WIRE_NONCE_LEN],
                          const uint8_t mac[KVS_WIRE_MAC_LEN]);
/* Splits an AUTH request body; 0, or -EBADMSG unless len is KVS_WIRE_AUTH_LEN. */
int kvs_wire_auth_decode(const uint8_t *in, size_t len, uint8_t nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN]);

/* One request entry seen by kvs_wire_parse_request(). key is not NUL-terminated. */
struct kvs_wire_item {
    const uint8_t *key;
    uint16_t klen;
    uint32_t len;        /* PUT: value length; GET: capacity */
    const uint8_t *val;  /* PUT: the value; else NULL */
    int shm;             /* SHM_PUT / SHM_GET: the entry names shm_region and shm_off */
    uint32_t shm_region; /* 0: the ring; n: buffer region n */
    uint64_t shm_off;    /* where the value is (SHM_PUT) or must land (SHM_GET) in the region */
};
typedef int (*kvs_wire_item_fn)(void *arg, uint32_t index, const struct kvs_wire_item *item);

/*
 * Parses a whole request frame held in buf[0..len). Checks the header, that
 * the entries exactly fill body_len and that every entry is well formed, and
 * calls fn (if not NULL) for each entry in order; a nonzero return from fn
 * stops the walk and is returned. Returns the frame's size on success, 0 if
 * buf holds less than one whole frame, or a negative code as
 * kvs_wire_hdr_decode (-EBADMSG for a bad entry).
 */
long kvs_wire_parse_request(const uint8_t *buf, size_t len, uint32_t max_body,
                            struct kvs_wire_hdr *h, kvs_wire_item_fn fn, void *arg);

/*
 * One entry of a PULL or PUSH request: a request entry header, the key, then
 * u64 addr | u32 rkey naming memory on the client's side.
 */
struct kvs_wire_remote_entry {
    const uint8_t *key; /* inside the body; not NUL-terminated */
    uint16_t klen;
    uint32_t len; /* PULL: the value's length; PUSH: the client's capacity */
    uint64_t addr;
    uint32_t rkey;
};
/*
 * Decodes the PULL/PUSH entry at body[*off..body_len) and moves *off past it.
 * 0, or -EBADMSG when the entry header is malformed or the entry does not fit.
 */
int kvs_wire_remote_entry_decode(const uint8_t *body, uint32_t body_len, size_t *off,
                                 struct kvs_wire_remote_entry *e);
/* Encodes e at out (room for KVS_WIRE_ENTRY_LEN + klen + 12 bytes); returns the bytes written. */
size_t kvs_wire_remote_entry_encode(uint8_t *out, const struct kvs_wire_remote_entry *e);

/*
 * What follows the key of an SHM_PUT / SHM_GET entry: u64 offset | u32
 * region (0 the ring, 1..KVS_WIRE_SHM_BUFFERS a buffer region), the layout
 * of a PULL/PUSH entry's addr | rkey. Decode: 0, or -EBADMSG for a region
 * number past KVS_WIRE_SHM_BUFFERS. Whether the region is mapped and the
 * range inside it is the server's check (server/shm.c).
 */
#define KVS_WIRE_SHM_OFF_LEN 12
void kvs_wire_shm_off_encode(uint8_t out[KVS_WIRE_SHM_OFF_LEN], uint32_t region, uint64_t off);
int kvs_wire_shm_off_decode(const uint8_t in[KVS_WIRE_SHM_OFF_LEN], uint32_t *region,
                            uint64_t *off);

/*
 * A whole SHM_MAP request frame (header, then the u64 region size): the
 * client's, a raw test peer's. Its memfd goes beside it (SCM_RIGHTS).
 * Decode: the size an SHM_MAP body (KVS_WIRE_SHM_MAP_LEN bytes) names;
 * whether kvstored maps it is server/shm.c's check.
 */
#define KVS_WIRE_SHM_MAP_FRAME_LEN (KVS_WIRE_HDR_LEN + KVS_WIRE_SHM_MAP_LEN)
void kvs_wire_shm_map_encode(uint8_t out[KVS_WIRE_SHM_MAP_FRAME_LEN], uint64_t id, uint64_t size);
uint64_t kvs_wire_shm_map_decode(const uint8_t in[KVS_WIRE_SHM_MAP_LEN]);

/*
 * A whole SHM_BUF request frame (header, then u64 size | u32 region | u32
 * 0). Decode: 0 with *size and *region, or -EBADMSG for a region number
 * outside 1..KVS_WIRE_SHM_BUFFERS or a non-zero last u32.
 */
#define KVS_WIRE_SHM_BUF_FRAME_LEN (KVS_WIRE_HDR_LEN + KVS_WIRE_SHM_BUF_LEN)
void kvs_wire_shm_buf_encode(uint8_t out[KVS_WIRE_SHM_BUF_FRAME_LEN], uint64_t id, uint32_t region,
                             uint64_t size);
int kvs_wire_shm_buf_decode(const uint8_t in[KVS_WIRE_SHM_BUF_LEN], uint32_t *region,
                            uint64_t *size);

/* ---- RDMA control messages ---- */

/*
 * Decodes the header of a control message received whole, msg[0..len):
 * magic and version (-EPROTO), flags 0, body_len exactly len minus the
 * header, count <= KVS_WIRE_MAX_KEYS, len <= KVS_WIRE_CTRL_MAX (-EBADMSG).
 * The opcode is not checked (kvstored hands the frames it does not serve
 * itself to the TCP state machine, which answers them). *h is filled
 * whenever len holds a header.
 */
int kvs_wire_ctrl_hdr_decode(const uint8_t *msg, size_t len, struct kvs_wire_hdr *h);

/*
 * A request entry without a value (RESERVE, LEASE; EXISTS and REMOVE with
 * len 0): entry header, then the key. Encode returns the bytes written
 * (KVS_WIRE_ENTRY_LEN + klen). Decode reads the entry at body[*off..body_len)
 * into it (val NULL) and moves *off past it; 0, or -EBADMSG when the entry
 * header is malformed or the entry does not fit (*off unchanged).
 */
size_t kvs_wire_key_entry_encode(uint8_t *out, const uint8_t *key, uint16_t klen, uint32_t len);
int kvs_wire_key_entry_decode(const uint8_t *body, uint32_t body_len, size_t *off,
                              struct kvs_wire_item *it);

void kvs_wire_slot_encode(uint8_t out[KVS_WIRE_SLOT_LEN], const struct kvs_wire_slot *s);
/*
 * Decodes a slot of a reply to req_opcode (RESERVE or LEASE). Checks that
 * the status is 0 or a known negative code, that a slot with status 0 has a
 * token other than KVS_WIRE_TOKEN_NONE, and that a failed one is all
 * zeros but for its token KVS_WIRE_TOKEN_NONE (and, LEASE's -ERANGE, its
 * len). 0 or -EBADMSG.
 */
int kvs_wire_slot_decode(const uint8_t in[KVS_WIRE_SLOT_LEN], uint8_t req_opcode,
                         struct kvs_wire_slot *s);

void kvs_wire_token_encode(uint8_t out[KVS_WIRE_TOKEN_LEN], const struct kvs_wire_token *t);
/*
 * Decodes a COMMIT (req_opcode KVS_OP_RDMA_COMMIT: flags KVS_WIRE_TOKEN_COMMIT
 * or 0) or RELEASE (flags 0) entry. 0 or -EBADMSG. Whether the token names
 * anything is the server's check.
 */
int kvs_wire_token_decode(const uint8_t in[KVS_WIRE_TOKEN_LEN], uint8_t req_opcode,
                          struct kvs_wire_token *t);

/*
 * ERROR frame body: i32 status (negative), then a short text (not
 * NUL-terminated). Encode writes at most cap bytes (the text is cut to fit;
 * cap >= 4) and returns the body length. Decode gives the status and the
 * text inside body; 0, or -EBADMSG for a body under 4 bytes or a status >= 0.
 */
size_t kvs_wire_error_encode(uint8_t *out, size_t cap, int32_t status, const char *text);
int kvs_wire_error_decode(const uint8_t *body, size_t len, int32_t *status, const char **text,
                          size_t *tlen);

#endif /* KVS_WIRE_H */

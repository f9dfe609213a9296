/*
 * rdma_ops.c - one chunk of keys at a time (RDMA transport): the paths of
 * docs/rdma.md.
 *
 *   put chunk up to KVSTORE_RDMA_PULL_MAX value bytes: PULL, 1 round trip
 *   larger put chunk:  RESERVE, then WRITE ... WRITE, SEND(COMMIT)
 *   get chunk up to KVSTORE_RDMA_PUSH_MAX capacity bytes: PUSH, 1 round trip
 *   larger get chunk:  LEASE, then READ ... READ, SEND(RELEASE) (fenced)
 *   EXISTS, REMOVE, STATS: the ordinary frame as one control message
 *
 * The two-round-trip paths share the slot request, the slice per key and
 * the COMMIT/RELEASE step (struct slot_chunk); puts copy bounced values in
 * while the RESERVE travels, gets copy them out after RELEASE.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- where a key's bytes lie ---- */

/*
 * True when the first len bytes of k's value (puts) or buffer (gets) lie in
 * registered memory and move zero-copy. A scatter-gather key does when
 * every segment holding those bytes is registered, and only on a path whose
 * slices are built per segment (not remote: PULL / PUSH name one address
 * per key, so there its value is staged in the bounce buffer).
 */
static int zero_copy(struct kvs_rdma_conn *c, const struct kvs_key_io *k, uint64_t len, int remote)
{
    if (len == 0) return 0;
    if (k->iovcnt == 0) return kvs_rdma_find_reg(c, k->val ? k->val : k->buf, len) != NULL;
    if (remote) return 0;
    for (uint32_t j = 0; j < k->iovcnt && len > 0; j++) {
        size_t take = k->iov[j].iov_len < len ? k->iov[j].iov_len : len;
        if (take && !kvs_rdma_find_reg(c, k->iov[j].iov_base, take)) return 0;
        len -= take;
    }
    return 1;
}

/* The slices (WRs and SGEs, at most) that moving k[0..n) can take: one per segment. */
static size_t chunk_slices(const struct kvs_key_io *k, uint32_t n)
{
    size_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += k[i].iovcnt ? k[i].iovcnt : 1;
    return sum;
}

/* ---- chunking ---- */

/*
 * How many keys from k[0..n) go in one RESERVE/LEASE message, or (remote: each
 * key names client memory) one PULL/PUSH message; at least one.
 */
static uint32_t chunk_size(struct kvs_rdma_conn *c, const struct kvs_key_io *k, uint32_t n,
                           int remote)
{
    _Static_assert(KVS_WIRE_PULL_SRC_LEN == KVS_WIRE_PUSH_DST_LEN &&
                       KVS_WIRE_PULL_MAX_KEYS == KVS_WIRE_PUSH_MAX_KEYS,
                   "PULL and PUSH entries are cut alike");
    size_t bytes = KVS_WIRE_HDR_LEN, bounce = 0;
    uint32_t i = 0, max = remote ? KVS_WIRE_PULL_MAX_KEYS : KVS_RDMA_CHUNK_KEYS;
    for (; i < n && i < max; i++) {
        size_t e = KVS_WIRE_ENTRY_LEN + k[i].klen + (remote ? KVS_WIRE_PULL_SRC_LEN : 0);
        size_t b = zero_copy(c, &k[i], k[i].len, remote) ? 0 : k[i].len;
        if (i > 0 && (bytes + e > KVS_WIRE_CTRL_MAX || bounce + b > KVS_RDMA_BOUNCE_CHUNK)) break;
        bytes += e;
        bounce += b;
    }
    return i;
}

/* The value bytes (puts) or capacity bytes (gets) of k[0..n). */
static uint64_t chunk_bytes(const struct kvs_key_io *k, uint32_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += k[i].len;
    return sum;
}

/*
 * Decodes the n status entries of a reply to opcode op into k's statuses and
 * lengths (GET/PUSH: the value's; REMOVE_MATCHING: its count). 0 or -EPROTO.
 */
static int take_statuses(struct kvs_key_io *k, uint32_t n, uint8_t op, const uint8_t *body)
{
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_wire_status st;
        if (kvs_wire_status_decode(body + (size_t)i * KVS_WIRE_STATUS_LEN, op, &st) < 0)
            return -EPROTO;
        k[i].status = st.status;
        k[i].vlen = st.len;
    }
    return 0;
}

/*
 * Puts: copies the values that are not in registered memory into the
 * bounce buffer, back to back in key order, and notes each one's offset
 * (UINT64_MAX: registered, no copy). Runs while a RESERVE is in flight, so
 * the copy costs no time of its own; the offsets do not depend on the reply
 * (a reserved slot has exactly the value's length).
 */
static int copy_puts_in(struct kvs_rdma_conn *c, const struct kvs_key_io *k, uint32_t n, int remote,
                        uint64_t *bounce_off)
{
    uint64_t t0 = kvs_now_ns();
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++)
        if (k[i].len && !zero_copy(c, &k[i], k[i].len, remote)) need += k[i].len;
    int rc = kvs_rdma_bounce_reserve(c, need);
    if (rc < 0) return rc;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        bounce_off[i] = UINT64_MAX;
        if (!k[i].len || zero_copy(c, &k[i], k[i].len, remote)) continue;
        kvs_key_gather(&k[i], c->bounce + off); /* a scatter-gather value: gathered here */
        bounce_off[i] = off;
        off += k[i].len;
    }
    atomic_fetch_add(&c->copy_us, kvs_rdma_elapsed_us(t0));
    return 0;
}

/* ---- PULL and PUSH: one round trip ---- */

/* A PULL/PUSH entry for key k naming len bytes of our memory at addr/rkey; its size. */
static size_t remote_entry(uint8_t *out, const struct kvs_rdma_conn *c, const struct kvs_key_io *k,
                           uint32_t len, uint64_t addr, uint32_t rkey)
{
    struct kvs_wire_remote_entry e = {.key = (const uint8_t *)k->key,
                                      .klen = (uint16_t)k->klen,
                                      .len = len,
                                      .addr = addr,
                                      .rkey = rkey ^ c->hooks.token_xor};
    return kvs_wire_remote_entry_encode(out, &e);
}

/* Sends the PULL/PUSH message of len bytes just built and waits for its reply's n statuses. */
static const uint8_t *remote_call(struct kvs_rdma_conn *c, uint8_t op, uint32_t n, size_t len,
                                  uint64_t id, uint64_t deadline, int *rc)
{
    kvs_rdma_put_hdr(kvs_rdma_send_buf(c), op, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    uint64_t t0 = kvs_now_ns();
    *rc = kvs_rdma_call(c, NULL, len, 0, deadline);
    atomic_fetch_add(&c->chain_wait_us, kvs_rdma_elapsed_us(t0));
    if (*rc < 0) return NULL;
    uint32_t blen;
    return kvs_rdma_take_reply(c, op, id, n, KVS_WIRE_STATUS_LEN, &blen, rc);
}

/*
 * One chunk of a put batch as PULL: values outside registered memory are
 * copied into the bounce buffer, then one SEND tells the server where each
 * value lies; it READs them into the slots it reserved, commits, and
 * answers a status per key. Returns 0, or a transport error (the connection
 * is then unusable).
 */
static int do_pull(struct kvs_rdma_conn *c, struct kvs_key_io *k, uint32_t n, uint64_t deadline)
{
    uint64_t *bounce_off = calloc(n ? n : 1, sizeof(*bounce_off));
    if (!bounce_off) return -ENOMEM;
    int rc = copy_puts_in(c, k, n, 1, bounce_off);
    if (rc < 0) goto out;
    uint8_t *out = kvs_rdma_send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t addr = (uintptr_t)k[i].val;
        uint32_t rkey = 0;
        if (bounce_off[i] != UINT64_MAX) {
            addr = (uintptr_t)(c->bounce + bounce_off[i]);
            rkey = c->bounce_mr->rkey;
            atomic_fetch_add(&c->bounce_bytes, k[i].len);
        } else if (k[i].len) {
            rkey = kvs_rdma_find_reg(c, k[i].val, k[i].len)->rkey;
            atomic_fetch_add(&c->zero_copy_bytes, k[i].len);
        }
        len += remote_entry(out + len, c, &k[i], (uint32_t)k[i].len, addr, rkey);
    }
    const uint8_t *body = remote_call(c, KVS_OP_RDMA_PULL, n, len, id, deadline, &rc);
    if (!body || (rc = take_statuses(k, n, KVS_OP_RDMA_PULL, body)) < 0) goto out;
    for (uint32_t i = 0; i < n; i++)
        if (k[i].status == 0) k[i].vlen = k[i].len;
out:
    free(bounce_off);
    return rc;
}

/*
 * One chunk of a get batch as PUSH: one SEND names, per key, its capacity
 * and where its value must land (the caller's buffer when it lies in a
 * registered region, else a capacity-sized piece of the bounce buffer); the
 * server WRITEs the values there and its reply, which RC delivers after the
 * WRITEs, gives a status and length per key, as GET. Returns 0, or a
 * transport error (the connection is then unusable).
 */
static int do_push(struct kvs_rdma_conn *c, struct kvs_key_io *k, uint32_t n, uint64_t deadline)
{
    uint64_t *bounce_off = calloc(n ? n : 1, sizeof(*bounce_off));
    struct ibv_mr **mrs = calloc(n ? n : 1, sizeof(struct ibv_mr *));
    int rc = -ENOMEM;
    if (!bounce_off || !mrs) goto out;
    /* Bounce space first: growing registers again, so sizes are known before any rkey. */
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++) {
        mrs[i] = zero_copy(c, &k[i], k[i].len, 1) ? kvs_rdma_find_reg(c, k[i].buf, k[i].len)
                                                  : NULL; /* segments: bounced */
        if (!mrs[i]) need += k[i].len;
    }
    if ((rc = kvs_rdma_bounce_reserve(c, need)) < 0) goto out;
    uint8_t *out = kvs_rdma_send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN, boff = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cap = (uint32_t)k[i].len; /* chunks over UINT32_MAX bytes take LEASE */
        uint64_t addr = (uintptr_t)k[i].buf;
        uint32_t rkey = 0;
        bounce_off[i] = UINT64_MAX;
        if (mrs[i]) {
            rkey = mrs[i]->rkey;
        } else if (cap) {
            bounce_off[i] = boff;
            addr = (uintptr_t)(c->bounce + boff);
            rkey = c->bounce_mr->rkey;
            boff += cap;
        }
        len += remote_entry(out + len, c, &k[i], cap, addr, rkey);
    }
    const uint8_t *body = remote_call(c, KVS_OP_RDMA_PUSH, n, len, id, deadline, &rc);
    if (!body || (rc = take_statuses(k, n, KVS_OP_RDMA_PUSH, body)) < 0) goto out;
    uint64_t t0 = kvs_now_ns();
    for (uint32_t i = 0; i < n; i++) {
        if (k[i].status == 0 && k[i].vlen > k[i].len) {
            rc = -EPROTO; /* the server says it wrote more than the capacity */
            goto out;
        }
        if (k[i].status != 0 || k[i].vlen == 0) continue;
        if (bounce_off[i] != UINT64_MAX) {
            kvs_key_scatter(&k[i], c->bounce + bounce_off[i], k[i].vlen);
            atomic_fetch_add(&c->bounce_bytes, k[i].vlen);
        } else {
            atomic_fetch_add(&c->zero_copy_bytes, k[i].vlen);
        }
    }
    atomic_fetch_add(&c->copy_us, kvs_rdma_elapsed_us(t0));
out:
    free(bounce_off);
    free(mrs);
    return rc;
}

/* ---- RESERVE + COMMIT and LEASE + RELEASE: two round trips ---- */

/* One chunk on a two-round-trip path: per key, its slot, token and bounce offset. */
struct slot_chunk {
    struct kvs_key_io *k;
    uint32_t n;
    uint8_t op; /* KVS_OP_RDMA_RESERVE or KVS_OP_RDMA_LEASE */
    uint64_t id;
    struct kvs_wire_slot *slots;
    uint32_t *tokens;     /* KVS_WIRE_TOKEN_NONE: the key has no second step */
    uint32_t ntok;        /* tokens handed out */
    uint64_t *bounce_off; /* UINT64_MAX: moved zero-copy, or nothing to move */
    struct kvs_rdma_chain chain;
};

static int slot_chunk_init(struct slot_chunk *ch, struct kvs_key_io *k, uint32_t n, uint8_t op)
{
    size_t m = n ? n : 1, slices = chunk_slices(k, n) + 1;
    *ch = (struct slot_chunk){.k = k, .n = n, .op = op};
    ch->slots = calloc(m, sizeof(*ch->slots));
    ch->tokens = calloc(m, sizeof(*ch->tokens));
    ch->bounce_off = calloc(m, sizeof(*ch->bounce_off));
    ch->chain.wrs = calloc(slices, sizeof(*ch->chain.wrs));
    ch->chain.sges = calloc(slices, sizeof(*ch->chain.sges));
    if (!ch->slots || !ch->tokens || !ch->bounce_off || !ch->chain.wrs || !ch->chain.sges)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        ch->tokens[i] = KVS_WIRE_TOKEN_NONE;
        ch->bounce_off[i] = UINT64_MAX;
    }
    return 0;
}

static void slot_chunk_free(struct slot_chunk *ch)
{
    free(ch->slots);
    free(ch->tokens);
    free(ch->bounce_off);
    free(ch->chain.wrs);
    free(ch->chain.sges);
}

/* Posts the RESERVE/LEASE message naming every key of ch (len: capacity for LEASE). */
static int send_slot_request(struct kvs_rdma_conn *c, struct slot_chunk *ch, uint64_t deadline)
{
    uint8_t *out = kvs_rdma_send_buf(c);
    size_t len = KVS_WIRE_HDR_LEN;
    ch->id = ++c->next_id;
    for (uint32_t i = 0; i < ch->n; i++) {
        const struct kvs_key_io *k = &ch->k[i];
        uint32_t cap = k->len > UINT32_MAX ? UINT32_MAX : (uint32_t)k->len;
        len +=
            kvs_wire_key_entry_encode(out + len, (const uint8_t *)k->key, (uint16_t)k->klen, cap);
    }
    kvs_rdma_put_hdr(out, ch->op, ch->n, (uint32_t)(len - KVS_WIRE_HDR_LEN), ch->id);
    return kvs_rdma_post_chain(c, NULL, len, 0, deadline);
}

/*
 * Waits for the slot reply, decodes every slot, and gives each key its
 * slot's status (and -ERANGE's length); a slot handed out also gives the key
 * its length and a token for the second step. slot_wait_us counts from t0.
 */
static int take_slots(struct kvs_rdma_conn *c, struct slot_chunk *ch, uint64_t t0,
                      uint64_t deadline)
{
    int rc = kvs_rdma_wait_reply(c, deadline);
    atomic_fetch_add(&c->slot_wait_us, kvs_rdma_elapsed_us(t0));
    if (rc < 0) return rc;
    uint32_t blen;
    const uint8_t *body =
        kvs_rdma_take_reply(c, ch->op, ch->id, ch->n, KVS_WIRE_SLOT_LEN, &blen, &rc);
    if (!body) return rc;
    for (uint32_t i = 0; i < ch->n; i++)
        if (kvs_wire_slot_decode(body + (size_t)i * KVS_WIRE_SLOT_LEN, ch->op, &ch->slots[i]) < 0)
            return -EPROTO;
    for (uint32_t i = 0; i < ch->n; i++) {
        const struct kvs_wire_slot *s = &ch->slots[i];
        ch->k[i].status = s->status;
        if (s->status == -ERANGE) ch->k[i].vlen = s->len;
        if (s->status < 0) continue;
        ch->k[i].vlen = s->len;
        ch->tokens[i] = s->token;
        ch->ntok++;
    }
    return 0;
}

/*
 * The zero-copy transfer of a scatter-gather key's slot: one slice per
 * segment, remotely adjacent, so the chain builder puts them in one WR as
 * an SGE list (a new WR past the device's max_sge).
 */
static void add_segments(struct kvs_rdma_conn *c, struct slot_chunk *ch, uint32_t i,
                         enum ibv_wr_opcode op)
{
    const struct kvs_wire_slot *s = &ch->slots[i];
    const struct kvs_key_io *k = &ch->k[i];
    uint64_t off = 0;
    for (uint32_t j = 0; j < k->iovcnt && off < s->len; j++) {
        uint64_t take = k->iov[j].iov_len < s->len - off ? k->iov[j].iov_len : s->len - off;
        if (take == 0) continue;
        struct kvs_rdma_slice sl = {.laddr = (uintptr_t)k->iov[j].iov_base,
                                    .lkey = kvs_rdma_find_reg(c, k->iov[j].iov_base, take)->lkey,
                                    .raddr = s->addr + off,
                                    .rkey = s->rkey,
                                    .len = (uint32_t)take};
        kvs_rdma_chain_add(c, &ch->chain, op, &sl);
        off += take;
    }
    atomic_fetch_add(&c->zero_copy_bytes, s->len);
}

/*
 * Adds the transfer of key i's slot to the chain: from/to user memory when
 * it lies in a registered region (ch->bounce_off[i] UINT64_MAX), else
 * from/to the bounce buffer at ch->bounce_off[i].
 */
static void add_transfer(struct kvs_rdma_conn *c, struct slot_chunk *ch, uint32_t i,
                         const void *user, enum ibv_wr_opcode op)
{
    const struct kvs_wire_slot *s = &ch->slots[i];
    if (ch->bounce_off[i] == UINT64_MAX && ch->k[i].iovcnt) {
        add_segments(c, ch, i, op);
        return;
    }
    struct kvs_rdma_slice sl = {.raddr = s->addr, .rkey = s->rkey, .len = s->len};
    if (ch->bounce_off[i] == UINT64_MAX) {
        sl.laddr = (uintptr_t)user;
        sl.lkey = kvs_rdma_find_reg(c, user, s->len)->lkey;
        atomic_fetch_add(&c->zero_copy_bytes, s->len);
    } else {
        sl.laddr = (uintptr_t)(c->bounce + ch->bounce_off[i]);
        sl.lkey = c->bounce_mr->lkey;
        atomic_fetch_add(&c->bounce_bytes, s->len);
    }
    kvs_rdma_chain_add(c, &ch->chain, op, &sl);
}

/*
 * The second round trip: the data chain, then COMMIT (puts) or RELEASE
 * (gets, fenced behind the READs) naming every token, in one post; each
 * key with a token gets the status answered for it. Nothing to do when no
 * slot was handed out.
 */
static int finish_tokens(struct kvs_rdma_conn *c, struct slot_chunk *ch, uint8_t op,
                         uint64_t deadline)
{
    if (ch->ntok == 0) return 0;
    if (c->hooks.stall_ms) usleep(c->hooks.stall_ms * 1000u);
    uint8_t *out = kvs_rdma_send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < ch->n; i++) {
        if (ch->tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        struct kvs_wire_token t = {.token = ch->tokens[i] ^ c->hooks.token_xor,
                                   .flags = op == KVS_OP_RDMA_COMMIT ? KVS_WIRE_TOKEN_COMMIT : 0};
        kvs_wire_token_encode(out + len, &t);
        len += KVS_WIRE_TOKEN_LEN;
    }
    kvs_rdma_put_hdr(out, op, ch->ntok, ch->ntok * KVS_WIRE_TOKEN_LEN, id);
    uint64_t t0 = kvs_now_ns();
    int rc = kvs_rdma_call(c, &ch->chain, len, op == KVS_OP_RDMA_RELEASE, deadline);
    atomic_fetch_add(&c->chain_wait_us, kvs_rdma_elapsed_us(t0));
    if (rc < 0) return rc;
    uint32_t blen;
    const uint8_t *body = kvs_rdma_take_reply(c, op, id, ch->ntok, KVS_WIRE_STATUS_LEN, &blen, &rc);
    if (!body) return rc;
    for (uint32_t i = 0, t = 0; i < ch->n; i++) {
        if (ch->tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        struct kvs_wire_status st;
        if (kvs_wire_status_decode(body + (size_t)t++ * KVS_WIRE_STATUS_LEN, op, &st) < 0)
            return -EPROTO;
        ch->k[i].status = st.status;
    }
    return 0;
}

/*
 * One chunk of a put batch: RESERVE (the bounce copies made meanwhile),
 * then WRITE ... WRITE, SEND(COMMIT). Fills the keys' statuses; returns 0,
 * or a transport error (the connection is then unusable).
 */
static int do_reserve_commit(struct kvs_rdma_conn *c, struct kvs_key_io *k, uint32_t n,
                             uint64_t deadline)
{
    struct slot_chunk ch;
    int rc = slot_chunk_init(&ch, k, n, KVS_OP_RDMA_RESERVE);
    uint64_t t0 = kvs_now_ns();
    if (rc == 0) rc = send_slot_request(c, &ch, deadline);
    if (rc == 0) rc = copy_puts_in(c, k, n, 0, ch.bounce_off);
    if (rc == 0) rc = take_slots(c, &ch, t0, deadline);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (ch.tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        if (ch.slots[i].len != k[i].len)
            rc = -EPROTO; /* the server reserved a slot that does not fit */
        else if (ch.slots[i].len > 0)
            add_transfer(c, &ch, i, k[i].val, IBV_WR_RDMA_WRITE);
    }
    if (rc == 0) rc = finish_tokens(c, &ch, KVS_OP_RDMA_COMMIT, deadline);
    slot_chunk_free(&ch);
    return rc;
}

/*
 * One chunk of a get batch: LEASE, then READ ... READ, SEND(RELEASE) (the
 * SEND fenced behind the READs), then the bounced values copied out. Fills
 * the keys' statuses; returns 0, or a transport error (the connection is
 * then unusable).
 */
static int do_lease_release(struct kvs_rdma_conn *c, struct kvs_key_io *k, uint32_t n,
                            uint64_t deadline)
{
    struct slot_chunk ch;
    int rc = slot_chunk_init(&ch, k, n, KVS_OP_RDMA_LEASE);
    uint64_t t0 = kvs_now_ns();
    if (rc == 0) rc = send_slot_request(c, &ch, deadline);
    if (rc == 0) rc = take_slots(c, &ch, t0, deadline);
    /* Bounce space first: growing registers again, so sizes are known before any SGE. */
    size_t need = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (ch.tokens[i] == KVS_WIRE_TOKEN_NONE) continue;
        if (ch.slots[i].len > k[i].len) rc = -EPROTO; /* a value larger than the capacity */
        if (!zero_copy(c, &k[i], ch.slots[i].len, 0)) need += ch.slots[i].len;
    }
    if (rc == 0) rc = kvs_rdma_bounce_reserve(c, need);
    uint64_t boff = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (ch.tokens[i] == KVS_WIRE_TOKEN_NONE || ch.slots[i].len == 0) continue;
        if (!zero_copy(c, &k[i], ch.slots[i].len, 0)) {
            ch.bounce_off[i] = boff;
            boff += ch.slots[i].len;
        }
        add_transfer(c, &ch, i, k[i].buf, IBV_WR_RDMA_READ);
    }
    if (rc == 0) rc = finish_tokens(c, &ch, KVS_OP_RDMA_RELEASE, deadline);
    t0 = kvs_now_ns();
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        if (k[i].status == 0 && ch.bounce_off[i] != UINT64_MAX)
            kvs_key_scatter(&k[i], c->bounce + ch.bounce_off[i], k[i].vlen);
    if (rc == 0) atomic_fetch_add(&c->copy_us, kvs_rdma_elapsed_us(t0));
    slot_chunk_free(&ch);
    return rc;
}

/* ---- plain frames ---- */

/* EXISTS / REMOVE (len 0 entries) or STATS (n 0): the ordinary frame as one control message. */
static const uint8_t *plain_call(struct kvs_rdma_conn *c, uint8_t op, const struct kvs_key_io *k,
                                 uint32_t n, uint32_t *blen, uint64_t deadline, int *rc)
{
    uint8_t *out = kvs_rdma_send_buf(c);
    uint64_t id = ++c->next_id;
    size_t len = KVS_WIRE_HDR_LEN;
    for (uint32_t i = 0; i < n; i++)
        len +=
            kvs_wire_key_entry_encode(out + len, (const uint8_t *)k[i].key, (uint16_t)k[i].klen, 0);
    kvs_rdma_put_hdr(out, op, n, (uint32_t)(len - KVS_WIRE_HDR_LEN), id);
    if ((*rc = kvs_rdma_call(c, NULL, len, 0, deadline)) < 0) return NULL;
    return kvs_rdma_take_reply(c, op, id, n, op == KVS_OP_STATS ? 0 : KVS_WIRE_STATUS_LEN, blen,
                               rc);
}

int kvs_rdma_run_stats(struct kvs_rdma_conn *c, struct kvs_req *req, uint64_t deadline)
{
    uint32_t blen;
    int rc;
    const uint8_t *body = plain_call(c, KVS_OP_STATS, NULL, 0, &blen, deadline, &rc);
    if (!body) return rc;
    req->text_len = blen;
    memcpy(req->text, body, blen < req->text_cap ? blen : req->text_cap);
    req->status = 0;
    return 0;
}

/* One chunk of EXISTS or REMOVE. */
static int do_plain(struct kvs_rdma_conn *c, uint8_t op, struct kvs_key_io *k, uint32_t n,
                    uint64_t deadline)
{
    uint32_t blen;
    int rc;
    const uint8_t *body = plain_call(c, op, k, n, &blen, deadline, &rc);
    return body ? take_statuses(k, n, op, body) : rc;
}

/* ---- a request, chunk by chunk ---- */

/*
 * The next chunk of req's keys from k[0..left): its size *m and the path it
 * takes. A put chunk whose values are small in all takes PULL, a get chunk
 * whose capacities are, PUSH (docs/rdma.md).
 */
static int run_chunk(struct kvs_rdma_conn *c, uint8_t op, struct kvs_key_io *k, uint32_t left,
                     uint32_t *m, uint64_t deadline)
{
    int put = op == KVS_OP_PUT;
    *m = chunk_size(c, k, left, 0);
    if (op == KVS_OP_PUT || op == KVS_OP_GET) {
        int pull = put && kvs_rdma_pull_on(c) && chunk_bytes(k, *m) <= c->pull_max;
        int push = !put && kvs_rdma_push_on(c) && chunk_bytes(k, *m) <= c->push_max;
        if (pull || push) *m = chunk_size(c, k, *m, 1);
        if (pull) return do_pull(c, k, *m, deadline);
        if (push) return do_push(c, k, *m, deadline);
        return put ? do_reserve_commit(c, k, *m, deadline) : do_lease_release(c, k, *m, deadline);
    }
    uint32_t cap = (KVS_WIRE_CTRL_MAX - KVS_WIRE_HDR_LEN) / KVS_WIRE_STATUS_LEN;
    if (*m > cap) *m = cap;
    return do_plain(c, op, k, *m, deadline);
}

int kvs_rdma_run_keys(struct kvs_rdma_conn *c, struct kvs_req *req, uint32_t *done,
                      uint64_t deadline)
{
    while (*done < req->n) {
        uint32_t m;
        int rc = run_chunk(c, req->opcode, req->keys + *done, req->n - *done, &m, deadline);
        if (rc < 0) return rc;
        *done += m;
    }
    return 0;
}

/*
 * fuzz_auth.c - libFuzzer target: arbitrary bytes at kvstored's protocol
 * state machine when the server has a secret (--auth-file).
 *
 * Input byte 0 picks how the rest is cut into reads, and whether the
 * harness first authenticates honestly (HELLO, then an AUTH computed from
 * the nonce it got). Without that, the input cannot forge a MAC, so the
 * checks are the gate itself: the connection never becomes authenticated,
 * every reply is a HELLO reply or an ERROR (-EACCES or a malformation),
 * and nothing is ever stored. With it, anything may follow: every reply
 * must still be well formed, and nothing stays pinned.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "proto.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz secret"

/* The reply stream, followed frame by frame; the last HELLO nonce is kept. */
struct replies {
    uint8_t frame[KVS_WIRE_HDR_LEN + 128];
    size_t have;
    uint64_t body_left;
    int authed_expected;
    uint8_t nonce[KVS_WIRE_NONCE_LEN];
};

/* Checks one whole reply header (and the start of its body, when small). */
static void check_frame(struct replies *r, const struct kvs_wire_hdr *h, const uint8_t *body)
{
    uint8_t base = h->opcode & (uint8_t)~KVS_OP_REPLY;
    if (base == KVS_OP_HELLO) {
        if (h->body_len != KVS_WIRE_HELLO_AUTH_LEN) abort();
        memcpy(r->nonce, body + KVS_WIRE_HELLO_LEN, KVS_WIRE_NONCE_LEN);
        return;
    }
    if (r->authed_expected) return;
    /* Not authenticated: nothing but HELLO and refusals ever comes back. */
    if (base != KVS_OP_ERROR) abort();
    int32_t status = (int32_t)kvs_get_u32(body);
    if (status != -EACCES && status != -EPROTO && status != -EBADMSG && status != -EMSGSIZE)
        abort();
}

static void follow(struct replies *r, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (r->body_left > 0) {
            size_t k = n < r->body_left ? n : (size_t)r->body_left;
            size_t room = sizeof(r->frame) - r->have;
            memcpy(r->frame + r->have, p, k < room ? k : room);
            r->have += k < room ? k : room;
            r->body_left -= k;
            p += k;
            n -= k;
        } else {
            size_t k = KVS_WIRE_HDR_LEN - r->have;
            if (k > n) k = n;
            memcpy(r->frame + r->have, p, k);
            r->have += k;
            p += k;
            n -= k;
            if (r->have < KVS_WIRE_HDR_LEN) continue;
            struct kvs_wire_hdr h;
            if (kvs_wire_hdr_decode(r->frame, &h, UINT32_MAX) != 0 || !(h.opcode & KVS_OP_REPLY))
                abort();
            r->body_left = h.body_len;
        }
        if (r->have >= KVS_WIRE_HDR_LEN && r->body_left == 0) {
            struct kvs_wire_hdr h;
            kvs_wire_hdr_decode(r->frame, &h, UINT32_MAX);
            if (h.body_len <= sizeof(r->frame) - KVS_WIRE_HDR_LEN)
                check_frame(r, &h, r->frame + KVS_WIRE_HDR_LEN);
            else if (!r->authed_expected)
                abort(); /* only STATS or GET replies are that large */
            r->have = 0;
        }
    }
}

static void drain(struct kvsd_proto_conn *c, struct replies *r)
{
    for (int guard = 0; kvsd_proto_out_pending(c) > 0 && guard < 100000; guard++) {
        struct iovec iov[8];
        int n = kvsd_proto_out_iov(c, iov, 8);
        size_t total = 0;
        for (int i = 0; i < n; i++) {
            follow(r, iov[i].iov_base, iov[i].iov_len);
            total += iov[i].iov_len;
        }
        kvsd_proto_sent(c, total);
        kvsd_proto_process(c);
    }
}

static void feed_all(struct kvsd_proto_conn *c, const uint8_t *data, size_t n, struct replies *r)
{
    size_t done = 0;
    for (int guard = 0; done < n && guard < 100000; guard++) {
        done += kvsd_proto_feed(c, data + done, n - done);
        drain(c, r);
        if (kvsd_proto_closing(c)) return;
    }
}

/* HELLO, then the right AUTH for the nonce it brought back. */
static void authenticate(struct kvsd_proto_conn *c, struct replies *r)
{
    uint8_t frame[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN], cn[KVS_WIRE_NONCE_LEN];
    uint8_t mac[KVS_WIRE_MAC_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO};
    kvs_wire_hdr_encode(frame, &h);
    feed_all(c, frame, KVS_WIRE_HDR_LEN, r);
    memset(cn, 0x5a, sizeof(cn));
    kvs_auth_client_mac((const uint8_t *)SECRET, strlen(SECRET), r->nonce, cn, mac);
    h = (struct kvs_wire_hdr){.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN};
    kvs_wire_hdr_encode(frame, &h);
    kvs_wire_auth_encode(frame + KVS_WIRE_HDR_LEN, cn, mac);
    r->authed_expected = 1; /* the AUTH reply itself */
    feed_all(c, frame, sizeof(frame), r);
    if (!kvsd_proto_authenticated(c)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const size_t chunks[] = {1, 3, 8, 24, 88, 100, 4096, 65536};
    size_t chunk = chunks[data[0] & 7];
    int honest = (data[0] >> 3) & 1;
    data++;
    size--;
    if (kvs_auth_init() < 0) abort();

    struct kvsd_server srv;
    struct kvsd_server_limits lim = {.max_object = 256 * 1024,
                                     .max_frame = 512 * 1024,
                                     .out_limit = 8192,
                                     .out_heap_limit = 8192,
                                     .rbuf_size = 4096};
    if (kvsd_server_init(&srv, 1u << 20, &lim) < 0) return 0;
    srv.auth_secret = (const uint8_t *)SECRET;
    srv.auth_secret_len = strlen(SECRET);
    srv.features = KVS_FEAT_AUTH;
    struct kvsd_proto_conn *c = kvsd_proto_conn_new(&srv);
    if (!c) goto out;
    struct replies r = {0};
    if (honest) authenticate(c, &r);
    for (size_t off = 0; off < size && !kvsd_proto_closing(c); off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        feed_all(c, data + off, n, &r);
    }
    drain(c, &r);
    if (!honest && kvsd_proto_authenticated(c)) abort();
    kvsd_proto_conn_free(c);

out:;
    struct kvsd_store_stats st;
    kvsd_store_stats(srv.store, &st);
    if (st.pinned != 0) abort();
    if (!honest && st.items != 0) abort(); /* nothing stored without AUTH */
    kvsd_server_fini(&srv);
    return 0;
}

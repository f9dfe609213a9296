/*
 * fuzz_server.c - libFuzzer target: arbitrary bytes through kvstored's
 * protocol state machine against a real in-process store (a pool of one or
 * two pages, so that eviction and page reclaim happen).
 *
 * The first input byte picks how the rest is cut into reads (as a socket
 * would deliver it), how often replies are drained, one or two connections,
 * the pool size and whether a page is filled first. Checked beyond
 * "no crash, no leak": every reply byte is part of a well-formed reply
 * frame, and once the connection is gone nothing stays pinned.
 *
 * The first connection is a local socket's with a sealed 64 KiB memfd
 * already passed (as net.c hands over a descriptor that came with the
 * bytes), so an input's SHM_MAP of that size maps it and its SHM_PUT and
 * SHM_GET entries reach the region with whatever offsets they name; after
 * each of its first chunks another descriptor of it is handed over, for an
 * SHM_BUF to map as a buffer region.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Follows the reply stream frame by frame across drains. */
struct reply_check {
    uint8_t hdr[KVS_WIRE_HDR_LEN];
    size_t have;
    uint64_t body_left;
};

static void check_replies(struct reply_check *rc, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (rc->body_left > 0) {
            size_t k = n < rc->body_left ? n : (size_t)rc->body_left;
            rc->body_left -= k;
            p += k;
            n -= k;
            continue;
        }
        size_t k = KVS_WIRE_HDR_LEN - rc->have;
        if (k > n) k = n;
        memcpy(rc->hdr + rc->have, p, k);
        rc->have += k;
        p += k;
        n -= k;
        if (rc->have < KVS_WIRE_HDR_LEN) continue;
        struct kvs_wire_hdr h;
        if (kvs_wire_hdr_decode(rc->hdr, &h, UINT32_MAX) != 0 || !(h.opcode & KVS_OP_REPLY))
            abort();
        rc->have = 0;
        rc->body_left = h.body_len;
    }
}

static void drain(struct kvsd_proto_conn *c, struct reply_check *rc)
{
    for (int guard = 0; kvsd_proto_out_pending(c) > 0 && guard < 100000; guard++) {
        struct iovec iov[8];
        int n = kvsd_proto_out_iov(c, iov, 8);
        size_t total = 0;
        for (int i = 0; i < n; i++) {
            check_replies(rc, iov[i].iov_base, iov[i].iov_len);
            total += iov[i].iov_len;
        }
        kvsd_proto_sent(c, total);
        kvsd_proto_process(c);
    }
}

/* Feeds all of data to c as socket reads would (replies drained when it pauses or eagerly). */
static void feed_all(struct kvsd_proto_conn *c, const uint8_t *data, size_t n,
                     struct reply_check *rc, int lazy_drain)
{
    size_t done = 0;
    for (int guard = 0; done < n && guard < 100000; guard++) {
        size_t took = kvsd_proto_feed(c, data + done, n - done);
        done += took;
        if (kvsd_proto_closing(c)) return;
        if (done < n || !lazy_drain) drain(c, rc);
    }
}

/* Values of this size fill a page 4 at a time (235000-byte chunks). */
#define FILL_LEN 200000u

/*
 * Fills one pool page with committed FILL_LEN-byte values, keys "fill0",
 * "fill1", ... An input is at most 64 KiB and a page is 1 MiB, so without
 * this an input could never fill a class and reach the LRU eviction of
 * alloc_slot. With it, a PUT whose entry announces 188001..235000 bytes
 * evicts the oldest of them (one-page pool) as soon as its entry header is
 * read: the value itself need not be in the input. A PUT of another size
 * reclaims the page. A large class keeps this cheap (4 items: ~15 us; 64
 * items of 16000 bytes took 190 us, mostly the pool's class lookup). The
 * values are not written: nothing reads them.
 */
static void prefill(struct kvsd_store *st)
{
    size_t count = KVSD_POOL_PAGE / kvsd_pool_slot_size(kvsd_store_pool(st), FILL_LEN);
    for (size_t i = 0; i < count; i++) {
        char key[24];
        int klen = snprintf(key, sizeof(key), "fill%zu", i);
        struct kvsd_item *it;
        if (kvsd_store_reserve(st, (const uint8_t *)key, (uint16_t)klen, FILL_LEN, &it) < 0 ||
            kvsd_store_commit(st, it) < 0)
            abort();
    }
}

#define FUZZ_REGION (64u * 1024) /* KVSD_SHM_MIN: the size an SHM_MAP must declare */

/* A descriptor of the one sealed region every input's first connection is handed. */
static int region_fd(void)
{
    static int fd = -1;
    if (fd >= 0) return dup(fd);
    fd = memfd_create("fuzz-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, FUZZ_REGION) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        abort();
    return dup(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const size_t chunks[] = {1, 3, 8, 24, 100, 4096, 65536, 1 << 20};
    size_t chunk = chunks[data[0] & 7];
    int lazy_drain = (data[0] >> 3) & 1; /* let replies pile up to reach back-pressure */
    /* Two connections on one store: pins held by one while the other replaces and evicts. */
    int nconn = (data[0] >> 4) & 1 ? 2 : 1;
    int second_freed_first = (data[0] >> 5) & 1;
    /* One or two 1 MiB pages: with a small value in each of two classes, page reclaim runs. */
    size_t pool = (data[0] >> 6) & 1 ? 2u << 20 : 1u << 20;
    int full = (data[0] >> 7) & 1; /* one page filled first (prefill): LRU eviction */
    data++;
    size--;

    struct kvsd_server srv;
    struct kvsd_server_limits lim = {.max_object = 256 * 1024,
                                     .max_frame = 512 * 1024,
                                     .out_limit = 8192,
                                     .out_heap_limit = 8192,
                                     .rbuf_size = 4096,
                                     .shm_max = 2 * FUZZ_REGION}; /* a ring and a buffer */
    if (kvsd_server_init(&srv, pool, &lim) < 0) return 0;
    if (full) prefill(srv.store);
    struct kvsd_proto_conn *c[2] = {kvsd_proto_conn_new(&srv), kvsd_proto_conn_new(&srv)};
    if (!c[0] || !c[1]) goto out;
    kvsd_proto_allow_shm(c[0]);
    int rfd = region_fd();
    if (rfd < 0) abort();
    kvsd_proto_take_fd(c[0], rfd);
    struct reply_check rc[2];
    memset(rc, 0, sizeof(rc));
    /* Chunks go to the connections in turn; each sees its own byte stream. */
    for (size_t off = 0, i = 0; off < size; i++) {
        size_t n = size - off < chunk ? size - off : chunk;
        int k = (int)(i % (size_t)nconn);
        if (!kvsd_proto_closing(c[k])) feed_all(c[k], data + off, n, &rc[k], lazy_drain);
        off += n;
        /* Another descriptor waits for an SHM_BUF (kvstored closes it if one already waits). */
        if (k == 0 && i < 8 && !kvsd_proto_closing(c[0])) {
            int bfd = region_fd();
            if (bfd < 0) abort();
            kvsd_proto_take_fd(c[0], bfd);
        }
    }
    drain(c[0], &rc[0]);
    drain(c[1], &rc[1]);

out:
    if (second_freed_first) {
        kvsd_proto_conn_free(c[1]);
        c[1] = NULL;
    }
    kvsd_proto_conn_free(c[0]);
    kvsd_proto_conn_free(c[1]);
    struct kvsd_store_stats st;
    kvsd_store_stats(srv.store, &st);
    if (st.pinned != 0) abort();
    if (srv.conn_memory != 0) abort(); /* every charge refunded */
    kvsd_server_fini(&srv);
    return 0;
}

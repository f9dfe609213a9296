/*
 * test_tcp_frames.c - the TCP transport's cut of a request into wire frames
 * (transport/tcp_frames.c, tcp_job_new). Random requests under random server
 * limits are planned, their iovecs joined into one byte stream and parsed
 * back with the wire decoder: every frame respects max_keys and max_frame
 * (body and largest reply), no frame is cut before it is full, every key
 * goes once and in order, keys no frame can hold are -E2BIG, PUT values are
 * referenced (never copied).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tcp_int.h"

#define MAX_KEYS_PER_REQ 48
#define VALUE_BYTES      (96 * 1024)

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint8_t values[VALUE_BYTES];

/* One random request and the storage its keys point into. */
struct sample {
    struct kvs_req req;
    struct kvs_key_io keys[MAX_KEYS_PER_REQ];
    char names[MAX_KEYS_PER_REQ][KVS_WIRE_MAX_KEY + 1];
    struct kvs_limits lim;
};

static void make_sample(struct sample *s, uint8_t opcode)
{
    memset(s, 0, sizeof(*s));
    uint32_t n = 1 + (uint32_t)(rnd() % MAX_KEYS_PER_REQ);
    s->lim.max_key = KVS_WIRE_MAX_KEY;
    s->lim.max_object = 1 + rnd() % (VALUE_BYTES - 1);
    s->lim.max_frame = 40 + rnd() % (128 * 1024);
    s->lim.max_keys = 1 + (uint32_t)(rnd() % 12);
    for (uint32_t i = 0; i < n; i++) {
        struct kvs_key_io *k = &s->keys[i];
        size_t klen = 1 + rnd() % (rnd() % 4 == 0 ? KVS_WIRE_MAX_KEY : 40);
        for (size_t j = 0; j < klen; j++)
            s->names[i][j] = (char)('a' + (i + j) % 26);
        k->key = s->names[i];
        k->klen = (uint32_t)klen;
        k->index = i;
        uint64_t len = rnd() % 3 == 0 ? 0 : rnd() % (rnd() % 2 ? 600 : VALUE_BYTES);
        if (opcode == KVS_OP_PUT) {
            len = len < s->lim.max_object ? len : s->lim.max_object; /* the client's check */
            k->val = values + rnd() % (VALUE_BYTES - len + 1);
            k->len = len;
        } else if (opcode == KVS_OP_GET) {
            k->buf = values;
            k->len = len;
        }
    }
    s->req.opcode = opcode;
    s->req.n = n;
    s->req.keys = s->keys;
}

/* Wire sizes of key k in a request frame and (at most) in its reply, as the spec says. */
static void sizes(const struct sample *s, const struct kvs_key_io *k, uint64_t *rq, uint64_t *rp)
{
    *rq = KVS_WIRE_ENTRY_LEN + k->klen + (s->req.opcode == KVS_OP_PUT ? k->len : 0);
    *rp = KVS_WIRE_STATUS_LEN;
    if (s->req.opcode == KVS_OP_GET) *rp += k->len < s->lim.max_object ? k->len : s->lim.max_object;
}

/* The job's iovecs as one byte stream. */
static uint8_t *join_iov(const struct tcp_job *job, size_t *len)
{
    size_t total = 0;
    for (int i = 0; i < job->niov; i++)
        total += job->iov[i].iov_len;
    uint8_t *out = malloc(total ? total : 1);
    assert_non_null(out);
    size_t at = 0;
    for (int i = 0; i < job->niov; i++) {
        memcpy(out + at, job->iov[i].iov_base, job->iov[i].iov_len);
        at += job->iov[i].iov_len;
    }
    *len = total;
    return out;
}

/* Walks one frame's entries against the keys the frame says it carries. */
struct walk {
    const struct sample *s;
    const struct tcp_frame *f;
    uint32_t next; /* the next key of the frame to match */
    uint64_t reply;
};

static int check_entry(void *arg, uint32_t index, const struct kvs_wire_item *item)
{
    struct walk *w = arg;
    const struct kvs_req *req = &w->s->req;
    (void)index;
    while (w->next < w->f->end && req->keys[w->next].status != KEY_PENDING)
        w->next++;
    assert_true(w->next < w->f->end);
    const struct kvs_key_io *k = &req->keys[w->next++];
    assert_int_equal(item->klen, k->klen);
    assert_memory_equal(item->key, k->key, k->klen);
    uint32_t want = req->opcode == KVS_OP_PUT || req->opcode == KVS_OP_GET ? (uint32_t)k->len : 0;
    assert_int_equal(item->len, want);
    if (req->opcode == KVS_OP_PUT && k->len > 0) assert_memory_equal(item->val, k->val, k->len);
    uint64_t rq, rp;
    sizes(w->s, k, &rq, &rp);
    w->reply += rp;
    return 0;
}

/* Checks the whole plan of s (job may be NULL: nothing to send). */
static void check_plan(struct sample *s, struct tcp_job *job)
{
    const struct kvs_req *req = &s->req;
    uint32_t pending = 0, values_sent = 0;
    for (uint32_t i = 0; i < req->n; i++) {
        uint64_t rq, rp;
        sizes(s, &req->keys[i], &rq, &rp);
        bool fits = rq <= s->lim.max_frame && rp <= s->lim.max_frame;
        assert_int_equal(req->keys[i].status, fits ? KEY_PENDING : -E2BIG);
        pending += fits;
        values_sent += fits && req->opcode == KVS_OP_PUT && req->keys[i].len > 0;
    }
    if (pending == 0) {
        assert_null(job);
        return;
    }
    assert_non_null(job);
    assert_true(job->niov <= (int)(2 * values_sent + 1));
    if (req->opcode != KVS_OP_PUT) assert_int_equal(job->niov, 1);
    for (int i = 0; i < job->niov; i++) /* values are sent from the caller's memory */
        if ((uint8_t *)job->iov[i].iov_base >= values &&
            (uint8_t *)job->iov[i].iov_base < values + VALUE_BYTES)
            assert_true(req->opcode == KVS_OP_PUT);

    size_t len;
    uint8_t *bytes = join_iov(job, &len);
    size_t at = 0;
    uint32_t sent = 0;
    for (uint32_t fi = 0; fi < job->nframes; fi++) {
        const struct tcp_frame *f = &job->frames[fi];
        if (fi > 0) assert_int_equal(f->first, job->frames[fi - 1].end);
        struct kvs_wire_hdr h;
        struct walk w = {.s = s, .f = f, .next = f->first};
        long got = kvs_wire_parse_request(bytes + at, len - at, UINT32_MAX, &h, check_entry, &w);
        assert_true(got > 0);
        at += (size_t)got;
        assert_int_equal(h.opcode, req->opcode);
        assert_int_equal(h.id, f->id);
        assert_int_equal(h.count, f->nsent);
        assert_true(h.count >= 1 && h.count <= s->lim.max_keys);
        assert_true(h.body_len <= s->lim.max_frame);
        assert_true(w.reply <= s->lim.max_frame);
        sent += h.count;
        /* Greedy: the next frame's first key would not have fit in this one. */
        if (fi + 1 < job->nframes) {
            const struct kvs_key_io *k = &req->keys[job->frames[fi + 1].first];
            assert_int_equal(k->status, KEY_PENDING);
            uint64_t rq, rp;
            sizes(s, k, &rq, &rp);
            assert_true(h.count == s->lim.max_keys || h.body_len + rq > s->lim.max_frame ||
                        w.reply + rp > s->lim.max_frame);
        }
    }
    for (uint32_t i = 0; i < job->frames[0].first; i++) /* keys before the first frame: refused */
        assert_int_equal(req->keys[i].status, -E2BIG);
    assert_int_equal(job->frames[job->nframes - 1].end, req->n);
    assert_int_equal(at, len);
    assert_int_equal(sent, pending);
    free(bytes);
}

static struct tcp_conn *fake_conn(void)
{
    struct tcp_conn *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->cfg.timeout_ms = 1000;
    atomic_init(&c->next_id, 100);
    return c;
}

static void test_random_requests(void **state)
{
    (void)state;
    static const uint8_t ops[] = {KVS_OP_PUT, KVS_OP_GET, KVS_OP_EXISTS, KVS_OP_REMOVE,
                                  KVS_OP_REMOVE_MATCHING};
    struct tcp_conn *c = fake_conn();
    struct sample *s = malloc(sizeof(*s));
    assert_non_null(s);
    rng_state = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof(values); i++)
        values[i] = (uint8_t)rnd();
    for (int iter = 0; iter < 4000; iter++) {
        make_sample(s, ops[iter % 5]);
        struct tcp_job *job = NULL;
        assert_int_equal(tcp_job_new(c, &s->req, &s->lim, &job), 0);
        check_plan(s, job);
        if (job) {
            assert_int_equal(atomic_load(&job->refs), job->nframes + 1);
            for (uint32_t f = 1; f < job->nframes; f++)
                assert_int_equal(job->frames[f].id, job->frames[f - 1].id + 1);
        }
        free(job);
    }
    free(s);
    free(c);
}

/* STATS has no keys: one empty frame. */
static void test_stats_is_one_empty_frame(void **state)
{
    (void)state;
    struct tcp_conn *c = fake_conn();
    struct kvs_req req = {.opcode = KVS_OP_STATS};
    struct kvs_limits lim = {.max_key = 512, .max_object = 1024, .max_frame = 4096, .max_keys = 8};
    struct tcp_job *job = NULL;
    assert_int_equal(tcp_job_new(c, &req, &lim, &job), 0);
    assert_non_null(job);
    assert_int_equal(job->nframes, 1);
    assert_int_equal(job->niov, 1);
    assert_int_equal(job->iov[0].iov_len, KVS_WIRE_HDR_LEN);
    struct kvs_wire_hdr h;
    assert_int_equal(kvs_wire_hdr_decode(job->iov[0].iov_base, &h, 0), 0);
    assert_int_equal(h.opcode, KVS_OP_STATS);
    assert_int_equal(h.count, 0);
    assert_int_equal(h.id, job->frames[0].id);
    free(job);
    free(c);
}

/* A GET whose reply could not fit any frame is refused before anything is built. */
static void test_nothing_fits(void **state)
{
    (void)state;
    struct tcp_conn *c = fake_conn();
    static char buf[4096];
    struct kvs_key_io k = {.key = "k", .klen = 1, .buf = buf, .len = sizeof(buf)};
    struct kvs_req req = {.opcode = KVS_OP_GET, .n = 1, .keys = &k};
    struct kvs_limits lim = {
        .max_key = 512, .max_object = 1 << 20, .max_frame = 1024, .max_keys = 8};
    struct tcp_job *job = (struct tcp_job *)&k; /* must be reset */
    assert_int_equal(tcp_job_new(c, &req, &lim, &job), 0);
    assert_null(job);
    assert_int_equal(k.status, -E2BIG);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_requests),
        cmocka_unit_test(test_stats_is_one_empty_frame),
        cmocka_unit_test(test_nothing_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_client_batch.c - batch and async calls against a real kvstored:
 * per-key statuses in a batch with mixed outcomes, batches split into several
 * frames, async single-key and batch calls (callback and wait forms, several
 * in flight), kvs_flush and kvs_close with ops in flight, bad call arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"

/* A small --max-frame makes big batches travel as several frames. */
static int setup(void **state)
{
    static struct kvt_client_fixture f;
    if (kvt_client_setup(&f, "--memory 64M --max-object 1M --max-frame 2M") < 0) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    kvt_client_teardown(*state);
    return 0;
}

static void test_mixed_outcomes(void **state)
{
    struct kvt_client_fixture *f = *state;
    assert_int_equal(kvs_put(f->c, "mix-present", "hello", 5), 0);
    assert_int_equal(kvs_put(f->c, "mix-long", "0123456789", 10), 0);

    char longkey[KVS_MAX_KEY + 2];
    memset(longkey, 'L', sizeof(longkey));
    longkey[KVS_MAX_KEY + 1] = '\0';

    /* Gets: present, missing, too small a buffer, size probe, bad keys. */
    const char *keys[] = {"mix-present", "mix-missing", "mix-long", "mix-long", "", NULL, longkey};
    enum { N = sizeof(keys) / sizeof(keys[0]) };
    char b0[16], b1[16], b2[4], b4[4], b5[4], b6[4];
    void *bufs[N] = {b0, b1, b2, NULL, b4, b5, b6};
    size_t caps[N] = {sizeof(b0), sizeof(b1), sizeof(b2), 0, 4, 4, 4};
    ssize_t res[N];
    memset(b2, 'z', sizeof(b2));
    assert_int_equal(kvs_batch_get(f->c, N, keys, bufs, caps, res), 2);
    assert_int_equal(res[0], 5);
    assert_memory_equal(b0, "hello", 5);
    assert_int_equal(res[1], -ENOENT);
    assert_int_equal(res[2], -ERANGE);
    assert_memory_equal(b2, "zzzz", 4);
    assert_int_equal(res[3], 10); /* (NULL, 0) probes the length, as kvs_get does */
    assert_int_equal(res[4], -EINVAL);
    assert_int_equal(res[5], -EINVAL);
    assert_int_equal(res[6], -E2BIG);

    /* Puts: fine, too big, NULL value with a length, bad key; the good ones land. */
    static unsigned char big[(1u << 20) + 1];
    const char *pkeys[] = {"mp-a", "mp-big", "mp-null", "", "mp-b"};
    const void *vals[] = {"A", big, NULL, "x", "BB"};
    size_t lens[] = {1, sizeof(big), 3, 1, 2};
    int st[5];
    assert_int_equal(kvs_batch_put(f->c, 5, pkeys, vals, lens, st), 2);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], -E2BIG);
    assert_int_equal(st[2], -EINVAL);
    assert_int_equal(st[3], -EINVAL);
    assert_int_equal(st[4], 0);
    char b[4];
    assert_int_equal(kvs_get(f->c, "mp-b", b, sizeof(b)), 2);
    assert_int_equal(kvs_get(f->c, "mp-big", b, sizeof(b)), -ENOENT);

    /* Exists. */
    const char *ekeys[] = {"mp-a", "mp-nope", NULL};
    int ex[3];
    assert_int_equal(kvs_batch_exists(f->c, 3, ekeys, ex), 2);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(ex[2], -EINVAL);
}

static void test_bad_calls(void **state)
{
    struct kvt_client_fixture *f = *state;
    const char *keys[1] = {"k"};
    const void *vals[1] = {"v"};
    size_t lens[1] = {1};
    int st[1];
    ssize_t res[1];
    void *bufs[1] = {st};
    kvs_op *op = (kvs_op *)1;
    assert_int_equal(kvs_batch_put(NULL, 1, keys, vals, lens, st), -EINVAL);
    assert_int_equal(kvs_batch_put(f->c, 1, NULL, vals, lens, st), -EINVAL);
    assert_int_equal(kvs_batch_put(f->c, 1, keys, NULL, lens, st), -EINVAL);
    assert_int_equal(kvs_batch_put(f->c, 1, keys, vals, NULL, st), -EINVAL);
    assert_int_equal(kvs_batch_put(f->c, 1, keys, vals, lens, NULL), -EINVAL);
    assert_int_equal(kvs_batch_get(f->c, 1, keys, NULL, lens, res), -EINVAL);
    assert_int_equal(kvs_batch_exists(f->c, 1, keys, NULL), -EINVAL);
    assert_int_equal(kvs_batch_get_async(f->c, 1, keys, bufs, lens, NULL, NULL, NULL, &op),
                     -EINVAL);
    assert_null(op);
    /* No callback and nowhere to put the op: nobody could ever learn it finished. */
    assert_int_equal(kvs_batch_put_async(f->c, 1, keys, vals, lens, st, NULL, NULL, NULL), -EINVAL);
    assert_int_equal(kvs_put_async(f->c, "k", "v", 1, NULL), -EINVAL);
    assert_int_equal(kvs_wait(NULL), -EINVAL);
    /* n = 0 is a valid, empty batch. */
    assert_int_equal(kvs_batch_put(f->c, 0, NULL, NULL, NULL, NULL), 0);
}

/* Several frames per server: more keys than fit one --max-frame of 2 MiB. */
static void test_batch_split_into_frames(void **state)
{
    struct kvt_client_fixture *f = *state;
    enum { N = 300, LEN = 16 * 1024 }; /* ~4.8 MiB: at least 3 frames each way */
    const char **keys = calloc(N, sizeof(*keys));
    const void **vals = calloc(N, sizeof(*vals));
    void **bufs = calloc(N, sizeof(*bufs));
    size_t *lens = calloc(N, sizeof(*lens));
    int *st = calloc(N, sizeof(*st));
    ssize_t *res = calloc(N, sizeof(*res));
    char(*names)[32] = calloc(N, 32);
    unsigned char *data = malloc((size_t)N * LEN), *out = malloc((size_t)N * LEN);
    assert_true(keys && vals && bufs && lens && st && res && names && data && out);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], 32, "split-%d", i);
        keys[i] = names[i];
        vals[i] = data + (size_t)i * LEN;
        bufs[i] = out + (size_t)i * LEN;
        lens[i] = LEN;
        kvval_fill(data + (size_t)i * LEN, LEN, names[i], 1);
    }
    assert_int_equal(kvs_batch_put(f->c, N, keys, vals, lens, st), N);
    memset(out, 0, (size_t)N * LEN);
    assert_int_equal(kvs_batch_get(f->c, N, keys, bufs, lens, res), N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i], LEN);
        assert_true(kvval_check(bufs[i], LEN, names[i], NULL));
    }
    free(keys);
    free(vals);
    free(bufs);
    free(lens);
    free(st);
    free(res);
    free(names);
    free(data);
    free(out);
}

static void test_async_single(void **state)
{
    struct kvt_client_fixture *f = *state;
    enum { N = 16 };
    kvs_op *ops[N];
    char keys[N][32], vals[N][32], bufs[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "as-%d", i);
        snprintf(vals[i], sizeof(vals[i]), "value-%d", i);
        assert_int_equal(kvs_put_async(f->c, keys[i], vals[i], strlen(vals[i]), &ops[i]), 0);
        assert_non_null(ops[i]);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(kvs_wait(ops[i]), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(kvs_get_async(f->c, keys[i], bufs[i], sizeof(bufs[i]), &ops[i]), 0);
    for (int i = N - 1; i >= 0; i--) { /* any order */
        assert_int_equal(kvs_wait(ops[i]), (ssize_t)strlen(vals[i]));
        assert_memory_equal(bufs[i], vals[i], strlen(vals[i]));
    }
    /* Per-key problems come back through kvs_wait, not as a call failure. */
    kvs_op *op;
    assert_int_equal(kvs_get_async(f->c, "", bufs[0], 4, &op), 0);
    assert_int_equal(kvs_wait(op), -EINVAL);
    assert_int_equal(kvs_get_async(f->c, "as-missing", bufs[0], 4, &op), 0);
    assert_int_equal(kvs_wait(op), -ENOENT);
}

struct cb_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    ssize_t nok_sum;
};

static void on_done(void *arg, ssize_t nok)
{
    struct cb_state *s = arg;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->nok_sum += nok;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits (bounded) until the callback ran want times. */
static int wait_calls(struct cb_state *s, int want)
{
    unsigned long long deadline = kvs_now_ns() + 20000000000ull;
    pthread_mutex_lock(&s->mu);
    while (s->calls < want && kvs_now_ns() < deadline) {
        pthread_mutex_unlock(&s->mu);
        usleep(1000);
        pthread_mutex_lock(&s->mu);
    }
    int calls = s->calls;
    pthread_mutex_unlock(&s->mu);
    return calls;
}

static void test_async_batches(void **state)
{
    struct kvt_client_fixture *f = *state;
    enum { B = 8, K = 32, LEN = 4096 };
    static char names[B][K][40];
    static unsigned char vals[B][K][LEN], outs[B][K][LEN];
    static const char *keys[B][K];
    static const void *vptr[B][K];
    static void *bptr[B][K];
    static size_t lens[B][K];
    static int st[B][K];
    static ssize_t res[B][K];
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++) {
            snprintf(names[b][k], sizeof(names[b][k]), "ab-%d-%d", b, k);
            keys[b][k] = names[b][k];
            kvval_fill(vals[b][k], LEN, names[b][k], 3);
            vptr[b][k] = vals[b][k];
            bptr[b][k] = outs[b][k];
            lens[b][k] = LEN;
        }
    }
    /* Callback form: B batches in flight at once. */
    struct cb_state s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    for (int b = 0; b < B; b++) {
        kvs_op *op = (kvs_op *)1;
        assert_int_equal(
            kvs_batch_put_async(f->c, K, keys[b], vptr[b], lens[b], st[b], on_done, &s, &op), 0);
    }
    assert_int_equal(wait_calls(&s, B), B);
    assert_int_equal(s.nok_sum, B * K);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            assert_int_equal(st[b][k], 0);

    /* Wait form, several in flight, waited in reverse order. */
    kvs_op *ops[B];
    for (int b = 0; b < B; b++)
        assert_int_equal(
            kvs_batch_get_async(f->c, K, keys[b], bptr[b], lens[b], res[b], NULL, NULL, &ops[b]),
            0);
    for (int b = B - 1; b >= 0; b--)
        assert_int_equal(kvs_wait(ops[b]), K);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++) {
            assert_int_equal(res[b][k], LEN);
            assert_true(kvval_check(outs[b][k], LEN, names[b][k], NULL));
        }
    }

    /* Exists, async with a callback; and a batch whose every key is invalid still calls back. */
    int ex[K];
    s.calls = 0;
    s.nok_sum = 0;
    assert_int_equal(kvs_batch_exists_async(f->c, K, keys[0], ex, on_done, &s, NULL), 0);
    const char *bad[2] = {"", NULL};
    int bst[2];
    const void *bv[2] = {"a", "b"};
    size_t bl[2] = {1, 1};
    assert_int_equal(kvs_batch_put_async(f->c, 2, bad, bv, bl, bst, on_done, &s, NULL), 0);
    assert_int_equal(wait_calls(&s, 2), 2);
    assert_int_equal(s.nok_sum, K);
    for (int k = 0; k < K; k++)
        assert_int_equal(ex[k], 1);
    assert_int_equal(bst[0], -EINVAL);
    assert_int_equal(bst[1], -EINVAL);
}

/* A callback that takes a lock its submitter holds: it must not run inside the submitting call. */
static pthread_mutex_t submit_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int locked_calls;
static void on_done_locking(void *arg, ssize_t nok)
{
    (void)arg;
    (void)nok;
    pthread_mutex_lock(&submit_lock);
    atomic_fetch_add(&locked_calls, 1);
    pthread_mutex_unlock(&submit_lock);
}

static void test_callback_not_inline(void **state)
{
    struct kvt_client_fixture *f = *state;
    const char *keys[1] = {""}; /* fails locally: the op completes during the call itself */
    const void *vals[1] = {"v"};
    size_t lens[1] = {1};
    int st[1];
    pthread_mutex_lock(&submit_lock);
    assert_int_equal(
        kvs_batch_put_async(f->c, 1, keys, vals, lens, st, on_done_locking, NULL, NULL), 0);
    pthread_mutex_unlock(&submit_lock);
    assert_int_equal(kvs_flush(f->c), 0);
    assert_int_equal(atomic_load(&locked_calls), 1);
}

static void test_flush_waits_for_ops(void **state)
{
    struct kvt_client_fixture *f = *state;
    enum { B = 6, K = 16, LEN = 64 * 1024 };
    static unsigned char vals[K][LEN];
    static char names[B][K][40];
    static const char *keys[B][K];
    static const void *vptr[K];
    static size_t lens[K];
    static int st[B][K];
    for (int k = 0; k < K; k++) {
        vptr[k] = vals[k];
        lens[k] = LEN;
    }
    struct cb_state s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++) {
            snprintf(names[b][k], sizeof(names[b][k]), "fl-%d-%d", b, k);
            keys[b][k] = names[b][k];
            st[b][k] = 12345;
        }
        assert_int_equal(
            kvs_batch_put_async(f->c, K, keys[b], vptr, lens, st[b], on_done, &s, NULL), 0);
    }
    assert_int_equal(kvs_flush(f->c), 0);
    /* Everything finished, callbacks included, before kvs_flush returned. */
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.calls, B);
    assert_int_equal(s.nok_sum, B * K);
    pthread_mutex_unlock(&s.mu);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            assert_int_equal(st[b][k], 0);
}

static void test_close_with_ops_in_flight(void **state)
{
    struct kvt_client_fixture *f = *state;
    kvs_client *c = kvs_open(f->srv.addr);
    assert_non_null(c);
    enum { B = 4, K = 8, LEN = 256 * 1024 };
    static unsigned char vals[K][LEN];
    static char names[B][K][40];
    static const char *keys[B][K];
    static const void *vptr[K];
    static size_t lens[K];
    static int st[B][K];
    for (int k = 0; k < K; k++) {
        vptr[k] = vals[k];
        lens[k] = LEN;
    }
    struct cb_state s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++) {
            snprintf(names[b][k], sizeof(names[b][k]), "cl-%d-%d", b, k);
            keys[b][k] = names[b][k];
        }
        assert_int_equal(kvs_batch_put_async(c, K, keys[b], vptr, lens, st[b], on_done, &s, NULL),
                         0);
    }
    kvs_close(c); /* waits for them: every callback has run when it returns */
    assert_int_equal(s.calls, B);
    assert_int_equal(s.nok_sum, B * K);
    char buf[4];
    assert_int_equal(kvs_get(f->c, "cl-3-7", NULL, 0), LEN);
    (void)buf;
}

/*
 * Callbacks run on the connection's reader thread and may submit more async
 * work. Submitting a big PUT from there while big GET replies are still
 * coming must not stall: the reader cannot block in a send while the server
 * waits for it to read.
 */
enum { CH_KEYS = 8, CH_LEN = 1024 * 1024, CH_ROUNDS = 6 };
struct chain {
    kvs_client *c;
    const char *keys[CH_KEYS];
    char names[CH_KEYS][32];
    const void *vals[CH_KEYS];
    void *bufs[CH_KEYS];
    size_t lens[CH_KEYS];
    int st[CH_ROUNDS][CH_KEYS];
    ssize_t res[CH_ROUNDS][CH_KEYS];
    atomic_int rounds, failures, finished;
};

static void chain_put_done(void *arg, ssize_t nok)
{
    struct chain *ch = arg;
    if (nok != CH_KEYS) atomic_fetch_add(&ch->failures, 1);
    atomic_fetch_add(&ch->finished, 1);
}

static void chain_get_done(void *arg, ssize_t nok)
{
    struct chain *ch = arg;
    if (nok != CH_KEYS) atomic_fetch_add(&ch->failures, 1);
    int r = atomic_fetch_add(&ch->rounds, 1) + 1;
    atomic_fetch_add(&ch->finished, 1);
    if (r >= CH_ROUNDS) return;
    /* From the reader thread: another big get and a big put, while replies are due. */
    if (kvs_batch_get_async(ch->c, CH_KEYS, ch->keys, ch->bufs, ch->lens, ch->res[r],
                            chain_get_done, ch, NULL) != 0 ||
        kvs_batch_put_async(ch->c, CH_KEYS, ch->keys, ch->vals, ch->lens, ch->st[r], chain_put_done,
                            ch, NULL) != 0)
        atomic_fetch_add(&ch->failures, 1);
}

static void test_submit_from_callback(void **state)
{
    struct kvt_client_fixture *f = *state;
    static struct chain ch;
    static unsigned char vals[CH_KEYS][CH_LEN], outs[CH_KEYS][CH_LEN];
    memset(&ch, 0, sizeof(ch));
    ch.c = f->c;
    for (int k = 0; k < CH_KEYS; k++) {
        snprintf(ch.names[k], sizeof(ch.names[k]), "chain-%d", k);
        ch.keys[k] = ch.names[k];
        ch.vals[k] = vals[k];
        ch.bufs[k] = outs[k];
        ch.lens[k] = CH_LEN;
    }
    assert_int_equal(kvs_batch_put(f->c, CH_KEYS, ch.keys, ch.vals, ch.lens, ch.st[0]), CH_KEYS);
    /* Two gets in flight to start with, so a reply is always being received. */
    assert_int_equal(kvs_batch_get_async(f->c, CH_KEYS, ch.keys, ch.bufs, ch.lens, ch.res[0],
                                         chain_get_done, &ch, NULL),
                     0);
    assert_int_equal(kvs_batch_get_async(f->c, CH_KEYS, ch.keys, ch.bufs, ch.lens, ch.res[0],
                                         chain_get_done, &ch, NULL),
                     0);
    /* Gets: 2 + (CH_ROUNDS - 1) chained; puts: CH_ROUNDS - 1. kvs_flush does not wait for
     * work submitted after it was called, so wait for the chain itself (bounded). */
    for (int i = 0; i < 30000 && atomic_load(&ch.finished) < 2 * CH_ROUNDS; i++)
        usleep(1000);
    assert_int_equal(atomic_load(&ch.finished), 2 * CH_ROUNDS);
    assert_int_equal(kvs_flush(f->c), 0);
    /* A reader stalled in a send would sit out the send timeout and lose the connection. */
    assert_int_equal(atomic_load(&ch.failures), 0);
    assert_true(atomic_load(&ch.rounds) >= CH_ROUNDS);
}

/*
 * kvs_flush waits for the ops in flight when it is called, not for a moment
 * with nothing in flight: a callback chain that always has the next batch
 * submitted before the previous one retires must not starve it. The chain
 * runs until the test stops it after kvs_flush returned; it ends by itself
 * only after RELAY_SECONDS (a flush that waited for it all along). Counting
 * rounds instead bounded the flush by the chain's speed: under load, 3000
 * round trips went by before the flushing thread ran again.
 */
enum { RELAY_SECONDS = 30 };
enum { RELAY_RUNNING, RELAY_STOPPED, RELAY_TIMED_OUT, RELAY_REFUSED };
struct relay {
    kvs_client *c;
    const char *keys[4];
    const void *vals[4];
    size_t lens[4];
    int st[4];
    unsigned long long deadline_ns;
    atomic_int rounds, stop, ended; /* ended: RELAY_RUNNING, or why it ended */
};

static void relay_next(void *arg, ssize_t nok)
{
    struct relay *r = arg;
    (void)nok;
    atomic_fetch_add(&r->rounds, 1);
    if (atomic_load(&r->stop))
        atomic_store(&r->ended, RELAY_STOPPED);
    else if (kvs_now_ns() > r->deadline_ns)
        atomic_store(&r->ended, RELAY_TIMED_OUT);
    else if (kvs_batch_put_async(r->c, 4, r->keys, r->vals, r->lens, r->st, relay_next, r, NULL))
        atomic_store(&r->ended, RELAY_REFUSED);
}

static void test_flush_not_starved_by_new_ops(void **state)
{
    struct kvt_client_fixture *f = *state;
    static struct relay r;
    memset(&r, 0, sizeof(r));
    r.c = f->c;
    r.deadline_ns = kvs_now_ns() + RELAY_SECONDS * 1000000000ull;
    const char *names[4] = {"relay-0", "relay-1", "relay-2", "relay-3"};
    for (int i = 0; i < 4; i++) {
        r.keys[i] = names[i];
        r.vals[i] = "v";
        r.lens[i] = 1;
    }
    assert_int_equal(
        kvs_batch_put_async(f->c, 4, r.keys, r.vals, r.lens, r.st, relay_next, &r, NULL), 0);
    while (atomic_load(&r.rounds) < 20 && atomic_load(&r.ended) == RELAY_RUNNING)
        usleep(1000);
    assert_int_equal(kvs_flush(f->c), 0);
    int at_flush = atomic_load(&r.ended);
    atomic_store(&r.stop, 1);
    while (atomic_load(&r.ended) == RELAY_RUNNING) /* bounded: RELAY_SECONDS */
        usleep(1000);
    assert_int_equal(at_flush, RELAY_RUNNING); /* returned while the chain still ran */
    assert_int_equal(atomic_load(&r.ended), RELAY_STOPPED);
    assert_int_equal(kvs_flush(f->c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_outcomes),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_batch_split_into_frames),
        cmocka_unit_test(test_async_single),
        cmocka_unit_test(test_async_batches),
        cmocka_unit_test(test_callback_not_inline),
        cmocka_unit_test(test_flush_waits_for_ops),
        cmocka_unit_test(test_close_with_ops_in_flight),
        cmocka_unit_test(test_submit_from_callback),
        cmocka_unit_test(test_flush_not_starved_by_new_ops),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

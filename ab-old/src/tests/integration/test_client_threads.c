/*
 * test_client_threads.c - one client shared by many threads: 16 threads
 * mixing single-key, batch and async calls on their own keys, and writers
 * and readers of one shared key whose self-checking values must never come
 * back torn.
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

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"

static int setup(void **state)
{
    static struct kvt_client_fixture f;
    if (kvt_client_setup(&f, "--memory 64M --max-object 1M") < 0) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    kvt_client_teardown(*state);
    return 0;
}

enum { THREADS = 16, ROUNDS = 40, BATCH = 8, LEN = 2048 };

struct worker {
    kvs_client *c;
    int id;
    atomic_int *errors;
};

static void bad(struct worker *w, const char *what, long got)
{
    fprintf(stderr, "thread %d: %s: %ld\n", w->id, what, got);
    atomic_fetch_add(w->errors, 1);
}

/* Each thread works on its own keys through every kind of call, checking every result. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned char val[LEN], buf[LEN];
    static __thread unsigned char bvals[BATCH][LEN], bouts[BATCH][LEN];
    char names[BATCH][32];
    const char *keys[BATCH];
    const void *vptr[BATCH];
    void *bptr[BATCH];
    size_t lens[BATCH];
    int st[BATCH];
    ssize_t res[BATCH];
    for (int r = 0; r < ROUNDS; r++) {
        char key[32];
        snprintf(key, sizeof(key), "t%d-single", w->id);
        kvval_fill(val, LEN, key, (unsigned)r);
        int rc = kvs_put(w->c, key, val, LEN);
        if (rc != 0) bad(w, "put", rc);
        ssize_t n = kvs_get(w->c, key, buf, LEN);
        if (n != LEN || memcmp(buf, val, LEN) != 0) bad(w, "get", (long)n);

        for (int k = 0; k < BATCH; k++) {
            snprintf(names[k], sizeof(names[k]), "t%d-b%d", w->id, k);
            keys[k] = names[k];
            kvval_fill(bvals[k], LEN, names[k], (unsigned)r);
            vptr[k] = bvals[k];
            bptr[k] = bouts[k];
            lens[k] = LEN;
        }
        rc = kvs_batch_put(w->c, BATCH, keys, vptr, lens, st);
        if (rc != BATCH) bad(w, "batch_put", rc);
        kvs_op *op;
        rc = kvs_batch_get_async(w->c, BATCH, keys, bptr, lens, res, NULL, NULL, &op);
        if (rc != 0)
            bad(w, "batch_get_async", rc);
        else if ((n = kvs_wait(op)) != BATCH)
            bad(w, "batch_get_async wait", (long)n);
        for (int k = 0; k < BATCH; k++) {
            unsigned version;
            if (res[k] != LEN || !kvval_check(bouts[k], LEN, names[k], &version) ||
                version != (unsigned)r)
                bad(w, "batch value", (long)res[k]);
        }
        if ((rc = kvs_exists(w->c, keys[r % BATCH])) != 1) bad(w, "exists", rc);
    }
    return NULL;
}

static void test_sixteen_threads_one_client(void **state)
{
    struct kvt_client_fixture *f = *state;
    pthread_t th[THREADS];
    struct worker w[THREADS];
    atomic_int errors = 0;
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){f->c, i, &errors};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&errors), 0);
    assert_int_equal(kvs_flush(f->c), 0);
}

/* ---- one key, many writers and readers: never a torn value ---- */

enum { SHARED_LEN = 256 * 1024, WRITERS = 3, READERS = 5, SHARED_ROUNDS = 30 };

struct shared {
    kvs_client *c;
    int id;
    atomic_int *torn, *errors, *reads_ok;
};

static void *writer_main(void *arg)
{
    struct shared *s = arg;
    unsigned char *val = malloc(SHARED_LEN);
    if (!val) return NULL;
    for (int r = 0; r < SHARED_ROUNDS; r++) {
        /* Lengths vary too, so a mix of two puts cannot pass for one. */
        size_t len = SHARED_LEN - (size_t)((s->id * 7919 + r * 104729) % 4096);
        kvval_fill(val, len, "shared", (unsigned)(s->id * 1000 + r + 1));
        int rc = kvs_put(s->c, "shared", val, len);
        if (rc != 0) atomic_fetch_add(s->errors, 1);
    }
    free(val);
    return NULL;
}

static void *reader_main(void *arg)
{
    struct shared *s = arg;
    unsigned char *buf = malloc(SHARED_LEN);
    if (!buf) return NULL;
    for (int r = 0; r < SHARED_ROUNDS * 2; r++) {
        ssize_t n = kvs_get(s->c, "shared", buf, SHARED_LEN);
        if (n == -ENOENT) continue;
        if (n < 0) {
            atomic_fetch_add(s->errors, 1);
            continue;
        }
        if (!kvval_check(buf, (size_t)n, "shared", NULL))
            atomic_fetch_add(s->torn, 1);
        else
            atomic_fetch_add(s->reads_ok, 1);
    }
    free(buf);
    return NULL;
}

static void test_one_key_never_torn(void **state)
{
    struct kvt_client_fixture *f = *state;
    pthread_t th[WRITERS + READERS];
    struct shared s[WRITERS + READERS];
    atomic_int torn = 0, errors = 0, reads_ok = 0;
    for (int i = 0; i < WRITERS + READERS; i++) {
        s[i] = (struct shared){f->c, i, &torn, &errors, &reads_ok};
        assert_int_equal(
            pthread_create(&th[i], NULL, i < WRITERS ? writer_main : reader_main, &s[i]), 0);
    }
    for (int i = 0; i < WRITERS + READERS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&errors), 0);
    assert_int_equal(atomic_load(&torn), 0);
    assert_true(atomic_load(&reads_ok) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sixteen_threads_one_client),
        cmocka_unit_test(test_one_key_never_torn),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * libmc_double.c - a Mooncake Store C API (store_c.h) that is not libkvstore:
 * an in-memory store in this process, for proving the shim backend-agnostic
 * (tests/integration/test_preload_mooncake.c runs tests/preload/mc_workload
 * linked against it, with and without the shim).
 *
 * It keeps Mooncake's conventions and some of its edges, on purpose where a
 * batch differs from the single-key calls: -1 for a NULL argument (a batch
 * call with one fails as a whole), -704 for a missing key, -600 for a buffer
 * too small (nothing copied) and for replica_num 0, an empty put_from
 * returns 0 and stores nothing while an empty value in a batch gets -600,
 * and a key given twice in one batch_put_from gets -706 the second time.
 * With the shim, results must still be what the single-key calls return.
 *
 * At destroy it says on stderr how many batch calls (and keys in them) and
 * single-key calls it served: the test reads that the shim drove its batch
 * calls.
 */
#include <pthread.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_c.h"

#define API __attribute__((visibility("default")))

enum {
    DBL_NULL_ARG = -1,
    DBL_INVALID_PARAMS = -600,
    DBL_NOT_FOUND = -704,
    DBL_TWICE = -706, /* Mooncake's OBJECT_ALREADY_EXISTS, for a key twice in one batch */
};

#define DBL_SLOTS 8192

struct entry {
    char *key; /* NULL: free */
    char *val;
    size_t len;
    int used; /* ever held a key: a probe goes on past it */
};

struct dbl_store {
    pthread_mutex_t lock;
    int ready; /* setup done */
    struct entry e[DBL_SLOTS];
    unsigned long batch_calls, batch_keys, single_calls;
};

static unsigned slot_hash(const char *k)
{
    unsigned h = 2166136261u;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 16777619u;
    return h % DBL_SLOTS;
}

/* The slot of key; with insert, else of where it would go (NULL: full). Lock held. */
static struct entry *find(struct dbl_store *s, const char *key, int insert)
{
    struct entry *freed = NULL;
    for (unsigned i = slot_hash(key), n = 0; n < DBL_SLOTS; n++, i = (i + 1) % DBL_SLOTS) {
        struct entry *e = &s->e[i];
        if (e->key && strcmp(e->key, key) == 0) return e;
        if (!e->used) return insert ? (freed ? freed : e) : NULL; /* the probe ends here */
        if (!e->key && !freed) freed = e;
    }
    return insert ? freed : NULL;
}

static int store_locked(struct dbl_store *s, const char *key, const void *val, size_t len)
{
    struct entry *e = find(s, key, 1);
    if (!e) return -200; /* NO_AVAILABLE_HANDLE: full */
    char *v = malloc(len);
    char *k = e->key ? e->key : strdup(key);
    if (!v || !k) {
        free(v);
        if (!e->key) free(k);
        return -200;
    }
    memcpy(v, val, len);
    free(e->val);
    e->key = k;
    e->val = v;
    e->len = len;
    e->used = 1;
    return 0;
}

static int64_t load_locked(struct dbl_store *s, const char *key, void *buf, size_t size)
{
    struct entry *e = find(s, key, 0);
    if (!e) return DBL_NOT_FOUND;
    if (size < e->len) return DBL_INVALID_PARAMS;
    if (e->len) memcpy(buf, e->val, e->len);
    return (int64_t)e->len;
}

static int remove_locked(struct entry *e)
{
    free(e->key);
    free(e->val);
    e->key = e->val = NULL;
    e->len = 0;
    return 0;
}

API mooncake_store_t mooncake_store_create(void)
{
    struct dbl_store *s = calloc(1, sizeof(*s));
    if (s) pthread_mutex_init(&s->lock, NULL);
    return s;
}

API void mooncake_store_destroy(mooncake_store_t store)
{
    struct dbl_store *s = store;
    if (!s) return;
    fprintf(stderr, "mc_double: %lu batch calls with %lu keys, %lu single-key calls\n",
            s->batch_calls, s->batch_keys, s->single_calls);
    for (int i = 0; i < DBL_SLOTS; i++) {
        free(s->e[i].key);
        free(s->e[i].val);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

API int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                             const char *metadata_server, uint64_t global_segment_size,
                             uint64_t local_buffer_size, const char *protocol,
                             const char *device_name, const char *master_server_addr)
{
    struct dbl_store *s = store;
    (void)metadata_server, (void)global_segment_size, (void)local_buffer_size, (void)protocol;
    (void)device_name, (void)master_server_addr;
    if (!s || !local_hostname) return DBL_NULL_ARG;
    s->ready = 1;
    return 0;
}

/* A single put: Mooncake's put_from of nothing succeeds and stores nothing. */
static int put_one(mooncake_store_t store, const char *key, const void *val, size_t size,
                   const mooncake_replicate_config_t *config)
{
    struct dbl_store *s = store;
    if (!s || !key || (!val && size > 0)) return DBL_NULL_ARG;
    if (!s->ready || (config && config->replica_num == 0)) return DBL_INVALID_PARAMS;
    if (size == 0) return 0;
    pthread_mutex_lock(&s->lock);
    s->single_calls++;
    int rc = store_locked(s, key, val, size);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

API int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
                           const mooncake_replicate_config_t *config)
{
    return put_one(store, key, value, size, config);
}

API int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
                                const mooncake_replicate_config_t *config)
{
    return put_one(store, key, buffer, size, config);
}

API int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                      const size_t *sizes, size_t count,
                                      const mooncake_replicate_config_t *config, int *results_out)
{
    struct dbl_store *s = store;
    if (!s || !keys || !buffers || !sizes || !results_out) return DBL_NULL_ARG;
    for (size_t i = 0; i < count; i++)
        if (!keys[i] || (!buffers[i] && sizes[i] > 0)) return DBL_NULL_ARG;
    pthread_mutex_lock(&s->lock);
    s->batch_calls++;
    s->batch_keys += count;
    for (size_t i = 0; i < count; i++) {
        int twice = 0;
        for (size_t j = 0; j < i && !twice; j++)
            twice = strcmp(keys[i], keys[j]) == 0;
        if (!s->ready || (config && config->replica_num == 0) || sizes[i] == 0)
            results_out[i] = DBL_INVALID_PARAMS;
        else if (twice)
            results_out[i] = DBL_TWICE;
        else
            results_out[i] = store_locked(s, keys[i], buffers[i], sizes[i]);
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

API int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                    size_t size)
{
    struct dbl_store *s = store;
    if (!s || !key || (!buffer && size > 0)) return DBL_NULL_ARG;
    if (!s->ready) return DBL_INVALID_PARAMS;
    pthread_mutex_lock(&s->lock);
    s->single_calls++;
    int64_t r = load_locked(s, key, buffer, size);
    pthread_mutex_unlock(&s->lock);
    return r;
}

API int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                      const size_t *sizes, size_t count, int64_t *results_out)
{
    struct dbl_store *s = store;
    if (!s || !keys || !buffers || !sizes || !results_out) return DBL_NULL_ARG;
    for (size_t i = 0; i < count; i++)
        if (!keys[i] || (!buffers[i] && sizes[i] > 0)) return DBL_NULL_ARG;
    pthread_mutex_lock(&s->lock);
    s->batch_calls++;
    s->batch_keys += count;
    for (size_t i = 0; i < count; i++)
        results_out[i] =
            s->ready ? load_locked(s, keys[i], buffers[i], sizes[i]) : DBL_INVALID_PARAMS;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

API int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
    struct dbl_store *s = store;
    if (!s || !key) return DBL_NULL_ARG;
    if (!s->ready) return DBL_INVALID_PARAMS;
    pthread_mutex_lock(&s->lock);
    s->single_calls++;
    int r = find(s, key, 0) != NULL;
    pthread_mutex_unlock(&s->lock);
    return r;
}

API int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                      int *results_out)
{
    struct dbl_store *s = store;
    if (!s || !keys || !results_out) return DBL_NULL_ARG;
    for (size_t i = 0; i < count; i++)
        if (!keys[i]) return DBL_NULL_ARG;
    pthread_mutex_lock(&s->lock);
    s->batch_calls++;
    s->batch_keys += count;
    for (size_t i = 0; i < count; i++)
        results_out[i] = s->ready ? find(s, keys[i], 0) != NULL : DBL_INVALID_PARAMS;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

API int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
    struct dbl_store *s = store;
    if (!s || !key) return DBL_NULL_ARG;
    pthread_mutex_lock(&s->lock);
    s->single_calls++;
    struct entry *e = find(s, key, 0);
    int64_t r = e ? (int64_t)e->len : DBL_NOT_FOUND;
    pthread_mutex_unlock(&s->lock);
    return r;
}

API int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
    struct dbl_store *s = store;
    (void)force;
    if (!s || !key) return DBL_NULL_ARG;
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, key, 0);
    int r = e ? remove_locked(e) : DBL_NOT_FOUND;
    pthread_mutex_unlock(&s->lock);
    return r;
}

API int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force)
{
    struct dbl_store *s = store;
    regex_t re;
    (void)force;
    if (!s || !pattern) return DBL_NULL_ARG;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) return DBL_INVALID_PARAMS;
    int64_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < DBL_SLOTS; i++)
        if (s->e[i].key && regexec(&re, s->e[i].key, 0, NULL, 0) == 0)
            n += !remove_locked(&s->e[i]);
    pthread_mutex_unlock(&s->lock);
    regfree(&re);
    return n;
}

API int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
    return mooncake_store_remove_by_regex(store, ".*", force);
}

API int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size)
{
    return store && buffer && size ? 0 : DBL_NULL_ARG;
}

API int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer)
{
    (void)buffer;
    return store ? 0 : DBL_NULL_ARG;
}

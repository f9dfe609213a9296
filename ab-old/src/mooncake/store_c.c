/*
 * store_c.c - Mooncake Store's C API (include/mooncake/store_c.h) over
 * libkvstore: a mooncake_store_t is one kvs_client plus what setup was told.
 *
 * Every call goes through libkvstore's public API (include/kvstore.h) and
 * binds to libkvstore.so dynamically, so that LD_PRELOAD=libkvbatch.so sees
 * the single-key kvs_put / kvs_get / kvs_exists made on behalf of
 * mooncake_store_put_from, _get_into, _is_exist and batches them.
 *
 * Conventions, from Mooncake's own C layer (mooncake-store/src/store_c.cpp)
 * and client (src/real_client.cpp): a NULL argument returns -1 before
 * anything is sent; a store that is not set up answers -600 (INVALID_PARAMS);
 * everything else returns 0 / a length / a count, or the Mooncake ErrorCode
 * that kvsmc_code() gives for the kvstored status. docs/mooncake.md has the
 * table.
 */
#include "kvsmc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstore.h"
#include "parse.h"

/* The C API is all that libkvstore_mooncake.so exports (mooncake/libkvstore_mooncake.map). */
#define MC_API __attribute__((visibility("default")))

/* A registered buffer, remembered so that unregistering an unknown one fails as in Mooncake. */
struct mc_reg {
    void *ptr;
    struct mc_reg *next;
};

struct mc_store {
    kvs_client *c;  /* NULL until setup */
    char *hostname; /* setup's local_hostname */
    pthread_mutex_t reg_mu;
    struct mc_reg *regs;
};

static void setup_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Setup's configuration errors on stderr, one line each (they are the caller's to fix). */
static void setup_error(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvstore_mooncake: mooncake_store_setup: %s\n", line);
}

int64_t kvsmc_code(int64_t st)
{
    if (st >= 0) return st;
    switch (-st) {
    case ENOENT:
        return KVSMC_OBJECT_NOT_FOUND;
    case ERANGE: /* buffer smaller than the value: Mooncake's get_into says INVALID_PARAMS */
    case E2BIG:
    case EINVAL:
        return KVSMC_INVALID_PARAMS;
    case ENOSPC:
        return KVSMC_NO_AVAILABLE_HANDLE;
    case ETIMEDOUT:
        return KVSMC_RPC_TIMEOUT;
    case EACCES:
        return KVSMC_ILLEGAL_CLIENT;
    case ENOTSUP:
        return KVSMC_NOT_SUPPORTED;
    case ECONNREFUSED:
    case ECONNRESET:
    case EIO:
    case EPROTO:
    case EBADMSG:
    case EMSGSIZE:
    case EBUSY:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return KVSMC_RPC_FAIL;
    default: /* -ENOMEM and anything unforeseen */
        return KVSMC_INTERNAL_ERROR;
    }
}

/* The connected client of store, or NULL (store not set up). store is not NULL. */
static kvs_client *client_of(mooncake_store_t store)
{
    return ((struct mc_store *)store)->c;
}

/* Mooncake refuses replica_num 0 (master_service.cpp PutStart); NULL means the default, 1. */
static int check_config(const mooncake_replicate_config_t *config)
{
    return config && config->replica_num == 0 ? KVSMC_INVALID_PARAMS : 0;
}

/* ---- lifecycle ---- */

MC_API mooncake_store_t mooncake_store_create(void)
{
    struct mc_store *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    pthread_mutex_init(&s->reg_mu, NULL);
    return s;
}

MC_API void mooncake_store_destroy(mooncake_store_t store)
{
    struct mc_store *s = store;
    if (!s) return;
    if (s->c) kvs_close(s->c);
    for (struct mc_reg *r = s->regs, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    pthread_mutex_destroy(&s->reg_mu);
    free(s->hostname);
    free(s);
}

/*
 * The kvs_open server list for setup: each "host:port" of master (NULL or
 * "": $KVSTORE_SERVERS, else KVS_DEFAULT_SERVERS) prefixed with scheme
 * ("tcp" or "rdma"); an entry that already names tcp:// or rdma:// keeps
 * it. Returns a malloc'ed string, or NULL with *err set (a Mooncake code).
 */
static char *server_list(const char *master, const char *scheme, int *err)
{
    if (!master || !*master) master = getenv("KVSTORE_SERVERS");
    if (!master || !*master) master = KVS_DEFAULT_SERVERS;
    size_t entries = 1;
    for (const char *p = master; *p; p++)
        entries += *p == ',';
    size_t cap = strlen(master) + entries * (strlen(scheme) + 4) + 1;
    char *out = malloc(cap);
    if (!out) {
        *err = KVSMC_INTERNAL_ERROR;
        return NULL;
    }
    size_t at = 0, len;
    const char *p = master, *item;
    while (kvs_list_next(&p, &item, &len)) {
        struct kvs_endpoint ep;
        if (kvs_parse_endpoint(item, len, KVS_EP_SCHEME, &ep) < 0) {
            setup_error("server \"%.*s\": expected [tcp://|rdma://]host:port", (int)len, item);
            free(out);
            *err = KVSMC_INVALID_PARAMS;
            return NULL;
        }
        const char *sep = ep.scheme[0] ? "" : "://";
        int n = snprintf(out + at, cap - at, "%s%s%s%.*s", at ? "," : "", *sep ? scheme : "", sep,
                         (int)len, item);
        if (n < 0 || (size_t)n >= cap - at) { /* cannot happen: cap counts every byte */
            free(out);
            *err = KVSMC_INTERNAL_ERROR;
            return NULL;
        }
        at += (size_t)n;
    }
    return out;
}

/* 0 if every server of c answers a STATS round trip, 1 if one does not, or a negative code. */
static int servers_unreachable(kvs_client *c)
{
    size_t cap = 64 << 10;
    for (int attempt = 0; attempt < 4; attempt++) {
        char *buf = malloc(cap);
        if (!buf) return -ENOMEM;
        ssize_t n = kvs_server_stats(c, buf, cap);
        if (n < 0) { /* no server answered */
            free(buf);
            return 1;
        }
        if ((size_t)n < cap) {
            /* kvs_server_stats marks a server that could not answer with "# error ..." */
            int bad = strncmp(buf, "# error ", 8) == 0 || strstr(buf, "\n# error ") != NULL;
            free(buf);
            return bad;
        }
        free(buf);
        cap = (size_t)n + 1; /* truncated: the counters grew; read them whole */
    }
    return -EIO;
}

MC_API int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                                const char *metadata_server, uint64_t global_segment_size,
                                uint64_t local_buffer_size, const char *protocol,
                                const char *device_name, const char *master_server_addr)
{
    (void)metadata_server, (void)global_segment_size, (void)local_buffer_size, (void)device_name;
    struct mc_store *s = store;
    if (!s) return KVSMC_INTERNAL_ERROR;
    if (s->c) {
        setup_error("this store is already set up");
        return KVSMC_INVALID_PARAMS;
    }
    if (!local_hostname || !*local_hostname) {
        setup_error("local_hostname is empty");
        return KVSMC_INVALID_PARAMS;
    }
    if (!protocol || !*protocol) protocol = "tcp";
    if (strcmp(protocol, "tcp") != 0 && strcmp(protocol, "rdma") != 0) {
        setup_error("protocol \"%s\": kvstored speaks \"tcp\" or \"rdma\"", protocol);
        return KVSMC_INVALID_PARAMS;
    }
    int err = 0;
    char *servers = server_list(master_server_addr, protocol, &err);
    if (!servers) return err;
    char *hostname = strdup(local_hostname);
    kvs_client *c = hostname ? kvs_open(servers) : NULL;
    if (!c) {
        int rc = hostname ? (int)kvsmc_code(-(errno ? errno : EINVAL)) : KVSMC_INTERNAL_ERROR;
        if (hostname) setup_error("cannot use servers \"%s\": %s", servers, strerror(errno));
        free(servers);
        free(hostname);
        return rc;
    }
    int down = servers_unreachable(c);
    if (down != 0) {
        setup_error("kvstored at \"%s\" does not answer", servers);
        kvs_close(c);
        free(servers);
        free(hostname);
        return down < 0 ? (int)kvsmc_code(down) : KVSMC_RPC_FAIL;
    }
    free(servers);
    s->hostname = hostname;
    s->c = c;
    return KVSMC_OK;
}

MC_API int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                                   const char *device_name, uint64_t mount_segment_size)
{
    /* Mooncake's initAll is setup with its defaults; here the servers come from the environment. */
    return mooncake_store_setup(store, "localhost:12345", NULL, mount_segment_size, 0, protocol,
                                device_name, NULL);
}

MC_API int mooncake_store_health_check(mooncake_store_t store)
{
    if (!store) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_HC_NOT_INITIALIZED;
    int down = servers_unreachable(c);
    if (down < 0) return (int)kvsmc_code(down);
    return down ? KVSMC_HC_UNREACHABLE : KVSMC_HC_HEALTHY;
}

/* ---- put ---- */

/* One key's put; 0-byte values are refused as Mooncake's master refuses them (PutStart). */
static int put_one(mooncake_store_t store, const char *key, const void *value, size_t size,
                   const mooncake_replicate_config_t *config)
{
    if (!store || !key || (!value && size > 0)) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c || size == 0) return KVSMC_INVALID_PARAMS;
    int rc = check_config(config);
    if (rc < 0) return rc;
    return (int)kvsmc_code(kvs_put(c, key, value, size));
}

MC_API int mooncake_store_put(mooncake_store_t store, const char *key, const void *value,
                              size_t size, const mooncake_replicate_config_t *config)
{
    return put_one(store, key, value, size, config);
}

MC_API int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer,
                                   size_t size, const mooncake_replicate_config_t *config)
{
    return put_one(store, key, buffer, size, config);
}

/*
 * Runs kvs_batch_put on the keys of [0, count) whose size is not 0 (those
 * get INVALID_PARAMS, as a single put would), mapping every status.
 */
static int batch_put(kvs_client *c, size_t count, const char *const keys[],
                     const void *const vals[], const size_t sizes[], int results_out[])
{
    size_t nonzero = 0;
    for (size_t i = 0; i < count; i++)
        nonzero += sizes[i] > 0;
    if (nonzero == count) {
        int rc = kvs_batch_put(c, count, keys, vals, sizes, results_out);
        if (rc < 0) return (int)kvsmc_code(rc);
        for (size_t i = 0; i < count; i++)
            results_out[i] = (int)kvsmc_code(results_out[i]);
        return 0;
    }
    /* Some keys are empty: send the others from compacted arrays. */
    const char **k = malloc((nonzero + 1) * sizeof(*k));
    const void **v = malloc((nonzero + 1) * sizeof(*v));
    size_t *l = malloc((nonzero + 1) * sizeof(*l));
    int *st = malloc((nonzero + 1) * sizeof(*st));
    int rc = 0;
    if (!k || !v || !l || !st) {
        rc = KVSMC_INTERNAL_ERROR;
        goto out;
    }
    size_t j = 0;
    for (size_t i = 0; i < count; i++) {
        if (sizes[i] == 0) continue;
        k[j] = keys[i], v[j] = vals[i], l[j] = sizes[i];
        j++;
    }
    rc = kvs_batch_put(c, nonzero, k, v, l, st);
    if (rc < 0) {
        rc = (int)kvsmc_code(rc);
        goto out;
    }
    rc = 0;
    j = 0;
    for (size_t i = 0; i < count; i++)
        results_out[i] = sizes[i] == 0 ? KVSMC_INVALID_PARAMS : (int)kvsmc_code(st[j++]);
out:
    free(st);
    free(l);
    free(v);
    free(k);
    return rc;
}

MC_API int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                         const size_t *sizes, size_t count,
                                         const mooncake_replicate_config_t *config,
                                         int *results_out)
{
    if (!store || !keys || !buffers || !sizes || !results_out) return KVSMC_INTERNAL_ERROR;
    for (size_t i = 0; i < count; i++)
        if (!keys[i] || (!buffers[i] && sizes[i] > 0)) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    int rc = c ? check_config(config) : KVSMC_INVALID_PARAMS;
    if (rc < 0) {
        /* As Mooncake: the call runs, and every key carries the refusal. */
        for (size_t i = 0; i < count; i++)
            results_out[i] = rc;
        return 0;
    }
    return batch_put(c, count, (const char *const *)keys, (const void *const *)buffers, sizes,
                     results_out);
}

/* ---- get ---- */

int64_t kvsmc_get_into_len(mooncake_store_t store, const char *key, void *buffer, size_t size,
                           size_t *needed)
{
    if (needed) *needed = 0;
    if (!store || !key || (!buffer && size > 0)) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    /* With size 0, kvs_get probes the length instead: a value that is not empty does not fit. */
    ssize_t n = kvs_get(c, key, size ? buffer : NULL, size);
    if (size == 0 && n > 0) {
        if (needed) *needed = (size_t)n;
        return KVSMC_INVALID_PARAMS;
    }
    if (n == -ERANGE && needed) {
        ssize_t len = kvs_get(c, key, NULL, 0); /* one more round trip, for the caller's retry */
        if (len < 0) return kvsmc_code(len);    /* gone meanwhile */
        *needed = (size_t)len > size ? (size_t)len : 0;
    }
    return kvsmc_code(n);
}

MC_API int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                       size_t size)
{
    return kvsmc_get_into_len(store, key, buffer, size, NULL);
}

/* kvs_batch_get with the results mapped (a probed length that does not fit is INVALID_PARAMS). */
static int batch_get(kvs_client *c, size_t count, const char *const keys[], void *const bufs[],
                     const size_t caps[], int64_t results_out[])
{
    ssize_t *res = malloc((count + 1) * sizeof(*res));
    if (!res) return KVSMC_INTERNAL_ERROR;
    int rc = kvs_batch_get(c, count, keys, bufs, caps, res);
    if (rc < 0) {
        free(res);
        return (int)kvsmc_code(rc);
    }
    for (size_t i = 0; i < count; i++)
        results_out[i] =
            res[i] > 0 && (size_t)res[i] > caps[i] ? KVSMC_INVALID_PARAMS : kvsmc_code(res[i]);
    free(res);
    return 0;
}

MC_API int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                         const size_t *sizes, size_t count, int64_t *results_out)
{
    if (!store || !keys || !buffers || !sizes || !results_out) return KVSMC_INTERNAL_ERROR;
    for (size_t i = 0; i < count; i++)
        if (!keys[i] || (!buffers[i] && sizes[i] > 0)) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) {
        for (size_t i = 0; i < count; i++)
            results_out[i] = KVSMC_INVALID_PARAMS;
        return 0;
    }
    return batch_get(c, count, (const char *const *)keys, buffers, sizes, results_out);
}

int kvsmc_batch_get_size(mooncake_store_t store, size_t count, const char *const keys[],
                         int64_t results_out[])
{
    if (!store || !keys || !results_out) return KVSMC_INTERNAL_ERROR;
    for (size_t i = 0; i < count; i++)
        if (!keys[i]) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    void **bufs = calloc(count + 1, sizeof(*bufs)); /* NULL buffers, 0 capacities: probes */
    size_t *caps = calloc(count + 1, sizeof(*caps));
    ssize_t *res = malloc((count + 1) * sizeof(*res));
    int rc = bufs && caps && res ? kvs_batch_get(c, count, keys, bufs, caps, res) : -ENOMEM;
    for (size_t i = 0; rc >= 0 && i < count; i++)
        results_out[i] = kvsmc_code(res[i]);
    free(res);
    free(caps);
    free(bufs);
    return rc < 0 ? (int)kvsmc_code(rc) : 0;
}

/* ---- existence, size, hostname ---- */

MC_API int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
    if (!store || !key) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    return (int)kvsmc_code(kvs_exists(c, key));
}

MC_API int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                         int *results_out)
{
    if (!store || !keys || !results_out) return KVSMC_INTERNAL_ERROR;
    for (size_t i = 0; i < count; i++)
        if (!keys[i]) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    int rc = c ? kvs_batch_exists(c, count, (const char *const *)keys, results_out)
               : KVSMC_INVALID_PARAMS;
    for (size_t i = 0; i < count; i++) {
        if (!c)
            results_out[i] = KVSMC_INVALID_PARAMS;
        else if (rc < 0) /* the call itself failed: every key carries it */
            results_out[i] = (int)kvsmc_code(rc);
        else
            results_out[i] = (int)kvsmc_code(results_out[i]);
    }
    return 0;
}

MC_API int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
    if (!store || !key) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    return kvsmc_code(kvs_get(c, key, NULL, 0));
}

MC_API int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len)
{
    if (!store || !buf_out || buf_len == 0) return KVSMC_INTERNAL_ERROR;
    const struct mc_store *s = store;
    if (!s->c) return KVSMC_INVALID_PARAMS;
    size_t len = strlen(s->hostname);
    if (len >= buf_len) return KVSMC_INTERNAL_ERROR;
    memcpy(buf_out, s->hostname, len + 1);
    return KVSMC_OK;
}

/* ---- remove ---- */

MC_API int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
    (void)force; /* nothing in kvstored blocks a remove (store.h: readers keep their copy) */
    if (!store || !key) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    return (int)kvsmc_code(kvs_remove(c, key));
}

/*
 * kvstored matches POSIX extended expressions anywhere in the key, as
 * Mooncake's master matches ECMAScript ones with std::regex_search; an empty
 * pattern matches every key in both ("^" on the wire, which needs a
 * non-empty pattern).
 */
MC_API int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern,
                                              int force)
{
    (void)force;
    if (!store || !pattern) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    return kvsmc_code(kvs_remove_matching(c, *pattern ? pattern : "^"));
}

MC_API int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
    (void)force;
    if (!store) return KVSMC_INTERNAL_ERROR;
    kvs_client *c = client_of(store);
    if (!c) return KVSMC_INVALID_PARAMS;
    return kvsmc_code(kvs_remove_matching(c, "^"));
}

/* ---- buffer registration ---- */

MC_API int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size)
{
    struct mc_store *s = store;
    if (!s || !buffer || size == 0) return KVSMC_INTERNAL_ERROR;
    if (!s->c) return KVSMC_INVALID_PARAMS;
    struct mc_reg *r = malloc(sizeof(*r));
    if (!r) return KVSMC_INTERNAL_ERROR;
    int rc = kvs_register_buffer(s->c, buffer, size);
    if (rc < 0) {
        free(r);
        return (int)kvsmc_code(rc);
    }
    r->ptr = buffer;
    pthread_mutex_lock(&s->reg_mu);
    r->next = s->regs;
    s->regs = r;
    pthread_mutex_unlock(&s->reg_mu);
    return KVSMC_OK;
}

MC_API int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer)
{
    struct mc_store *s = store;
    if (!s || !buffer) return KVSMC_INTERNAL_ERROR;
    if (!s->c) return KVSMC_INVALID_PARAMS;
    struct mc_reg *found = NULL;
    pthread_mutex_lock(&s->reg_mu);
    for (struct mc_reg **pp = &s->regs; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr != buffer) continue;
        found = *pp;
        *pp = found->next;
        break;
    }
    pthread_mutex_unlock(&s->reg_mu);
    if (!found) return KVSMC_INVALID_PARAMS; /* never registered (Mooncake fails it too) */
    free(found);
    int rc = kvs_unregister_buffer(s->c, buffer);
    return rc == -ENOENT ? KVSMC_INVALID_PARAMS : (int)kvsmc_code(rc);
}

/* ---- scatter-gather values (kvsmc.h) ---- */

/* The checks every scatter-gather call makes first: NULL arrays, NULL keys, NULL segment lists. */
static int check_parts(mooncake_store_t store, size_t count, const char *const keys[],
                       const struct iovec *const iovs[], const size_t niov[], const void *results)
{
    if (!store || !keys || !iovs || !niov || !results) return KVSMC_INTERNAL_ERROR;
    for (size_t i = 0; i < count; i++) {
        if (!keys[i] || (!iovs[i] && niov[i] > 0)) return KVSMC_INTERNAL_ERROR;
        for (size_t j = 0; j < niov[i]; j++)
            if (!iovs[i][j].iov_base && iovs[i][j].iov_len > 0) return KVSMC_INTERNAL_ERROR;
    }
    return 0;
}

static int iov_empty(const struct iovec *iov, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (iov[i].iov_len) return 0;
    return 1;
}

/*
 * The segments go to libkvstore as they are (kvs_batch_putv: each segment
 * sent where it lies). Mooncake refuses an empty value (INVALID_PARAMS):
 * such keys are answered here and not sent. One key of one segment is the
 * single-key call, which the shim batches.
 */
int kvsmc_batch_put_parts(mooncake_store_t store, size_t count, const char *const keys[],
                          const struct iovec *const iovs[], const size_t niov[],
                          const mooncake_replicate_config_t *config, int results_out[])
{
    int rc = check_parts(store, count, keys, iovs, niov, results_out);
    if (rc < 0) return rc;
    kvs_client *c = client_of(store);
    rc = c ? check_config(config) : KVSMC_INVALID_PARAMS;
    if (rc < 0) {
        for (size_t i = 0; i < count; i++)
            results_out[i] = rc;
        return 0;
    }
    if (count == 1 && niov[0] == 1) {
        results_out[0] = put_one(store, keys[0], iovs[0][0].iov_base, iovs[0][0].iov_len, config);
        return 0;
    }
    /* Per key: its place among the keys sent, and the arrays of those. */
    const char **k = malloc((count + 1) * sizeof(*k));
    const struct iovec **v = malloc((count + 1) * sizeof(*v));
    size_t *cnt = malloc((count + 1) * sizeof(*cnt));
    int *st = calloc(count + 1, sizeof(*st));
    rc = KVSMC_INTERNAL_ERROR;
    if (!k || !v || !cnt || !st) goto out;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (iov_empty(iovs[i], niov[i])) continue;
        k[n] = keys[i], v[n] = iovs[i], cnt[n] = niov[i];
        n++;
    }
    rc = n ? kvs_batch_putv(c, n, k, v, cnt, st) : 0;
    if (rc < 0) {
        rc = (int)kvsmc_code(rc);
        goto out;
    }
    rc = 0;
    for (size_t i = 0, j = 0; i < count; i++)
        results_out[i] =
            iov_empty(iovs[i], niov[i]) ? KVSMC_INVALID_PARAMS : (int)kvsmc_code(st[j++]);
out:
    free(st);
    free(cnt);
    free(v);
    free(k);
    return rc;
}

/*
 * The segments are filled by libkvstore in order (kvs_batch_getv), nothing
 * staged. One key of one segment is the single-key call, which the shim batches.
 */
int kvsmc_batch_get_parts(mooncake_store_t store, size_t count, const char *const keys[],
                          const struct iovec *const iovs[], const size_t niov[],
                          int64_t results_out[])
{
    int rc = check_parts(store, count, keys, iovs, niov, results_out);
    if (rc < 0) return rc;
    kvs_client *c = client_of(store);
    if (!c) {
        for (size_t i = 0; i < count; i++)
            results_out[i] = KVSMC_INVALID_PARAMS;
        return 0;
    }
    if (count == 1 && niov[0] == 1) {
        results_out[0] =
            mooncake_store_get_into(store, keys[0], iovs[0][0].iov_base, iovs[0][0].iov_len);
        return 0;
    }
    ssize_t *res = malloc((count + 1) * sizeof(*res));
    if (!res) return KVSMC_INTERNAL_ERROR;
    rc = kvs_batch_getv(c, count, keys, iovs, niov, res);
    if (rc < 0) {
        free(res);
        return (int)kvsmc_code(rc);
    }
    /* A key with no segments probes the length (kvs_get's NULL, 0): it does not fit. */
    for (size_t i = 0; i < count; i++)
        results_out[i] = res[i] > 0 && niov[i] == 0 ? KVSMC_INVALID_PARAMS : kvsmc_code(res[i]);
    free(res);
    return 0;
}

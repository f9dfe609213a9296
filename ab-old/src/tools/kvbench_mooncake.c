/*
 * kvbench_mooncake.c - "kvbench mooncake": threads calling Mooncake Store's C
 * API (store_c.h) one key at a time - mooncake_store_put_from or
 * mooncake_store_get_into - as a program written for Mooncake does, so that
 * the same command under LD_PRELOAD=libkvbatch.so measures the shim's
 * batching of those calls.
 *
 * The library is opened at run time (--library; by default kvbatch's
 * drop-in beside kvbench, build/lib/libkvstore_mooncake.so; Mooncake's own
 * libmooncake_store.so works the same) with RTLD_GLOBAL, and every call is
 * looked up in the global scope, as a program linked against it binds: an
 * LD_PRELOADed shim comes first there and interposes. Each thread puts from
 * and gets into one buffer of its own, registered with
 * mooncake_store_register_buffer (Mooncake's zero-copy calls want that).
 */
#include "kvbench.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/store_c.h"

/* The API's functions this workload calls, from the global scope. */
struct mc_api {
    mooncake_store_t (*create)(void);
    void (*destroy)(mooncake_store_t);
    int (*setup)(mooncake_store_t, const char *, const char *, uint64_t, uint64_t, const char *,
                 const char *, const char *);
    int (*put_from)(mooncake_store_t, const char *, void *, size_t,
                    const mooncake_replicate_config_t *);
    int64_t (*get_into)(mooncake_store_t, const char *, void *, size_t);
    int (*register_buffer)(mooncake_store_t, void *, size_t);
    int (*unregister_buffer)(mooncake_store_t, void *);
};

/* The command line. */
struct mc_cmd {
    struct bench_common common;
    const char *library;
    const char *master;   /* master_server_addr (the drop-in: kvstored's list) */
    const char *protocol; /* tcp, rdma */
    const char *device;
    const char *hostname;
    const char *metadata;
    size_t segment, local_buffer;
    enum bench_op ops[2];
    int nops;
    int threads;
    size_t size;
    uint64_t keys;
    long long max_ops;
    double seconds;
};

struct mc_run {
    const struct mc_cmd *cmd;
    const struct mc_api *api;
    mooncake_store_t store;
    enum bench_op op;
    uint64_t ops_each;
    uint64_t deadline_ns;
    _Atomic uint64_t done;
};

struct mc_worker {
    struct mc_run *run;
    int id;
    struct bench_hist lat;
    uint64_t ops, errors, bytes;
    int first_error;
};

static const struct kvopt_choice mc_op_choices[] = {{"put", BENCH_PUT}, {"get", BENCH_GET}, {0}};

static int mc_parse(struct mc_cmd *c, int argc, char **argv)
{
    const struct kvopt opts[] = {
        {"library", 0, KVOPT_STRING, KVOPT_TO(c->library), "PATH",
         "the library providing Mooncake's C API", .lo = 1, .hi = PATH_MAX - 1,
         .dflt = "libkvstore_mooncake.so beside kvbench"},
        {"master", 0, KVOPT_STRING, KVOPT_TO(c->master), "ADDR",
         "mooncake_store_setup's master_server_addr (the drop-in: kvstored host:port list)",
         .lo = 1, .hi = 4096, .dflt = "the library's ($KVSTORE_SERVERS for the drop-in)"},
        {"protocol", 0, KVOPT_STRING, KVOPT_TO(c->protocol), "P", "tcp or rdma", .lo = 1, .hi = 16},
        {"device", 0, KVOPT_STRING, KVOPT_TO(c->device), "D", "RDMA device names", .lo = 0,
         .hi = 256, .dflt = "\"\""},
        {"hostname", 0, KVOPT_STRING, KVOPT_TO(c->hostname), "H", "local_hostname", .lo = 1,
         .hi = 256},
        {"metadata", 0, KVOPT_STRING, KVOPT_TO(c->metadata), "M", "metadata_server", .lo = 1,
         .hi = 4096},
        {"segment", 0, KVOPT_SIZE, KVOPT_TO(c->segment), "SIZE", "global_segment_size", .lo = 0,
         .hi = 1ll << 40},
        {"local-buffer", 0, KVOPT_SIZE, KVOPT_TO(c->local_buffer), "SIZE", "local_buffer_size",
         .lo = 0, .hi = 1ll << 40},
        {"ops", 0, KVOPT_ENUM, KVOPT_LIST(c->ops, c->nops), "L",
         "put (put_from) and/or get (get_into), run one after the other", .choices = mc_op_choices},
        {"threads", 0, KVOPT_COUNT, KVOPT_TO(c->threads), "N", "client threads", .lo = 1,
         .hi = 1024},
        {"size", 0, KVOPT_SIZE, KVOPT_TO(c->size), "SIZE", "value size", .lo = 1, .hi = 64 << 20},
        {"keys", 0, KVOPT_COUNT, KVOPT_TO(c->keys), "N", "keys per thread", .lo = 1, .hi = 1000000},
        {"max-ops", 0, KVOPT_COUNT, KVOPT_TO(c->max_ops), "N", "op bound per run, all threads",
         .lo = 1, .hi = 1000000000000LL, .accepted = "1..10^12", .dflt = "none"},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(c->seconds), "S", "time bound per run", .lo = 0,
         .hi = 86400},
        BENCH_OPTS_OUTPUT(c->common),
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbench mooncake",
        .usage = "usage: kvbench mooncake [options]\n"
                 "  threads calling mooncake_store_put_from / mooncake_store_get_into, one key\n"
                 "  per call; run it under LD_PRELOAD=libkvbatch.so to measure the shim\n",
        .footer = "exit status: 0 ok, 1 some ops failed, 2 bad arguments or no library\n",
        .opts = opts};
    return kvopt_parse(&cmd, argc, argv);
}

/* dlopens path (RTLD_GLOBAL) and binds api from the global scope; 0, or -1 said on stderr. */
static int mc_load(const char *path, struct mc_api *api)
{
    char def[PATH_MAX];
    if (!path) {
        ssize_t n = readlink("/proc/self/exe", def, sizeof(def) - 1);
        if (n <= 0) return -1;
        def[n] = '\0';
        char *slash = strrchr(def, '/');
        if (slash) *slash = '\0';
        size_t len = strlen(def);
        snprintf(def + len, sizeof(def) - len, "/../lib/libkvstore_mooncake.so");
        path = def;
    }
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "kvbench mooncake: cannot open %s: %s\n", path, dlerror());
        return -1;
    }
    struct {
        void **fn;
        const char *name;
    } need[] = {
        {(void **)&api->create, "mooncake_store_create"},
        {(void **)&api->destroy, "mooncake_store_destroy"},
        {(void **)&api->setup, "mooncake_store_setup"},
        {(void **)&api->put_from, "mooncake_store_put_from"},
        {(void **)&api->get_into, "mooncake_store_get_into"},
        {(void **)&api->register_buffer, "mooncake_store_register_buffer"},
        {(void **)&api->unregister_buffer, "mooncake_store_unregister_buffer"},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        if (!(*need[i].fn = dlsym(RTLD_DEFAULT, need[i].name))) {
            fprintf(stderr, "kvbench mooncake: %s has no %s\n", path, need[i].name);
            return -1;
        }
    return 0;
}

static void key_of(int thread, uint64_t i, char *key, size_t cap)
{
    snprintf(key, cap, "mcb.%d.%d.%llu", (int)getpid(), thread, (unsigned long long)i);
}

static void note(struct mc_worker *w, int64_t rc, size_t moved)
{
    w->ops++;
    if (rc < 0) {
        w->errors++;
        if (!w->first_error) w->first_error = (int)rc;
    } else {
        w->bytes += moved;
    }
}

/* A get's outcome: the length, and the pattern the put wrote. */
static int64_t check_get(const char *key, const void *buf, size_t size, int64_t rc)
{
    if (rc < 0) return rc;
    if ((size_t)rc != size || !kvval_check_ends(buf, size, key, 0)) return -EBADMSG;
    return rc;
}

static void *mc_worker_main(void *arg)
{
    struct mc_worker *w = arg;
    struct mc_run *r = w->run;
    const struct mc_cmd *c = r->cmd;
    char key[96];
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, c->size) != 0) {
        w->first_error = -ENOMEM;
        w->errors = w->ops = 1;
        return NULL;
    }
    int registered = r->api->register_buffer(r->store, buf, c->size) == 0;
    for (uint64_t j = 0; j < r->ops_each; j++) {
        uint64_t t0 = kvs_now_ns();
        if (t0 >= r->deadline_ns) break;
        key_of(w->id, j % c->keys, key, sizeof(key));
        int64_t rc;
        if (r->op == BENCH_PUT) {
            kvval_stamp_ends(buf, c->size, key, 0); /* what check_get reads */
            t0 = kvs_now_ns();
            rc = r->api->put_from(r->store, key, buf, c->size, NULL);
        } else {
            rc = check_get(key, buf, c->size, r->api->get_into(r->store, key, buf, c->size));
        }
        bench_hist_add(&w->lat, kvs_now_ns() - t0, 1);
        note(w, rc, c->size);
        atomic_fetch_add_explicit(&r->done, 1, memory_order_relaxed);
    }
    if (registered) r->api->unregister_buffer(r->store, buf);
    free(buf);
    return NULL;
}

/* Puts every thread's keys once, for the get runs; 0, or the first error. */
static int mc_prefill(const struct mc_cmd *c, const struct mc_api *api, mooncake_store_t store)
{
    char key[96];
    void *buf = malloc(c->size);
    int rc = buf ? 0 : -ENOMEM;
    for (int t = 0; t < c->threads && rc == 0; t++)
        for (uint64_t i = 0; i < c->keys && rc == 0; i++) {
            key_of(t, i, key, sizeof(key));
            kvval_fill(buf, c->size, key, 0);
            rc = api->put_from(store, key, buf, c->size, NULL);
        }
    free(buf);
    return rc;
}

/* One measured run of op; fills res. */
static int mc_run_once(const struct mc_cmd *c, const struct mc_api *api, mooncake_store_t store,
                       enum bench_op op, struct bench_result *res)
{
    struct mc_run r = {.cmd = c, .api = api, .store = store, .op = op};
    memset(res, 0, sizeof(*res));
    uint64_t total = c->max_ops > 0 ? (uint64_t)c->max_ops : UINT64_MAX / 2;
    r.ops_each = (total + (uint64_t)c->threads - 1) / (uint64_t)c->threads;
    atomic_init(&r.done, 0);
    struct mc_worker *w = calloc((size_t)c->threads, sizeof(*w));
    pthread_t *t = calloc((size_t)c->threads, sizeof(*t));
    if (!w || !t) {
        free(w);
        free(t);
        return -ENOMEM;
    }
    struct bench_progress prog;
    bench_progress_start(&prog, op == BENCH_PUT ? "mooncake put_from" : "mooncake get_into",
                         &r.done, c->max_ops > 0 ? (uint64_t)c->max_ops : 0, c->seconds,
                         c->common.quiet);
    uint64_t start = kvs_now_ns();
    r.deadline_ns = start + (uint64_t)(c->seconds * 1e9);
    int started = 0;
    for (; started < c->threads; started++) {
        w[started].run = &r;
        w[started].id = started;
        if (pthread_create(&t[started], NULL, mc_worker_main, &w[started]) != 0) break;
    }
    while (atomic_load(&r.done) < (uint64_t)started * r.ops_each && kvs_now_ns() < r.deadline_ns) {
        bench_progress_tick(&prog);
        bench_sleep_ns(50 * 1000 * 1000);
    }
    struct bench_hist lat = {0};
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        bench_hist_merge(&lat, &w[i].lat);
        res->ops += w[i].ops;
        res->errors += w[i].errors;
        res->bytes += w[i].bytes;
        if (!res->first_error) res->first_error = w[i].first_error;
    }
    uint64_t end = kvs_now_ns();
    bench_progress_end(&prog);
    snprintf(res->workload, sizeof(res->workload), "mc-%s", op == BENCH_PUT ? "put_from" : "get");
    snprintf(res->label, sizeof(res->label), "mooncake C API");
    res->threads = c->threads;
    res->batch = 1;
    res->size = c->size;
    res->p50_us = bench_hist_quantile(&lat, 0.5) / 1e3;
    res->p99_us = bench_hist_quantile(&lat, 0.99) / 1e3;
    bench_result_timing(res, BENCH_SINGLE, start, end);
    free(w);
    free(t);
    return started == c->threads ? 0 : -EAGAIN;
}

int bench_mooncake_main(int argc, char **argv)
{
    struct mc_cmd c = {.common = {.repeat = 1},
                       .protocol = "tcp",
                       .device = "",
                       .hostname = "localhost:12345",
                       .metadata = "P2PHANDSHAKE",
                       .segment = 512ull << 20,
                       .local_buffer = 128ull << 20,
                       .ops = {BENCH_PUT, BENCH_GET},
                       .nops = 2,
                       .threads = 16,
                       .size = 8192,
                       .keys = 256,
                       .seconds = 10};
    int rc = mc_parse(&c, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    struct mc_api api;
    if (mc_load(c.library, &api) < 0) return KVOPT_EXIT_USAGE;
    mooncake_store_t store = api.create();
    if (!store || api.setup(store, c.hostname, c.metadata, c.segment, c.local_buffer, c.protocol,
                            c.device, c.master) != 0) {
        fprintf(stderr, "kvbench mooncake: mooncake_store_setup failed (master %s)\n",
                c.master ? c.master : "(the library's default)");
        if (store) api.destroy(store);
        return KVOPT_EXIT_USAGE;
    }
    struct bench_output out;
    if (bench_output_open(&out, c.common.csv, c.common.json) < 0) {
        api.destroy(store);
        return KVOPT_EXIT_USAGE;
    }
    out.quiet = c.common.quiet;
    uint64_t errors = 0;
    rc = 0;
    for (int o = 0; o < c.nops && rc == 0; o++) {
        if (c.ops[o] == BENCH_GET && (rc = mc_prefill(&c, &api, store)) != 0) {
            fprintf(stderr, "kvbench mooncake: prefilling for get failed (%d)\n", rc);
            break;
        }
        struct bench_result runs[64], med;
        for (int i = 0; i < c.common.repeat && rc == 0; i++) {
            if ((rc = mc_run_once(&c, &api, store, c.ops[o], &runs[i])) < 0) break;
            runs[i].run = i + 1;
            errors += runs[i].errors;
            bench_emit(&out, &runs[i]);
        }
        if (rc == 0) bench_emit_median(&out, runs, c.common.repeat, &med);
    }
    api.destroy(store);
    if (bench_output_close(&out) < 0 && rc == 0) rc = -EIO;
    return rc != 0 || errors ? BENCH_EXIT_ERRORS : 0;
}

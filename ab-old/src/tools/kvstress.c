/*
 * kvstress - fault-injection stress for kvbatch.
 *
 * Many threads put and get self-verifying values (values.h: each
 * value encodes its key, a version and a checksum) through libkvstore - or
 * through the shim when run under LD_PRELOAD=libkvbatch.so - with a bounded
 * op count and time, while kvstored (which kvstress starts itself, on
 * 127.0.0.1:0 or inside a network namespace) is killed with SIGKILL and
 * restarted. Every key-op gets an id; its completions are counted, so an op
 * that never ends or ends twice is seen. Gets are checked: a value that is
 * not one kvval_fill wrote for that key (torn, mixed, another key's) is a
 * wrong value; an older version than one already acknowledged is stale.
 * RSS of kvstored and of kvstress itself are sampled. Under the shim the
 * stats file must agree with the ops issued. docs/stress.md has the details.
 *
 * Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or set-up.
 */
#include "kvstress.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "opts.h"
#include "status.h"

const char *const opname[OP_KINDS] = {"put", "get"};

struct options opt = {.threads = 8,
                      .max_ops = 200000,
                      .seconds = 10,
                      .down_ms = 200,
                      .keys = 64,
                      .min_len = 16,
                      .max_len = 16384,
                      .listen = "127.0.0.1:0",
                      .memory = 64ull << 20,
                      .client_growth_mb = 64};

/* ---- command line ---- */

/* Parses argv into opt; 0, KVOPT_HELP or -EINVAL with a message. */
static int parse_options(int argc, char **argv)
{
    const struct kvopt opts[] = {
        {"threads", 0, KVOPT_COUNT, KVOPT_TO(opt.threads), "N", "worker threads", .lo = 1,
         .hi = MAX_THREADS},
        {"ops", 0, KVOPT_COUNT, KVOPT_TO(opt.max_ops), "N", "key-ops in all, all threads", .lo = 1,
         .hi = 1ll << 32, .accepted = "1..2^32"},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(opt.seconds), "S", "time bound", .lo = 0,
         .hi = 86400},
        {"kills", 0, KVOPT_COUNT, KVOPT_TO(opt.kills), "N",
         "SIGKILL + restart kvstored N times, evenly spaced", .lo = 0, .hi = MAX_RESTARTS - 2},
        {"down-ms", 0, KVOPT_COUNT, KVOPT_TO(opt.down_ms), "MS",
         "how long the killed server stays down", .lo = 0, .hi = 600000},
        {"keys", 0, KVOPT_COUNT, KVOPT_TO(opt.keys), "N", "own keys per thread", .lo = 1,
         .hi = 100000},
        {"min-len", 0, KVOPT_SIZE, KVOPT_TO(opt.min_len), "SIZE", "smallest value", .lo = 12,
         .hi = 64 << 20},
        {"max-len", 0, KVOPT_SIZE, KVOPT_TO(opt.max_len), "SIZE",
         "largest value, at least --min-len", .lo = 12, .hi = 64 << 20},
        {"kvstored", 0, KVOPT_STRING, KVOPT_TO(opt.kvstored), "PATH", "server binary",
         .dflt = "kvstored next to kvstress"},
        {"listen", 0, KVOPT_STRING, KVOPT_TO(opt.listen), "HOST:PORT",
         "where kvstored listens; port 0 picks a free one"},
        {"netns", 0, KVOPT_STRING, KVOPT_TO(opt.netns), "NAME",
         "run kvstored inside network namespace NAME"},
        {"memory", 0, KVOPT_SIZE, KVOPT_TO(opt.memory), "SIZE", "kvstored --memory", .lo = 1 << 20,
         .hi = 1ll << 44},
        {"servers", 0, KVOPT_STRING, KVOPT_TO(opt.servers), "LIST",
         "use running servers instead (no --kills, no --writeback-check)"},
        {"client-growth-mb", 0, KVOPT_COUNT, KVOPT_TO(opt.client_growth_mb), "N",
         "bound on kvstress's RSS growth after warm-up, MiB", .lo = 0, .hi = 1 << 20},
        {"writeback-check", 0, KVOPT_FLAG, KVOPT_TO(opt.writeback_check), NULL,
         "with the shim in writeback mode: pending puts at a crash"},
        {"corrupt-one", 0, KVOPT_FLAG, KVOPT_TO(opt.corrupt_one), NULL,
         "self-test: damage one get result (the run must fail)"},
        {"json", 0, KVOPT_STRING, KVOPT_TO(opt.json_path), "FILE",
         "also write the JSON figures to FILE"},
        {"quiet", 0, KVOPT_FLAG, KVOPT_TO(opt.quiet), NULL, "no per-problem lines"},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvstress",
        .usage = "usage: kvstress [options]\n",
        .footer = "exit status: 0 all checks passed, 1 a check failed, 2 bad usage or set-up\n",
        .opts = opts};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc != 0) return rc;
    if (opt.max_len < opt.min_len)
        return kvopt_bad("kvstress", "--max-len", "(below --min-len)", "at least --min-len");
    if (opt.servers && (opt.kills || opt.writeback_check)) {
        fprintf(stderr, "kvstress: --servers uses running servers: no --kills, no "
                        "--writeback-check\n");
        return -EINVAL;
    }
    return 0;
}

/* What the environment must give a mode: --writeback-check needs the shim in writeback mode. */
static int check_environment(void)
{
    const char *pm = getenv("KVBATCH_PUT_MODE");
    const char *pre = getenv("LD_PRELOAD");
    wb_mode = pm && !strcmp(pm, "writeback") && pre && strstr(pre, "libkvbatch");
    if (opt.writeback_check && !wb_mode) {
        fprintf(stderr, "kvstress: --writeback-check needs LD_PRELOAD=libkvbatch.so and "
                        "KVBATCH_PUT_MODE=writeback\n");
        return -EINVAL;
    }
    const char *pol = getenv("KVBATCH_POLICY");
    if (opt.writeback_check && (!pol || strcmp(pol, "fixed") != 0)) {
        /* Adaptive sends an idle put at once: nothing would be pending at the kill. */
        fprintf(stderr, "kvstress: --writeback-check needs KVBATCH_POLICY=fixed and a window "
                        "(KVBATCH_WINDOW_US) well above a millisecond\n");
        return -EINVAL;
    }
    return 0;
}

/* Path of kvstored next to this binary. */
static const char *default_kvstored(const char *argv0)
{
    static char path[PATH_MAX];
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return argv0;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof(path), "%.*s/kvstored", (int)(sizeof(path) - 10), self);
    return path;
}

/* ---- the run ---- */

/* Where the client connects: --servers, or a kvstored started here. NULL if it cannot start. */
static const char *servers_under_test(void)
{
    if (opt.servers) return opt.servers;
    if (split_hostport(opt.listen, srv.host, sizeof(srv.host), &srv.port) < 0) {
        kvopt_bad("kvstress", "--listen", opt.listen, "HOST:PORT");
        return NULL;
    }
    return spawn_server() < 0 ? NULL : srv.addr;
}

/* All bookkeeping allocated and touched before the run, so later RSS growth is the library's. */
static int prepare_bookkeeping(void)
{
    uint64_t max_ids = opt.max_ops + (uint64_t)opt.threads * BATCH_KEYS;
    completions = calloc(max_ids, 1);
    if (!completions) return -ENOMEM;
    memset((void *)completions, 0, max_ids);
    for (int s = 0; s < SHARED_KEYS; s++)
        snprintf(shared_names[s], sizeof(shared_names[s]), "stress.%d.shared.%d", (int)getpid(), s);
    return 0;
}

/* Sets up worker i (its keys, buffers, quota) and starts it; 0 or -1. */
static int start_worker(int i)
{
    struct worker *w = &workers[i];
    w->index = i;
    w->quota = opt.max_ops / (uint64_t)opt.threads;
    w->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) ^ (uint64_t)getpid();
    w->ks = calloc((size_t)opt.keys, sizeof(*w->ks));
    w->names = calloc((size_t)opt.keys, sizeof(*w->names));
    w->val = malloc(opt.max_len);
    w->buf = malloc(opt.max_len);
    if (!w->ks || !w->names || !w->val || !w->buf) return -1;
    memset(w->val, 0, opt.max_len);
    memset(w->buf, 0, opt.max_len);
    for (int k = 0; k < opt.keys; k++)
        snprintf(w->names[k], sizeof(w->names[k]), "stress.%d.t%d.k%d", (int)getpid(), i, k);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cv, NULL);
    return pthread_create(&w->tid, NULL, worker_main, w) == 0 ? 0 : -1;
}

struct memfig {
    uint64_t server_max, client_warm, client_max, server_bound;
};

/* Kills kvstored, keeps it down --down-ms, restarts it and opens the next epoch; 0 or -1. */
static int kill_and_restart(void)
{
    kill_server(SIGKILL);
    usleep((useconds_t)opt.down_ms * 1000);
    if (restart_server() < 0) {
        fprintf(stderr, "kvstress: kvstored did not restart\n");
        return -1;
    }
    int e = rs.n++;
    rs.up_ns[e] = kvs_now_ns();
    atomic_store(&current_epoch, e);
    atomic_fetch_add(&kills_done, 1);
    return 0;
}

/*
 * The controller, every 20 ms until the started workers finish (at most two
 * minutes past the end): the kill schedule and the memory samples. 0, or -1
 * when kvstored did not restart.
 */
static int control(int started, struct memfig *mem)
{
    unsigned long long interval = (t_end - t_start) / (unsigned long long)(opt.kills + 1);
    unsigned long long next_kill = t_start + interval, warm_at = t_start + 1000000000ull;
    int running = started;
    while (running > 0) {
        unsigned long long now = kvs_now_ns();
        if (now > t_end + 120000000000ull) break; /* two minutes over: stop waiting */
        if (opt.kills && atomic_load(&kills_done) < opt.kills && now >= next_kill && now < t_end) {
            if (kill_and_restart() < 0) return -1;
            next_kill += interval;
        }
        uint64_t s = srv.pid > 0 ? rss_of(srv.pid) : 0, c = rss_of(getpid());
        if (s > mem->server_max) mem->server_max = s;
        if (c > mem->client_max) mem->client_max = c;
        if (!mem->client_warm && now >= warm_at) mem->client_warm = c;
        usleep(20000);
        running = 0;
        for (int i = 0; i < started; i++)
            if (!atomic_load(&workers[i].finished)) running++;
    }
    return 0;
}

/*
 * Joins the workers. One still in a call two minutes after the end never
 * returns: that is reported and the process leaves at once, without
 * touching the client.
 */
static void join_workers(int started)
{
    int stuck = 0;
    for (int i = 0; i < started; i++) {
        if (atomic_load(&workers[i].finished))
            pthread_join(workers[i].tid, NULL);
        else
            stuck++;
    }
    if (!stuck) return;
    fprintf(stderr, "kvstress: %d threads stuck in a call 2 minutes after the end\n", stuck);
    printf("{\"pass\":0,\"stuck_threads\":%d}\n", stuck);
    fflush(stdout);
    kill_server(SIGKILL);
    _exit(1);
}

/* ---- the verdict ---- */

/* Everything a run is judged and reported on. */
struct outcome {
    double secs;
    uint64_t never, twice; /* key-ops completed 0 times, or more than once */
    uint64_t total_issued, total_ok;
    int restarts_without_ok;
    double worst_recovery_ms;
    struct memfig mem;
    uint64_t client_growth;
    struct shim_check sc;
    struct wb_result wr;
    int run_flush_rc; /* write-behind: kvs_flush right after the workers, before any check */
    int fail;
    const char *why[16];
    int nwhy;
};

/* Completions per key-op id, and the batches whose status or callback went wrong. */
static void count_completions(struct outcome *o)
{
    uint64_t issued_ids = atomic_load(&next_id);
    for (uint64_t i = 0; i < issued_ids; i++) {
        if (completions[i] == 0) o->never++;
        if (completions[i] > 1) o->twice++;
    }
    o->twice += atomic_load(&fig.double_callbacks);
    o->never += atomic_load(&fig.status_unset);
}

/*
 * kvstored's memory bound: pool + item metadata (~200 B + key per item) +
 * per-conn buffers (64 KiB read, 4 MiB reply back-pressure cap) for up to 4
 * connections (stress client, write-behind check, slack), + 32 MiB for
 * code, heap, stacks. And how much kvstress itself grew after warm-up.
 */
static void memory_bounds(struct outcome *o)
{
    struct memfig *mem = &o->mem;
    uint64_t items = (uint64_t)opt.threads * (uint64_t)opt.keys + SHARED_KEYS + 64;
    mem->server_bound =
        opt.memory + items * (200 + 64) + 4 * ((4u << 20) + (64u << 10)) + (32ull << 20);
    if (!mem->client_warm) mem->client_warm = mem->client_max;
    o->client_growth = mem->client_max - mem->client_warm;
}

/* For each restart, the time from its start to the first op it answered. */
static void recovery(struct outcome *o)
{
    for (int e = 0; e < rs.n; e++) {
        unsigned long long f = atomic_load(&rs.first_ok_ns[e]);
        double ms = (double)(f - rs.up_ns[e]) / 1e6;
        if (!f)
            o->restarts_without_ok++;
        else if (ms > o->worst_recovery_ms)
            o->worst_recovery_ms = ms;
    }
}

static void check(struct outcome *o, int ok, const char *what)
{
    if (ok) return;
    o->fail = 1;
    if (o->nwhy < (int)(sizeof(o->why) / sizeof(o->why[0]))) o->why[o->nwhy++] = what;
}

/* The rules of docs/stress.md, each one a reason to fail. */
static void judge(struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    /*
     * Under write-behind a put that returned 0 can still fail once sent: a
     * kill, or a failure the kvs_flush after the run reports. That, and
     * nothing else, explains a stale or missing value of an own key: the
     * shim orders every later call of the key after its pending puts.
     */
    int wb_lost = wb_mode && (opt.kills > 0 || o->run_flush_rc < 0);
    check(o, fig.wrong_values == 0, "wrong values");
    check(o, fig.stale_values == 0 || wb_lost, "stale values");
    check(o, o->never == 0, "ops never completed");
    check(o, o->twice == 0, "ops completed twice");
    check(o, fig.abandoned_batches == 0, "batches abandoned");
    check(o, fig.unexpected_status == 0, "unexpected statuses");
    /* Only a store kvstress sized itself is known not to evict. */
    check(o, opt.kills > 0 || wb_lost || opt.servers || fig.missing_after_ok == 0,
          "acknowledged puts missing");
    check(o, o->restarts_without_ok == 0, "a restart never saw a successful op");
    check(o, atomic_load(&kills_done) == opt.kills, "fewer kills than asked");
    check(o, o->total_ok > 0, "no op succeeded");
    check(o, opt.servers || mem->server_max <= mem->server_bound, "kvstored RSS over bound");
    check(o, o->client_growth <= (uint64_t)opt.client_growth_mb << 20,
          "kvstress RSS grew over bound");
    check(o, !o->sc.used || (o->sc.file_read && o->sc.ok), "shim stats disagree");
    check(o, !opt.writeback_check || o->wr.ok, "write-behind crash check");
}

/* The table of ops: issued, ok, errors by status. */
static void print_ops(void)
{
    printf("  %-6s %10s %10s %10s\n", "op", "issued", "ok", "errors");
    for (int k = 0; k < OP_KINDS; k++) {
        uint64_t is = atomic_load(&fig.issued[k]), ok = atomic_load(&fig.ok[k]);
        printf("  %-6s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "  ", opname[k], is, ok, is - ok);
        for (int e = 1; e < NSTATUS; e++)
            if (fig.err[k][e])
                printf(" %s=%" PRIu64, kvs_status_class_name(kvs_status_class(-e)),
                       (uint64_t)atomic_load(&fig.err[k][e]));
        printf("\n");
    }
}

/* What the memory, shim-stats and write-behind checks saw. */
static void print_checks(const struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    const struct shim_check *sc = &o->sc;
    const struct wb_result *wr = &o->wr;
    if (opt.servers)
        printf("  RSS max: kvstored not measured (--servers)");
    else
        printf("  RSS max: kvstored %.1f MiB (bound %.1f)", (double)mem->server_max / 1048576,
               (double)mem->server_bound / 1048576);
    printf(", kvstress %.1f MiB (grew %.1f after warm-up, bound %d)\n",
           (double)mem->client_max / 1048576, (double)o->client_growth / 1048576,
           opt.client_growth_mb);
    if (sc->used)
        printf("  shim stats: ops put %.0f get %.0f, errors put %.0f get %.0f, writeback "
               "errors %.0f: %s\n",
               sc->ops[OP_PUT], sc->ops[OP_GET], sc->errors[OP_PUT], sc->errors[OP_GET],
               sc->wb_errors, sc->ok ? "agree" : "DISAGREE");
    if (wb_mode)
        printf("  write-behind: kvs_flush after the run %d (%s)\n", o->run_flush_rc,
               kvs_strerror(o->run_flush_rc));
    if (wr->ran)
        printf("  write-behind crash: %d puts pending, kvs_flush %d (%s), absent %d, "
               "rewritten %d, revived %d, wrong %d: %s\n",
               wr->puts, wr->flush_rc, kvs_strerror(wr->flush_rc), wr->absent, wr->rewritten_ok,
               wr->revived, wr->wrong, wr->ok ? "ok" : "FAILED");
}

/* The human summary on stdout. */
static void print_summary(const struct outcome *o)
{
    printf("kvstress: %d threads, %.1f s, %s%s, %d kills\n", opt.threads, o->secs,
           o->sc.used || wb_mode ? "through the shim" : "direct", wb_mode ? " (writeback)" : "",
           atomic_load(&kills_done));
    print_ops();
    printf("  throughput %.0f key-ops/s, %" PRIu64 " async batches\n",
           (double)o->total_issued / o->secs, (uint64_t)fig.batches);
    printf("  wrong values %" PRIu64 ", stale %" PRIu64 ", missing after ok %" PRIu64
           ", never completed %" PRIu64 ", completed twice %" PRIu64 ", unexpected %" PRIu64 "\n",
           (uint64_t)fig.wrong_values, (uint64_t)fig.stale_values, (uint64_t)fig.missing_after_ok,
           o->never, o->twice, (uint64_t)fig.unexpected_status);
    for (int e = 0; e < rs.n; e++) {
        unsigned long long f = atomic_load(&rs.first_ok_ns[e]);
        printf("  restart %d: first op answered after %.1f ms\n", e + 1,
               f ? (double)(f - rs.up_ns[e]) / 1e6 : -1.0);
    }
    print_checks(o);
    for (int i = 0; i < o->nwhy; i++)
        printf("  FAILED: %s\n", o->why[i]);
    printf("  result: %s\n", o->fail ? "FAIL" : "PASS");
}

/*
 * Replaces the closing brace of the JSON object in json[0..len) with
 * ,"errors":{"put":{"ENAME":n,...},"get":{...}}} and returns the new length.
 */
static int append_error_counts(char *json, size_t cap, int len)
{
    if (len <= 0 || (size_t)len >= cap) return len;
    size_t at = (size_t)len - 1; /* over the final '}' */
    at += (size_t)snprintf(json + at, cap - at, ",\"errors\":{");
    for (int k = 0; k < OP_KINDS && at < cap; k++) {
        at += (size_t)snprintf(json + at, cap - at, "%s\"%s\":{", k ? "," : "", opname[k]);
        int first = 1;
        for (int e = 1; e < NSTATUS && at < cap; e++) {
            uint64_t v = atomic_load(&fig.err[k][e]);
            if (!v) continue;
            const char *name = e < NSTATUS - 1 ? strerrorname_np(e) : NULL;
            char num[16];
            snprintf(num, sizeof(num), "E%d", e);
            at += (size_t)snprintf(json + at, cap - at, "%s\"%s\":%" PRIu64, first ? "" : ",",
                                   name ? name : num, v);
            first = 0;
        }
        if (at < cap) at += (size_t)snprintf(json + at, cap - at, "}");
    }
    if (at < cap) at += (size_t)snprintf(json + at, cap - at, "}}");
    return at < cap ? (int)at : (int)cap - 1;
}

/* The JSON line on stdout (and in --json FILE): the figures tests and scripts read. */
static void print_json(const struct outcome *o)
{
    const struct memfig *mem = &o->mem;
    const struct shim_check *sc = &o->sc;
    const struct wb_result *wr = &o->wr;
    char json[4096];
    int jn = snprintf(json, sizeof(json),
                      "{\"threads\":%d,\"seconds\":%.3f,\"shim\":%d,\"writeback\":%d,\"kills\":%d,"
                      "\"put_issued\":%" PRIu64 ",\"put_ok\":%" PRIu64 ",\"get_issued\":%" PRIu64
                      ",\"get_ok\":%" PRIu64 ",\"batches\":%" PRIu64 ",\"wrong_values\":%" PRIu64
                      ",\"stale_values\":%" PRIu64 ",\"missing_after_ok\":%" PRIu64
                      ",\"never_completed\":%" PRIu64 ",\"completed_twice\":%" PRIu64
                      ",\"unexpected_status\":%" PRIu64
                      ",\"restarts\":%d,\"restarts_without_ok\":%d,\"worst_recovery_ms\":%.1f"
                      ",\"server_rss_max\":%" PRIu64 ",\"server_rss_bound\":%" PRIu64
                      ",\"client_rss_max\":%" PRIu64 ",\"client_rss_growth\":%" PRIu64
                      ",\"shim_stats_ok\":%d,\"run_flush_rc\":%d,\"writeback_flush_rc\":%d"
                      ",\"writeback_ok\":%d,\"pass\":%d}",
                      opt.threads, o->secs, sc->used, wb_mode, atomic_load(&kills_done),
                      (uint64_t)fig.issued[OP_PUT], (uint64_t)fig.ok[OP_PUT],
                      (uint64_t)fig.issued[OP_GET], (uint64_t)fig.ok[OP_GET], (uint64_t)fig.batches,
                      (uint64_t)fig.wrong_values, (uint64_t)fig.stale_values,
                      (uint64_t)fig.missing_after_ok, o->never, o->twice,
                      (uint64_t)fig.unexpected_status, rs.n, o->restarts_without_ok,
                      o->worst_recovery_ms, mem->server_max, mem->server_bound, mem->client_max,
                      o->client_growth, sc->used ? sc->ok && sc->file_read : -1, o->run_flush_rc,
                      wr->ran ? wr->flush_rc : 0, wr->ran ? wr->ok : -1, !o->fail);
    jn = append_error_counts(json, sizeof(json), jn);
    printf("%s\n", json);
    if (opt.json_path) {
        FILE *f = fopen(opt.json_path, "w");
        if (f) {
            fprintf(f, "%.*s\n", jn, json);
            fclose(f);
        }
    }
}

int main(int argc, char **argv)
{
    int rc = parse_options(argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0 || check_environment() < 0) return KVOPT_EXIT_USAGE;
    if (!opt.kvstored) opt.kvstored = default_kvstored(argv[0]);
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&corrupt_pending, opt.corrupt_one);
    const char *addr = servers_under_test();
    if (!addr || prepare_bookkeeping() < 0) return KVOPT_EXIT_USAGE;
    client = kvs_open(addr);
    if (!client) {
        fprintf(stderr, "kvstress: kvs_open(%s): %s\n", addr, strerror(errno));
        kill_server(SIGKILL);
        return KVOPT_EXIT_USAGE;
    }

    struct outcome o = {0};
    t_start = kvs_now_ns();
    t_end = t_start + (unsigned long long)(opt.seconds * 1e9);
    int started = 0;
    while (started < opt.threads && start_worker(started) == 0)
        started++;
    o.fail = started < opt.threads;
    if (control(started, &o.mem) < 0) o.fail = 1;
    unsigned long long t_stop = kvs_now_ns();
    join_workers(started);

    if (wb_mode) o.run_flush_rc = kvs_flush(client);
    if (opt.writeback_check && !o.fail) writeback_check(&o.wr);
    kvs_close(client);
    check_shim_stats(&o.sc, kvs_wall_s());
    if (!opt.servers) kill_server(SIGTERM);

    o.secs = (double)(t_stop - t_start) / 1e9;
    o.total_issued = atomic_load(&fig.issued[OP_PUT]) + atomic_load(&fig.issued[OP_GET]);
    o.total_ok = atomic_load(&fig.ok[OP_PUT]) + atomic_load(&fig.ok[OP_GET]);
    count_completions(&o);
    memory_bounds(&o);
    recovery(&o);
    judge(&o);
    if (!opt.quiet) print_summary(&o);
    print_json(&o);
    return o.fail ? 1 : 0;
}

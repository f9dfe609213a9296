/*
 * kvbench_stats.c - what every kvbench workload shares: latency histograms,
 * result lines, CSV/JSON output, the progress line, opening the client and
 * the output files (a session), the names of ops and paths.
 */
#include "kvbench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void bench_sleep_ns(uint64_t ns)
{
    struct timespec ts = kvs_ns_to_timespec(ns);
    for (int i = 0; i < 100 && nanosleep(&ts, &ts) < 0 && errno == EINTR; i++) {
    }
}

/* Bucket of a value: exact below 2*SUB, then SUB sub-buckets per power of two. */
static unsigned hist_index(uint64_t v)
{
    if (v < 2 * BENCH_HIST_SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= SUBBITS + 1 */
    unsigned sub = (unsigned)(v >> (e - BENCH_HIST_SUBBITS)) & (BENCH_HIST_SUB - 1);
    unsigned idx = 2 * BENCH_HIST_SUB + (e - BENCH_HIST_SUBBITS - 1) * BENCH_HIST_SUB + sub;
    return idx < BENCH_HIST_BUCKETS ? idx : BENCH_HIST_BUCKETS - 1;
}

/* Middle of the value range a bucket covers. */
static double hist_value(unsigned idx)
{
    if (idx < 2 * BENCH_HIST_SUB) return (double)idx;
    unsigned e = (idx - 2 * BENCH_HIST_SUB) / BENCH_HIST_SUB + BENCH_HIST_SUBBITS + 1;
    unsigned sub = (idx - 2 * BENCH_HIST_SUB) % BENCH_HIST_SUB;
    double step = (double)(1ull << (e - BENCH_HIST_SUBBITS));
    return (double)(1ull << e) + step * sub + step / 2;
}

void bench_hist_add(struct bench_hist *h, uint64_t ns, uint64_t times)
{
    h->bucket[hist_index(ns)] += times;
    h->count += times;
    if (ns > h->max_ns) h->max_ns = ns;
}

void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from)
{
    for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++)
        into->bucket[i] += from->bucket[i];
    into->count += from->count;
    if (from->max_ns > into->max_ns) into->max_ns = from->max_ns;
}

double bench_hist_quantile(const struct bench_hist *h, double q)
{
    if (h->count == 0) return 0;
    uint64_t rank = (uint64_t)(q * (double)(h->count - 1)) + 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen >= rank) {
            double v = hist_value(i);
            return v > (double)h->max_ns ? (double)h->max_ns : v;
        }
    }
    return (double)h->max_ns;
}

void bench_result_timing(struct bench_result *r, enum bench_mode mode, uint64_t start_ns,
                         uint64_t end_ns)
{
    snprintf(r->path, sizeof(r->path), "%s",
             mode == BENCH_SINGLE && bench_shim_preloaded() ? "shim" : bench_mode_name(mode));
    r->seconds = (double)(end_ns - start_ns) / 1e9;
    if (r->seconds > 0) {
        /* ops that succeeded (a timed-out round counts one error even with no op) */
        r->ops_per_s = (double)(r->ops > r->errors ? r->ops - r->errors : 0) / r->seconds;
        r->bytes_per_s = (double)r->bytes / r->seconds;
    }
}

int bench_shim_preloaded(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "libkvbatch") != NULL;
}

const char *bench_op_name(enum bench_op op)
{
    return op == BENCH_PUT ? "put" : op == BENCH_GET ? "get" : "exists";
}

const char *bench_mode_name(enum bench_mode mode)
{
    return mode == BENCH_SINGLE ? "single" : mode == BENCH_BATCH ? "batch" : "async";
}

const struct kvopt_choice bench_op_choices[] = {
    {"put", BENCH_PUT}, {"get", BENCH_GET}, {"exists", BENCH_EXISTS}, {NULL, 0}};
const struct kvopt_choice bench_mode_choices[] = {
    {"single", BENCH_SINGLE}, {"batch", BENCH_BATCH}, {"async", BENCH_ASYNC}, {NULL, 0}};

/* Latency for humans: ns in, "12.3us" / "4.56ms" out. */
static const char *fmt_us(char *buf, size_t cap, double us)
{
    if (us >= 10000)
        snprintf(buf, cap, "%.2fms", us / 1000);
    else
        snprintf(buf, cap, "%.1fus", us);
    return buf;
}

void bench_print_result(const struct bench_result *r)
{
    char a[32], b[32], c[32], d[32];
    char run[16];
    if (r->run > 0)
        snprintf(run, sizeof(run), "run %d", r->run);
    else
        snprintf(run, sizeof(run), "median");
    printf("%-6s %-14s %-6s size=%zu threads=%d batch=%d: %.0f ops/s %.1f MB/s", run, r->workload,
           r->path, r->size, r->threads, r->batch, r->ops_per_s, r->bytes_per_s / 1e6);
    if (r->p50_us > 0)
        printf("  lat/op p50 %s p99 %s", fmt_us(a, sizeof(a), r->p50_us),
               fmt_us(b, sizeof(b), r->p99_us));
    if (r->batch_p50_us > 0)
        printf("  lat/batch p50 %s p99 %s", fmt_us(c, sizeof(c), r->batch_p50_us),
               fmt_us(d, sizeof(d), r->batch_p99_us));
    if (r->exposed_p50_us > 0 || strcmp(r->workload, "layerwise-save") == 0)
        printf("  exposed/req p50 %s p99 %s", fmt_us(a, sizeof(a), r->exposed_p50_us),
               fmt_us(b, sizeof(b), r->exposed_p99_us));
    if (r->wait_p50_us > 0 || strcmp(r->workload, "layerwise-load") == 0)
        printf("  wait/layer p50 %s p99 %s  wait/req p50 %s p99 %s",
               fmt_us(a, sizeof(a), r->wait_p50_us), fmt_us(b, sizeof(b), r->wait_p99_us),
               fmt_us(c, sizeof(c), r->req_wait_p50_us), fmt_us(d, sizeof(d), r->req_wait_p99_us));
    unsigned long long ok = r->ops > r->errors ? r->ops - r->errors : 0;
    printf("  (%llu ops ok, %llu errors, %.2f s)", ok, (unsigned long long)r->errors, r->seconds);
    if (r->label[0]) printf(" [%s]", r->label);
    if (r->first_error) printf(" first error: %s", kvs_strerror(r->first_error));
    printf("\n");
    /* ops/s and latencies count only ops that worked: say so when none did */
    if (r->errors && !ok)
        printf("kvbench: all %llu ops failed: %s\n", (unsigned long long)r->errors,
               r->first_error ? kvs_strerror(r->first_error) : "unknown error");
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of one double field across runs (offset into struct bench_result). */
static double median_of(const struct bench_result *runs, int n, size_t offset)
{
    double v[64] = {0};
    if (n > 64) n = 64;
    if (n < 1) return 0;
    for (int i = 0; i < n; i++)
        memcpy(&v[i], (const char *)&runs[i] + offset, sizeof(v[i]));
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_median(const struct bench_result *runs, int n, struct bench_result *med)
{
    *med = runs[0];
    med->run = 0;
    med->ops = med->errors = med->bytes = 0;
    for (int i = 0; i < n; i++) {
        med->ops += runs[i].ops;
        med->errors += runs[i].errors;
        med->bytes += runs[i].bytes;
        if (!med->first_error) med->first_error = runs[i].first_error;
    }
#define MED(f) med->f = median_of(runs, n, offsetof(struct bench_result, f))
    MED(seconds);
    MED(ops_per_s);
    MED(bytes_per_s);
    MED(p50_us);
    MED(p99_us);
    MED(batch_p50_us);
    MED(batch_p99_us);
    MED(exposed_p50_us);
    MED(exposed_p99_us);
    MED(wait_p50_us);
    MED(wait_p99_us);
    MED(req_wait_p50_us);
    MED(req_wait_p99_us);
#undef MED
}

static const char CSV_HEADER[] =
    "workload,path,label,run,size,threads,batch,ops,errors,bytes,seconds,ops_per_s,bytes_per_s,"
    "p50_us,p99_us,batch_p50_us,batch_p99_us,exposed_p50_us,exposed_p99_us,wait_p50_us,"
    "wait_p99_us,req_wait_p50_us,req_wait_p99_us,shim\n";

int bench_output_open(struct bench_output *out, const char *csv_path, const char *json_path)
{
    memset(out, 0, sizeof(*out));
    if (csv_path) {
        out->csv = fopen(csv_path, "w");
        if (!out->csv) {
            fprintf(stderr, "kvbench: cannot write %s: %s\n", csv_path, strerror(errno));
            return -errno;
        }
        fputs(CSV_HEADER, out->csv);
    }
    if (json_path) {
        out->json = fopen(json_path, "w");
        if (!out->json) {
            int err = -errno;
            fprintf(stderr, "kvbench: cannot write %s: %s\n", json_path, strerror(errno));
            if (out->csv) fclose(out->csv);
            out->csv = NULL;
            return err;
        }
        fputs("[\n", out->json);
    }
    return 0;
}

void bench_output_row(struct bench_output *out, const struct bench_result *r)
{
    int shim = bench_shim_preloaded();
    if (out->csv) {
        /* labels are ours (no commas or quotes), written quoted anyway */
        fprintf(out->csv,
                "%s,%s,\"%s\",%d,%zu,%d,%d,%llu,%llu,%llu,%.4f,%.1f,%.1f,%.2f,%.2f,%.2f,%.2f,"
                "%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%d\n",
                r->workload, r->path, r->label, r->run, r->size, r->threads, r->batch,
                (unsigned long long)r->ops, (unsigned long long)r->errors,
                (unsigned long long)r->bytes, r->seconds, r->ops_per_s, r->bytes_per_s, r->p50_us,
                r->p99_us, r->batch_p50_us, r->batch_p99_us, r->exposed_p50_us, r->exposed_p99_us,
                r->wait_p50_us, r->wait_p99_us, r->req_wait_p50_us, r->req_wait_p99_us, shim);
        fflush(out->csv);
    }
    if (out->json) {
        fprintf(out->json,
                "%s  {\"workload\": \"%s\", \"path\": \"%s\", \"label\": \"%s\", \"run\": %d, "
                "\"size\": %zu, \"threads\": %d, \"batch\": %d, \"ops\": %llu, \"errors\": %llu, "
                "\"bytes\": %llu, \"seconds\": %.4f, \"ops_per_s\": %.1f, \"bytes_per_s\": %.1f, "
                "\"p50_us\": %.2f, \"p99_us\": %.2f, \"batch_p50_us\": %.2f, "
                "\"batch_p99_us\": %.2f, \"exposed_p50_us\": %.2f, \"exposed_p99_us\": %.2f, "
                "\"wait_p50_us\": %.2f, \"wait_p99_us\": %.2f, \"req_wait_p50_us\": %.2f, "
                "\"req_wait_p99_us\": %.2f, \"shim\": %s, \"first_error\": \"%s\"}",
                out->json_rows ? ",\n" : "", r->workload, r->path, r->label, r->run, r->size,
                r->threads, r->batch, (unsigned long long)r->ops, (unsigned long long)r->errors,
                (unsigned long long)r->bytes, r->seconds, r->ops_per_s, r->bytes_per_s, r->p50_us,
                r->p99_us, r->batch_p50_us, r->batch_p99_us, r->exposed_p50_us, r->exposed_p99_us,
                r->wait_p50_us, r->wait_p99_us, r->req_wait_p50_us, r->req_wait_p99_us,
                shim ? "true" : "false", r->first_error ? kvs_strerror(r->first_error) : "");
        out->json_rows++;
        fflush(out->json);
    }
}

int bench_output_close(struct bench_output *out)
{
    int rc = 0;
    if (out->csv && fclose(out->csv) != 0) rc = -errno;
    if (out->json) {
        fputs("\n]\n", out->json);
        if (fclose(out->json) != 0) rc = -errno;
    }
    out->csv = out->json = NULL;
    return rc;
}

int bench_session_open(const struct bench_common *c, const char *who, kvs_client **client,
                       struct bench_output *out)
{
    *client = kvs_open(c->servers);
    if (!*client) {
        fprintf(stderr, "%s: bad server list '%s': %s\n", who,
                c->servers ? c->servers : "(default)", strerror(errno));
        return -1;
    }
    if (bench_output_open(out, c->csv, c->json) < 0) {
        kvs_close(*client);
        *client = NULL;
        return -1;
    }
    return 0;
}

int bench_session_close(kvs_client *client, struct bench_output *out)
{
    int rc = bench_output_close(out) < 0 ? -1 : 0;
    kvs_close(client);
    return rc;
}

void bench_emit(struct bench_output *out, const struct bench_result *r)
{
    bench_print_result(r);
    bench_output_row(out, r);
}

void bench_emit_median(struct bench_output *out, const struct bench_result *runs, int n,
                       struct bench_result *med)
{
    bench_median(runs, n, med);
    if (n > 1) bench_emit(out, med);
}

void bench_progress_start(struct bench_progress *p, const char *what, _Atomic uint64_t *done_ops,
                          uint64_t total_ops, double seconds, int quiet)
{
    memset(p, 0, sizeof(*p));
    p->what = what;
    p->done_ops = done_ops;
    p->total_ops = total_ops;
    p->seconds = seconds;
    p->start_ns = p->last_print_ns = kvs_now_ns();
    p->tty = isatty(STDERR_FILENO);
    p->quiet = quiet;
}

/* Called a few times a second by the thread that waits for the workers. */
void bench_progress_tick(struct bench_progress *p)
{
    if (p->quiet) return;
    uint64_t now = kvs_now_ns();
    uint64_t every = p->tty ? 250000000ull : 5000000000ull; /* plain lines: one per 5 s */
    if (now - p->last_print_ns < every) return;
    uint64_t done = atomic_load_explicit(p->done_ops, memory_order_relaxed);
    double rate = (double)(done - p->last_ops) / ((double)(now - p->last_print_ns) / 1e9);
    double elapsed = (double)(now - p->start_ns) / 1e9;
    double frac = elapsed / p->seconds;
    if (p->total_ops && (double)done / (double)p->total_ops > frac)
        frac = (double)done / (double)p->total_ops;
    if (frac > 1) frac = 1;
    fprintf(stderr, "%s%s: %llu ops, %.0f ops/s, %.1f s, %3.0f%%%s", p->tty ? "\r\033[K" : "",
            p->what, (unsigned long long)done, rate, elapsed, frac * 100, p->tty ? "" : "\n");
    fflush(stderr);
    p->printed = 1;
    p->last_print_ns = now;
    p->last_ops = done;
}

void bench_progress_end(struct bench_progress *p)
{
    if (p->printed && p->tty) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

/*
 * kvbatch-stat - shows what batching does, from the shim's stats file.
 *
 *   kvbatch-stat FILE             one summary: rates since the last look
 *   kvbatch-stat -s FILE          the same, since the shim started
 *   kvbatch-stat -w SECONDS FILE  one line per interval, like vmstat (-n COUNT lines)
 *   kvbatch-stat --json FILE      totals and rates since the shim started, as JSON
 *
 * It reads only the Prometheus text the shim writes (KVBATCH_STATS_FILE).
 * The batcher's samples carry a backend label (kvs, mooncake): they are
 * summed over the backends, or, with --backend NAME, only NAME's are read.
 * "The last look" is a copy of FILE as this user last summarised it, kept in
 * $XDG_RUNTIME_DIR (or /tmp) under a name derived from FILE's real path; it
 * counts only while it belongs to the same shim instance (same start time).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "file.h"
#include "opts.h"

#define MAX_SAMPLES 512
#define MAX_FILE    (1 << 20) /* bytes: what is read of a stats file, at most */
#define NAME_LEN    160

/* The command line. */
struct options {
    const char *path; /* the stats file */
    double every;     /* -w: seconds between lines; 0: one summary */
    long long count;  /* -n: lines to print; -1: until interrupted */
    int as_json;
    int since_start;
    const char *backend; /* --backend: only this backend's samples; NULL: all, summed */
};

static const char *const ops[] = {"put", "get", "exists"};
static const char *const reasons[] = {"window",   "max_ops", "max_bytes", "idle",
                                      "explicit", "exit",    "group",     "direct"};
#define NREASONS ((int)(sizeof(reasons) / sizeof(reasons[0])))

struct sample {
    char name[NAME_LEN]; /* metric name with its {labels} */
    double value;
};

struct snap {
    struct sample s[MAX_SAMPLES];
    int n;
    char info[NAME_LEN];     /* kvbatch_info labels */
    char backends[NAME_LEN]; /* the backends whose samples were read, "kvs mooncake" */
};

/*
 * Takes the process and backend labels out of a sample name, in place:
 * name{pid="7",backend="kvs",op="put"} -> name{op="put"}, with 7 into *pid
 * and kvs into be ("" when the name has none). A per-batcher sample keeps
 * its backend inside the batcher label: {pid="7",backend="kvs",batcher="0"}
 * -> {batcher="kvs/0"}. False if a label is malformed.
 */
static bool strip_process_labels(char *name, long *pid, char *be, size_t cap)
{
    char *open = strchr(name, '{');
    be[0] = '\0';
    if (!open) return true;
    char out[NAME_LEN * 2], *o = out;
    char batcher[32] = "";
    const char *p = open + 1;
    bool first = true;
    o += snprintf(out, sizeof(out), "%.*s{", (int)(open - name), name);
    while (*p && *p != '}') {
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '"') return false;
        const char *q = strchr(eq + 2, '"');
        if (!q) return false;
        size_t klen = (size_t)(eq - p), vlen = (size_t)(q - eq - 2);
        const char *v = eq + 2;
        if (klen == 3 && strncmp(p, "pid", 3) == 0) {
            *pid = strtol(v, NULL, 10);
        } else if (klen == 7 && strncmp(p, "backend", 7) == 0) {
            snprintf(be, cap, "%.*s", (int)vlen, v);
        } else if (klen == 7 && strncmp(p, "batcher", 7) == 0) {
            snprintf(batcher, sizeof(batcher), "%.*s", (int)(vlen < 16 ? vlen : 16), v);
        } else if ((size_t)(o - out) + klen + vlen + 8 < sizeof(out)) {
            o += sprintf(o, "%s%.*s", first ? "" : ",", (int)(q + 1 - p), p);
            first = false;
        }
        p = q + 1;
        if (*p == ',') p++;
    }
    if (batcher[0] && (size_t)(o - out) + 64 < sizeof(out)) {
        o += sprintf(o, "%sbatcher=\"%s/%s\"", first ? "" : ",", be[0] ? be : "-", batcher);
        first = false;
    }
    if (first)
        o[-1] = '\0'; /* no label left: name{ -> name */
    else
        *o++ = '}', *o = '\0';
    size_t len = strlen(out);
    if (len >= NAME_LEN) return false;
    memcpy(name, out, len + 1);
    return true;
}

/* Adds value to the sample called name (a new one if need be). */
static void add_sample(struct snap *sn, const char *name, double value)
{
    for (int i = 0; i < sn->n; i++)
        if (strcmp(sn->s[i].name, name) == 0) {
            sn->s[i].value += value;
            return;
        }
    if (sn->n >= MAX_SAMPLES) return;
    snprintf(sn->s[sn->n].name, sizeof(sn->s[0].name), "%.159s", name);
    sn->s[sn->n++].value = value;
}

/*
 * Reads FILE into snap (only backend's samples of the batcher's, if not
 * NULL); 0 or a negative errno: -EINVAL if FILE is not a regular file (a
 * fifo or a device such as /dev/zero is never read), -EFBIG if it is over
 * MAX_FILE bytes (the shim writes at most 64 KiB), -ENODATA if it holds no
 * sample.
 */
static int load(const char *path, const char *backend, struct snap *sn)
{
    static char text[MAX_FILE];
    char be[64];
    ssize_t len = kvs_file_read(path, text, sizeof(text));
    if (len < 0) return (int)len;
    sn->n = 0;
    sn->info[0] = sn->backends[0] = '\0';
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        char *sp = strrchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        long pid = 0;
        if (!strip_process_labels(line, &pid, be, sizeof(be))) continue;
        if (be[0]) {
            if (backend && strcmp(be, backend) != 0) continue;
            size_t bl = strlen(sn->backends), l = strlen(be);
            char word[sizeof(be) + 2];
            snprintf(word, sizeof(word), " %s ", be);
            char have[sizeof(sn->backends) + 2];
            snprintf(have, sizeof(have), " %s ", sn->backends);
            if (!strstr(have, word) && bl + l + 2 < sizeof(sn->backends))
                snprintf(sn->backends + bl, sizeof(sn->backends) - bl, "%s%s", bl ? " " : "", be);
        }
        add_sample(sn, line, strtod(sp + 1, NULL));
        if (strncmp(line, "kvbatch_info{", 13) == 0)
            snprintf(sn->info, sizeof(sn->info), "%.159s", line + 12);
    }
    return sn->n ? 0 : -ENODATA;
}

/* Says why FILE could not be read (load's codes), on stderr. */
static void load_failed(const char *path, int rc)
{
    const char *why = rc == -EINVAL  ? "not a regular file"
                      : rc == -EFBIG ? "larger than a stats file can be (1 MiB)"
                                     : strerror(-rc);
    fprintf(stderr, "kvbatch-stat: cannot read %s: %s\n", path, why);
}

static double get(const struct snap *sn, const char *name)
{
    for (int i = 0; i < sn->n; i++)
        if (strcmp(sn->s[i].name, name) == 0) return sn->s[i].value;
    return 0;
}

static double getf(const struct snap *sn, const char *fmt, const char *arg)
{
    char name[NAME_LEN];
    snprintf(name, sizeof(name), fmt, arg);
    return get(sn, name);
}

/* A sample's value at the start of the span: in prev, or 0 when the span starts at start-up. */
static double before(const struct snap *prev, const char *name)
{
    return prev ? get(prev, name) : 0;
}

/* How much a sample grew over the span prev -> cur. */
static double delta(const struct snap *cur, const struct snap *prev, const char *name)
{
    return get(cur, name) - before(prev, name);
}

/*
 * Quantile q of histogram `base` over the difference cur - prev (prev may be
 * NULL), interpolating linearly inside the bucket, as Prometheus'
 * histogram_quantile does. NAN when there are no observations.
 */
static double quantile(const struct snap *cur, const struct snap *prev, const char *base, double q)
{
    double les[64], cum[64];
    int nb = 0;
    size_t blen = strlen(base);
    for (int i = 0; i < cur->n && nb < 64; i++) {
        const char *nm = cur->s[i].name;
        if (strncmp(nm, base, blen) != 0 || strncmp(nm + blen, "_bucket{le=\"", 12) != 0) continue;
        const char *le = nm + blen + 12;
        les[nb] = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        cum[nb] = cur->s[i].value - before(prev, nm);
        nb++;
    }
    if (nb == 0 || cum[nb - 1] <= 0) return NAN;
    double rank = q * cum[nb - 1];
    for (int i = 0; i < nb; i++) {
        if (cum[i] < rank) continue;
        if (isinf(les[i])) return i > 0 ? les[i - 1] : NAN;
        double lo = i > 0 ? les[i - 1] : 0, below = i > 0 ? cum[i - 1] : 0;
        double in = cum[i] - below;
        return in > 0 ? lo + (les[i] - lo) * (rank - below) / in : les[i];
    }
    return les[nb - 1];
}

/* Human time: 12.3us, 4.5ms, 1.2s. */
static const char *fmt_time(double sec, char *buf, size_t cap)
{
    if (isnan(sec))
        snprintf(buf, cap, "-");
    else if (sec < 1e-3)
        snprintf(buf, cap, "%.1fus", sec * 1e6);
    else if (sec < 1)
        snprintf(buf, cap, "%.2fms", sec * 1e3);
    else
        snprintf(buf, cap, "%.2fs", sec);
    return buf;
}

static const char *fmt_bytes(double b, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4)
        b /= 1024, u++;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

static double diff(const struct snap *cur, const struct snap *prev, const char *fmt,
                   const char *arg)
{
    char name[NAME_LEN];
    snprintf(name, sizeof(name), fmt, arg);
    return delta(cur, prev, name);
}

/* Sum of kvbatch_errors_total over status, for one op (ENOENT counted apart). */
static void errors_of(const struct snap *sn, const char *op, double *misses, double *errs)
{
    char pre[64];
    int n = snprintf(pre, sizeof(pre), "kvbatch_errors_total{op=\"%s\",status=\"", op);
    *misses = *errs = 0;
    for (int i = 0; i < sn->n; i++) {
        if (strncmp(sn->s[i].name, pre, (size_t)n) != 0) continue;
        if (strncmp(sn->s[i].name + n, "ENOENT", 6) == 0)
            *misses += sn->s[i].value;
        else
            *errs += sn->s[i].value;
    }
}

/* Errors over cur - prev (prev may be NULL), for one op (ENOENT counted apart). */
static void errors_between(const struct snap *cur, const struct snap *prev, const char *op,
                           double *misses, double *errs)
{
    double pm = 0, pe = 0;
    errors_of(cur, op, misses, errs);
    if (prev) errors_of(prev, op, &pm, &pe);
    *misses -= pm;
    *errs -= pe;
}

/*
 * libkvstore's transport counters (kvbatch_transport_total), summed over
 * servers, over cur - prev, printed per op: frames and system calls per op
 * on TCP, doorbells and round trips per op on RDMA, are what batching saves.
 */
static void transport_line(const struct snap *cur, const struct snap *prev, double ops_done)
{
    static const char pre[] = "kvbatch_transport_total{";
    char names[16][32];
    double sums[16];
    int nn = 0;
    for (int i = 0; i < cur->n; i++) {
        const char *c = strstr(cur->s[i].name, "counter=\"");
        if (strncmp(cur->s[i].name, pre, sizeof(pre) - 1) != 0 || !c) continue;
        char name[32];
        if (sscanf(c + 9, "%31[^\"]", name) != 1) continue;
        int k = 0;
        while (k < nn && strcmp(names[k], name) != 0)
            k++;
        if (k == nn) {
            if (nn == 16) continue;
            snprintf(names[nn], sizeof(names[0]), "%s", name);
            sums[nn++] = 0;
        }
        sums[k] += cur->s[i].value - before(prev, cur->s[i].name);
    }
    static const char *const shown[] = {"frames_sent", "send_syscalls", "recv_syscalls",
                                        "doorbells",   "work_requests", "round_trips"};
    int any = 0;
    for (size_t j = 0; j < sizeof(shown) / sizeof(shown[0]); j++)
        for (int k = 0; k < nn; k++)
            if (strcmp(names[k], shown[j]) == 0 && sums[k] > 0) {
                printf("%s %s %.0f (%.3f/op)", any ? "," : "transport:", shown[j], sums[k],
                       ops_done > 0 ? sums[k] / ops_done : 0);
                any = 1;
            }
    if (any) printf("\n");
}

/* The per-op table over span seconds; returns the ops of all kinds. */
static double ops_table(const struct snap *cur, const struct snap *prev, double span)
{
    char c[32];
    printf("\n%-7s %12s %10s %10s %10s %10s %12s %8s %8s\n", "op", "ops", "ops/s", "batches",
           "batches/s", "ops/batch", "bytes", "direct", "errors");
    double tops = 0, tbatches = 0;
    for (int k = 0; k < 3; k++) {
        double o = diff(cur, prev, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        double bt = diff(cur, prev, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
        double by = diff(cur, prev, "kvbatch_bytes_total{op=\"%s\"}", ops[k]);
        double dir = diff(cur, prev, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]);
        double miss, errs;
        errors_between(cur, prev, ops[k], &miss, &errs);
        tops += o;
        tbatches += bt;
        printf("%-7s %12.0f %10.0f %10.0f %10.0f %10.1f %12s %8.0f %8.0f%s\n", ops[k], o,
               span > 0 ? o / span : 0, bt, span > 0 ? bt / span : 0, bt > 0 ? (o - dir) / bt : 0,
               fmt_bytes(by, c, sizeof(c)), dir, errs, miss > 0 ? " (+misses)" : "");
    }
    double batched_ops = delta(cur, prev, "kvbatch_batch_ops_sum");
    printf("%-7s %12.0f %10.0f %10.0f %10.0f %10.1f\n", "all", tops, span > 0 ? tops / span : 0,
           tbatches, span > 0 ? tbatches / span : 0, tbatches > 0 ? batched_ops / tbatches : 0);
    return tops;
}

/* Flushes by reason, with their share. */
static void flush_line(const struct snap *cur, const struct snap *prev)
{
    double total = 0;
    for (int r = 0; r < NREASONS; r++)
        total += diff(cur, prev, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
    printf("\nflushes:");
    for (int r = 0; r < NREASONS; r++) {
        double v = diff(cur, prev, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
        printf("  %s %.0f (%.0f%%)", reasons[r], v, total > 0 ? 100 * v / total : 0);
    }
}

/* p50 / p90 / p99 of the queue delay and of the op latency (and its mean). */
static void latency_lines(const struct snap *cur, const struct snap *prev)
{
    char a[32], b[32], c[32], d[32];
    double lat_n = delta(cur, prev, "kvbatch_op_latency_seconds_count");
    double lat_sum = delta(cur, prev, "kvbatch_op_latency_seconds_sum");
    printf("\nqueue delay: p50 %s  p90 %s  p99 %s\n",
           fmt_time(quantile(cur, prev, "kvbatch_queue_delay_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(cur, prev, "kvbatch_queue_delay_seconds", 0.9), b, sizeof(b)),
           fmt_time(quantile(cur, prev, "kvbatch_queue_delay_seconds", 0.99), c, sizeof(c)));
    printf("op latency:  p50 %s  p90 %s  p99 %s  (mean %s)\n",
           fmt_time(quantile(cur, prev, "kvbatch_op_latency_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(cur, prev, "kvbatch_op_latency_seconds", 0.9), b, sizeof(b)),
           fmt_time(quantile(cur, prev, "kvbatch_op_latency_seconds", 0.99), c, sizeof(c)),
           fmt_time(lat_n > 0 ? lat_sum / lat_n : NAN, d, sizeof(d)));
}

/* What is pending now, and the errors of the span by status. */
static void now_and_errors(const struct snap *cur, const struct snap *prev)
{
    char a[32];
    printf("now: %.0f ops queued, %.0f batches in flight, %s held for write-behind, %.0f "
           "write-behind failures in all\n",
           get(cur, "kvbatch_queued_ops"), get(cur, "kvbatch_inflight_batches"),
           fmt_bytes(get(cur, "kvbatch_writeback_pending_bytes"), a, sizeof(a)),
           get(cur, "kvbatch_writeback_errors_total"));
    printf("errors by status:");
    int any = 0;
    for (int i = 0; i < cur->n; i++) {
        if (strncmp(cur->s[i].name, "kvbatch_errors_total{", 21) != 0) continue;
        double v = cur->s[i].value - before(prev, cur->s[i].name);
        if (v > 0) {
            printf(" %s=%.0f", cur->s[i].name + 20, v);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
}

/* The batchers of sn (their batcher label, "kvs/0"), into names; how many. */
static int batchers_of(const struct snap *sn, char names[][32], int max)
{
    static const char pre[] = "kvbatch_max_inflight{batcher=\"";
    int n = 0;
    for (int i = 0; i < sn->n && n < max; i++)
        if (strncmp(sn->s[i].name, pre, sizeof(pre) - 1) == 0 &&
            sscanf(sn->s[i].name + sizeof(pre) - 1, "%31[^\"]", names[n]) == 1)
            n++;
    return n;
}

/* The auto controller's reason of batcher bname in sn, or "?". */
static void reason_of(const struct snap *sn, const char *bname, char *out, size_t cap)
{
    char pre[80];
    int n = snprintf(pre, sizeof(pre), "kvbatch_auto_reason{batcher=\"%s\",reason=\"", bname);
    snprintf(out, cap, "?");
    for (int i = 0; i < sn->n; i++)
        if (strncmp(sn->s[i].name, pre, (size_t)n) == 0) {
            snprintf(out, cap, "%.*s", (int)strcspn(sn->s[i].name + n, "\""), sn->s[i].name + n);
            return;
        }
}

/* A per-batcher gauge: family{batcher="bname"}. */
static double batcher_get(const struct snap *sn, const char *family, const char *bname)
{
    char name[NAME_LEN];
    snprintf(name, sizeof(name), "%.64s{batcher=\"%.31s\"}", family, bname);
    return get(sn, name);
}

/*
 * Each batcher's setting in effect; under policy auto, its controller's
 * level, why it last changed it and its last epoch; how often the
 * controllers moved over the span.
 */
static void auto_line(const struct snap *cur, const struct snap *prev)
{
    char names[64][32];
    int nb = batchers_of(cur, names, 64);
    for (int i = 0; i < nb; i++) {
        char a[32], b[32], c[32], reason[48];
        double levels = batcher_get(cur, "kvbatch_auto_levels", names[i]);
        printf("batcher %s: window %s, max_inflight %.0f", names[i],
               fmt_time(batcher_get(cur, "kvbatch_window_seconds", names[i]), a, sizeof(a)),
               batcher_get(cur, "kvbatch_max_inflight", names[i]));
        if (levels > 0) {
            reason_of(cur, names[i], reason, sizeof(reason));
            printf(" (auto: level %.0f of 0..%.0f, 0 = most direct calls; last change: %s; "
                   "last epoch: op latency mean %s p99 %s)",
                   batcher_get(cur, "kvbatch_auto_level", names[i]), levels - 1, reason,
                   fmt_time(batcher_get(cur, "kvbatch_auto_epoch_mean_seconds", names[i]), b,
                            sizeof(b)),
                   fmt_time(batcher_get(cur, "kvbatch_auto_epoch_p99_seconds", names[i]), c,
                            sizeof(c)));
        }
        printf("\n");
    }
    if (get(cur, "kvbatch_auto_changes_total") > 0)
        printf("auto: %.0f level changes\n", delta(cur, prev, "kvbatch_auto_changes_total"));
}

/*
 * The human summary of cur, over the span since prev (a last look of the same
 * shim instance) or, with prev NULL, since the shim started. Gauges ("now")
 * are always cur's.
 */
static void summary(const char *path, const struct snap *cur, const struct snap *prev)
{
    char a[32], b[32];
    double now = (double)time(NULL);
    double wrote = get(cur, "kvbatch_write_time_seconds");
    double from =
        prev ? get(prev, "kvbatch_write_time_seconds") : get(cur, "kvbatch_start_time_seconds");
    double span = wrote - from > 0 ? wrote - from : 0;
    printf("kvbatch-stat %s: written %.0fs ago; %.1fs of activity since %s\n", path,
           now - wrote > 0 ? now - wrote : 0, span, prev ? "the last look" : "the shim started");
    printf("backends: %s\n", cur->backends[0] ? cur->backends : "-");
    printf("settings: %s window=%s max_ops=%.0f max_bytes=%s max_inflight=%.0f\n", cur->info,
           fmt_time(get(cur, "kvbatch_setting_window_seconds"), a, sizeof(a)),
           get(cur, "kvbatch_setting_max_ops"),
           fmt_bytes(get(cur, "kvbatch_setting_max_bytes"), b, sizeof(b)),
           get(cur, "kvbatch_setting_max_inflight"));
    auto_line(cur, prev);
    double tops = ops_table(cur, prev, span);
    flush_line(cur, prev);
    latency_lines(cur, prev);
    transport_line(cur, prev, tops);
    now_and_errors(cur, prev);
}

/*
 * Path of the last-look copy of the stats file at path: one per user, stats
 * file and --backend (FNV-1a of the real path and the backend), in
 * $XDG_RUNTIME_DIR or /tmp.
 */
static int last_look_path(const char *path, const char *backend, char *out, size_t cap)
{
    char real[PATH_MAX + 64];
    if (!realpath(path, real)) return -errno;
    if (backend) snprintf(real + strlen(real), sizeof(real) - strlen(real), "\n%s", backend);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = real; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const char *dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || !dir[0]) dir = "/tmp";
    int n = snprintf(out, cap, "%s/kvbatch-stat-%u-%016llx.last", dir, (unsigned)getuid(),
                     (unsigned long long)h);
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/* The last look, if it is of the same shim instance and not newer than cur. */
static const struct snap *last_look(const char *state, const struct snap *cur, struct snap *prev)
{
    if (load(state, NULL, prev) < 0) return NULL; /* saved as read: one backend or the sum */
    double start = get(cur, "kvbatch_start_time_seconds");
    if (start <= 0 || get(prev, "kvbatch_start_time_seconds") != start) return NULL;
    if (get(prev, "kvbatch_write_time_seconds") > get(cur, "kvbatch_write_time_seconds"))
        return NULL;
    return prev;
}

/*
 * Keeps a copy of the stats file as read (its text, re-rendered from cur) for
 * the next look: kvs_file_replace (a new file under a random name, never
 * through a planted link, then rename), private to the user. Failure to keep
 * it only costs the next look its "since the last look".
 */
static void save_look(const char *state, const struct snap *cur)
{
    static char text[MAX_SAMPLES * (NAME_LEN + 32)];
    size_t len = 0;
    for (int i = 0; i < cur->n && len < sizeof(text); i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s %.17g\n", cur->s[i].name,
                                cur->s[i].value);
    if (len < sizeof(text)) kvs_file_replace(state, text, len, 0600);
}

static void json_num(const char *key, double v, int comma)
{
    if (isnan(v) || isinf(v))
        printf("\"%s\":null%s", key, comma ? "," : "");
    else
        printf("\"%s\":%.9g%s", key, v, comma ? "," : "");
}

static void json(const struct snap *sn)
{
    double span = get(sn, "kvbatch_write_time_seconds") - get(sn, "kvbatch_start_time_seconds");
    printf("{");
    json_num("seconds", span, 1);
    for (int k = 0; k < 3; k++) {
        double o = getf(sn, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        double bt = getf(sn, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
        double miss, errs;
        errors_of(sn, ops[k], &miss, &errs);
        printf("\"%s\":{", ops[k]);
        json_num("ops", o, 1);
        json_num("batches", bt, 1);
        json_num("ops_per_s", span > 0 ? o / span : 0, 1);
        json_num("bytes", getf(sn, "kvbatch_bytes_total{op=\"%s\"}", ops[k]), 1);
        json_num("direct", getf(sn, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]), 1);
        json_num("not_found", miss, 1);
        json_num("errors", errs, 0);
        printf("},");
    }
    printf("\"flush\":{");
    for (int r = 0; r < NREASONS; r++)
        json_num(reasons[r], getf(sn, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]),
                 r < NREASONS - 1);
    printf("},");
    json_num("mean_batch_ops",
             get(sn, "kvbatch_batch_ops_count") > 0
                 ? get(sn, "kvbatch_batch_ops_sum") / get(sn, "kvbatch_batch_ops_count")
                 : 0,
             1);
    json_num("queue_delay_p50_s", quantile(sn, NULL, "kvbatch_queue_delay_seconds", 0.5), 1);
    json_num("queue_delay_p99_s", quantile(sn, NULL, "kvbatch_queue_delay_seconds", 0.99), 1);
    json_num("op_latency_p50_s", quantile(sn, NULL, "kvbatch_op_latency_seconds", 0.5), 1);
    json_num("op_latency_p99_s", quantile(sn, NULL, "kvbatch_op_latency_seconds", 0.99), 1);
    char names[64][32];
    int nb = batchers_of(sn, names, 64);
    printf("\"batchers\":[");
    for (int i = 0; i < nb; i++) {
        printf("%s{\"batcher\":\"%s\",", i ? "," : "", names[i]);
        json_num("window_s", batcher_get(sn, "kvbatch_window_seconds", names[i]), 1);
        json_num("max_inflight", batcher_get(sn, "kvbatch_max_inflight", names[i]),
                 batcher_get(sn, "kvbatch_auto_levels", names[i]) > 0);
        if (batcher_get(sn, "kvbatch_auto_levels", names[i]) > 0) {
            char reason[48];
            reason_of(sn, names[i], reason, sizeof(reason));
            printf("\"auto\":{");
            json_num("level", batcher_get(sn, "kvbatch_auto_level", names[i]), 1);
            json_num("levels", batcher_get(sn, "kvbatch_auto_levels", names[i]), 1);
            printf("\"reason\":\"%s\",", reason);
            json_num("epoch_mean_s", batcher_get(sn, "kvbatch_auto_epoch_mean_seconds", names[i]),
                     1);
            json_num("epoch_p99_s", batcher_get(sn, "kvbatch_auto_epoch_p99_seconds", names[i]), 0);
            printf("}");
        }
        printf("}");
    }
    printf("],");
    json_num("auto_changes", get(sn, "kvbatch_auto_changes_total"), 1);
    json_num("queued_ops", get(sn, "kvbatch_queued_ops"), 1);
    json_num("inflight_batches", get(sn, "kvbatch_inflight_batches"), 1);
    json_num("writeback_errors", get(sn, "kvbatch_writeback_errors_total"), 0);
    printf("}\n");
}

static double sum_ops(const struct snap *cur, const struct snap *prev, const char *fmt)
{
    double t = 0;
    for (int k = 0; k < 3; k++)
        t += diff(cur, prev, fmt, ops[k]);
    return t;
}

/* One vmstat-like line for the interval prev -> cur. */
static void interval_line(const struct snap *cur, const struct snap *prev, double secs, int header)
{
    char a[32], b[32], c[32];
    if (header)
        printf("%9s %9s %9s %9s %9s %9s %10s %10s %10s %8s\n", "put/s", "get/s", "exists/s",
               "batches/s", "ops/batch", "idle%", "qdelay50", "lat50", "lat99", "errors/s");
    double o = sum_ops(cur, prev, "kvbatch_ops_total{op=\"%s\"}");
    double bt = sum_ops(cur, prev, "kvbatch_batches_total{op=\"%s\"}");
    /* idle%: sent without waiting - idle flushes and direct calls */
    double fl = 0, idle = diff(cur, prev, "kvbatch_flush_total{reason=\"%s\"}", "idle") +
                          diff(cur, prev, "kvbatch_flush_total{reason=\"%s\"}", "direct");
    for (int r = 0; r < NREASONS; r++)
        fl += diff(cur, prev, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
    double e = 0;
    for (int k = 0; k < 3; k++) {
        double em, ee, pm, pe;
        errors_of(cur, ops[k], &em, &ee);
        errors_of(prev, ops[k], &pm, &pe);
        e += ee - pe;
    }
    printf("%9.0f %9.0f %9.0f %9.0f %9.1f %9.0f %10s %10s %10s %8.0f\n",
           diff(cur, prev, "kvbatch_ops_total{op=\"%s\"}", "put") / secs,
           diff(cur, prev, "kvbatch_ops_total{op=\"%s\"}", "get") / secs,
           diff(cur, prev, "kvbatch_ops_total{op=\"%s\"}", "exists") / secs, bt / secs,
           bt > 0 ? (o - sum_ops(cur, prev, "kvbatch_direct_ops_total{op=\"%s\"}")) / bt : 0,
           fl > 0 ? 100 * idle / fl : 0,
           fmt_time(quantile(cur, prev, "kvbatch_queue_delay_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(cur, prev, "kvbatch_op_latency_seconds", 0.5), b, sizeof(b)),
           fmt_time(quantile(cur, prev, "kvbatch_op_latency_seconds", 0.99), c, sizeof(c)),
           e / secs);
    fflush(stdout);
}

/* The command line: 0, KVOPT_HELP or -EINVAL (said on stderr). */
static int parse_options(int argc, char **argv, struct options *o)
{
    int nargs = 0;
    const struct kvopt opts[] = {
        {"since-start", 's', KVOPT_FLAG, KVOPT_TO(o->since_start), NULL,
         "rates since the shim started, not since the last look"},
        {NULL, 'w', KVOPT_SECONDS, KVOPT_TO(o->every), "SECONDS",
         "print one line per interval (rates over the interval)", .lo = 0, .hi = 86400},
        {NULL, 'n', KVOPT_COUNT, KVOPT_TO(o->count), "COUNT", "with -w: stop after COUNT lines",
         .lo = 1, .hi = 1000000000, .dflt = "until interrupted"},
        {"json", 0, KVOPT_FLAG, KVOPT_TO(o->as_json), NULL,
         "one JSON object (totals, rates since start, percentiles)"},
        {"backend", 'b', KVOPT_STRING, KVOPT_TO(o->backend), "NAME",
         "only the batcher counters of backend NAME (kvs, mooncake)", .lo = 1, .hi = 60,
         .dflt = "all, summed"},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbatch-stat",
        .usage = "usage: kvbatch-stat [-s] [-w SECONDS [-n COUNT]] [--json] [-b NAME] FILE\n"
                 "  FILE is the shim's stats file (KVBATCH_STATS_FILE); alone, the rates are\n"
                 "  since your last look at FILE, or since the shim started\n",
        .opts = opts,
        .args = &o->path,
        .max_args = 1,
        .nargs = &nargs};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc != 0) return rc;
    if (!nargs) {
        fprintf(stderr, "kvbatch-stat: no FILE given\n");
        kvopt_help(&cmd, stderr);
        return -EINVAL;
    }
    return 0;
}

/* One look: the JSON totals, or the summary since the last look (or since start). */
static void look_once(const struct options *o, struct snap *cur, struct snap *prev)
{
    char state[PATH_MAX];
    if (o->as_json) {
        json(cur);
    } else if (last_look_path(o->path, o->backend, state, sizeof(state)) < 0) {
        summary(o->path, cur, NULL);
    } else {
        summary(o->path, cur, o->since_start ? NULL : last_look(state, cur, prev));
        save_look(state, cur);
    }
}

/* -w: a line per interval, -n lines or until interrupted; 0, or 1 if FILE cannot be read. */
static int watch(const struct options *o, struct snap *cur, struct snap *prev)
{
    for (long long line = 0; o->count < 0 || line < o->count; line++) {
        struct timespec ts = kvs_ns_to_timespec((uint64_t)(o->every * 1e9));
        *prev = *cur;
        nanosleep(&ts, NULL);
        int rc = load(o->path, o->backend, cur);
        if (rc < 0) {
            load_failed(o->path, rc);
            return 1;
        }
        double secs =
            get(cur, "kvbatch_write_time_seconds") - get(prev, "kvbatch_write_time_seconds");
        if (secs <= 0) secs = o->every; /* file not rewritten: rates are 0 over the wait */
        interval_line(cur, prev, secs, line % 20 == 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct snap cur, prev;
    struct options o = {.count = -1};
    int rc = parse_options(argc, argv, &o);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    rc = load(o.path, o.backend, &cur);
    if (rc < 0) {
        load_failed(o.path, rc);
        return 1;
    }
    if (o.every > 0) return watch(&o, &cur, &prev);
    look_once(&o, &cur, &prev);
    return 0;
}

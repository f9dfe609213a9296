/*
 * kvbatch-stat - shows what batching does, from the shim's stats files.
 *
 *   kvbatch-stat FILE|DIR...        one summary: rates since the last look
 *   kvbatch-stat -s FILE|DIR...     the same, since each shim started
 *   kvbatch-stat -w SECONDS FILE..  one line per interval, like vmstat (-n COUNT lines)
 *   kvbatch-stat --json FILE|DIR..  totals and rates since start, as JSON
 *   kvbatch-stat -p ...             also one row per process (file)
 *   kvbatch-stat --prune DIR...     removes the files of writers that exited or died
 *
 * It reads only the Prometheus text the shim writes (KVBATCH_STATS_FILE),
 * one file per process (KVBATCH_STATS_FILE=DIR/kvb-%p.prom): a DIR stands
 * for every kvbatch stats file *.prom in it. Counters are summed over the
 * files, and rates are each file's own (its growth over its own span)
 * summed, so two processes started at different times add up right. The
 * batcher's samples carry pid and backend labels: summed over the backends,
 * or, with --backend NAME, only NAME's are read. "The last look" is a copy
 * of a file as this user last summarised it, kept in $XDG_RUNTIME_DIR (or
 * /tmp) under a name derived from its real path; it counts only while it
 * belongs to the same shim instance (same start time). Each file's writer is
 * named running, exited (its last write at exit), gone (no such pid, and no
 * last write: killed or crashed) or stale (not rewritten for 3 intervals).
 */
#include <dirent.h>
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
#include "hash.h"
#include "opts.h"

#define MAX_FILE  (1 << 20) /* bytes: what is read of a stats file, at most */
#define MAX_FILES 1024      /* files read in one look (a directory's *.prom) */
#define MAX_ARGS  64
#define NAME_LEN  160

/* The command line. */
struct options {
    const char *paths[MAX_ARGS]; /* stats files and directories */
    int npaths;
    double every;    /* -w: seconds between lines; 0: one summary */
    long long count; /* -n: lines to print; -1: until interrupted */
    int as_json;
    int since_start;
    int per_process;
    int prune;
    const char *backend; /* --backend: only this backend's samples; NULL: all, summed */
};

static const char *const ops[] = {"put", "get", "exists"};
static const char *const reasons[] = {"window",   "max_ops", "max_bytes", "idle",
                                      "explicit", "exit",    "group",     "direct"};
#define NREASONS ((int)(sizeof(reasons) / sizeof(reasons[0])))

struct sample {
    char name[NAME_LEN]; /* metric name with its {labels}, pid and backend taken out */
    double value;
};

/* One stats file as read: its samples (pid and backend labels taken out). */
struct snap {
    struct sample *s;
    int n, cap;
    int hint;                /* add_sample: where the next name is looked for first */
    long pid;                /* the pid label: the process that wrote it (0: none) */
    char info[NAME_LEN];     /* kvbatch_info labels */
    char backends[NAME_LEN]; /* the backends whose samples were read, "kvs mooncake" */
};

/* What a file's writer is, as far as its file and the pid tell. */
enum state { RUNNING, EXITED, GONE, STALE };
static const char *const state_names[] = {"running", "exited", "gone", "stale"};

/* One file being looked at. */
struct file {
    char path[PATH_MAX];
    struct snap cur, prev;
    bool have_prev; /* prev is the same shim instance's earlier copy */
    bool seen;      /* found in this look (-w: the file is still there) */
    bool noted;     /* -w: its writer's end was said */
    enum state state;
};

struct files {
    struct file *f[MAX_FILES];
    int n;
    int skipped; /* *.prom files of a directory that are not kvbatch stats files */
};

/*
 * A span over the files: counters as their growth (d) and their growth per
 * second of each file's own span, summed (r); gauges as they are now, summed (d).
 */
struct view {
    struct snap d, r;
    double span; /* the longest file span */
};

static int bad_line; /* load's -EBADMSG: the line that is not a sample */

static void snap_free(struct snap *sn)
{
    free(sn->s);
    memset(sn, 0, sizeof(*sn));
}

/*
 * Adds value to the sample called name (a new one if need be); false without
 * memory. Files list their samples in one order, so the one after the last
 * found is tried first (summing many files stays linear).
 */
static bool add_sample(struct snap *sn, const char *name, double value)
{
    if (sn->hint < sn->n && strcmp(sn->s[sn->hint].name, name) == 0) {
        sn->s[sn->hint++].value += value;
        return true;
    }
    for (int i = 0; i < sn->n; i++)
        if (strcmp(sn->s[i].name, name) == 0) {
            sn->s[i].value += value;
            sn->hint = i + 1;
            return true;
        }
    sn->hint = sn->n + 1;
    if (sn->n == sn->cap) {
        int cap = sn->cap ? 2 * sn->cap : 256;
        struct sample *s = realloc(sn->s, (size_t)cap * sizeof(*s));
        if (!s) return false;
        sn->s = s;
        sn->cap = cap;
    }
    snprintf(sn->s[sn->n].name, sizeof(sn->s[0].name), "%.159s", name);
    sn->s[sn->n++].value = value;
    return true;
}

/* Adds the words of the list from to the list to ("kvs mooncake"), each once. */
static void words_union(char *to, size_t cap, const char *from)
{
    char buf[NAME_LEN];
    snprintf(buf, sizeof(buf), "%s", from);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char have[NAME_LEN + 2], word[NAME_LEN + 2];
        snprintf(have, sizeof(have), " %s ", to);
        snprintf(word, sizeof(word), " %s ", w);
        size_t l = strlen(to);
        if (!strstr(have, word) && l + strlen(w) + 2 < cap)
            snprintf(to + l, cap - l, "%s%s", l ? " " : "", w);
    }
}

/*
 * Takes the process and backend labels out of a sample name, in place:
 * name{pid="7",backend="kvs",op="put"} -> name{op="put"}, with 7 into *pid
 * and kvs into be ("" when the name has none). A per-batcher sample keeps
 * its backend inside the batcher label: {pid="7",backend="kvs",batcher="0"}
 * -> {batcher="kvs/0"} (a name that already says "kvs/0" is left so). False
 * if a label is malformed.
 */
static bool strip_process_labels(char *name, long *pid, char *be, size_t cap)
{
    char *open = strchr(name, '{');
    be[0] = '\0';
    if (!open) return true;
    char out[NAME_LEN * 2], *o = out;
    char batcher[48] = "";
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
            snprintf(batcher, sizeof(batcher), "%.*s", (int)(vlen < 40 ? vlen : 40), v);
        } else if ((size_t)(o - out) + klen + vlen + 8 < sizeof(out)) {
            o += sprintf(o, "%s%.*s", first ? "" : ",", (int)(q + 1 - p), p);
            first = false;
        }
        p = q + 1;
        if (*p == ',') p++;
    }
    if (batcher[0] && (size_t)(o - out) + 64 < sizeof(out)) {
        if (strchr(batcher, '/'))
            o += sprintf(o, "%sbatcher=\"%s\"", first ? "" : ",", batcher);
        else
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

/*
 * A sample line of the text format: NAME[{LABELS}] VALUE [TIMESTAMP]. Cuts
 * line after the name (in place) and gives the value; false if it is not one.
 */
static bool parse_sample(char *line, double *value)
{
    char *p = line;
    if (!(*p == '_' || *p == ':' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        return false;
    while (*p == '_' || *p == ':' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
           (*p >= '0' && *p <= '9'))
        p++;
    if (*p == '{') {
        p = strchr(p, '}');
        if (!p) return false;
        p++;
    }
    if (*p != ' ') return false;
    *p++ = '\0';
    char *end;
    *value = strtod(p, &end);
    if (end == p) return false;
    while (*end == ' ')
        end++;
    if (*end) {
        char *ts_end;
        (void)strtoll(end, &ts_end, 10); /* an optional timestamp */
        if (ts_end == end || *ts_end) return false;
    }
    return true;
}

/*
 * Reads FILE into sn (only backend's samples of the batcher's, if not NULL);
 * 0 or a negative errno: -EINVAL if FILE is not a regular file (a fifo or a
 * device such as /dev/zero is never read), -EFBIG if it is over MAX_FILE
 * bytes (the shim writes at most 256 KiB), -EBADMSG if a line is not a
 * Prometheus sample (bad_line says which), -ENODATA if it has no
 * kvbatch_start_time_seconds (every stats file has), -ENOMEM.
 */
static int load(const char *path, const char *backend, struct snap *sn)
{
    static char text[MAX_FILE];
    char be[64];
    ssize_t len = kvs_file_read(path, text, sizeof(text));
    if (len < 0) return (int)len;
    text[len] = '\0';
    sn->n = sn->hint = 0;
    sn->pid = 0;
    sn->info[0] = sn->backends[0] = '\0';
    bool started = false;
    int lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        lineno++;
        if (line[0] == '#' || line[0] == '\0') continue;
        double value;
        long pid = 0;
        if (!parse_sample(line, &value) || !strip_process_labels(line, &pid, be, sizeof(be))) {
            bad_line = lineno;
            return -EBADMSG;
        }
        if (pid) sn->pid = pid;
        if (be[0]) {
            if (backend && strcmp(be, backend) != 0) continue;
            words_union(sn->backends, sizeof(sn->backends), be);
        }
        if (!add_sample(sn, line, value)) return -ENOMEM;
        if (strcmp(line, "kvbatch_start_time_seconds") == 0) started = true;
        if (strncmp(line, "kvbatch_info{", 13) == 0)
            snprintf(sn->info, sizeof(sn->info), "%.159s", line + 12);
    }
    return started ? 0 : -ENODATA;
}

/* Says why FILE could not be read (load's codes), on stderr. */
static void load_failed(const char *path, int rc)
{
    if (rc == -EBADMSG)
        fprintf(stderr,
                "kvbatch-stat: %s is not a kvbatch stats file (line %d is not a Prometheus "
                "sample)\n",
                path, bad_line);
    else if (rc == -ENODATA)
        fprintf(stderr,
                "kvbatch-stat: %s is not a kvbatch stats file (no kvbatch_start_time_seconds; "
                "the shim writes one with KVBATCH_STATS_FILE)\n",
                path);
    else
        fprintf(stderr, "kvbatch-stat: cannot read %s: %s\n", path,
                rc == -EINVAL  ? "not a regular file"
                : rc == -EFBIG ? "larger than a stats file can be (1 MiB)"
                               : strerror(-rc));
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

/* A counter's sample (its growth is what counts), not a gauge's. */
static bool is_counter(const char *name)
{
    static const char *const ends[] = {"_total", "_bucket", "_sum", "_count"};
    size_t n = strcspn(name, "{");
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        size_t l = strlen(ends[i]);
        if (n >= l && strncmp(name + n - l, ends[i], l) == 0) return true;
    }
    return false;
}

/* The seconds a file's figures cover: since prev (NULL: since its shim started). */
static double file_span(const struct snap *cur, const struct snap *prev)
{
    double from =
        prev ? get(prev, "kvbatch_write_time_seconds") : get(cur, "kvbatch_start_time_seconds");
    double span = get(cur, "kvbatch_write_time_seconds") - from;
    return span > 0 ? span : 0;
}

/* Adds a file's figures over prev -> cur (prev NULL: since start) into v. */
static void view_add(struct view *v, const struct snap *cur, const struct snap *prev)
{
    double span = file_span(cur, prev);
    words_union(v->d.backends, sizeof(v->d.backends), cur->backends);
    if (span > v->span) v->span = span;
    for (int i = 0; i < cur->n; i++) {
        const struct sample *s = &cur->s[i];
        if (!is_counter(s->name)) {
            add_sample(&v->d, s->name, s->value);
            continue;
        }
        double d = s->value - (prev ? get(prev, s->name) : 0);
        add_sample(&v->d, s->name, d);
        add_sample(&v->r, s->name, span > 0 ? d / span : 0);
    }
}

static void view_free(struct view *v)
{
    snap_free(&v->d);
    snap_free(&v->r);
}

/*
 * Quantile q of histogram `base` in sn (bucket counts over a span),
 * interpolating linearly inside the bucket, as Prometheus'
 * histogram_quantile does. NAN when there are no observations.
 */
static double quantile(const struct snap *sn, const char *base, double q)
{
    double les[64], cum[64];
    int nb = 0;
    size_t blen = strlen(base);
    for (int i = 0; i < sn->n && nb < 64; i++) {
        const char *nm = sn->s[i].name;
        if (strncmp(nm, base, blen) != 0 || strncmp(nm + blen, "_bucket{le=\"", 12) != 0) continue;
        const char *le = nm + blen + 12;
        les[nb] = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        cum[nb] = sn->s[i].value;
        nb++;
    }
    for (int i = 1; i < nb; i++) /* the order of the file, but be sure: by bound */
        for (int j = i; j > 0 && les[j - 1] > les[j]; j--) {
            double t = les[j];
            les[j] = les[j - 1], les[j - 1] = t;
            t = cum[j];
            cum[j] = cum[j - 1], cum[j - 1] = t;
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

/*
 * libkvstore's transport counters (kvbatch_transport_total), summed over
 * servers, printed per op: frames and system calls per op on TCP,
 * doorbells and round trips per op on RDMA, are what batching saves.
 */
static void transport_line(const struct snap *d, double ops_done)
{
    static const char pre[] = "kvbatch_transport_total{";
    char names[16][32];
    double sums[16];
    int nn = 0;
    for (int i = 0; i < d->n; i++) {
        const char *c = strstr(d->s[i].name, "counter=\"");
        if (strncmp(d->s[i].name, pre, sizeof(pre) - 1) != 0 || !c) continue;
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
        sums[k] += d->s[i].value;
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

/* The per-op table of a view; returns the ops of all kinds. */
static double ops_table(const struct view *v)
{
    char c[32];
    printf("\n%-7s %12s %10s %10s %10s %10s %12s %8s %8s\n", "op", "ops", "ops/s", "batches",
           "batches/s", "ops/batch", "bytes", "direct", "errors");
    double tops = 0, tbatches = 0, trate = 0, tbrate = 0;
    for (int k = 0; k < 3; k++) {
        double o = getf(&v->d, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        double bt = getf(&v->d, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
        double by = getf(&v->d, "kvbatch_bytes_total{op=\"%s\"}", ops[k]);
        double dir = getf(&v->d, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]);
        double orate = getf(&v->r, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        double brate = getf(&v->r, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
        double miss, errs;
        errors_of(&v->d, ops[k], &miss, &errs);
        tops += o, tbatches += bt, trate += orate, tbrate += brate;
        printf("%-7s %12.0f %10.0f %10.0f %10.0f %10.1f %12s %8.0f %8.0f%s\n", ops[k], o, orate, bt,
               brate, bt > 0 ? (o - dir) / bt : 0, fmt_bytes(by, c, sizeof(c)), dir, errs,
               miss > 0 ? " (+misses)" : "");
    }
    double batched_ops = get(&v->d, "kvbatch_batch_ops_sum");
    printf("%-7s %12.0f %10.0f %10.0f %10.0f %10.1f\n", "all", tops, trate, tbatches, tbrate,
           tbatches > 0 ? batched_ops / tbatches : 0);
    return tops;
}

/* Flushes by reason, with their share. */
static void flush_line(const struct snap *d)
{
    double total = 0;
    for (int r = 0; r < NREASONS; r++)
        total += getf(d, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
    printf("\nflushes:");
    for (int r = 0; r < NREASONS; r++) {
        double v = getf(d, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
        printf("  %s %.0f (%.0f%%)", reasons[r], v, total > 0 ? 100 * v / total : 0);
    }
}

/* p50 / p90 / p99 of the queue delay and of the op latency (and its mean). */
static void latency_lines(const struct snap *d)
{
    char a[32], b[32], c[32], e[32];
    double lat_n = get(d, "kvbatch_op_latency_seconds_count");
    double lat_sum = get(d, "kvbatch_op_latency_seconds_sum");
    printf("\nqueue delay: p50 %s  p90 %s  p99 %s\n",
           fmt_time(quantile(d, "kvbatch_queue_delay_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(d, "kvbatch_queue_delay_seconds", 0.9), b, sizeof(b)),
           fmt_time(quantile(d, "kvbatch_queue_delay_seconds", 0.99), c, sizeof(c)));
    printf("op latency:  p50 %s  p90 %s  p99 %s  (mean %s)\n",
           fmt_time(quantile(d, "kvbatch_op_latency_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(d, "kvbatch_op_latency_seconds", 0.9), b, sizeof(b)),
           fmt_time(quantile(d, "kvbatch_op_latency_seconds", 0.99), c, sizeof(c)),
           fmt_time(lat_n > 0 ? lat_sum / lat_n : NAN, e, sizeof(e)));
}

/* What is pending now, and the errors of the span by status. */
static void now_and_errors(const struct snap *d)
{
    char a[32];
    printf("now: %.0f ops queued, %.0f batches in flight, %s held for write-behind, %.0f "
           "write-behind failures\n",
           get(d, "kvbatch_queued_ops"), get(d, "kvbatch_inflight_batches"),
           fmt_bytes(get(d, "kvbatch_writeback_pending_bytes"), a, sizeof(a)),
           get(d, "kvbatch_writeback_errors_total"));
    printf("errors by status:");
    int any = 0;
    for (int i = 0; i < d->n; i++) {
        if (strncmp(d->s[i].name, "kvbatch_errors_total{", 21) != 0) continue;
        if (d->s[i].value > 0) {
            printf(" %s=%.0f", d->s[i].name + 20, d->s[i].value);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
}

/* The batchers of sn (their batcher label, "kvs/0"), into names; how many. */
static int batchers_of(const struct snap *sn, char names[][48], int max)
{
    static const char pre[] = "kvbatch_max_inflight{batcher=\"";
    int n = 0;
    for (int i = 0; i < sn->n && n < max; i++)
        if (strncmp(sn->s[i].name, pre, sizeof(pre) - 1) == 0 &&
            sscanf(sn->s[i].name + sizeof(pre) - 1, "%47[^\"]", names[n]) == 1)
            n++;
    return n;
}

/* The auto controller's reason of batcher bname in sn, or "?". */
static void reason_of(const struct snap *sn, const char *bname, char *out, size_t cap)
{
    char pre[96];
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
    snprintf(name, sizeof(name), "%.64s{batcher=\"%.47s\"}", family, bname);
    return get(sn, name);
}

/*
 * Each batcher's setting in effect (prefix: "" or "pid N "); under policy
 * auto, its controller's level, why it last changed it and its last epoch.
 */
static void batcher_lines(const struct snap *cur, const char *prefix)
{
    char names[64][48];
    int nb = batchers_of(cur, names, 64);
    for (int i = 0; i < nb; i++) {
        char a[32], b[32], c[32], reason[48];
        double levels = batcher_get(cur, "kvbatch_auto_levels", names[i]);
        printf("%sbatcher %s: window %s, max_inflight %.0f", prefix, names[i],
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
}

/* The settings line of sn (prefix as for batcher_lines). */
static void settings_line(const struct snap *sn, const char *prefix)
{
    char a[32], b[32];
    printf("%ssettings: %s window=%s max_ops=%.0f max_bytes=%s max_inflight=%.0f\n", prefix,
           sn->info, fmt_time(get(sn, "kvbatch_setting_window_seconds"), a, sizeof(a)),
           get(sn, "kvbatch_setting_max_ops"),
           fmt_bytes(get(sn, "kvbatch_setting_max_bytes"), b, sizeof(b)),
           get(sn, "kvbatch_setting_max_inflight"));
}

/* What the file and its pid say of its writer, at now (Unix time). */
static enum state state_of(const struct snap *sn, double now)
{
    if (get(sn, "kvbatch_exited") == 1) return EXITED;
    if (sn->pid > 0 && kill((pid_t)sn->pid, 0) < 0 && errno == ESRCH) return GONE;
    double interval = get(sn, "kvbatch_setting_stats_interval_seconds");
    if (interval > 0 && now - get(sn, "kvbatch_write_time_seconds") > 3 * interval + 1)
        return STALE;
    return RUNNING;
}

/* A line saying what became of a file's writer, to out; nothing while it runs. */
static void state_note(FILE *out, const struct file *f, double now)
{
    double ago = now - get(&f->cur, "kvbatch_write_time_seconds");
    if (ago < 0) ago = 0;
    if (f->state == EXITED)
        fprintf(out, "note: pid %ld exited %.0fs ago; %s holds its final figures\n", f->cur.pid,
                ago, f->path);
    else if (f->state == GONE)
        fprintf(out,
                "note: pid %ld is gone without its exit write (killed or crashed?); %s holds "
                "its figures of %.0fs ago (remove the file once read)\n",
                f->cur.pid, f->path, ago);
    else if (f->state == STALE)
        fprintf(out,
                "note: %s was last written %.0fs ago (every %.3gs expected): pid %ld does not "
                "write it (stopped, hung, or another pid namespace)\n",
                f->path, ago, get(&f->cur, "kvbatch_setting_stats_interval_seconds"), f->cur.pid);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the file at path to fs (a new entry, or the one already there). */
static struct file *files_add(struct files *fs, const char *path)
{
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->f[i]->path, path) == 0) return fs->f[i];
    if (fs->n == MAX_FILES) return NULL;
    struct file *f = calloc(1, sizeof(*f));
    if (!f) return NULL;
    snprintf(f->path, sizeof(f->path), "%s", path);
    fs->f[fs->n++] = f;
    return f;
}

/*
 * Reads every file the arguments name into fs (cur; a file read before
 * keeps its previous copy in prev when keep_prev). A DIR stands for its
 * *.prom files that are kvbatch stats files (the others are counted in
 * skipped). 0, or 1 after saying on stderr why a named file cannot be read;
 * files of a directory that vanished meanwhile are left out.
 */
static int read_all(const struct options *o, struct files *fs, bool keep_prev)
{
    for (int i = 0; i < fs->n; i++)
        fs->f[i]->seen = false;
    fs->skipped = 0;
    for (int a = 0; a < o->npaths; a++) {
        struct stat st;
        const char *arg = o->paths[a];
        if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *d = opendir(arg);
            if (!d) {
                fprintf(stderr, "kvbatch-stat: cannot read %s: %s\n", arg, strerror(errno));
                return 1;
            }
            char *names[MAX_FILES] = {0};
            int n = 0;
            for (struct dirent *e; (e = readdir(d)) && n < MAX_FILES;) {
                size_t l = strlen(e->d_name);
                if (e->d_name[0] == '.' || l < 6 || strcmp(e->d_name + l - 5, ".prom") != 0)
                    continue;
                if (!(names[n] = malloc(strlen(arg) + l + 2))) break;
                sprintf(names[n++], "%s/%s", arg, e->d_name);
            }
            closedir(d);
            qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
            for (int k = 0; k < n; k++) {
                struct file *f = files_add(fs, names[k]);
                free(names[k]);
                if (!f) continue;
                if (keep_prev && f->cur.n) {
                    struct snap t = f->prev;
                    f->prev = f->cur, f->cur = t;
                }
                int rc = load(f->path, o->backend, &f->cur);
                if (rc == -EBADMSG || rc == -ENODATA) fs->skipped++;
                if (rc == 0) f->seen = true;
            }
            continue;
        }
        struct file *f = files_add(fs, arg);
        if (!f) continue;
        if (keep_prev && f->cur.n) {
            struct snap t = f->prev;
            f->prev = f->cur, f->cur = t;
        }
        int rc = load(arg, o->backend, &f->cur);
        if (rc < 0) {
            if (keep_prev && rc == -ENOENT) continue; /* -w: its writer removed it */
            load_failed(arg, rc);
            return 1;
        }
        f->seen = true;
    }
    return 0;
}

/* The files of fs read in this look, in order, into v; how many. */
static int seen_files(const struct files *fs, struct file **v)
{
    int n = 0;
    for (int i = 0; i < fs->n; i++)
        if (fs->f[i]->seen) v[n++] = fs->f[i];
    return n;
}

/*
 * The human summary over the files, each over the span since its prev (a
 * last look of the same shim instance) or since its shim started. Gauges
 * ("now") are the files' current ones.
 */
static void summary(const struct options *o, struct file **f, int n)
{
    double now = (double)time(NULL);
    struct view v = {0};
    int count[4] = {0};
    for (int i = 0; i < n; i++) {
        f[i]->state = state_of(&f[i]->cur, now);
        count[f[i]->state]++;
        view_add(&v, &f[i]->cur, f[i]->have_prev ? &f[i]->prev : NULL);
    }
    if (n == 1) {
        double wrote = get(&f[0]->cur, "kvbatch_write_time_seconds");
        printf("kvbatch-stat %s: written %.0fs ago; %.1fs of activity since %s\n", f[0]->path,
               now - wrote > 0 ? now - wrote : 0, v.span,
               f[0]->have_prev ? "the last look" : "the shim started");
    } else {
        printf("kvbatch-stat: %d files (%d running, %d exited, %d gone, %d stale), summed; each "
               "since %s\n",
               n, count[RUNNING], count[EXITED], count[GONE], count[STALE],
               o->since_start ? "its shim started" : "your last look at it (or its start)");
    }
    printf("backends: %s\n", v.d.backends[0] ? v.d.backends : "-");
    for (int i = 0; i < n; i++) {
        char prefix[32] = "";
        if (n > 1) snprintf(prefix, sizeof(prefix), "pid %ld ", f[i]->cur.pid);
        if (n == 1 || o->per_process) settings_line(&f[i]->cur, prefix);
        batcher_lines(&f[i]->cur, prefix);
    }
    if (n > 1 && !o->per_process) settings_line(&f[0]->cur, "");
    if (get(&v.d, "kvbatch_auto_changes_total") > 0)
        printf("auto: %.0f level changes\n", get(&v.d, "kvbatch_auto_changes_total"));
    double tops = ops_table(&v);
    flush_line(&v.d);
    latency_lines(&v.d);
    transport_line(&v.d, tops);
    now_and_errors(&v.d);
    if (o->per_process) {
        printf("\n%-8s %-8s %9s %12s %10s %10s %10s  %s\n", "pid", "state", "written", "ops",
               "ops/s", "ops/batch", "lat99", "file");
        for (int i = 0; i < n; i++) {
            struct view p = {0};
            char a[32], b[32];
            view_add(&p, &f[i]->cur, f[i]->have_prev ? &f[i]->prev : NULL);
            double o_ = 0, r = 0, bt = 0, dir = 0;
            for (int k = 0; k < 3; k++) {
                o_ += getf(&p.d, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
                r += getf(&p.r, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
                bt += getf(&p.d, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
                dir += getf(&p.d, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]);
            }
            double ago = now - get(&f[i]->cur, "kvbatch_write_time_seconds");
            snprintf(a, sizeof(a), "%.0fs ago", ago > 0 ? ago : 0);
            printf("%-8ld %-8s %9s %12.0f %10.0f %10.1f %10s  %s\n", f[i]->cur.pid,
                   state_names[f[i]->state], a, o_, r, bt > 0 ? (o_ - dir) / bt : 0,
                   fmt_time(quantile(&p.d, "kvbatch_op_latency_seconds", 0.99), b, sizeof(b)),
                   f[i]->path);
            view_free(&p);
        }
    }
    for (int i = 0; i < n; i++)
        state_note(stdout, f[i], now);
    view_free(&v);
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
    uint64_t h = kvs_fnv1a(real, strlen(real));
    const char *dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || !dir[0]) dir = "/tmp";
    int n = snprintf(out, cap, "%s/kvbatch-stat-%u-%016llx.last", dir, (unsigned)getuid(),
                     (unsigned long long)h);
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/* The last look into prev, if it is of the same shim instance and not newer than cur. */
static bool last_look(const char *state, const struct snap *cur, struct snap *prev)
{
    if (load(state, NULL, prev) < 0) return false; /* saved as read: one backend or the sum */
    double start = get(cur, "kvbatch_start_time_seconds");
    if (start <= 0 || get(prev, "kvbatch_start_time_seconds") != start) return false;
    return get(prev, "kvbatch_write_time_seconds") <= get(cur, "kvbatch_write_time_seconds");
}

/*
 * Keeps a copy of the stats file as read (its text, re-rendered from cur) for
 * the next look: kvs_file_replace (a new file under a random name, never
 * through a planted link, then rename), private to the user. Failure to keep
 * it only costs the next look its "since the last look".
 */
static void save_look(const char *state, const struct snap *cur)
{
    size_t cap = (size_t)cur->n * (NAME_LEN + 32) + 1, len = 0;
    char *text = malloc(cap);
    if (!text) return;
    for (int i = 0; i < cur->n && len < cap; i++)
        len +=
            (size_t)snprintf(text + len, cap - len, "%s %.17g\n", cur->s[i].name, cur->s[i].value);
    if (len < cap) kvs_file_replace(state, text, len, 0600);
    free(text);
}

/* A JSON number: an integral value as an integer (byte counts, ops), else %.9g; NaN as null. */
static void json_num(const char *key, double v, int comma)
{
    if (isnan(v) || isinf(v))
        printf("\"%s\":null%s", key, comma ? "," : "");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        printf("\"%s\":%.0f%s", key, v, comma ? "," : "");
    else
        printf("\"%s\":%.9g%s", key, v, comma ? "," : "");
}

/* A JSON string (paths may hold anything). */
static void json_str(const char *key, const char *s, int comma)
{
    printf("\"%s\":\"", key);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    printf("\"%s", comma ? "," : "");
}

/* The figures of a view (totals and rates since start), as JSON members ending in a comma. */
static void json_figures(const struct view *v)
{
    json_num("seconds", v->span, 1);
    for (int k = 0; k < 3; k++) {
        double o = getf(&v->d, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        double miss, errs;
        errors_of(&v->d, ops[k], &miss, &errs);
        printf("\"%s\":{", ops[k]);
        json_num("ops", o, 1);
        json_num("batches", getf(&v->d, "kvbatch_batches_total{op=\"%s\"}", ops[k]), 1);
        json_num("ops_per_s", getf(&v->r, "kvbatch_ops_total{op=\"%s\"}", ops[k]), 1);
        json_num("bytes", getf(&v->d, "kvbatch_bytes_total{op=\"%s\"}", ops[k]), 1);
        json_num("direct", getf(&v->d, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]), 1);
        json_num("not_found", miss, 1);
        json_num("errors", errs, 0);
        printf("},");
    }
    printf("\"flush\":{");
    for (int r = 0; r < NREASONS; r++)
        json_num(reasons[r], getf(&v->d, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]),
                 r < NREASONS - 1);
    printf("},");
    double nb = get(&v->d, "kvbatch_batch_ops_count");
    json_num("mean_batch_ops", nb > 0 ? get(&v->d, "kvbatch_batch_ops_sum") / nb : 0, 1);
    json_num("queue_delay_p50_s", quantile(&v->d, "kvbatch_queue_delay_seconds", 0.5), 1);
    json_num("queue_delay_p99_s", quantile(&v->d, "kvbatch_queue_delay_seconds", 0.99), 1);
    json_num("op_latency_p50_s", quantile(&v->d, "kvbatch_op_latency_seconds", 0.5), 1);
    json_num("op_latency_p99_s", quantile(&v->d, "kvbatch_op_latency_seconds", 0.99), 1);
    json_num("queued_ops", get(&v->d, "kvbatch_queued_ops"), 1);
    json_num("inflight_batches", get(&v->d, "kvbatch_inflight_batches"), 1);
    json_num("writeback_errors", get(&v->d, "kvbatch_writeback_errors_total"), 1);
    json_num("auto_changes", get(&v->d, "kvbatch_auto_changes_total"), 1);
}

/* One file's process: who wrote it, its state, its figures and its batchers. */
static void json_process(const struct file *f)
{
    struct view v = {0};
    char names[64][48];
    view_add(&v, &f->cur, NULL);
    printf("{");
    json_num("pid", (double)f->cur.pid, 1);
    json_str("file", f->path, 1);
    json_str("state", state_names[f->state], 1);
    json_figures(&v);
    int nb = batchers_of(&f->cur, names, 64);
    printf("\"batchers\":[");
    for (int i = 0; i < nb; i++) {
        double levels = batcher_get(&f->cur, "kvbatch_auto_levels", names[i]);
        printf("%s{", i ? "," : "");
        json_str("batcher", names[i], 1);
        json_num("window_s", batcher_get(&f->cur, "kvbatch_window_seconds", names[i]), 1);
        json_num("max_inflight", batcher_get(&f->cur, "kvbatch_max_inflight", names[i]),
                 levels > 0);
        if (levels > 0) {
            char reason[48];
            reason_of(&f->cur, names[i], reason, sizeof(reason));
            printf("\"auto\":{");
            json_num("level", batcher_get(&f->cur, "kvbatch_auto_level", names[i]), 1);
            json_num("levels", levels, 1);
            json_str("reason", reason, 1);
            json_num("epoch_mean_s",
                     batcher_get(&f->cur, "kvbatch_auto_epoch_mean_seconds", names[i]), 1);
            json_num("epoch_p99_s",
                     batcher_get(&f->cur, "kvbatch_auto_epoch_p99_seconds", names[i]), 0);
            printf("}");
        }
        printf("}");
    }
    printf("]}");
    view_free(&v);
}

/* Totals and rates since start, summed over the files, and each file's process. */
static void json(struct file **f, int n)
{
    double now = (double)time(NULL);
    struct view v = {0};
    for (int i = 0; i < n; i++) {
        f[i]->state = state_of(&f[i]->cur, now);
        view_add(&v, &f[i]->cur, NULL);
    }
    printf("{");
    json_num("files", n, 1);
    json_figures(&v);
    printf("\"processes\":[");
    for (int i = 0; i < n; i++) {
        if (i) printf(",");
        json_process(f[i]);
    }
    printf("]}\n");
    view_free(&v);
}

/* One vmstat-like line of a view over an interval (pid: "" or the process's column). */
static void interval_line(const struct view *v, const char *pid)
{
    char a[32], b[32], c[32];
    double o = 0, bt = 0, dir = 0, nowait = 0, fl = 0, e = 0;
    for (int k = 0; k < 3; k++) {
        double em, ee;
        o += getf(&v->d, "kvbatch_ops_total{op=\"%s\"}", ops[k]);
        bt += getf(&v->d, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
        dir += getf(&v->d, "kvbatch_direct_ops_total{op=\"%s\"}", ops[k]);
        errors_of(&v->r, ops[k], &em, &ee);
        e += ee;
    }
    /* nowait%: sends that waited for no window - idle flushes and direct calls */
    nowait = getf(&v->d, "kvbatch_flush_total{reason=\"%s\"}", "idle") +
             getf(&v->d, "kvbatch_flush_total{reason=\"%s\"}", "direct");
    for (int r = 0; r < NREASONS; r++)
        fl += getf(&v->d, "kvbatch_flush_total{reason=\"%s\"}", reasons[r]);
    double brate = 0;
    for (int k = 0; k < 3; k++)
        brate += getf(&v->r, "kvbatch_batches_total{op=\"%s\"}", ops[k]);
    printf("%s%9.0f %9.0f %9.0f %9.0f %9.1f %9.0f %10s %10s %10s %8.0f\n", pid,
           getf(&v->r, "kvbatch_ops_total{op=\"%s\"}", "put"),
           getf(&v->r, "kvbatch_ops_total{op=\"%s\"}", "get"),
           getf(&v->r, "kvbatch_ops_total{op=\"%s\"}", "exists"), brate,
           bt > 0 ? (o - dir) / bt : 0, fl > 0 ? 100 * nowait / fl : 0,
           fmt_time(quantile(&v->d, "kvbatch_queue_delay_seconds", 0.5), a, sizeof(a)),
           fmt_time(quantile(&v->d, "kvbatch_op_latency_seconds", 0.5), b, sizeof(b)),
           fmt_time(quantile(&v->d, "kvbatch_op_latency_seconds", 0.99), c, sizeof(c)), e);
}

/* The command line: 0, KVOPT_HELP or -EINVAL (said on stderr). */
static int parse_options(int argc, char **argv, struct options *o)
{
    const struct kvopt opts[] = {
        {"since-start", 's', KVOPT_FLAG, KVOPT_TO(o->since_start), NULL,
         "rates since each shim started, not since the last look"},
        {NULL, 'w', KVOPT_SECONDS, KVOPT_TO(o->every), "SECONDS",
         "print one line per interval (rates over the interval)", .lo = 0, .hi = 86400},
        {NULL, 'n', KVOPT_COUNT, KVOPT_TO(o->count), "COUNT", "with -w: stop after COUNT lines",
         .lo = 1, .hi = 1000000000, .dflt = "until interrupted"},
        {"json", 0, KVOPT_FLAG, KVOPT_TO(o->as_json), NULL,
         "one JSON object (totals, rates since start, percentiles, each process)"},
        {"per-process", 'p', KVOPT_FLAG, KVOPT_TO(o->per_process), NULL,
         "also one row per file (process): pid, state, ops/s; with -w a line per process"},
        {"prune", 0, KVOPT_FLAG, KVOPT_TO(o->prune), NULL,
         "remove the files of writers that exited, or are gone and silent for 3 intervals"},
        {"backend", 'b', KVOPT_STRING, KVOPT_TO(o->backend), "NAME",
         "only the batcher counters of backend NAME (kvs, mooncake)", .lo = 1, .hi = 60,
         .dflt = "all, summed"},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbatch-stat",
        .usage =
            "usage: kvbatch-stat [-s] [-w SECONDS [-n COUNT]] [--json] [-p] [--prune] [-b NAME] "
            "FILE|DIR...\n"
            "  FILE is a shim's stats file (KVBATCH_STATS_FILE), DIR stands for the stats\n"
            "  files *.prom in it; several are summed. Alone, the rates are since your\n"
            "  last look at each file, or since its shim started\n",
        .opts = opts,
        .args = o->paths,
        .max_args = MAX_ARGS,
        .nargs = &o->npaths};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc != 0) return rc;
    if (!o->npaths) {
        fprintf(stderr, "kvbatch-stat: no FILE given\n");
        kvopt_help(&cmd, stderr);
        return -EINVAL;
    }
    return 0;
}

/*
 * --prune: removes the files whose writer exited (its last write says so),
 * or is gone and has not written for 3 intervals (a pid alone could be
 * another pid namespace's); says each on stdout. 0, or 1 if one could not be
 * removed.
 */
static int prune(struct file **f, int n)
{
    double now = (double)time(NULL);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        enum state st = state_of(&f[i]->cur, now);
        double interval = get(&f[i]->cur, "kvbatch_setting_stats_interval_seconds");
        bool silent =
            interval > 0 && now - get(&f[i]->cur, "kvbatch_write_time_seconds") > 3 * interval + 1;
        if (st != EXITED && !(st == GONE && silent)) continue;
        if (unlink(f[i]->path) < 0) {
            fprintf(stderr, "kvbatch-stat: cannot remove %s: %s\n", f[i]->path, strerror(errno));
            rc = 1;
        } else {
            printf("removed %s (pid %ld %s)\n", f[i]->path, f[i]->cur.pid, state_names[st]);
        }
    }
    return rc;
}

/* One look: the JSON totals, or the summary since the last look (or since start). */
static void look_once(const struct options *o, struct file **f, int n)
{
    char state[PATH_MAX];
    if (o->as_json) {
        json(f, n);
        return;
    }
    for (int i = 0; i < n; i++)
        f[i]->have_prev = !o->since_start &&
                          last_look_path(f[i]->path, o->backend, state, sizeof(state)) == 0 &&
                          last_look(state, &f[i]->cur, &f[i]->prev);
    summary(o, f, n);
    for (int i = 0; i < n; i++)
        if (last_look_path(f[i]->path, o->backend, state, sizeof(state)) == 0)
            save_look(state, &f[i]->cur);
}

/*
 * -w: a line per interval (-p: a line per process), -n lines or until
 * interrupted. A file's growth over the interval counts at its own rate; a
 * file not rewritten adds nothing, and the end of its writer (exited, gone,
 * stale, its file removed) is said once on stderr. 0, or 1 if a named file
 * cannot be read.
 */
static int watch(const struct options *o, struct files *fs)
{
    double last_tick = (double)time(NULL);
    for (long long line = 0; o->count < 0 || line < o->count; line++) {
        struct timespec ts = kvs_ns_to_timespec((uint64_t)(o->every * 1e9));
        nanosleep(&ts, NULL);
        bool had[MAX_FILES];
        for (int i = 0; i < fs->n; i++)
            had[i] = fs->f[i]->seen && fs->f[i]->cur.n > 0;
        int nbefore = fs->n;
        if (read_all(o, fs, true)) return 1;
        double now = (double)time(NULL);
        struct view total = {0};
        if (line % 20 == 0)
            printf("%s%9s %9s %9s %9s %9s %9s %10s %10s %10s %8s\n",
                   o->per_process ? "     pid " : "", "put/s", "get/s", "exists/s", "batches/s",
                   "ops/batch", "nowait%", "qdelay50", "lat50", "lat99", "errors/s");
        for (int i = 0; i < fs->n; i++) {
            struct file *f = fs->f[i];
            if (!f->seen) {
                if (i < nbefore && had[i] && !f->noted) {
                    fprintf(stderr, "note: %s is gone (its writer removed it at exit?)\n", f->path);
                    f->noted = true;
                }
                continue;
            }
            /* A file new in this look counts from its start only if it started meanwhile. */
            bool fresh = i >= nbefore || !had[i];
            const struct snap *prev = fresh ? NULL : &f->prev;
            if (fresh && get(&f->cur, "kvbatch_start_time_seconds") < last_tick) prev = &f->cur;
            if (prev && get(&f->cur, "kvbatch_start_time_seconds") !=
                            get(prev, "kvbatch_start_time_seconds"))
                prev = NULL; /* a new shim instance at the same path */
            enum state st = state_of(&f->cur, now);
            if (st != RUNNING && (st != f->state || !f->noted)) {
                f->state = st;
                state_note(stderr, f, now);
                f->noted = true;
            } else if (st == RUNNING) {
                f->state = st, f->noted = false;
            }
            view_add(&total, &f->cur, prev);
            if (o->per_process) {
                struct view p = {0};
                char pid[16];
                view_add(&p, &f->cur, prev);
                snprintf(pid, sizeof(pid), "%8ld ", f->cur.pid);
                interval_line(&p, pid);
                view_free(&p);
            }
        }
        if (!o->per_process) interval_line(&total, "");
        fflush(stdout);
        view_free(&total);
        last_tick = now;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct files fs;
    static struct file *seen[MAX_FILES];
    struct options o = {.count = -1};
    int rc = parse_options(argc, argv, &o);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    if (read_all(&o, &fs, false)) return 1;
    int n = seen_files(&fs, seen);
    if (fs.skipped)
        fprintf(stderr, "kvbatch-stat: %d *.prom file(s) skipped: not kvbatch stats files\n",
                fs.skipped);
    if (n == 0 && o.every <= 0) {
        fprintf(stderr, "kvbatch-stat: no kvbatch stats file in %s%s\n", o.paths[0],
                o.npaths > 1 ? " ..." : "");
        return 1;
    }
    if (o.prune) return prune(seen, n);
    if (o.every > 0) return watch(&o, &fs);
    look_once(&o, seen, n);
    return 0;
}

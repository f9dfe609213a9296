/*
 * kvstress_checks.c - the checks beyond the workers' own: the shim's stats
 * file must agree with the ops kvstress issued through the interposed calls,
 * and pending write-behind puts at a crash must come back as a failure.
 */
#include "kvstress.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "values.h"

/*
 * Value of the sample name (labels included, without the pid label every
 * sample of this process's stats file starts with) in text, or -1.
 */
static double metric(const char *text, const char *name)
{
    char full[512];
    const char *brace = strchr(name, '{');
    if (brace)
        snprintf(full, sizeof(full), "%.*s{pid=\"%d\",%s", (int)(brace - name), name, (int)getpid(),
                 brace + 1);
    else
        snprintf(full, sizeof(full), "%s{pid=\"%d\"}", name, (int)getpid());
    size_t n = strlen(full);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, full, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
    return -1;
}

/* Expands %p in the KVBATCH_STATS_FILE pattern. */
static void stats_path(char *out, size_t cap)
{
    const char *pat = getenv("KVBATCH_STATS_FILE");
    size_t o = 0;
    if (!pat) pat = "";
    for (const char *p = pat; *p && o + 1 < cap; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%d", (int)getpid());
            p++;
        } else {
            out[o++] = *p;
        }
        if (o >= cap) o = cap - 1;
    }
    out[o] = '\0';
}

/* Reads the stats file once it was written after `after` (Unix s); NULL if never. */
static char *read_stats_after(double after)
{
    char path[PATH_MAX];
    stats_path(path, sizeof(path));
    for (int i = 0; i < 300; i++) { /* 3 s */
        FILE *f = fopen(path, "r");
        if (f) {
            char *text = calloc(1, 1 << 20);
            size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
            fclose(f);
            if (text && n && metric(text, "kvbatch_write_time_seconds") >= after) return text;
            free(text);
        }
        usleep(10000);
    }
    return NULL;
}

void check_shim_stats(struct shim_check *sc, double closed_at)
{
    const char *pre = getenv("LD_PRELOAD");
    sc->used = pre && strstr(pre, "libkvbatch") && getenv("KVBATCH_STATS_FILE");
    if (!sc->used) return;
    char *text = read_stats_after(closed_at);
    if (!text) {
        fprintf(stderr, "kvstress: the shim's stats file was not rewritten after kvs_close\n");
        return;
    }
    sc->file_read = 1;
    sc->ok = 1;
    sc->wb_errors = metric(text, "kvbatch_writeback_errors_total{backend=\"kvs\"}");
    for (int k = 0; k < OP_KINDS; k++) {
        char name[128];
        snprintf(name, sizeof(name), "kvbatch_ops_total{backend=\"kvs\",op=\"%s\"}", opname[k]);
        sc->ops[k] = metric(text, name);
        if (sc->ops[k] != (double)atomic_load(&fig.single_issued[k])) {
            fprintf(stderr, "kvstress: shim counted %.0f %s ops, kvstress issued %" PRIu64 "\n",
                    sc->ops[k], opname[k], (uint64_t)atomic_load(&fig.single_issued[k]));
            sc->ok = 0;
        }
        /* Per status: the shim's errors = what callers saw (+ write-behind failures). */
        double total = 0, mine_total = 0;
        for (int c = 0; c < KVS_STATUS_C_OTHER; c++) {
            int e = -kvs_status_class_code(c);
            snprintf(name, sizeof(name),
                     "kvbatch_errors_total{backend=\"kvs\",op=\"%s\",status=\"%s\"}", opname[k],
                     kvs_status_class_name(c));
            double v = metric(text, name);
            if (v < 0) v = 0;
            total += v;
            double mine = (double)atomic_load(&fig.single_err[k][e]);
            mine_total += mine;
            if (!wb_mode && v != mine) {
                fprintf(stderr, "kvstress: shim counted %.0f %s %s errors, kvstress saw %.0f\n", v,
                        opname[k], kvs_status_class_name(c), mine);
                sc->ok = 0;
            }
        }
        sc->errors[k] = total;
        if (wb_mode && k == OP_PUT &&
            total != mine_total + (sc->wb_errors > 0 ? sc->wb_errors : 0)) {
            fprintf(stderr,
                    "kvstress: shim put errors %.0f != caller-seen %.0f + write-behind %.0f\n",
                    total, mine_total, sc->wb_errors);
            sc->ok = 0;
        }
    }
    free(text);
}

/* ---- write-behind crash check ---- */

enum { WB_KEYS = 32 }; /* keys of the write-behind crash check */

/* Puts version 1 of every key through the shim: each returns 0 while it waits in the batcher. */
static void wb_put_pending(kvs_client *c, const char *const keys[], unsigned char *val,
                           struct wb_result *wr)
{
    /* Connection up first (batch calls pass through: KVBATCH_BATCH_CALLS=pass), so only the puts
     * wait. */
    const char *warm[] = {"wb.warmup"};
    int wres[1];
    kvs_batch_exists(c, 1, warm, wres);
    for (int i = 0; i < WB_KEYS; i++) {
        size_t len = value_len(keys[i], 1);
        kvval_fill(val, len, keys[i], 1);
        atomic_fetch_add(&fig.single_issued[OP_PUT], 1); /* interposed: the shim counts it */
        if (kvs_put(c, keys[i], val, len) == 0) wr->puts++;
    }
}

/* A later, acknowledged put of version 2 of the even keys (direct batch calls, retried). */
static void wb_rewrite_even(kvs_client *c, const char *const keys[], unsigned char *val,
                            struct wb_result *wr)
{
    for (int i = 0; i < WB_KEYS; i += 2) {
        size_t len = value_len(keys[i], 2);
        kvval_fill(val, len, keys[i], 2);
        const void *vp[1] = {val};
        size_t lp[1] = {len};
        int st[1] = {-EIO};
        for (int tries = 0; tries < 100 && st[0] != 0; tries++)
            if (kvs_batch_put(c, 1, &keys[i], vp, lp, st) != 1) usleep(20000);
        if (st[0] == 0) wr->rewritten_ok++;
    }
}

/* Reads every key back: the even ones hold version 2, the odd ones are absent. 0 or -ENOMEM. */
static int wb_read_back(kvs_client *c, const char *const keys[], struct wb_result *wr)
{
    void *bufs[WB_KEYS];
    size_t caps[WB_KEYS];
    ssize_t res[WB_KEYS];
    unsigned char *all = malloc((size_t)WB_KEYS * opt.max_len);
    if (!all) return -ENOMEM;
    for (int i = 0; i < WB_KEYS; i++) {
        bufs[i] = all + (size_t)i * opt.max_len;
        caps[i] = opt.max_len;
    }
    kvs_batch_get(c, WB_KEYS, keys, bufs, caps, res);
    for (int i = 0; i < WB_KEYS; i++) {
        unsigned v = 0;
        if (res[i] == -ENOENT) {
            wr->absent++;
            if (i % 2 == 0) wr->wrong++; /* its later put was acknowledged */
        } else if (res[i] >= 0 && kvval_check(bufs[i], (size_t)res[i], keys[i], &v) && v == 1) {
            wr->revived++;
        } else if (res[i] < 0 || v != 2 || i % 2) {
            wr->wrong++; /* an error, a damaged value, or a version no put wrote */
        }
    }
    free(all);
    return 0;
}

void writeback_check(struct wb_result *wr)
{
    static char names[WB_KEYS][64];
    const char *keys[WB_KEYS];
    for (int i = 0; i < WB_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "wb.%d.%d", (int)getpid(), i);
        keys[i] = names[i];
    }
    unsigned char *val = malloc(opt.max_len);
    if (!val) return;
    wr->ran = 1;
    kvs_client *c = kvs_open(srv.addr);
    if (c) {
        wb_put_pending(c, keys, val, wr);
        kill_server(SIGKILL);
        wr->flush_rc = kvs_flush(c);
        if (restart_server() == 0) {
            wb_rewrite_even(c, keys, val, wr);
            wr->ok = wb_read_back(c, keys, wr) == 0 && wr->flush_rc < 0 && wr->wrong == 0 &&
                     wr->revived == 0 && wr->rewritten_ok == WB_KEYS / 2;
        }
        kvs_close(c);
    }
    free(val);
}

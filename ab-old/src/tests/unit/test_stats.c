/*
 * test_stats.c - the stats file: counters and histograms rendered in the
 * Prometheus text format (checked by promtool on a real file), exact
 * cumulative buckets, atomic replacement, settings gauges, the writer thread,
 * and what a hostile user can plant at its temporary name or its path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "config.h"
#include "controller.h"
#include "file.h"
#include "stats.h"
#include "metrics.h"
#include "statsfile.h"

static char text[65536];

static size_t render_all(struct kvb_stats *st)
{
    struct kvb_config cfg;
    kvb_config_defaults(&cfg);
    struct kvb_proc_facts p = {4242, 1700000000.0, 1700000001.5, false};
    size_t n = kvb_settings_render(&cfg, 0, &p, text, sizeof(text));
    assert_true(n < sizeof(text));
    struct kvb_stats_source src = {"kvs", st};
    size_t m = kvb_stats_render(&src, 1, 4242, text + n, sizeof(text) - n);
    assert_true(n + m < sizeof(text));
    return n + m;
}

static void fill(struct kvb_stats *st)
{
    kvb_stats_init(st);
    kvb_count(&st->ops[KVB_OP_PUT], 100);
    kvb_count(&st->batches[KVB_OP_PUT], 10);
    kvb_count(&st->flushes[KVB_FLUSH_IDLE], 7);
    kvb_count(&st->flushes[KVB_FLUSH_WINDOW], 3);
    kvb_count_result(st, KVB_OP_GET, -ENOENT);
    kvb_count_result(st, KVB_OP_PUT, -ECONNRESET);
    kvb_count_result(st, KVB_OP_PUT, -12345);
    for (int i = 0; i < 10; i++)
        kvb_hist_observe(&st->batch_ops, 10);
    kvb_hist_observe(&st->op_latency, 1500);       /* 1.5 us */
    kvb_hist_observe(&st->op_latency, 3000000000); /* 3 s: +Inf bucket */
    /* policy auto's controller, as a batcher in slot 0 publishes it */
    assert_int_equal(kvb_stats_claim_slot(st), 0);
    struct kvb_batcher_gauges *g = &st->batcher[0];
    atomic_store(&g->window_ns, 12500);
    atomic_store(&g->max_inflight, 4);
    atomic_store(&g->level, 1);
    atomic_store(&g->levels, 6);
    atomic_store(&g->reason, KVB_CTL_WORSE);
    atomic_store(&g->mean_ns, 40000);
    atomic_store(&g->p99_ns, 250000);
    kvb_count(&st->tune_changes, 3);
}

static void test_render_values(void **state)
{
    struct kvb_stats st;
    (void)state;
    fill(&st);
    render_all(&st);
    assert_non_null(
        strstr(text, "\nkvbatch_ops_total{pid=\"4242\",backend=\"kvs\",op=\"put\"} 100\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_batches_total{pid=\"4242\",backend=\"kvs\",op=\"put\"} 10\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_flush_total{pid=\"4242\",backend=\"kvs\",reason=\"idle\"} 7\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_flush_total{pid=\"4242\",backend=\"kvs\",reason=\"exit\"} 0\n"));
    assert_non_null(strstr(
        text,
        "kvbatch_errors_total{pid=\"4242\",backend=\"kvs\",op=\"get\",status=\"ENOENT\"} 1\n"));
    assert_non_null(strstr(
        text,
        "kvbatch_errors_total{pid=\"4242\",backend=\"kvs\",op=\"put\",status=\"ECONNRESET\"} 1\n"));
    assert_non_null(strstr(
        text,
        "kvbatch_errors_total{pid=\"4242\",backend=\"kvs\",op=\"put\",status=\"other\"} 1\n"));
    /* Cumulative buckets: 10 batches of 10 ops land in le=16 and stay counted above. */
    assert_non_null(
        strstr(text, "kvbatch_batch_ops_bucket{pid=\"4242\",backend=\"kvs\",le=\"8\"} 0\n"));
    assert_non_null(
        strstr(text, "kvbatch_batch_ops_bucket{pid=\"4242\",backend=\"kvs\",le=\"16\"} 10\n"));
    assert_non_null(
        strstr(text, "kvbatch_batch_ops_bucket{pid=\"4242\",backend=\"kvs\",le=\"+Inf\"} 10\n"));
    assert_non_null(strstr(text, "kvbatch_batch_ops_sum{pid=\"4242\",backend=\"kvs\"} 100\n"));
    assert_non_null(strstr(
        text, "kvbatch_op_latency_seconds_bucket{pid=\"4242\",backend=\"kvs\",le=\"2e-06\"} 1\n"));
    assert_non_null(strstr(
        text, "kvbatch_op_latency_seconds_bucket{pid=\"4242\",backend=\"kvs\",le=\"1\"} 1\n"));
    assert_non_null(strstr(
        text, "kvbatch_op_latency_seconds_bucket{pid=\"4242\",backend=\"kvs\",le=\"+Inf\"} 2\n"));
    assert_non_null(
        strstr(text, "kvbatch_op_latency_seconds_count{pid=\"4242\",backend=\"kvs\"} 2\n"));
    assert_non_null(strstr(text, "kvbatch_info{pid=\"4242\",policy=\"auto\",put_mode=\"sync\""));
    assert_non_null(
        strstr(text, "\nkvbatch_flush_total{pid=\"4242\",backend=\"kvs\",reason=\"direct\"} 0\n"));
    assert_non_null(strstr(
        text, "\nkvbatch_window_seconds{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 1.25e-05\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_max_inflight{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 4\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_auto_level{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 1\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_auto_levels{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 6\n"));
    assert_non_null(strstr(text, "\nkvbatch_auto_changes_total{pid=\"4242\",backend=\"kvs\"} 3\n"));
    assert_non_null(strstr(
        text,
        "\nkvbatch_auto_reason{pid=\"4242\",backend=\"kvs\",batcher=\"0\",reason=\"worse\"} 1\n"));
    assert_non_null(strstr(
        text,
        "\nkvbatch_auto_epoch_p99_seconds{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 0.00025\n"));
    assert_non_null(strstr(text, "kvbatch_setting_window_seconds{pid=\"4242\"} 5e-05\n"));
    assert_non_null(strstr(text, "# TYPE kvbatch_queue_delay_seconds histogram\n"));
}

static void test_render_reports_needed_length(void **state)
{
    struct kvb_stats st;
    char small[64];
    (void)state;
    fill(&st);
    struct kvb_stats_source src = {"kvs", &st};
    size_t need = kvb_stats_render(&src, 1, 4242, small, sizeof(small));
    assert_true(need > sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
}

/* Two backends: each family's HELP and TYPE once, then each backend's samples under its label. */
static void test_render_names_the_backend(void **state)
{
    struct kvb_stats kvs, mc;
    (void)state;
    fill(&kvs);
    kvb_stats_init(&mc);
    kvb_count(&mc.ops[KVB_OP_GET], 42);
    kvb_count(&mc.flushes[KVB_FLUSH_GROUP], 3);
    kvb_hist_observe(&mc.batch_ops, 4);
    struct kvb_stats_source src[] = {{"kvs", &kvs}, {"mooncake", &mc}};
    size_t n = kvb_stats_render(src, 2, 4242, text, sizeof(text));
    assert_true(n < sizeof(text));
    assert_non_null(
        strstr(text, "\nkvbatch_ops_total{pid=\"4242\",backend=\"kvs\",op=\"put\"} 100\n"));
    assert_non_null(
        strstr(text, "\nkvbatch_ops_total{pid=\"4242\",backend=\"mooncake\",op=\"get\"} 42\n"));
    assert_non_null(strstr(
        text, "kvbatch_flush_total{pid=\"4242\",backend=\"mooncake\",reason=\"group\"} 3\n"));
    assert_non_null(
        strstr(text, "kvbatch_batch_ops_bucket{pid=\"4242\",backend=\"mooncake\",le=\"4\"} 1\n"));
    assert_non_null(strstr(text, "kvbatch_queued_ops{pid=\"4242\",backend=\"mooncake\"} 0\n"));
    /* Only a backend under policy auto has the controller's samples. */
    assert_non_null(
        strstr(text, "\nkvbatch_auto_level{pid=\"4242\",backend=\"kvs\",batcher=\"0\"} 1\n"));
    assert_null(strstr(text, "kvbatch_auto_level{pid=\"4242\",backend=\"mooncake\""));
    /* A backend without a batcher has no setting in effect to show. */
    assert_null(strstr(text, "kvbatch_max_inflight{pid=\"4242\",backend=\"mooncake\""));
    assert_non_null(strstr(text, "\nkvbatch_batchers{pid=\"4242\",backend=\"mooncake\"} 0\n"));
    const char *help = "# TYPE kvbatch_ops_total counter\n";
    const char *first = strstr(text, help);
    assert_non_null(first);
    assert_null(strstr(first + 1, help));
}

static void test_hist_index(void **state)
{
    struct kvb_stats st;
    (void)state;
    kvb_stats_init(&st);
    assert_int_equal(kvb_hist_index(&st.batch_ops, 0), 0);
    assert_int_equal(kvb_hist_index(&st.batch_ops, 1), 0);
    assert_int_equal(kvb_hist_index(&st.batch_ops, 2), 1);
    assert_int_equal(kvb_hist_index(&st.batch_ops, 3), 2);
    assert_int_equal(kvb_hist_index(&st.batch_ops, 1u << 30), st.batch_ops.nbounds);
    assert_string_equal(kvs_status_class_name(kvs_status_class(-ETIMEDOUT)), "ETIMEDOUT");
}

static void test_atomic_write_and_promtool(void **state)
{
    struct kvb_stats st;
    char dir[] = "/tmp/kvb-stats-XXXXXX", path[128], cmd[256];
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/kvbatch.prom", dir);
    fill(&st);
    size_t n = render_all(&st);
    assert_int_equal(kvs_file_replace(path, "old\n", 4, 0644), 0);
    assert_int_equal(kvs_file_replace(path, text, n, 0644), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char back[65536];
    size_t got = fread(back, 1, sizeof(back), f);
    fclose(f);
    assert_int_equal(got, n);
    assert_memory_equal(back, text, n);
    snprintf(cmd, sizeof(cmd), "ls %s | wc -l | grep -qx 1", dir); /* no temporary left */
    assert_int_equal(system(cmd), 0);
    if (access("/usr/bin/promtool", X_OK) == 0) {
        snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s", path);
        assert_int_equal(system(cmd), 0);
    } else {
        fprintf(stderr, "SKIP promtool check: /usr/bin/promtool is not installed\n");
    }
    assert_int_equal(kvs_file_replace("/nonexistent-dir/x.prom", "x", 1, 0644), -ENOENT);
    unlink(path);
    rmdir(dir);
}

/* A render callback that numbers its calls: the file says which one wrote it. */
static atomic_int renders;
static size_t render_count(void *arg, bool final, char *buf, size_t cap)
{
    (void)arg;
    (void) final;
    return (size_t)snprintf(buf, cap, "render %d\n", atomic_fetch_add(&renders, 1) + 1);
}

static void no_log(enum kvs_log_level lvl, const char *fmt, ...)
{
    (void)lvl;
    (void)fmt;
}

static int file_render_number(const char *path)
{
    int n = -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fscanf(f, "render %d", &n) != 1) n = -1;
    fclose(f);
    return n;
}

/*
 * The writer: a first write at start, one per interval, a last one at stop
 * and none after it; one writer per fork generation, none once stopped.
 */
static void test_statsfile_writer(void **state)
{
    static struct kvb_statsfile sf;
    char dir[] = "/tmp/kvb-writer-XXXXXX", path[128];
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/w.prom", dir);
    atomic_store(&renders, 0);
    assert_int_equal(
        kvb_statsfile_init(&sf, path, 2000000 /* 2 ms */, false, render_count, NULL, no_log), 0);
    kvb_statsfile_start(&sf, 0);
    assert_int_equal(file_render_number(path), 1);
    for (int i = 0; i < 5000 && atomic_load(&renders) < 4; i++)
        usleep(1000);
    assert_true(atomic_load(&renders) >= 4); /* the interval writes */
    kvb_statsfile_stop(&sf);
    int last = atomic_load(&renders);
    assert_int_equal(file_render_number(path), last);
    usleep(20000); /* ten intervals */
    assert_int_equal(atomic_load(&renders), last);
    kvb_statsfile_start(&sf, 1); /* stopped: a new generation starts nothing */
    kvb_statsfile_stop(&sf);
    assert_int_equal(atomic_load(&renders), last);

    /* A long interval: only start and stop write. The same generation starts once. */
    static struct kvb_statsfile slow;
    atomic_store(&renders, 0);
    assert_int_equal(
        kvb_statsfile_init(&slow, path, 60ull * 1000000000, false, render_count, NULL, no_log), 0);
    kvb_statsfile_start(&slow, 0);
    kvb_statsfile_start(&slow, 0);
    assert_int_equal(atomic_load(&renders), 1);
    kvb_statsfile_start(&slow, 1); /* a forked child's generation: its own writer */
    assert_int_equal(atomic_load(&renders), 2);
    kvb_statsfile_stop(&slow);
    assert_int_equal(file_render_number(path), 3);
    unlink(path);
    rmdir(dir);
}

static int warn_lines, debug_lines;
static char warn_text[512];
static void count_log(enum kvs_log_level lvl, const char *fmt, ...)
{
    if (lvl <= KVS_LOG_WARN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(warn_text, sizeof(warn_text), fmt, ap);
        va_end(ap);
        warn_lines++;
    } else {
        debug_lines++;
    }
}

/* A stats file in a directory that does not exist: one warning at the default level, then debug. */
static void test_statsfile_missing_dir_warns_once(void **state)
{
    static struct kvb_statsfile sf;
    (void)state;
    warn_lines = debug_lines = 0;
    assert_int_equal(kvb_statsfile_init(&sf, "/tmp/kvb-no-such-dir-39a1/s.prom", 60ull * 1000000000,
                                        false, render_count, NULL, count_log),
                     0);
    kvb_statsfile_start(&sf, 0);
    kvb_statsfile_stop(&sf);
    assert_int_equal(warn_lines, 1);
    assert_int_equal(debug_lines, 1); /* the second failure of the same kind */
    assert_non_null(strstr(warn_text, "/tmp/kvb-no-such-dir-39a1/s.prom"));
    assert_non_null(strstr(warn_text, "directory"));
}

static atomic_int warnings;
static void count_warnings(enum kvs_log_level lvl, const char *fmt, ...)
{
    (void)fmt;
    if (lvl <= KVS_LOG_WARN) atomic_fetch_add(&warnings, 1);
}

/* The file's bytes (up to 255), or "" if it cannot be read. */
static const char *contents(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (!f) return buf;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/*
 * Starts a writer on path (2 ms interval), lets it write at least 4 times,
 * stops it; returns the warnings it logged. Each call has a writer of its
 * own: a stopped writer's detached thread may still be leaving its wait.
 */
static int write_a_while(const char *path)
{
    static struct kvb_statsfile sfs[8];
    static int used;
    assert_true(used < 8);
    struct kvb_statsfile *sf = &sfs[used++];
    atomic_store(&renders, 0);
    atomic_store(&warnings, 0);
    assert_int_equal(
        kvb_statsfile_init(sf, path, 2000000, false, render_count, NULL, count_warnings), 0);
    kvb_statsfile_start(sf, 0);
    for (int i = 0; i < 5000 && atomic_load(&renders) < 4; i++)
        usleep(1000);
    kvb_statsfile_stop(sf);
    return atomic_load(&warnings);
}

/*
 * What another user may plant in the stats file's directory (the process
 * may be root): a symbolic link at the temporary name the writer once used
 * ("<file>.tmp.<pid>") is never followed - the file it points to keeps its
 * bytes, the stats file is written; a symbolic link, a fifo or a character
 * device at the stats file's own path is left as it is, with one warning for
 * all the writes refused.
 */
static void test_stats_file_planted_links_and_special_files(void **state)
{
    char dir[] = "/tmp/kvb-hostile-XXXXXX", path[128], victim[128], planted[160], buf[256];
    struct stat st;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.prom", dir);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious\n", f);
    fclose(f);

    snprintf(planted, sizeof(planted), "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(symlink(victim, planted), 0);
    assert_int_equal(write_a_while(path), 0);
    assert_string_equal(contents(victim, buf, sizeof(buf)), "precious\n");
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(file_render_number(path), atomic_load(&renders));
    assert_int_equal(lstat(planted, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* left where it was, never opened */
    unlink(planted);
    unlink(path);

    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(write_a_while(path), 1);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(contents(victim, buf, sizeof(buf)), "precious\n");
    unlink(path);

    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(write_a_while(path), 1);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(path);

    if (mknod(path, S_IFCHR | 0600, makedev(1, 3)) == 0) { /* /dev/null's numbers */
        assert_int_equal(write_a_while(path), 1);
        assert_int_equal(lstat(path, &st), 0);
        assert_true(S_ISCHR(st.st_mode));
        unlink(path);
    } else {
        fprintf(stderr, "SKIP the character device case: mknod: %s\n", strerror(errno));
    }
    snprintf(buf, sizeof(buf), "ls %s | wc -l | grep -qx 1", dir); /* the victim only */
    assert_int_equal(system(buf), 0);
    unlink(victim);
    rmdir(dir);
}

/* A render callback that writes whether this is the last write. */
static size_t render_final(void *arg, bool final, char *buf, size_t cap)
{
    (void)arg;
    return (size_t)snprintf(buf, cap, "final %d\n", final ? 1 : 0);
}

/*
 * At stop the file is written a last time, saying so (the shim's
 * kvbatch_exited 1), or, with remove_at_end (KVBATCH_STATS_AT_EXIT=remove),
 * removed; and the settings show kvbatch_exited and the interval.
 */
static void test_statsfile_last_write_or_removal(void **state)
{
    static struct kvb_statsfile sf, rm; /* two: a stopped writer thread may still be leaving */
    char dir[] = "/tmp/kvb-final-XXXXXX", path[128], buf[64];
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.prom", dir);
    assert_int_equal(
        kvb_statsfile_init(&sf, path, 60ull * 1000000000, false, render_final, NULL, no_log), 0);
    kvb_statsfile_start(&sf, 0);
    assert_string_equal(contents(path, buf, sizeof(buf)), "final 0\n");
    kvb_statsfile_stop(&sf);
    assert_string_equal(contents(path, buf, sizeof(buf)), "final 1\n");
    assert_int_equal(
        kvb_statsfile_init(&rm, path, 60ull * 1000000000, true, render_final, NULL, no_log), 0);
    kvb_statsfile_start(&rm, 0);
    assert_string_equal(contents(path, buf, sizeof(buf)), "final 0\n");
    kvb_statsfile_stop(&rm);
    assert_int_equal(access(path, F_OK), -1);
    rmdir(dir);

    struct kvb_config cfg;
    kvb_config_defaults(&cfg);
    struct kvb_proc_facts p = {99, 1700000000.0, 1700000001.5, true};
    assert_true(kvb_settings_render(&cfg, 0, &p, text, sizeof(text)) < sizeof(text));
    assert_non_null(strstr(text, "\nkvbatch_exited{pid=\"99\"} 1\n"));
    assert_non_null(strstr(text, "\nkvbatch_setting_stats_interval_seconds{pid=\"99\"} 1\n"));
    assert_non_null(strstr(text, "\nkvbatch_write_time_seconds{pid=\"99\"} 1700000001.500\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_values),
        cmocka_unit_test(test_render_reports_needed_length),
        cmocka_unit_test(test_render_names_the_backend),
        cmocka_unit_test(test_hist_index),
        cmocka_unit_test(test_atomic_write_and_promtool),
        cmocka_unit_test(test_statsfile_writer),
        cmocka_unit_test(test_statsfile_missing_dir_warns_once),
        cmocka_unit_test(test_stats_file_planted_links_and_special_files),
        cmocka_unit_test(test_statsfile_last_write_or_removal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_kvbatch_stat.c - runs the kvbatch-stat viewer on stats files written
 * here (the shim's Prometheus text, values chosen so every rate is known):
 * the summary's rates since start, "since the last look" across two runs,
 * -s, a new shim instance, --json, -w, two backends summed or one picked,
 * a directory of several processes' files (summed, per process, the state
 * of each writer), and its errors for a missing file, a bad argument and
 * what is not a stats file (/dev/zero, a fifo, 1.2 MB, /etc/passwd, other
 * Prometheus text).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtest.h"

static char dir[64];
static char stats_path[128];

/* Writes a stats file of one shim instance: start time, write time, put and get counters. */
static void write_stats(double start, double wrote, double puts, double put_batches, double gets,
                        double enoent)
{
    FILE *f = fopen(stats_path, "w");
    assert_non_null(f);
    fprintf(f,
            "# HELP kvbatch_info The shim's settings.\n"
            "kvbatch_info{policy=\"adaptive\",put_mode=\"sync\"} 1\n"
            "kvbatch_start_time_seconds %.0f\n"
            "kvbatch_write_time_seconds %.0f\n"
            "kvbatch_ops_total{op=\"put\"} %.0f\n"
            "kvbatch_ops_total{op=\"get\"} %.0f\n"
            "kvbatch_ops_total{op=\"exists\"} 0\n"
            "kvbatch_batches_total{op=\"put\"} %.0f\n"
            "kvbatch_batches_total{op=\"get\"} 0\n"
            "kvbatch_direct_ops_total{op=\"get\"} %.0f\n"
            "kvbatch_bytes_total{op=\"put\"} %.0f\n"
            "kvbatch_errors_total{op=\"get\",status=\"ENOENT\"} %.0f\n"
            "kvbatch_errors_total{op=\"put\",status=\"EIO\"} 2\n"
            "kvbatch_flush_total{reason=\"window\"} %.0f\n"
            "kvbatch_batch_ops_sum %.0f\n"
            "kvbatch_op_latency_seconds_bucket{le=\"0.0001\"} %.0f\n"
            "kvbatch_op_latency_seconds_bucket{le=\"+Inf\"} %.0f\n"
            "kvbatch_op_latency_seconds_sum %.6f\n"
            "kvbatch_op_latency_seconds_count %.0f\n"
            "kvbatch_queued_ops 3\n"
            "kvbatch_transport_total{server=\"127.0.0.1:7070\",counter=\"frames_sent\"} %.0f\n",
            start, wrote, puts, gets, put_batches, gets, puts * 4096, enoent, put_batches, puts,
            puts, puts, puts * 50e-6, puts, puts / 10);
    assert_int_equal(fclose(f), 0);
}

/*
 * Runs kvbatch-stat with args (one string, shell words), bounded by 20 s
 * (timeout(1): exit status 124 when it did not end); its stdout+stderr in *out.
 */
static int stat_run(const char *args, char **out)
{
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof(cmd), "XDG_RUNTIME_DIR=%s timeout 20 %s %s 2>&1", dir,
             kvt_build_path("bin/kvbatch-stat"), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 65535, p);
    buf[n] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The op row of the summary: "put  OPS  OPS/S  BATCHES ..." */
static void op_row(const char *out, const char *op, double *ops, double *rate, double *batches)
{
    char pre[16];
    snprintf(pre, sizeof(pre), "\n%s ", op);
    const char *p = strstr(out, pre);
    assert_non_null(p);
    assert_int_equal(sscanf(p + strlen(pre), "%lf %lf %lf", ops, rate, batches), 3);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kvb-stat-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(stats_path, sizeof(stats_path), "%s/kvb.prom", dir);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_summary_then_since_last_look(void **state)
{
    char args[256], *out;
    double ops, rate, batches;
    (void)state;
    /* 10 s of activity: 1000 puts in 100 batches, 500 gets (40 misses). */
    write_stats(1000, 1010, 1000, 100, 500, 40);
    snprintf(args, sizeof(args), "%s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "since the shim started"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 1000 && rate == 100 && batches == 100);
    op_row(out, "get", &ops, &rate, &batches);
    assert_true(ops == 500 && rate == 50);
    assert_non_null(strstr(out, "{op=\"get\",status=\"ENOENT\"}=40"));
    assert_non_null(strstr(out, "{op=\"put\",status=\"EIO\"}=2"));
    assert_non_null(strstr(out, "transport: frames_sent 100 (0.067/op)"));
    free(out);

    /* 10 s later: 3000 puts in 200 batches; the look covers only the last 10 s. */
    write_stats(1000, 1020, 3000, 200, 500, 40);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "since the last look"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 2000 && rate == 200 && batches == 100);
    op_row(out, "get", &ops, &rate, &batches);
    assert_true(ops == 0 && rate == 0);
    assert_non_null(strstr(out, "errors by status: none")); /* EIO=2 was before the last look */
    assert_non_null(strstr(out, "transport: frames_sent 200 (0.100/op)"));
    free(out);

    /* -s: since start, whatever the last look was. */
    snprintf(args, sizeof(args), "-s %s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "since the shim started"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 3000 && rate == 150);
    free(out);

    /* A new shim instance (another start time) is never diffed against the old one. */
    write_stats(2000, 2004, 40, 4, 0, 0);
    snprintf(args, sizeof(args), "%s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "since the shim started"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 40 && rate == 10);
    free(out);
}

/* A file of two backends (the shim's samples carry backend="..."): summed, or one with -b. */
static void test_backends_summed_or_one(void **state)
{
    char args[256], *out;
    double ops, rate, batches;
    (void)state;
    FILE *f = fopen(stats_path, "w");
    assert_non_null(f);
    fprintf(f, "kvbatch_info{policy=\"fixed\",put_mode=\"sync\"} 1\n"
               "kvbatch_start_time_seconds 2000\n"
               "kvbatch_write_time_seconds 2010\n"
               "kvbatch_ops_total{backend=\"kvs\",op=\"put\"} 100\n"
               "kvbatch_ops_total{backend=\"mooncake\",op=\"put\"} 900\n"
               "kvbatch_batches_total{backend=\"kvs\",op=\"put\"} 50\n"
               "kvbatch_batches_total{backend=\"mooncake\",op=\"put\"} 50\n"
               "kvbatch_flush_total{backend=\"mooncake\",reason=\"group\"} 7\n"
               "kvbatch_queued_ops{backend=\"kvs\"} 1\n"
               "kvbatch_queued_ops{backend=\"mooncake\"} 2\n");
    assert_int_equal(fclose(f), 0);
    snprintf(args, sizeof(args), "-s %s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "backends: kvs mooncake\n"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 1000 && rate == 100 && batches == 100);
    assert_non_null(strstr(out, "group 7"));
    assert_non_null(strstr(out, "now: 3 ops queued"));
    free(out);
    snprintf(args, sizeof(args), "-s -b mooncake %s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "backends: mooncake\n"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 900 && batches == 50);
    assert_non_null(strstr(out, "now: 2 ops queued"));
    free(out);
}

static void test_json_and_interval(void **state)
{
    char args[256], *out;
    (void)state;
    write_stats(1000, 1010, 1000, 100, 500, 40);
    snprintf(args, sizeof(args), "--json %s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "\"put\":{\"ops\":1000,\"batches\":100,\"ops_per_s\":100,"));
    assert_non_null(strstr(out, "\"not_found\":40"));
    free(out);
    /* The file is not rewritten during the interval: every rate is 0. */
    snprintf(args, sizeof(args), "-w 0.05 -n 2 %s", stats_path);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "put/s"));
    int lines = 0;
    for (const char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 3); /* header + 2 */
    free(out);
}

static void test_bad_inputs(void **state)
{
    char args[256], *out;
    (void)state;
    snprintf(args, sizeof(args), "%s/absent.prom", dir);
    assert_int_equal(stat_run(args, &out), 1);
    assert_non_null(strstr(out, "cannot read"));
    free(out);
    snprintf(args, sizeof(args), "-w soon %s", stats_path);
    assert_int_equal(stat_run(args, &out), 2);
    assert_non_null(strstr(out, "kvbatch-stat: bad -w 'soon' (accepted: seconds in (0, 86400])"));
    free(out);
    snprintf(args, sizeof(args), "-w 1 -n 0 %s", stats_path);
    assert_int_equal(stat_run(args, &out), 2);
    assert_non_null(strstr(out, "kvbatch-stat: bad -n '0' (accepted: 1..1000000000)"));
    free(out);
    assert_int_equal(stat_run("", &out), 2);
    assert_non_null(strstr(out, "kvbatch-stat: no FILE given"));
    assert_non_null(strstr(out, "usage:"));
    free(out);
    assert_int_equal(stat_run("-x", &out), 2);
    assert_non_null(strstr(out, "kvbatch-stat: unknown option '-x'"));
    free(out);
}

/*
 * What is not a stats file is refused at once, never read without end:
 * /dev/zero (endless, no newline), a fifo with no writer (its open would
 * wait), a regular file over 1 MiB.
 */
static void test_not_a_stats_file(void **state)
{
    char args[256], path[160], *out;
    (void)state;
    assert_int_equal(stat_run("/dev/zero", &out), 1);
    assert_non_null(strstr(out, "kvbatch-stat: cannot read /dev/zero: not a regular file"));
    free(out);
    snprintf(path, sizeof(path), "%s/fifo.prom", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    snprintf(args, sizeof(args), "-s %s", path);
    assert_int_equal(stat_run(args, &out), 1);
    assert_non_null(strstr(out, "not a regular file"));
    free(out);
    unlink(path);
    snprintf(path, sizeof(path), "%s/big.prom", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 40000; i++) /* 40000 samples of 30 bytes: 1.2 MB */
        fprintf(f, "kvbatch_queued_ops%-10d 1\n", i);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(stat_run(path, &out), 1);
    assert_non_null(strstr(out, "larger than a stats file can be (1 MiB)"));
    free(out);
    unlink(path);
}

/* Writes a stats file of process pid as the shim does: pid and backend labels, HELP lines. */
static void write_proc(const char *path, long pid, double start, double wrote, double puts,
                       double batches, double put_bytes, int exited)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "# HELP kvbatch_info The shim's mode.\n# TYPE kvbatch_info gauge\n"
            "kvbatch_info{pid=\"%ld\",policy=\"auto\",put_mode=\"sync\",passthrough=\"0\"} 1\n"
            "kvbatch_setting_stats_interval_seconds{pid=\"%ld\"} 1\n"
            "kvbatch_start_time_seconds{pid=\"%ld\"} %.3f\n"
            "kvbatch_write_time_seconds{pid=\"%ld\"} %.3f\n"
            "kvbatch_exited{pid=\"%ld\"} %d\n"
            "# HELP kvbatch_ops_total Calls.\n# TYPE kvbatch_ops_total counter\n"
            "kvbatch_ops_total{pid=\"%ld\",backend=\"kvs\",op=\"put\"} %.0f\n"
            "kvbatch_batches_total{pid=\"%ld\",backend=\"kvs\",op=\"put\"} %.0f\n"
            "kvbatch_bytes_total{pid=\"%ld\",backend=\"kvs\",op=\"put\"} %.0f\n"
            "kvbatch_flush_total{pid=\"%ld\",backend=\"kvs\",reason=\"idle\"} %.0f\n"
            "kvbatch_queued_ops{pid=\"%ld\",backend=\"kvs\"} 1\n"
            "kvbatch_window_seconds{pid=\"%ld\",backend=\"kvs\",batcher=\"0\"} 5e-05\n"
            "kvbatch_max_inflight{pid=\"%ld\",backend=\"kvs\",batcher=\"0\"} 4\n"
            "kvbatch_auto_levels{pid=\"%ld\",backend=\"kvs\",batcher=\"0\"} 4\n"
            "kvbatch_auto_level{pid=\"%ld\",backend=\"kvs\",batcher=\"0\"} 1\n"
            "kvbatch_auto_reason{pid=\"%ld\",backend=\"kvs\",batcher=\"0\",reason=\"better\"} 1\n"
            "kvbatch_max_inflight{pid=\"%ld\",backend=\"kvs\",batcher=\"1\"} 2\n"
            "kvbatch_window_seconds{pid=\"%ld\",backend=\"kvs\",batcher=\"1\"} 0\n",
            pid, pid, pid, start, pid, wrote, pid, exited, pid, puts, pid, batches, pid, put_bytes,
            pid, batches, pid, pid, pid, pid, pid, pid, pid, pid);
    assert_int_equal(fclose(f), 0);
}

/* A pid that no process has: a child that has exited and been reaped. */
static long dead_pid(void)
{
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) _exit(0);
    assert_int_equal(waitpid(p, NULL, 0), p);
    return (long)p;
}

/*
 * A directory of several processes' files (one is not a stats file): each
 * file's counters summed, each file's rate over its own span summed, each
 * batcher's setting under its process, -p's rows with the writer's state,
 * and a note for the writer that exited and the one gone without a last write.
 */
static void test_directory_of_processes(void **state)
{
    char sub[128], path[192], args[256], *out;
    double ops, rate, batches;
    (void)state;
    double now = (double)time(NULL);
    snprintf(sub, sizeof(sub), "%s/multi", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    /* This process (running): 1000 puts in 10 s. An exited one: 3000 in 30 s. A dead one. */
    long me = (long)getpid(), gone = dead_pid();
    snprintf(path, sizeof(path), "%s/kvb-%ld.prom", sub, me);
    write_proc(path, me, now - 10, now, 1000, 100, 4096000, 0);
    snprintf(path, sizeof(path), "%s/kvb-1.prom", sub);
    write_proc(path, 1, now - 40, now - 10, 3000, 100, 16681978000.0, 1);
    snprintf(path, sizeof(path), "%s/kvb-%ld.prom", sub, gone);
    write_proc(path, gone, now - 20, now - 15, 500, 50, 0, 0);
    snprintf(path, sizeof(path), "%s/apt.prom", sub); /* node_exporter's directory has others */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("apt_upgrades_pending{origin=\"Debian\"} 3\n", f);
    fclose(f);

    snprintf(args, sizeof(args), "-s -p %s", sub);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "3 files (1 running, 1 exited, 1 gone, 0 stale), summed"));
    assert_non_null(strstr(out, "1 *.prom file(s) skipped: not kvbatch stats files"));
    op_row(out, "put", &ops, &rate, &batches);
    assert_true(ops == 4500 && batches == 250);
    assert_true(rate == 100 + 100 + 100); /* 1000/10 s + 3000/30 s + 500/5 s */
    char want[256];
    snprintf(want, sizeof(want),
             "pid %ld batcher kvs/0: window 50.0us, max_inflight 4 (auto: level 1 of 0..3", me);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "pid %ld batcher kvs/1: window 0.0us, max_inflight 2\n", me);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "now: 3 ops queued"));
    snprintf(want, sizeof(want), "\n%-8ld %-8s", me, "running");
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\n1        exited  "));
    assert_non_null(strstr(out, "note: pid 1 exited 10s ago"));
    snprintf(want, sizeof(want), "note: pid %ld is gone without its exit write", gone);
    assert_non_null(strstr(out, want));
    free(out);

    /* --json: every process, integers as integers (a byte count past 2^32 too). */
    snprintf(args, sizeof(args), "--json %s", sub);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "\"files\":3,"));
    assert_non_null(strstr(out, "\"bytes\":16686074000,")); /* the sum */
    assert_non_null(strstr(out, "\"bytes\":16681978000,"));
    assert_non_null(strstr(out, "\"pid\":1,"));
    assert_non_null(strstr(out, "\"state\":\"gone\""));
    assert_non_null(strstr(out, "{\"batcher\":\"kvs/1\",\"window_s\":0,\"max_inflight\":2}"));
    assert_null(strstr(out, "e+"));
    free(out);

    /* An empty directory is said to be one. */
    snprintf(path, sizeof(path), "%s/empty", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(stat_run(path, &out), 1);
    assert_non_null(strstr(out, "no kvbatch stats file in"));
    free(out);
    rmdir(path);

    /* -w on the file of a writer that exited: its rows are 0, and a note says why. */
    snprintf(args, sizeof(args), "-w 0.05 -n 1 %s/kvb-1.prom", sub);
    assert_int_equal(stat_run(args, &out), 0);
    assert_non_null(strstr(out, "nowait%"));
    assert_non_null(strstr(out, "note: pid 1 exited"));
    free(out);

    /* --prune: the exited writer's file and the dead one's go; the running one and apt.prom stay.
     */
    snprintf(args, sizeof(args), "--prune %s", sub);
    assert_int_equal(stat_run(args, &out), 0);
    snprintf(want, sizeof(want), "removed %s/kvb-1.prom (pid 1 exited)", sub);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "removed %s/kvb-%ld.prom (pid %ld gone)", sub, gone, gone);
    assert_non_null(strstr(out, want));
    free(out);
    snprintf(path, sizeof(path), "%s/kvb-%ld.prom", sub, me);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/apt.prom", sub);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/kvb-1.prom", sub);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(args, sizeof(args), "rm -r %s", sub);
    assert_int_equal(system(args), 0);
}

/* A file that is not the shim's (a passwd file, any other Prometheus text) is refused. */
static void test_not_kvbatch_text(void **state)
{
    char path[160], *out;
    (void)state;
    assert_int_equal(stat_run("/etc/passwd", &out), 1);
    assert_non_null(strstr(out,
                           "kvbatch-stat: /etc/passwd is not a kvbatch stats file (line 1 is not a "
                           "Prometheus sample)"));
    free(out);
    snprintf(path, sizeof(path), "%s/other.prom", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# HELP up Up.\nup 1\n", f);
    fclose(f);
    assert_int_equal(stat_run(path, &out), 1);
    assert_non_null(strstr(out, "is not a kvbatch stats file (no kvbatch_start_time_seconds"));
    free(out);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_then_since_last_look),
        cmocka_unit_test(test_backends_summed_or_one),
        cmocka_unit_test(test_json_and_interval),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_not_a_stats_file),
        cmocka_unit_test(test_directory_of_processes),
        cmocka_unit_test(test_not_kvbatch_text),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

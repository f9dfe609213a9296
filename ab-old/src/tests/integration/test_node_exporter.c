/*
 * test_node_exporter.c - two processes under the shim write their stats
 * files into one directory (KVBATCH_STATS_FILE=DIR/kvb-%p.prom) while Debian's
 * prometheus-node-exporter, on a free 127.0.0.1 port, scrapes that
 * directory with its textfile collector: every series of both files is in
 * the scrape (their pid labels keep them apart), node_textfile_scrape_error
 * is 0, and the scrape passes promtool check metrics. With
 * KVBATCH_STATS_AT_EXIT=remove the files are gone once the processes exit.
 * Skipped when the package is not installed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpreload.h"
#include "kvtest.h"

#define NODE_EXPORTER "/usr/bin/prometheus-node-exporter"
#define MAX_SERIES    4096

extern char **environ;

static struct kvt_server srv;
static char dir[64];
static pid_t workload[2], exporter; /* ended at teardown if a failed check left them */

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts argv with the environment plus extra (NULL-ended "NAME=value"); its pid. */
static pid_t spawn(char *const argv[], const char *const extra[], const char *out_path)
{
    char *env[512];
    int n = 0;
    for (char **e = environ; *e && n < 400; e++)
        env[n++] = *e;
    for (const char *const *e = extra; e && *e; e++)
        env[n++] = (char *)*e;
    env[n] = NULL;
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, out_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    return pid;
}

/* A free TCP port on 127.0.0.1 (bound once and let go). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* GET /metrics from 127.0.0.1:port; the body (malloc'ed), or NULL if nothing listens yet. */
static char *scrape(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return NULL;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    size_t cap = 1 << 22, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    ssize_t r;
    while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (!strstr(buf, " 200 ") || !body) {
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

/*
 * A sample's series as "name{a="1",b="2"}" with its labels sorted by name (as
 * the scrape has them). The auto controller's reason is a label whose value
 * can change between reading a file and the scrape: it reads as "*".
 */
static void series_of(const char *line, char *out, size_t cap)
{
    size_t eol = strcspn(line, "\n");
    const char *brace = memchr(line, '{', eol);
    if (!brace) {
        snprintf(out, cap, "%.*s", (int)strcspn(line, " \n"), line);
        return;
    }
    char labels[64][128];
    int n = 0;
    const char *p = brace + 1;
    bool auto_reason = strncmp(line, "kvbatch_auto_reason{", 20) == 0;
    while (*p && *p != '}' && n < 64) {
        const char *q = strchr(p, '"');
        q = q ? strchr(q + 1, '"') : NULL;
        if (!q) fail_msg("not a label list: %.*s", (int)eol, line);
        if (!q) break;
        if (strncmp(p, "le=\"", 4) == 0) /* a bound as a number: 1048576 = 1.048576e+06 */
            snprintf(labels[n++], sizeof(labels[0]), "le=\"%.9g\"", strtod(p + 4, NULL));
        else if (auto_reason && strncmp(p, "reason=\"", 8) == 0) /* it may move meanwhile */
            snprintf(labels[n++], sizeof(labels[0]), "reason=\"*\"");
        else
            snprintf(labels[n++], sizeof(labels[0]), "%.*s", (int)(q + 1 - p), p);
        p = q + 1;
        if (*p == ',') p++;
    }
    for (int i = 1; i < n; i++) /* insertion sort by label name */
        for (int j = i; j > 0 && strcmp(labels[j - 1], labels[j]) > 0; j--) {
            char t[128];
            memcpy(t, labels[j], sizeof(t));
            memcpy(labels[j], labels[j - 1], sizeof(t));
            memcpy(labels[j - 1], t, sizeof(t));
        }
    size_t o = (size_t)snprintf(out, cap, "%.*s{", (int)(brace - line), line);
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? "," : "", labels[i]);
    if (o < cap) snprintf(out + o, cap - o, "}");
}

/* Every series of text (sample lines), into set; how many. */
static int series_set(const char *text, char (*set)[256], int max)
{
    int n = 0;
    for (const char *l = text; l && *l && n < max; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (*l != '#' && *l != '\n') series_of(l, set[n++], sizeof(set[0]));
    return n;
}

static int count_prom_files(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".prom") == 0) n++;
    }
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kvb-ne-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    return kvt_server_start(&srv, 0, "--memory 64M");
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    pid_t left[] = {workload[0], workload[1], exporter};
    for (int i = 0; i < 3; i++)
        if (left[i] > 0) {
            kill(left[i], SIGTERM);
            waitpid(left[i], NULL, 0);
        }
    kvt_server_stop(&srv);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_two_processes_scraped_by_node_exporter(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("the workloads run over tcp");
    if (access(NODE_EXPORTER, X_OK) != 0) {
        fprintf(stderr, "SKIP: %s is not installed (Debian package prometheus-node-exporter)\n",
                NODE_EXPORTER);
        skip();
    }
    char preload[PATH_MAX + 64], stats[128], kvbench[PATH_MAX], log[128], nelog[128];
    kvt_preload_env(NULL, preload, sizeof(preload));
    snprintf(stats, sizeof(stats), "KVBATCH_STATS_FILE=%s/kvb-%%p.prom", dir);
    snprintf(log, sizeof(log), "%s/workload.log", dir);
    snprintf(nelog, sizeof(nelog), "%s/node_exporter.log", dir);
    kvt_abs_build("bin/kvbench", kvbench, sizeof(kvbench));
    const char *env[] = {preload,
                         stats,
                         "KVBATCH_STATS_INTERVAL_MS=50",
                         "KVBATCH_STATS_AT_EXIT=remove",
                         "KVSTORE_TRANSPORT=tcp",
                         NULL};
    char *wl[] = {kvbench,  "put", "--servers", srv.addr, "--threads", "2",
                  "--size", "1K",  "--seconds", "6",      NULL};
    pid_t *w = workload;
    w[0] = spawn(wl, env, log);
    w[1] = spawn(wl, env, log);
    for (int i = 0; i < 200 && count_prom_files() < 2; i++) /* bounded: 10 s */
        nap_ms(50);
    assert_int_equal(count_prom_files(), 2);

    int port = 0;
    pid_t ne = -1;
    char *text = NULL;
    for (int attempt = 0; attempt < 3 && !text; attempt++) {
        char listen[64], textdir[128];
        port = free_port();
        snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", port);
        snprintf(textdir, sizeof(textdir), "--collector.textfile.directory=%s", dir);
        char *argv[] = {NODE_EXPORTER,          listen,  "--collector.disable-defaults",
                        "--collector.textfile", textdir, NULL};
        exporter = ne = spawn(argv, NULL, nelog);
        for (int i = 0; i < 100 && !text; i++) { /* bounded: 5 s */
            nap_ms(50);
            text = scrape(port);
        }
        if (!text) {
            kill(ne, SIGTERM);
            waitpid(ne, NULL, 0);
            exporter = 0;
        }
    }
    assert_non_null(text);

    /* Both files as they are now, then a scrape: every series of each is in it. */
    char path[160];
    static char want[2][MAX_SERIES][256], got[4 * MAX_SERIES][256];
    int nwant[2];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/kvb-%d.prom", dir, (int)w[i]);
        char *f = kvt_slurp(path);
        assert_non_null(f);
        nwant[i] = series_set(f, want[i], MAX_SERIES);
        assert_true(nwant[i] > 100);
        free(f);
    }
    free(text);
    text = scrape(port);
    assert_non_null(text);
    int ngot = series_set(text, got, 4 * MAX_SERIES);
    for (int i = 0; i < 2; i++) {
        char pid_label[32];
        snprintf(pid_label, sizeof(pid_label), "pid=\"%d\"", (int)w[i]);
        for (int k = 0; k < nwant[i]; k++) {
            assert_non_null(strstr(want[i][k], pid_label));
            int found = 0;
            for (int j = 0; j < ngot && !found; j++)
                found = strcmp(got[j], want[i][k]) == 0;
            if (!found) fail_msg("pid %d: series %s is not in the scrape", (int)w[i], want[i][k]);
        }
    }
    assert_non_null(strstr(text, "\nnode_textfile_scrape_error 0\n"));
    snprintf(path, sizeof(path), "%s/scrape.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    if (access("/usr/bin/promtool", X_OK) == 0) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s", path);
        assert_int_equal(system(cmd), 0);
    }
    unlink(path);
    free(text);

    /* KVBATCH_STATS_AT_EXIT=remove: once both exit, no file is left to export. */
    for (int i = 0; i < 2; i++) {
        int st;
        assert_int_equal(waitpid(w[i], &st, 0), w[i]);
        w[i] = 0;
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(count_prom_files(), 0);
    text = scrape(port);
    assert_non_null(text);
    assert_null(strstr(text, "\nkvbatch_"));
    assert_non_null(strstr(text, "\nnode_textfile_scrape_error 0\n"));
    free(text);
    kill(ne, SIGTERM);
    waitpid(ne, NULL, 0);
    exporter = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes_scraped_by_node_exporter),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_kvs_cli.c - kvs-cli against a real kvstored: put from an argument and
 * from standard input (binary, 1 MiB), get writes the stored bytes exactly,
 * exists/remove/remove-matching print and exit by result, every failure has
 * its own exit status and one line naming the key and the reason (no server,
 * a value too large), stats passes the STATS text, info groups it (the
 * server's version, pid and RSS, items, slab classes) and shows only the
 * sections asked for. Each child runs under timeout; kvstored binds
 * 127.0.0.1.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"

static struct kvt_server server;
static char tmpdir[64];
static char out[256 * 1024], err[8192];

/* Reads all of path into buf (NUL-terminated); its length. */
static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        buf[0] = '\0';
        return 0;
    }
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return n;
}

/*
 * Runs `[STDIN_CMD |] kvs-cli --server ADDR ARGS` (a shell line), stdout into
 * out, stderr into err; returns the exit status, and the length of stdout in
 * *len when len is not NULL.
 */
static int cli(const char *stdin_cmd, const char *args, size_t *len)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s%s timeout -k 5 60 %s --server %s %s >%s/out 2>%s/err",
             stdin_cmd ? stdin_cmd : "", stdin_cmd ? " |" : "", kvt_build_path("bin/kvs-cli"),
             server.addr, args, tmpdir, tmpdir);
    int st = system(cmd);
    char path[128];
    snprintf(path, sizeof(path), "%s/out", tmpdir);
    size_t n = slurp(path, out, sizeof(out));
    if (len) *len = n;
    snprintf(path, sizeof(path), "%s/err", tmpdir);
    slurp(path, err, sizeof(err));
    if (err[0]) fprintf(stderr, "kvs-cli %s: stderr: %s", args, err);
    assert_true(st >= 0 && WIFEXITED(st));
    return WEXITSTATUS(st);
}

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/kvb-cli-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return kvt_server_start(&server, 0, "--memory 16M --max-object 2M");
}

static int teardown(void **state)
{
    (void)state;
    kvt_server_stop(&server);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_put_get_from_argument_and_stdin(void **state)
{
    (void)state;
    size_t n;
    assert_int_equal(cli(NULL, "put cli.a hello", NULL), 0);
    assert_int_equal(cli(NULL, "get cli.a", &n), 0);
    assert_int_equal(n, 5);
    assert_memory_equal(out, "hello", 5);
    /* a value that looks like an option is a value */
    assert_int_equal(cli(NULL, "put cli.dash -5", NULL), 0);
    assert_int_equal(cli(NULL, "get cli.dash", &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(out, "-5", 2);

    /* 1 MiB of binary from stdin (with NUL bytes), back byte for byte */
    char cmd[512], src[128];
    snprintf(src, sizeof(src), "%s/value", tmpdir);
    snprintf(cmd, sizeof(cmd), "head -c 1048576 /dev/urandom > %s", src);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "cat %s", src);
    assert_int_equal(cli(cmd, "put cli.bin", NULL), 0);
    snprintf(cmd, sizeof(cmd), "timeout 60 %s --server %s get cli.bin | cmp -s - %s",
             kvt_build_path("bin/kvs-cli"), server.addr, src);
    assert_int_equal(system(cmd), 0);
    /* "-" is stdin too; an empty stdin stores an empty value */
    assert_int_equal(cli("printf ''", "put cli.empty -", NULL), 0);
    assert_int_equal(cli(NULL, "get cli.empty", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cli(NULL, "exists cli.empty", NULL), 0);
}

static void test_exit_status_by_result(void **state)
{
    (void)state;
    assert_int_equal(cli(NULL, "put cli.x 1", NULL), 0);
    assert_int_equal(cli(NULL, "get cli.missing", NULL), 1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "'cli.missing': not found"));
    assert_int_equal(cli(NULL, "exists cli.x cli.missing", NULL), 1);
    assert_string_equal(out, "1\n0\n");
    assert_int_equal(cli(NULL, "exists cli.x", NULL), 0);
    assert_string_equal(out, "1\n");
    assert_int_equal(cli(NULL, "del cli.x", NULL), 0);
    assert_int_equal(cli(NULL, "remove cli.x", NULL), 1);
    assert_int_equal(cli(NULL, "exists cli.x", NULL), 1);

    assert_int_equal(cli(NULL, "put cli.m1 a", NULL), 0);
    assert_int_equal(cli(NULL, "put cli.m2 b", NULL), 0);
    assert_int_equal(cli(NULL, "remove-matching '^cli\\.m[0-9]$'", NULL), 0);
    assert_string_equal(out, "2\n");
    assert_int_equal(cli(NULL, "exists cli.m1 cli.m2", NULL), 1);
    assert_string_equal(out, "0\n0\n");
}

static void test_failures_say_why(void **state)
{
    (void)state;
    /* over --max-object: refused, the key and the reason named */
    assert_int_equal(cli("head -c 3000000 /dev/zero", "put cli.big", NULL), 3);
    assert_non_null(strstr(err, "'cli.big'"));
    assert_non_null(strstr(err, kvs_strerror(-E2BIG)));
    /* usage */
    assert_int_equal(cli(NULL, "frobnicate", NULL), 2);
    assert_non_null(strstr(err, "unknown command 'frobnicate'"));
    assert_int_equal(cli(NULL, "get", NULL), 2);
    assert_int_equal(cli(NULL, "info nosuchsection", NULL), 2);
    assert_non_null(strstr(err, "unknown section 'nosuchsection'"));

    /* no server there: 3, and the reason (not "not found") */
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "KVSTORE_TRANSPORT=tcp KVSTORE_CONNECT_TIMEOUT_MS=2000 timeout 60 %s --server "
             "127.0.0.1:1 get cli.a 2>%s/err",
             kvt_build_path("bin/kvs-cli"), tmpdir);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
    snprintf(cmd, sizeof(cmd), "%s/err", tmpdir);
    slurp(cmd, err, sizeof(err));
    assert_non_null(strstr(err, kvs_strerror(-ECONNREFUSED)));
}

/* The value of "name:" on its own line of out, or NULL. */
static const char *info_value(const char *name, char *buf, size_t cap)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s:", name);
    const char *p = strstr(out, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, "\n");
    snprintf(buf, cap, "%.*s", (int)n, p);
    return buf;
}

static void test_stats_and_info(void **state)
{
    (void)state;
    assert_int_equal(cli(NULL, "remove-matching ^", NULL), 0);
    for (int i = 0; i < 3; i++) {
        char args[64];
        snprintf(args, sizeof(args), "put cli.i%d 0123456789abcdef", i);
        assert_int_equal(cli(NULL, args, NULL), 0);
    }
    assert_int_equal(cli(NULL, "stats", NULL), 0);
    char head[128];
    snprintf(head, sizeof(head), "# server %s\n", server.name);
    assert_memory_equal(out, head, strlen(head));
    assert_non_null(strstr(out, "\nitems 3\n"));

    assert_int_equal(cli(NULL, "info", NULL), 0);
    char v[128];
    assert_memory_equal(out, "# Server\n", 9);
    assert_non_null(info_value("server", v, sizeof(v)));
    assert_string_equal(v, server.name);
    assert_non_null(info_value("kvstored_version", v, sizeof(v)));
    assert_string_equal(v, kvs_version());
    assert_non_null(info_value("process_id", v, sizeof(v)));
    assert_int_equal(atoll(v), server.pid);
    assert_non_null(info_value("rss", v, sizeof(v)));
    assert_true(atoll(v) > 0);
    assert_non_null(info_value("rss_human", v, sizeof(v)));
    assert_non_null(info_value("uptime_in_seconds", v, sizeof(v)));
    assert_non_null(info_value("items", v, sizeof(v)));
    assert_string_equal(v, "3");
    assert_non_null(info_value("pool_memory", v, sizeof(v)));
    assert_string_equal(v, "16777216");
    assert_non_null(info_value("pool_memory_human", v, sizeof(v)));
    assert_string_equal(v, "16.00M");
    assert_non_null(info_value("connected_clients", v, sizeof(v)));
    assert_non_null(info_value("op_put", v, sizeof(v)));
    /* the three 16-byte values share one slab class */
    const char *cls = strstr(out, "\n# Classes\nclass_");
    assert_non_null(cls);
    assert_non_null(strstr(cls, ",items=3,"));
    for (const char *s = "# Clients\n# Memory\n# Operations\n# Errors\n# Client\n"; *s;) {
        size_t n = strcspn(s, "\n");
        char sec[32];
        snprintf(sec, sizeof(sec), "\n%.*s\n", (int)n, s);
        assert_non_null(strstr(out, sec));
        s += n + 1;
    }
    /* the counters info knows are under their sections, not under Other */
    const char *other = strstr(out, "# Other\n");
    if (other) {
        assert_null(strstr(other, "\nitems:"));
        assert_null(strstr(other, "\nclass_"));
    }

    assert_int_equal(cli(NULL, "info memory", NULL), 0);
    assert_memory_equal(out, "# Memory\n", 9);
    assert_null(strstr(out, "# Server"));
    assert_null(strstr(out, "# Clients"));
    assert_non_null(strstr(out, "\nitems:3\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_from_argument_and_stdin),
        cmocka_unit_test(test_exit_status_by_result),
        cmocka_unit_test(test_failures_say_why),
        cmocka_unit_test(test_stats_and_info),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

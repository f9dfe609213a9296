/*
 * test_clients.c - kvstored's connection list through `kvs-cli clients` and
 * kvs_server_clients: a TCP client and a local-socket client, each after a
 * known number of puts and gets, are listed with their peer (the TCP
 * client's own address and port; the local one's pid and uid) and with
 * exactly the frames, keys and bytes they moved; kvs-cli's own connection
 * too; a FIELD=VALUE filter keeps only the matching lines; a client that
 * closes leaves the list; a bad argument exits 2 with a message. kvstored
 * binds 127.0.0.1 and its socket lives in a private directory; every wait
 * is bounded. (The bound of the list, 1024 connections, is test_clients in
 * tests/unit: that many sockets would exceed a test's descriptors.)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "parse.h"

static struct kvt_server server;
static char dir[64], tcp_url[96], unix_url[160];
static char out[256 * 1024], err[8192];

/* Reads all of path into buf (NUL-terminated). */
static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    buf[0] = '\0';
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs `kvs-cli --server tcp://... ARGS`: stdout into out, stderr into err; its exit status. */
static int cli(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "timeout -k 5 60 %s --server %s %s >%s/out 2>%s/err",
             kvt_build_path("bin/kvs-cli"), tcp_url, args, dir, dir);
    int st = system(cmd);
    char path[128];
    snprintf(path, sizeof(path), "%s/out", dir);
    slurp(path, out, sizeof(out));
    snprintf(path, sizeof(path), "%s/err", dir);
    slurp(path, err, sizeof(err));
    if (err[0]) fprintf(stderr, "kvs-cli %s: stderr: %s", args, err);
    assert_true(st >= 0 && WIFEXITED(st));
    return WEXITSTATUS(st);
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/kvb-clients-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    char args[256];
    snprintf(args, sizeof(args), "--memory 16M --unix %s/kvs.sock", dir);
    if (kvt_server_start(&server, 0, args) < 0) return -1;
    snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", server.port);
    snprintf(unix_url, sizeof(unix_url), "unix://%s/kvs.sock", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kvt_server_stop(&server);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/*
 * This process's end of its one TCP connection to kvstored ("127.0.0.1:PORT",
 * as the server sees its peer), found among its descriptors; 0, or -1 if
 * there is none.
 */
static int own_tcp_peer(char *buf, size_t cap)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    for (struct dirent *e; found < 0 && (e = readdir(d));) {
        int fd = atoi(e->d_name);
        struct sockaddr_in peer = {0}, self = {0};
        socklen_t pl = sizeof(peer), sl = sizeof(self);
        if (e->d_name[0] == '.' || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 ||
            peer.sin_family != AF_INET || ntohs(peer.sin_port) != server.port ||
            getsockname(fd, (struct sockaddr *)&self, &sl) < 0)
            continue;
        if (kvs_format_sockaddr((struct sockaddr *)&self, sl, buf, cap) >= 0) found = 0;
    }
    closedir(d);
    return found;
}

/* The line of out holding needle (a static copy), or NULL. */
static const char *line_with(const char *needle)
{
    static char line[512];
    const char *p = strstr(out, needle);
    if (!p) return NULL;
    while (p > out && p[-1] != '\n')
        p--;
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    assert_true(n < sizeof(line));
    memcpy(line, p, n);
    line[n] = '\0';
    return line;
}

/* Field name's number in line. */
static unsigned long long field(const char *line, const char *name)
{
    char want[40];
    snprintf(want, sizeof(want), " %s=", name);
    const char *p = strstr(line, want);
    assert_non_null(p);
    return strtoull(p + strlen(want), NULL, 10);
}

static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        n += strncmp(p, prefix, pl) == 0;
    return n;
}

/* n puts of vlen-byte values and g gets, keys prefix0.. (2-byte keys: one letter, one digit). */
static void work(kvs_client *c, char prefix, int n, size_t vlen, int g)
{
    char key[3] = {prefix, '0', '\0'}, val[16], buf[64];
    memset(val, 'v', sizeof(val));
    for (int i = 0; i < n; i++) {
        key[1] = (char)('0' + i);
        assert_int_equal(kvs_put(c, key, val, vlen), 0);
    }
    for (int i = 0; i < g; i++) {
        key[1] = (char)('0' + i);
        assert_int_equal(kvs_get(c, key, buf, sizeof(buf)), (ssize_t)vlen);
    }
}

/* Wire bytes of HELLO, n PUTs of 2-byte keys and vlen-byte values, g GETs: in, then out. */
static unsigned long long wire_in(int n, size_t vlen, int g)
{
    return 24 + (unsigned long long)n * (24 + 8 + 2 + vlen) + (unsigned long long)g * (24 + 8 + 2);
}

static unsigned long long wire_out(int n, size_t vlen, int g)
{
    return 24 + 32 + (unsigned long long)n * (24 + 8) + (unsigned long long)g * (24 + 8 + vlen);
}

static void test_tcp_and_local_clients_listed_with_counters(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("checks a TCP peer's address and the local socket");
    /* Values in the socket, not in a shared region: the byte counts are the frames'. */
    setenv("KVSTORE_SHM_SIZE", "0", 1);
    kvs_client *a = kvs_open(tcp_url);
    kvs_client *b = kvs_open(unix_url);
    assert_non_null(a);
    assert_non_null(b);
    work(a, 'a', 3, 10, 2);
    work(b, 'b', 4, 7, 1);
    char addr[64];
    assert_int_equal(own_tcp_peer(addr, sizeof(addr)), 0);

    assert_int_equal(cli("clients"), 0);
    char head[160];
    snprintf(head, sizeof(head), "# server 127.0.0.1:%d\n", server.port);
    assert_int_equal(strncmp(out, head, strlen(head)), 0);
    /* a, b and kvs-cli's own connection */
    assert_int_equal(count_lines(out, "id="), 3);
    assert_non_null(strstr(out, "\n# listed 3 omitted 0\n"));

    char needle[128];
    snprintf(needle, sizeof(needle), " addr=%s transport=tcp ", addr);
    const char *la = line_with(needle);
    assert_non_null(la);
    assert_int_equal(field(la, "requests"), 1 + 3 + 2); /* HELLO, puts, gets */
    assert_int_equal(field(la, "keys_put"), 3);
    assert_int_equal(field(la, "keys_get"), 2);
    assert_int_equal(field(la, "bytes_in"), wire_in(3, 10, 2));
    assert_int_equal(field(la, "bytes_out"), wire_out(3, 10, 2));
    assert_int_equal(field(la, "reply_queue"), 0);
    assert_non_null(strstr(la, " auth=1"));

    snprintf(needle, sizeof(needle), " addr=unix transport=local pid=%d uid=%u ", (int)getpid(),
             (unsigned)getuid());
    const char *lb = line_with(needle);
    assert_non_null(lb);
    assert_int_equal(field(lb, "requests"), 1 + 4 + 1);
    assert_int_equal(field(lb, "keys_put"), 4);
    assert_int_equal(field(lb, "keys_get"), 1);
    assert_int_equal(field(lb, "bytes_in"), wire_in(4, 7, 1));
    assert_int_equal(field(lb, "bytes_out"), wire_out(4, 7, 1));

    /* kvs-cli itself: HELLO and this CLIENTS, over TCP from 127.0.0.1 */
    const char *lc = line_with(" requests=2 keys_put=0 keys_get=0 ");
    assert_non_null(lc);
    assert_non_null(strstr(lc, " addr=127.0.0.1:"));
    assert_non_null(strstr(lc, " transport=tcp "));

    /* Filters: only the lines matching every FIELD=VALUE; the comment lines stay. */
    assert_int_equal(cli("clients transport=local"), 0);
    assert_int_equal(count_lines(out, "id="), 1);
    assert_non_null(line_with(needle));
    assert_int_equal(cli("clients transport=tcp keys_put=3"), 0);
    assert_int_equal(count_lines(out, "id="), 1);
    snprintf(needle, sizeof(needle), " addr=%s ", addr);
    assert_non_null(line_with(needle));
    assert_int_equal(cli("clients transport=rdma"), 0);
    assert_int_equal(count_lines(out, "id="), 0);
    assert_non_null(strstr(out, "# listed "));

    /* The API: the same blocks, truncated to cap-1 and NUL-terminated, the whole length back. */
    char small[32];
    ssize_t n = kvs_server_clients(a, small, sizeof(small));
    assert_true(n > (ssize_t)sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(strncmp(small, head, strlen(head)), 0);
    assert_int_equal(kvs_server_clients(NULL, small, sizeof(small)), -EINVAL);

    kvs_close(a);
    kvs_close(b);
    unsetenv("KVSTORE_SHM_SIZE");
}

/* The line of a client that closed is gone (kvstored closes its side when it reads the EOF). */
static void test_closed_client_leaves_list(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("checks a TCP peer's address");
    kvs_client *a = kvs_open(tcp_url);
    assert_non_null(a);
    work(a, 'c', 1, 4, 0);
    char addr[64], needle[96];
    assert_int_equal(own_tcp_peer(addr, sizeof(addr)), 0);
    snprintf(needle, sizeof(needle), " addr=%s ", addr);
    assert_int_equal(cli("clients"), 0);
    assert_non_null(line_with(needle));
    kvs_close(a);
    int gone = 0;
    for (int i = 0; i < 50 && !gone; i++) {
        assert_int_equal(cli("clients"), 0);
        gone = line_with(needle) == NULL;
        if (!gone) usleep(100 * 1000);
    }
    assert_true(gone);
    assert_non_null(strstr(out, "# listed 1 omitted 0\n")); /* kvs-cli alone */
}

static void test_bad_argument_exit_2(void **state)
{
    (void)state;
    assert_int_equal(cli("clients bogus"), 2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "kvs-cli clients: 'bogus' is not FIELD=VALUE"));
    assert_int_equal(cli("clients color=red"), 2);
    assert_non_null(strstr(err, "'color=red'"));
    assert_int_equal(cli("clients =1"), 2);
    assert_non_null(strstr(err, "FIELD one of id, addr, transport"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_and_local_clients_listed_with_counters),
        cmocka_unit_test(test_closed_client_leaves_list),
        cmocka_unit_test(test_bad_argument_exit_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

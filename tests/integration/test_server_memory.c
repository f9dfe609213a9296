/*
 * test_server_memory.c - hostile peers against a real kvstored on 127.0.0.1,
 * and what they cost it, measured in its VmRSS (/proc/PID/status):
 *
 *   - peers that pipeline small requests and never read a reply (count-0
 *     PUTs, one-key EXISTS, unknown opcodes, HELLO): kvstored grows by at
 *     most its documented per-connection budget while they are connected,
 *     and gives the memory back once they are gone;
 *   - the same HELLO flood before AUTH (--auth-file): a far smaller budget;
 *   - PUTs whose values trickle in: each reservation expires after
 *     --put-timeout, is thrown away and counted, its connection closed;
 *   - --prefault: the whole pool resident at start, only what is touched
 *     without it.
 *
 * Every flood is bounded in bytes and stops when the server stops taking
 * input; every wait is bounded. The RSS bounds are not checked under a
 * sanitizer (SAN set), whose allocator keeps freed memory in quarantine;
 * the floods still run there. KVS_TEST_FLOOD_CONNS sets the number of
 * flooding connections (16).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtest.h"
#include "rawwire.h"
#include "wire.h"

#define KIB 1024ll
#define MIB (1024ll * 1024)

/* Connections per flood (KVS_TEST_FLOOD_CONNS overrides, for measuring). */
#define FLOOD_CONNS 16
/* Bytes one connection may send at most: far more than any budget takes. */
#define FLOOD_CAP (48 * MIB)
/* The flood is over once no connection could send for this long. */
#define QUIET_MS 500

/*
 * What one connection may make kvstored grow by while it does not read: the
 * documented budget (docs/server.md "Memory per connection") is 64 KiB of
 * read buffer + 1 MiB of reply heap + about 1 KiB of connection state; the
 * bound allows twice that for the allocator's rounding and RSS noise.
 */
#define BOUND_PER_CONN (2 * MIB)
/* Before AUTH: 2 KiB of read buffer + 4 KiB of reply heap + state. */
#define BOUND_PER_CONN_PREAUTH (64 * KIB)
/* What may stay after every flooding peer has gone. */
#define BOUND_AFTER (4 * MIB)

/*
 * Whether the RSS bounds are checked: not under a sanitizer, nor with
 * KVS_TEST_MEASURE_ONLY set (to print the figures of another kvstored:
 * KVS_TEST_BUILD=OLD_BUILD_DIR, as docs/stress.md does for "before").
 */
static int check_rss(void)
{
    const char *san = getenv("SAN");
    return !(san && *san) && !getenv("KVS_TEST_MEASURE_ONLY");
}

static int flood_conns(void)
{
    const char *v = getenv("KVS_TEST_FLOOD_CONNS");
    int n = v ? atoi(v) : FLOOD_CONNS;
    return n > 0 && n <= 1000 ? n : FLOOD_CONNS;
}

/* kvstored's VmRSS in bytes. */
static long long rss_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lld kB", &kib) == 1) break;
    fclose(f);
    assert_true(kib > 0);
    return kib * KIB;
}

/* kvstored's CPU time so far, in clock ticks (utime + stime of /proc/PID/stat). */
static long long cpu_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* fields after the command name */
    assert_non_null(p);
    long long utime = 0, stime = 0;
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime), 2);
    return utime + stime;
}

/*
 * VmRSS once kvstored has gone quiet: no CPU time used and RSS within
 * 64 KiB over 300 ms (at most 20 s: a slow machine may still be parsing).
 */
static long long settled_rss(pid_t pid)
{
    long long prev = rss_of(pid), cpu = cpu_of(pid);
    for (int i = 0; i < 66; i++) {
        usleep(300000);
        long long now = rss_of(pid), now_cpu = cpu_of(pid);
        if (llabs(now - prev) <= 64 * KIB && now_cpu == cpu) return now;
        prev = now;
        cpu = now_cpu;
    }
    return prev;
}

/* ---- replies and STATS over a control connection ---- */

static int read_reply(int fd, struct kvs_wire_hdr *h, uint8_t **body)
{
    uint8_t hb[KVS_WIRE_HDR_LEN];
    *body = NULL;
    if (kvt_raw_recv_all(fd, hb, sizeof(hb)) < 0) return -1;
    assert_int_equal(kvs_wire_hdr_decode(hb, h, UINT32_MAX), 0);
    *body = malloc(h->body_len + 1);
    assert_non_null(*body);
    assert_int_equal(kvt_raw_recv_all(fd, *body, h->body_len), 0);
    (*body)[h->body_len] = 0;
    return 0;
}

/* A counter from a STATS reply, or -1 if absent. */
static long long stat_value(int fd, const char *name)
{
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_STATS, 999);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    free(b.p);
    struct kvs_wire_hdr h = {0};
    uint8_t *body = NULL;
    assert_int_equal(read_reply(fd, &h, &body), 0);
    assert_int_equal(h.opcode, KVS_OP_STATS | KVS_OP_REPLY);
    long long v = -1;
    size_t nlen = strlen(name);
    for (char *line = (char *)body; line && *line;) {
        if (strncmp(line, name, nlen) == 0 && line[nlen] == ' ') {
            v = atoll(line + nlen + 1);
            break;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    free(body);
    return v;
}

/* Waits (at most 5 s) until kvstored counts want connections. */
static void wait_conns(int ctl, long long want)
{
    for (int i = 0; i < 100 && stat_value(ctl, "connections_current") != want; i++)
        usleep(50000);
    assert_int_equal(stat_value(ctl, "connections_current"), want);
}

/* ---- floods ---- */

/* One request frame of a flood: header (opcode, count) and an optional body. */
struct flood_kind {
    const char *name;
    uint8_t opcode;
    int exists_key; /* one EXISTS entry of key "k" */
};

static const struct flood_kind kinds[] = {
    {"count-0 PUT", KVS_OP_PUT, 0},
    {"one-key EXISTS", KVS_OP_EXISTS, 1},
    {"unknown opcode", 0x3f, 0},
    {"HELLO", KVS_OP_HELLO, 0},
};

/* 64 KiB or so of back-to-back copies of kind's frame (a whole number of frames). */
static size_t flood_buffer(const struct flood_kind *k, uint8_t **out)
{
    struct kvt_reqbuf one = {0};
    kvt_req_begin(&one, k->opcode, 7);
    if (k->exists_key) kvt_req_entry(&one, "k", 0, NULL);
    kvt_req_end(&one);
    size_t copies = (64 * 1024) / one.len;
    uint8_t *buf = malloc(copies * one.len);
    assert_non_null(buf);
    for (size_t i = 0; i < copies; i++)
        memcpy(buf + i * one.len, one.p, one.len);
    free(one.p);
    *out = buf;
    return copies * one.len;
}

/*
 * Sends copies of kind's frame on every fd, never reading, until none of
 * them could send anything for QUIET_MS while kvstored (pid) used no CPU
 * (it has stopped reading them: back-pressure), or each has sent
 * FLOOD_CAP, or a minute has passed. Returns bytes sent.
 */
static long long flood(pid_t pid, const int *fds, int n, const struct flood_kind *k)
{
    uint8_t *buf;
    size_t blen = flood_buffer(k, &buf);
    long long *sent = calloc((size_t)n, sizeof(*sent));
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    assert_non_null(sent);
    assert_non_null(pfd);
    long long total = 0;
    uint64_t give_up = kvs_now_ms() + 60000;
    while (kvs_now_ms() < give_up) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            pfd[i] = (struct pollfd){.fd = sent[i] < FLOOD_CAP ? fds[i] : -1, .events = POLLOUT};
            while (sent[i] < FLOOD_CAP) {
                size_t off = (size_t)(sent[i] % (long long)blen);
                ssize_t got = send(fds[i], buf + off, blen - off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (got < 0) {
                    assert_true(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
                    break;
                }
                sent[i] += got;
                total += got;
            }
            if (sent[i] < FLOOD_CAP) live++;
        }
        if (!live) break;
        long long cpu = cpu_of(pid);
        if (poll(pfd, (nfds_t)n, QUIET_MS) == 0 && cpu_of(pid) == cpu) break;
    }
    free(pfd);
    free(sent);
    free(buf);
    return total;
}

/*
 * Opens n connections to s, floods them with kind k, and returns kvstored's
 * growth per connection (RSS over base, over n) while they are connected;
 * then closes them and returns in *after what stayed over base once they
 * are gone. ctl is a control connection (STATS).
 */
static long long flood_growth(const struct kvt_server *s, int ctl, int n,
                              const struct flood_kind *k, long long base, long long *after)
{
    int *fds = calloc((size_t)n, sizeof(*fds));
    assert_non_null(fds);
    for (int i = 0; i < n; i++)
        fds[i] = kvt_raw_connect(s->port, 10);
    wait_conns(ctl, n + 1);
    long long bytes = flood(s->pid, fds, n, k);
    long long rss = settled_rss(s->pid);
    long long per = (rss - base) / n;
    print_message("%-16s %3d conns: sent %7.1f MiB, kvstored RSS %7.1f MiB (+%6.0f KiB per "
                  "connection)\n",
                  k->name, n, (double)bytes / MIB, (double)rss / MIB, (double)per / KIB);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    wait_conns(ctl, 1);
    *after = settled_rss(s->pid) - base;
    print_message("%-16s after they closed: +%.1f MiB over the baseline\n", k->name,
                  (double)*after / MIB);
    return per;
}

/*
 * Each kind of flood in turn against one kvstored: while connected, growth
 * per connection within its budget; after they close, RSS back near where
 * it started.
 */
static void test_unread_replies_bounded(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M"), 0);
    int ctl = kvt_raw_connect(s.port, 10);
    wait_conns(ctl, 1);
    long long base = settled_rss(s.pid);
    int n = flood_conns();
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        long long after;
        long long per = flood_growth(&s, ctl, n, &kinds[i], base, &after);
        if (!check_rss()) continue;
        assert_true(per < BOUND_PER_CONN);
        assert_true(after < BOUND_AFTER);
    }
    close(ctl);
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* HELLO floods from peers that never authenticate: the pre-AUTH budget. */
static void test_preauth_hello_flood_bounded(void **state)
{
    (void)state;
    char dir[] = "/tmp/kvs-mem-XXXXXX", file[64], args[128];
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/secret", dir);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "flood secret\n", 13), 13);
    close(fd);
    snprintf(args, sizeof(args), "--memory 16M --auth-file %s", file);
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    /* The control connection is not authenticated either: it asks nothing but waits. */
    long long base = settled_rss(s.pid);
    int n = 4 * flood_conns();
    int *fds = calloc((size_t)n, sizeof(*fds));
    assert_non_null(fds);
    for (int i = 0; i < n; i++)
        fds[i] = kvt_raw_connect(s.port, 10);
    long long bytes = flood(s.pid, fds, n, &kinds[3]);
    long long rss = settled_rss(s.pid);
    long long per = (rss - base) / n;
    print_message("HELLO before AUTH %3d conns: sent %.1f MiB, kvstored RSS %.1f MiB (+%.0f KiB "
                  "per connection)\n",
                  n, (double)bytes / MIB, (double)rss / MIB, (double)per / KIB);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    if (check_rss()) assert_true(per < BOUND_PER_CONN_PREAUTH);
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unlink(file);
    rmdir(dir);
}

/* ---- a PUT value that trickles in ---- */

#define SLOW_PEERS 4
#define SLOW_VALUE (15 * MIB)

/* One PUT entry's status from the reply on fd. */
static int32_t put_status(int fd)
{
    struct kvs_wire_hdr h = {0};
    uint8_t *body = NULL;
    assert_int_equal(read_reply(fd, &h, &body), 0);
    assert_int_equal(h.opcode, KVS_OP_PUT | KVS_OP_REPLY);
    struct kvs_wire_status st;
    assert_int_equal(kvs_wire_status_decode(body, KVS_OP_PUT, &st), 0);
    free(body);
    return st.status;
}

/*
 * SLOW_PEERS peers each declare a 15 MiB value and send it a byte every 50
 * ms: every byte is progress, so --stall-timeout (60 s) never fires, and
 * their four slots pin almost all of a 64 MiB pool. Under --put-timeout
 * 1 each slot is thrown away (put_expired) about a second after it was
 * reserved and its connection closed; then the pool is free again.
 */
static void test_trickled_put_expires(void **state)
{
    (void)state;
    struct kvt_server s;
    assert_int_equal(kvt_server_start(&s, 0, "--memory 64M --put-timeout 1"), 0);
    int ctl = kvt_raw_connect(s.port, 10);
    int fds[SLOW_PEERS];
    uint64_t t0 = kvs_now_ms();
    for (int i = 0; i < SLOW_PEERS; i++) {
        char key[16];
        snprintf(key, sizeof(key), "slow%d", i);
        struct kvt_reqbuf b = {0};
        kvt_req_begin(&b, KVS_OP_PUT, (uint64_t)i);
        kvt_req_entry(&b, key, SLOW_VALUE, NULL);
        kvt_req_end(&b);
        /* The header and the entry claim the value's bytes; none of them is sent yet. */
        kvs_put_u32(b.p + 12, (uint32_t)(b.len - KVS_WIRE_HDR_LEN) + SLOW_VALUE);
        fds[i] = kvt_raw_connect(s.port, 10);
        kvt_raw_send_all(fds[i], b.p, b.len);
        free(b.p);
    }
    for (int i = 0; i < 50 && stat_value(ctl, "pinned_items") != SLOW_PEERS; i++)
        usleep(20000);
    assert_int_equal(stat_value(ctl, "pinned_items"), SLOW_PEERS);
    assert_true(stat_value(ctl, "pages_free") < 8);

    /* Trickle until the server has closed every one of them (at most 6 s). */
    int open_peers = SLOW_PEERS;
    for (int round = 0; round < 120 && open_peers > 0; round++) {
        usleep(50000);
        for (int i = 0; i < SLOW_PEERS; i++) {
            if (fds[i] < 0) continue;
            char c = 'x', sink[64];
            ssize_t got = recv(fds[i], sink, sizeof(sink), MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno == ECONNRESET) ||
                send(fds[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                close(fds[i]);
                fds[i] = -1;
                open_peers--;
            }
        }
    }
    uint64_t took = kvs_now_ms() - t0;
    print_message("%d trickling peers closed after %llu ms\n", SLOW_PEERS,
                  (unsigned long long)took);
    assert_int_equal(open_peers, 0);
    assert_true(took >= 1000);
    assert_int_equal(stat_value(ctl, "put_expired"), SLOW_PEERS);
    assert_int_equal(stat_value(ctl, "pinned_items"), 0);
    assert_int_equal(stat_value(ctl, "items"), 0);
    assert_int_equal(stat_value(ctl, "connections_stalled"), 0);

    /* The pool is everyone's again: a 48 MiB value fits. */
    static uint8_t big[48 * MIB];
    struct kvt_reqbuf b = {0};
    kvt_req_put(&b, 9, "after", big, sizeof(big));
    kvt_raw_send_all(ctl, b.p, b.len);
    free(b.p);
    assert_int_equal(put_status(ctl), 0);
    close(ctl);
    int status = kvt_server_stop(&s);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* --prefault: the pool is resident before the first request; without it, only what is touched. */
static void test_prefault_takes_the_pool_at_start(void **state)
{
    (void)state;
    struct kvt_server lazy, eager;
    assert_int_equal(kvt_server_start(&lazy, 0, "--memory 64M"), 0);
    assert_int_equal(kvt_server_start(&eager, 0, "--memory 64M --prefault"), 0);
    assert_true(rss_of(eager.pid) >= 64 * MIB);
    if (check_rss()) assert_true(rss_of(lazy.pid) < 32 * MIB); /* a sanitizer's RSS is its own */
    kvs_client *c = kvs_open(eager.addr);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "pf", "v", 1), 0);
    char out[4];
    assert_int_equal(kvs_get(c, "pf", out, sizeof(out)), 1);
    kvs_close(c);
    kvt_server_stop(&eager);
    kvt_server_stop(&lazy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefault_takes_the_pool_at_start),
        cmocka_unit_test(test_unread_replies_bounded),
        cmocka_unit_test(test_preauth_hello_flood_bounded),
        cmocka_unit_test(test_trickled_put_expires),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_client_failover.c - what the client does when a server misbehaves:
 * SIGKILLed in the middle of a batch (every key gets an error, a later call
 * succeeds after a restart), a server that never answers (-ETIMEDOUT, and
 * the buffer is never written afterwards, even when the late reply comes),
 * a server that breaks the protocol (-EPROTO: bytes that are no header, a
 * reply whose header claims more body than its entries fill), and fork
 * (the child uses the parent's client; the parent's connection survives).
 *
 * The misbehaving servers are small scripted fakes speaking the wire
 * protocol from a thread of this test, on 127.0.0.1.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "wire.h"

/* ---- SIGKILL mid-batch, then restart ---- */

enum { KILL_KEYS = 64, KILL_LEN = 512 * 1024 };

struct batch_run {
    kvs_client *c;
    const char **keys;
    const void **vals;
    size_t *lens;
    int *st;
    int rc;
};

static void *batch_thread(void *arg)
{
    struct batch_run *b = arg;
    b->rc = kvs_batch_put(b->c, KILL_KEYS, b->keys, b->vals, b->lens, b->st);
    return NULL;
}

static void test_kill_mid_batch_then_restart(void **state)
{
    (void)state;
    struct kvt_server srv;
    assert_int_equal(kvt_server_start(&srv, 0, "--memory 128M --max-object 1M"), 0);
    kvs_client *c = kvs_open(srv.addr);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "warm", "up", 2), 0); /* connected */

    static const char *keys[KILL_KEYS];
    static const void *vals[KILL_KEYS];
    static size_t lens[KILL_KEYS];
    static int st[KILL_KEYS];
    static char names[KILL_KEYS][40];
    unsigned char *data = calloc(1, KILL_LEN);
    assert_non_null(data);
    for (int i = 0; i < KILL_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "kill-%d", i);
        keys[i] = names[i];
        vals[i] = data;
        lens[i] = KILL_LEN;
        st[i] = 12345;
    }
    /* Stopped, the server cannot answer: the 32 MiB batch is surely in flight when it dies. */
    assert_int_equal(kill(srv.pid, SIGSTOP), 0);
    struct batch_run run = {c, keys, vals, lens, st, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, batch_thread, &run), 0);
    usleep(200 * 1000);
    kvt_server_kill(&srv);
    pthread_join(th, NULL);

    assert_int_equal(run.rc, 0);
    for (int i = 0; i < KILL_KEYS; i++) {
        if (st[i] != -ECONNRESET && st[i] != -EIO)
            fail_msg("key %d: %d (%s)", i, st[i], kvs_strerror(st[i]));
    }
    char buf[4];
    assert_true(kvs_get(c, "warm", buf, sizeof(buf)) < 0); /* down: refused */
    assert_true(kvs_flush(c) < 0);

    assert_int_equal(kvt_server_restart(&srv), 0);
    /* The first attempts may fall in the reconnect backoff (at most 1 s); bounded retry. */
    int rc = -1;
    for (int i = 0; i < 40 && rc != 0; i++) {
        rc = kvs_put(c, "after-restart", "ok", 2);
        if (rc != 0) usleep(100 * 1000);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(kvs_get(c, "after-restart", buf, sizeof(buf)), 2);
    assert_int_equal(kvs_batch_put(c, 4, keys, vals, lens, st), 4);
    free(data);
    kvs_close(c);
    kvt_server_stop(&srv);
}

/* ---- fake servers ---- */

enum fake_mode {
    FAKE_LATE_REPLY,
    FAKE_GARBAGE,
    FAKE_OVERLONG_REPLY,
    FAKE_SILENT_HELLO,
    FAKE_SMALL_FRAMES
};

struct fake {
    int lfd;
    int port;
    enum fake_mode mode;
    atomic_int release; /* FAKE_LATE_REPLY: the test lets the late reply go */
    atomic_int failed;
    atomic_int frames, max_count; /* FAKE_SMALL_FRAMES: what arrived */
    pthread_t th;
};

#define FAKE_MAX_KEYS 3 /* FAKE_SMALL_FRAMES advertises this many keys per frame */

static int read_full(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = recv(fd, p, n, 0);
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* Reads one request frame; returns its id (and skips its body) or -1. */
static long long read_request(int fd, struct kvs_wire_hdr *h)
{
    uint8_t raw[KVS_WIRE_HDR_LEN];
    if (read_full(fd, raw, sizeof(raw)) < 0) return -1;
    if (kvs_wire_hdr_decode(raw, h, 1u << 20) < 0) return -1;
    uint8_t body[4096];
    if (h->body_len > sizeof(body) || read_full(fd, body, h->body_len) < 0) return -1;
    return (long long)h->id;
}

static int send_get_reply(int fd, uint64_t id, const char *value)
{
    uint8_t out[KVS_WIRE_HDR_LEN + KVS_WIRE_STATUS_LEN + 64];
    size_t len = strlen(value);
    struct kvs_wire_hdr h = {.opcode = KVS_OP_GET | KVS_OP_REPLY,
                             .count = 1,
                             .body_len = (uint32_t)(KVS_WIRE_STATUS_LEN + len),
                             .id = id};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_status_encode(out + KVS_WIRE_HDR_LEN, 0, (uint32_t)len);
    memcpy(out + KVS_WIRE_HDR_LEN + KVS_WIRE_STATUS_LEN, value, len);
    return write_full(fd, out, KVS_WIRE_HDR_LEN + KVS_WIRE_STATUS_LEN + len);
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) goto fail;
    struct kvs_wire_hdr h;
    if (read_request(fd, &h) < 0 || h.opcode != KVS_OP_HELLO) goto fail;
    if (f->mode == FAKE_SILENT_HELLO) { /* never answers: the client's connect timeout decides */
        uint8_t b;
        while (recv(fd, &b, 1, 0) > 0) {
        }
        close(fd);
        return NULL;
    }
    uint8_t hello[KVS_WIRE_HDR_LEN + KVS_WIRE_HELLO_LEN];
    struct kvs_wire_hdr rh = {
        .opcode = KVS_OP_HELLO | KVS_OP_REPLY, .body_len = KVS_WIRE_HELLO_LEN, .id = h.id};
    struct kvs_wire_hello lim = {.version = 1,
                                 .max_key = 512,
                                 .max_object = 1 << 20,
                                 .max_frame = 1 << 22,
                                 .max_keys = 1024};
    if (f->mode == FAKE_SMALL_FRAMES) lim.max_keys = FAKE_MAX_KEYS;
    kvs_wire_hdr_encode(hello, &rh);
    kvs_wire_hello_encode(hello + KVS_WIRE_HDR_LEN, &lim);
    if (write_full(fd, hello, sizeof(hello)) < 0) goto fail;

    if (f->mode == FAKE_SMALL_FRAMES) { /* every PUT frame: status 0 per key, until EOF */
        while (read_request(fd, &h) >= 0) {
            if (h.opcode != KVS_OP_PUT || h.count > 64) goto fail;
            atomic_fetch_add(&f->frames, 1);
            if ((int)h.count > atomic_load(&f->max_count))
                atomic_store(&f->max_count, (int)h.count);
            uint8_t out[KVS_WIRE_HDR_LEN + 64 * KVS_WIRE_STATUS_LEN];
            struct kvs_wire_hdr r = {.opcode = KVS_OP_PUT | KVS_OP_REPLY,
                                     .count = h.count,
                                     .body_len = h.count * KVS_WIRE_STATUS_LEN,
                                     .id = h.id};
            kvs_wire_hdr_encode(out, &r);
            for (uint32_t i = 0; i < h.count; i++)
                kvs_wire_status_encode(out + KVS_WIRE_HDR_LEN + i * KVS_WIRE_STATUS_LEN, 0, 0);
            if (write_full(fd, out, KVS_WIRE_HDR_LEN + h.count * KVS_WIRE_STATUS_LEN) < 0)
                goto fail;
        }
        close(fd);
        return NULL;
    }
    long long id = read_request(fd, &h);
    if (id < 0) goto fail;
    if (f->mode == FAKE_GARBAGE || f->mode == FAKE_OVERLONG_REPLY) {
        /*
         * GARBAGE: 24 bytes that are no header. OVERLONG_REPLY: a well-formed
         * GET reply entry (status 0, one byte of value) in a frame whose
         * header claims body_len 0xFFFFFFFF.
         */
        uint8_t junk[KVS_WIRE_HDR_LEN + KVS_WIRE_STATUS_LEN + 1];
        size_t jlen = KVS_WIRE_HDR_LEN;
        memset(junk, 0xab, sizeof(junk));
        if (f->mode == FAKE_OVERLONG_REPLY) {
            struct kvs_wire_hdr r = {.opcode = KVS_OP_GET | KVS_OP_REPLY,
                                     .count = 1,
                                     .body_len = UINT32_MAX,
                                     .id = (uint64_t)id};
            kvs_wire_hdr_encode(junk, &r);
            kvs_wire_status_encode(junk + KVS_WIRE_HDR_LEN, 0, 1);
            jlen = sizeof(junk);
        }
        write_full(fd, junk, jlen);
        /* The client must drop the connection; wait for that. */
        uint8_t b;
        while (recv(fd, &b, 1, 0) > 0) {
        }
        close(fd);
        return NULL;
    }
    /* FAKE_LATE_REPLY: answer only after the client gave up on this request. */
    for (int i = 0; i < 1000 && !atomic_load(&f->release); i++)
        usleep(10 * 1000);
    if (send_get_reply(fd, (uint64_t)id, "LATE!") < 0) goto fail;
    id = read_request(fd, &h); /* the next request is answered at once */
    if (id < 0 || send_get_reply(fd, (uint64_t)id, "fresh") < 0) goto fail;
    uint8_t b;
    while (recv(fd, &b, 1, 0) > 0) {
    }
    close(fd);
    return NULL;
fail:
    atomic_store(&f->failed, 1);
    if (fd >= 0) close(fd);
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 4), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &alen), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    pthread_join(f->th, NULL);
    close(f->lfd);
    assert_int_equal(atomic_load(&f->failed), 0);
}

static void test_timeout_buffer_never_written_late(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("its fake server speaks the wire protocol over TCP");
    struct fake f;
    fake_start(&f, FAKE_LATE_REPLY);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    setenv("KVSTORE_TIMEOUT_MS", "300", 1);
    kvs_client *c = kvs_open(addr);
    unsetenv("KVSTORE_TIMEOUT_MS");
    assert_non_null(c);

    char buf[16];
    memset(buf, 'z', sizeof(buf));
    unsigned long long t0 = kvs_now_ns();
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), -ETIMEDOUT);
    unsigned long long waited_ms = (kvs_now_ns() - t0) / 1000000;
    assert_in_range(waited_ms, 250, 5000); /* bounded by the timeout, not hung */

    atomic_store(&f.release, 1); /* the late reply now arrives... */
    usleep(300 * 1000);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 'z'); /* ...and is dropped */

    char fresh[16];
    assert_int_equal(kvs_get(c, "k", fresh, sizeof(fresh)), 5); /* same connection goes on */
    assert_memory_equal(fresh, "fresh", 5);
    assert_int_equal(kvs_flush(c), -ETIMEDOUT);
    kvs_close(c);
    fake_stop(&f);
}

static void test_protocol_violation(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("its fake server speaks the wire protocol over TCP");
    struct fake f;
    fake_start(&f, FAKE_GARBAGE);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    kvs_client *c = kvs_open(addr);
    assert_non_null(c);
    char buf[16];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), -EPROTO);
    kvs_close(c);
    fake_stop(&f);
}

/*
 * A reply whose header claims more body than its entries fill (body_len
 * 0xFFFFFFFF, then one 9-byte GET entry, status 0): the client must fail the
 * key with -EPROTO, as the server refuses such a request - not hand out the
 * entry as a success.
 */
static void test_reply_longer_than_its_entries_fails(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("its fake server speaks the wire protocol over TCP");
    struct fake f;
    fake_start(&f, FAKE_OVERLONG_REPLY);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    kvs_client *c = kvs_open(addr);
    assert_non_null(c);
    char buf[16];
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), -EPROTO);
    kvs_close(c);
    fake_stop(&f);
}

static void test_connect_timeout(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("its fake server speaks the wire protocol over TCP");
    struct fake f;
    fake_start(&f, FAKE_SILENT_HELLO);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    setenv("KVSTORE_CONNECT_TIMEOUT_MS", "300", 1);
    kvs_client *c = kvs_open(addr);
    unsetenv("KVSTORE_CONNECT_TIMEOUT_MS");
    assert_non_null(c);
    char buf[4];
    unsigned long long t0 = kvs_now_ns();
    assert_int_equal(kvs_get(c, "k", buf, sizeof(buf)), -ETIMEDOUT);
    assert_in_range((kvs_now_ns() - t0) / 1000000, 250, 5000);
    /* Within the backoff the next call fails at once, without a new attempt. */
    assert_int_equal(kvs_put(c, "k", "v", 1), -ETIMEDOUT);
    kvs_close(c);
    fake_stop(&f);
}

/* A server advertising max_keys 3 gets a batch of 10 as 4 frames, all answered. */
static void test_batch_split_by_max_keys(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("its fake server speaks the wire protocol over TCP");
    struct fake f;
    fake_start(&f, FAKE_SMALL_FRAMES);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    kvs_client *c = kvs_open(addr);
    assert_non_null(c);
    const char *keys[10] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"};
    const void *vals[10];
    size_t lens[10];
    int st[10];
    for (int i = 0; i < 10; i++) {
        vals[i] = "value";
        lens[i] = 5;
        st[i] = 99;
    }
    assert_int_equal(kvs_batch_put(c, 10, keys, vals, lens, st), 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(st[i], 0);
    assert_int_equal(atomic_load(&f.frames), 4);
    assert_int_equal(atomic_load(&f.max_count), FAKE_MAX_KEYS);
    kvs_close(c);
    fake_stop(&f);
}

/* ---- fork ---- */

static void test_fork_child_uses_client(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("a forked child cannot use RDMA: librdmacm's state is process-wide "
                     "(docs/rdma.md)");
    struct kvt_server srv;
    assert_int_equal(kvt_server_start(&srv, 0, "--memory 16M --max-object 1M"), 0);
    kvs_client *c = kvs_open(srv.addr);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "parent", "P", 1), 0); /* parent's connection and reader are up */

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char b[4];
        int ok = kvs_get(c, "parent", b, sizeof(b)) == 1 && b[0] == 'P' &&
                 kvs_put(c, "child", "C", 1) == 0;
        const char *keys[2] = {"parent", "child"};
        int ex[2];
        ok = ok && kvs_batch_exists(c, 2, keys, ex) == 2 && ex[0] == 1 && ex[1] == 1;
        kvs_close(c);
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The child closed only its copy: the parent's connection still works. */
    char b[4];
    assert_int_equal(kvs_get(c, "child", b, sizeof(b)), 1);
    assert_int_equal(kvs_flush(c), 0);
    kvs_close(c);
    kvt_server_stop(&srv);
}

/*
 * After a lost connection its fd number is free and gets reused (here by a
 * pipe): a fork must not close that number in the child.
 */
static void test_fork_after_connection_loss_keeps_fds(void **state)
{
    (void)state;
    struct kvt_server srv;
    assert_int_equal(kvt_server_start(&srv, 0, "--memory 16M --max-object 1M"), 0);
    kvs_client *c = kvs_open(srv.addr);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "k", "v", 1), 0);
    kvt_server_kill(&srv);
    char b[4];
    assert_true(kvs_get(c, "k", b, sizeof(b)) < 0); /* the loss is noticed... */
    usleep(200 * 1000);                             /* ...and the reader closed the socket */

    /* The lowest free number (the socket's old one) becomes the pipe's write end. */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int rd = dup(pipefd[0]), wr = pipefd[0];
    assert_true(rd >= 0);
    assert_int_equal(dup2(pipefd[1], wr), wr);
    close(pipefd[1]);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(rd);
        _exit(write(wr, "ok", 2) == 2 ? 0 : 1);
    }
    close(wr);
    char got[2] = {0};
    assert_int_equal(read(rd, got, 2), 2);
    assert_memory_equal(got, "ok", 2);
    close(rd);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kvs_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_mid_batch_then_restart),
        cmocka_unit_test(test_timeout_buffer_never_written_late),
        cmocka_unit_test(test_protocol_violation),
        cmocka_unit_test(test_reply_longer_than_its_entries_fails),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_batch_split_by_max_keys),
        cmocka_unit_test(test_fork_child_uses_client),
        cmocka_unit_test(test_fork_after_connection_loss_keeps_fds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_shm_buffers.c - buffer regions (kvs_alloc_buffer, docs/shm.md
 * "Buffer regions"): values put from such a buffer and got into it move in
 * place (client_shm_in_place counts them; nothing of them takes ring room),
 * whether the buffer was allocated before the connection (mapped at the
 * handshake), while connected (mapped in the stream), or lived through a
 * reconnection; a capacity running past the buffer's end goes through the
 * ring; freed buffers leave no mapping in kvstored, nor do those of a
 * client killed without freeing them; a buffer kvstored refuses (over
 * --shm-max) or a TCP connection still moves every value right; kvs_close
 * with buffers mapped does not wait for a stopped kvstored; bad calls
 * get -EINVAL / -ENOMEM; and a raw local peer's SHM_BUF frames of every bad
 * kind are refused, counted, and the connection goes on (or, malformed, is
 * closed). Threads allocating, using and freeing buffers at once: the last
 * case (run under TSan too, tests/threaded.txt).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "rawwire.h"
#include "values.h"

enum { NK = 8, VLEN = 20000, SLOT = 32 * 1024 }; /* NK values, each in its own 32 KiB slot */

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    return kvt_private_dir(dir, sizeof(dir), "shmbuf");
}

static int group_teardown(void **state)
{
    (void)state;
    return kvt_remove_dir(dir);
}

/* kvstored with its local socket at dir/name; url gets shm://PATH. */
static void start_local(struct kvt_server *s, const char *name, const char *extra, char *path,
                        size_t plen, char *url, size_t ulen)
{
    assert_int_equal(kvt_server_start_local(s, dir, name, extra, path, plen), 0);
    snprintf(url, ulen, "shm://%s", path);
}

/* kvstored's mappings of client buffers (its /proc/PID/maps lines naming their memfd). */
static int buffer_mappings(pid_t pid)
{
    int n = kvt_memfd_mappings(pid, "kvstore-buffer");
    assert_true(n >= 0);
    return n;
}

/* Waits (bounded) until kvstored holds want buffer mappings; returns the last count. */
static int wait_mappings(pid_t pid, int want)
{
    int n = -1;
    for (int i = 0; i < 200 && (n = buffer_mappings(pid)) != want; i++)
        usleep(10 * 1000);
    return n;
}

/*
 * Puts NK values from slots of buf (at slot i, version ver) under prefix,
 * gets them back into other slots of buf (cap each, starting at slot NK),
 * and checks every one.
 */
static void roundtrip(kvs_client *c, uint8_t *buf, const char *prefix, unsigned ver, size_t cap)
{
    char names[NK][32];
    const char *keys[NK];
    const void *vals[NK];
    void *bufs[NK];
    size_t lens[NK], caps[NK];
    int st[NK];
    ssize_t got[NK];
    for (int i = 0; i < NK; i++) {
        snprintf(names[i], sizeof(names[i]), "%s%d", prefix, i);
        keys[i] = names[i];
        kvval_fill(buf + (size_t)i * SLOT, VLEN, names[i], ver);
        vals[i] = buf + (size_t)i * SLOT;
        lens[i] = VLEN;
        bufs[i] = buf + (size_t)(NK + i) * SLOT;
        caps[i] = cap;
        memset(bufs[i], 0, SLOT);
    }
    assert_int_equal(kvs_batch_put(c, NK, keys, vals, lens, st), NK);
    assert_int_equal(kvs_batch_get(c, NK, keys, bufs, caps, got), NK);
    for (int i = 0; i < NK; i++) {
        unsigned version = 0;
        assert_int_equal(got[i], VLEN);
        assert_true(kvval_check(bufs[i], VLEN, names[i], &version));
        assert_int_equal(version, ver);
    }
}

enum { BUF_LEN = 2 * NK * SLOT };

static void test_values_move_in_place(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "inplace.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    void *buf = NULL;
    assert_int_equal(kvs_alloc_buffer(c, BUF_LEN, &buf), 0); /* before any connection */
    assert_non_null(buf);
    assert_int_equal((uintptr_t)buf % 4096, 0);
    for (size_t i = 0; i < BUF_LEN; i++) /* zeroed */
        if (((uint8_t *)buf)[i]) fail_msg("byte %zu not zero", i);

    roundtrip(c, buf, "ip", 1, SLOT);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), 2 * NK);
    assert_int_equal(kvt_server_counter(c, "client_shm_fallbacks"), 0);
    assert_int_equal(kvt_server_counter(c, "shm_maps"), 2); /* the ring, the buffer */
    assert_int_equal(buffer_mappings(s.pid), 1);

    /* Ending at the buffer's end: in place. A capacity past its end: through the ring. */
    uint8_t *last = (uint8_t *)buf + BUF_LEN - VLEN;
    char out[VLEN];
    long long in_place = kvt_server_counter(c, "client_shm_in_place");
    assert_int_equal(kvs_get(c, "ip3", last, VLEN), VLEN);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), in_place + 1);
    memset(last, 0, VLEN);
    assert_int_equal(kvs_get(c, "ip3", last, VLEN + 100), VLEN);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), in_place + 1);
    assert_int_equal(kvs_get(c, "ip3", out, sizeof(out)), VLEN);
    assert_memory_equal(out, last, VLEN);
    in_place++;

    /* Ordinary memory beside it still goes through the ring. */
    assert_int_equal(kvs_put(c, "plain", out, sizeof(out)), 0);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), in_place);

    assert_int_equal(kvs_free_buffer(c, buf), 0);
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_allocated_while_connected_and_reconnected(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "later.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "first", "x", 1), 0); /* the connection is up */

    void *a = NULL, *b = NULL;
    assert_int_equal(kvs_alloc_buffer(c, BUF_LEN, &a), 0); /* mapped in the stream */
    roundtrip(c, a, "la", 1, SLOT);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), 2 * NK);
    assert_int_equal(buffer_mappings(s.pid), 1);

    /* Freed: kvstored unmaps it; the number it had is free again for the next buffer. */
    assert_int_equal(kvs_free_buffer(c, a), 0);
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    assert_int_equal(kvs_free_buffer(c, a), -EINVAL); /* not twice */
    assert_int_equal(kvs_alloc_buffer(c, BUF_LEN, &b), 0);
    roundtrip(c, b, "lb", 2, SLOT);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), 4 * NK);

    /* kvstored restarts: the new connection maps the buffer at its handshake. */
    kvt_server_stop(&s);
    assert_int_equal(kvt_server_restart(&s), 0);
    char tmp[8];
    for (int i = 0; i < 100 && kvs_get(c, "first", tmp, sizeof(tmp)) != -ENOENT; i++)
        usleep(20 * 1000);
    long long before = kvt_server_counter(c, "client_shm_in_place");
    roundtrip(c, b, "lc", 3, SLOT);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), before + 2 * NK);
    assert_int_equal(buffer_mappings(s.pid), 1);
    kvs_close(c); /* frees b */
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    kvt_server_stop(&s);
}

/*
 * The killed client (run as "test_shm_buffers --client URL FD", a program of
 * its own: a fork of this threaded process could not start the library's
 * threads under TSan, die_after_fork): puts and gets in place until killed,
 * after writing a byte to FD once its buffer is mapped and used.
 */
static int killed_client_main(const char *url, int ready)
{
    kvs_client *c = kvs_open(url);
    void *b = NULL;
    if (!c || kvs_alloc_buffer(c, BUF_LEN, &b) < 0) return 1;
    if (kvs_put(c, "kill", b, VLEN) < 0) return 1;
    if (write(ready, "r", 1) != 1) return 1;
    for (int i = 0; i < 100000; i++)
        if (kvs_put(c, "kill", b, VLEN) < 0 || kvs_get(c, "kill", (char *)b + SLOT, SLOT) < 0)
            return 1;
    return 0;
}

static void test_client_killed_leaves_no_mapping(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("runs a client of a local kvstored");
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "kill.sock", NULL, path, sizeof(path), url, sizeof(url));
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", ready[1]);
    const char *const argv[] = {"test_shm_buffers", "--client", url, fd, NULL};
    pid_t pid = kvt_spawn_self(argv, NULL);
    assert_true(pid > 0);
    close(ready[1]);
    char r;
    assert_int_equal(read(ready[0], &r, 1), 1);
    close(ready[0]);
    assert_int_equal(buffer_mappings(s.pid), 1);
    usleep(20 * 1000);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    char out[VLEN];
    assert_int_equal(kvs_get(c, "kill", out, sizeof(out)), VLEN);
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

/* kvs_close with buffers left while kvstored cannot answer: no round trip to unmap, no wait. */
static void test_close_does_not_wait_for_a_stopped_server(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("SIGSTOPs a local kvstored");
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "stop.sock", NULL, path, sizeof(path), url, sizeof(url));
    setenv("KVSTORE_TIMEOUT_MS", "3000", 1);
    kvs_client *c = kvs_open(url);
    unsetenv("KVSTORE_TIMEOUT_MS");
    assert_non_null(c);
    void *b[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(kvs_alloc_buffer(c, 1 << 16, &b[i]), 0);
    assert_int_equal(kvs_put(c, "stop", b[0], 100), 0); /* connected, buffers mapped */
    assert_int_equal(buffer_mappings(s.pid), 3);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    uint64_t t0 = kvs_now_ms();
    kvs_close(c);
    uint64_t took = kvs_now_ms() - t0;
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    assert_true(took < 1500);
    assert_int_equal(wait_mappings(s.pid, 0), 0); /* its connection closed: all unmapped */
    kvt_server_stop(&s);
}

static void test_refused_or_tcp_still_right(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    /* 512 KiB of shared memory per connection: the ring takes it all, the buffer is refused. */
    start_local(&s, "small.sock", "--shm-max 512K", path, sizeof(path), url, sizeof(url));
    setenv("KVSTORE_SHM_SIZE", "512K", 1);
    kvs_client *c = kvs_open(url);
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    void *b = NULL;
    struct kvt_capture cap;
    assert_int_equal(kvt_capture_begin(&cap, dir), 0);
    assert_int_equal(kvs_alloc_buffer(c, BUF_LEN, &b), 0);
    roundtrip(c, b, "rf", 1, SLOT);
    char *said = kvt_capture_end(&cap);
    assert_non_null(said);
    assert_non_null(strstr(said, "--shm-max"));
    free(said);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), 0);
    assert_true(kvt_server_counter(c, "shm_refused") >= 1);
    assert_int_equal(buffer_mappings(s.pid), 0);
    kvs_close(c);

    /* Over TCP a buffer is ordinary memory. */
    char tcp[96];
    snprintf(tcp, sizeof(tcp), "tcp://%s", s.addr);
    c = kvs_open(tcp);
    assert_non_null(c);
    assert_int_equal(kvs_alloc_buffer(c, BUF_LEN, &b), 0);
    roundtrip(c, b, "tc", 1, SLOT);
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"), 0);
    assert_int_equal(kvs_free_buffer(c, b), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_bad_calls(void **state)
{
    (void)state;
    kvs_client *c = kvs_open("127.0.0.1:1"); /* never connected: the calls are local */
    assert_non_null(c);
    void *b = (void *)1;
    assert_int_equal(kvs_alloc_buffer(NULL, 4096, &b), -EINVAL);
    assert_null(b);
    assert_int_equal(kvs_alloc_buffer(c, 4096, NULL), -EINVAL);
    assert_int_equal(kvs_alloc_buffer(c, 0, &b), -EINVAL);
    assert_int_equal(kvs_alloc_buffer(c, (16ull << 30) + 1, &b), -EINVAL);
    assert_int_equal(kvs_free_buffer(c, NULL), -EINVAL);
    assert_int_equal(kvs_free_buffer(NULL, c), -EINVAL);
    char stack[16];
    assert_int_equal(kvs_free_buffer(c, stack), -EINVAL);
    assert_int_equal(kvs_free_buffer(c, MAP_FAILED), -EINVAL);

    void *all[KVS_MAX_SHARED_BUFFERS + 1];
    for (int i = 0; i < KVS_MAX_SHARED_BUFFERS; i++) {
        assert_int_equal(kvs_alloc_buffer(c, 1, &all[i]), 0);
        memset(all[i], i, 4096); /* at least a page of it is ours */
    }
    assert_int_equal(kvs_alloc_buffer(c, 1, &all[KVS_MAX_SHARED_BUFFERS]), -ENOMEM);
    assert_null(all[KVS_MAX_SHARED_BUFFERS]);
    assert_int_equal(kvs_free_buffer(c, all[7]), 0);
    assert_int_equal(kvs_alloc_buffer(c, 1, &all[7]), 0);
    for (int i = 0; i < KVS_MAX_SHARED_BUFFERS; i += 2)
        assert_int_equal(kvs_free_buffer(c, all[i]), 0);
    kvs_close(c); /* frees the odd ones */
}

/* ---- a raw local peer ---- */

/* Sends frame out[0..len) with passfd (-1: none) and reads the answer: 0 or the ERROR status. */
static int raw_send_map(int fd, const uint8_t *out, size_t len, int passfd, uint64_t id)
{
    kvt_raw_send_fd(fd, out, len, passfd);
    uint8_t body[256] = {0};
    struct kvs_wire_hdr h;
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.id, id);
    if (h.opcode == (out[5] | KVS_OP_REPLY)) return 0;
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    return (int32_t)kvs_get_u32(body);
}

static int raw_buf(int fd, uint32_t region, uint64_t size, int passfd)
{
    uint8_t out[KVS_WIRE_SHM_BUF_FRAME_LEN];
    kvs_wire_shm_buf_encode(out, 40 + region, region, size);
    return raw_send_map(fd, out, sizeof(out), passfd, 40 + region);
}

/* A sealed memfd named as the library names its buffers (name) or its ring. */
static int sealed_memfd(const char *name, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    return fd;
}

static void test_raw_peer_buffer_frames(void **state)
{
    (void)state;
    KVT_SKIP_ON_RDMA("a raw peer on kvstored's local socket");
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "raw.sock", "--shm-max 4M", path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    char val[100];
    kvval_fill(val, sizeof(val), "rk", 5);
    assert_int_equal(kvs_put(c, "rk", val, sizeof(val)), 0);

    int fd = kvt_raw_local(path);
    assert_true(fd >= 0);
    uint8_t body[256] = {0};
    struct kvs_wire_hdr h;
    kvt_raw_hello(fd);
    long long refused = kvt_server_counter(c, "shm_refused");

    int m = sealed_memfd("kvstore-buffer", 1 << 20);
    assert_int_equal(raw_buf(fd, 1, 1 << 20, m), -ENOTSUP); /* no ring yet */
    uint8_t map[KVS_WIRE_SHM_MAP_FRAME_LEN];
    kvs_wire_shm_map_encode(map, 9, 1 << 20);
    int ring = sealed_memfd("kvstore-shm", 1 << 20);
    assert_int_equal(raw_send_map(fd, map, sizeof(map), ring, 9), 0);
    close(ring);
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(raw_buf(fd, 2, 4096 * 16, p[0]), -EINVAL); /* not a memfd */
    assert_int_equal(raw_buf(fd, 2, 1 << 20, -1), -EINVAL);     /* no descriptor */
    assert_int_equal(raw_buf(fd, 2, 2 << 20, m), -EINVAL);      /* size differs from the file's */
    int big = sealed_memfd("kvstore-buffer", 4 << 20);
    assert_int_equal(raw_buf(fd, 3, 4 << 20, big), -EINVAL); /* past --shm-max with the ring */
    close(big);
    assert_int_equal(raw_buf(fd, 2, 1 << 20, m), 0);
    assert_int_equal(raw_buf(fd, 2, 1 << 20, m), -EBUSY); /* that number is mapped */
    assert_int_equal(kvt_server_counter(c, "shm_refused"), refused + 6);
    close(p[0]);
    close(p[1]);

    /* A GET into region 2 lands in the peer's buffer; region 5 (unmapped) fails alone. */
    uint8_t *mem = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    assert_true(mem != MAP_FAILED);
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_SHM_GET, 50);
    uint8_t t[KVS_WIRE_SHM_OFF_LEN];
    kvt_req_entry(&b, "rk", sizeof(val), NULL);
    kvs_wire_shm_off_encode(t, 2, 4096);
    kvt_reqbuf_put(&b, t, sizeof(t));
    kvt_req_entry(&b, "rk", sizeof(val), NULL);
    kvs_wire_shm_off_encode(t, 5, 0);
    kvt_reqbuf_put(&b, t, sizeof(t));
    kvt_req_entry(&b, "rk", sizeof(val), NULL);
    kvs_wire_shm_off_encode(t, 2, (1 << 20) - 50); /* past its end */
    kvt_reqbuf_put(&b, t, sizeof(t));
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_SHM_GET | KVS_OP_REPLY);
    assert_int_equal(h.count, 3);
    assert_int_equal((int32_t)kvs_get_u32(body), 0);
    assert_int_equal((int32_t)kvs_get_u32(body + 8), -EINVAL);
    assert_int_equal((int32_t)kvs_get_u32(body + 16), -EINVAL);
    assert_memory_equal(mem + 4096, val, sizeof(val));

    /* Unmapped (size 0, no descriptor): entries naming it fail from then on. */
    assert_int_equal(raw_buf(fd, 2, 0, -1), 0);
    kvt_raw_send_all(fd, b.p, b.len);
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal((int32_t)kvs_get_u32(body), -EINVAL);
    assert_int_equal(wait_mappings(s.pid, 0), 0);

    /* Region 0 or past KVS_WIRE_SHM_BUFFERS in an SHM_BUF: malformed, ERROR, closed. */
    long long proto = kvt_server_counter(c, "errors_protocol");
    uint8_t bad[KVS_WIRE_SHM_BUF_FRAME_LEN];
    kvs_wire_shm_buf_encode(bad, 60, 1, 1 << 20);
    kvs_put_u32(bad + KVS_WIRE_HDR_LEN + 8, 0);
    kvt_raw_send_all(fd, bad, sizeof(bad));
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -EBADMSG);
    assert_true(recv(fd, body, sizeof(body), 0) <= 0);
    assert_int_equal(kvt_server_counter(c, "errors_protocol"), proto + 1);
    close(fd);

    /* Others are unaffected. */
    char out[sizeof(val)];
    assert_int_equal(kvs_get(c, "rk", out, sizeof(out)), (ssize_t)sizeof(val));
    assert_memory_equal(out, val, sizeof(val));
    munmap(mem, 1 << 20);
    close(m);
    free(b.p);
    kvs_close(c);
    kvt_server_stop(&s);
}

/* ---- threads ---- */

enum { TT = 4, TROUNDS = 20 };

struct thread_arg {
    kvs_client *c;
    int id;
    int failed;
};

/* Puts VLEN bytes of key (version ver) from b, gets them back at b + SLOT; true if they came back.
 */
static bool put_get_checked(kvs_client *c, uint8_t *b, const char *key, unsigned ver)
{
    unsigned version = 0;
    kvval_fill(b, VLEN, key, ver);
    return kvs_put(c, key, b, VLEN) == 0 && kvs_get(c, key, b + SLOT, SLOT) == VLEN &&
           kvval_check(b + SLOT, VLEN, key, &version) && version == ver;
}

/* Each round: a buffer of its own, a put and a get in place, checked, freed. */
static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    for (int r = 0; r < TROUNDS && !a->failed; r++) {
        uint8_t *b = NULL;
        if (kvs_alloc_buffer(a->c, 2 * SLOT, (void **)&b) < 0) {
            a->failed = 1;
            break;
        }
        char key[32];
        snprintf(key, sizeof(key), "th%d-%d", a->id, r);
        if (!put_get_checked(a->c, b, key, (unsigned)r + 1)) a->failed = 1;
        if (kvs_free_buffer(a->c, b) != 0) a->failed = 1;
    }
    return NULL;
}

static void test_threads_alloc_use_free(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "threads.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    pthread_t tid[TT];
    struct thread_arg args[TT];
    for (int i = 0; i < TT; i++) {
        args[i] = (struct thread_arg){.c = c, .id = i};
        assert_int_equal(pthread_create(&tid[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < TT; i++) {
        pthread_join(tid[i], NULL);
        assert_int_equal(args[i].failed, 0);
    }
    assert_true(kvt_server_counter(c, "client_shm_in_place") > 0);
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

/*
 * Region numbers handed on while others send: churners free and allocate
 * buffers (taking the lowest numbers again and again) while senders, whose
 * long-lived buffers have higher numbers, put and get in place, so every
 * sender's look-up passes the slots being rewritten.
 */
enum { CHURNERS = 2, SENDERS = 2, CHURN_ROUNDS = 150, SEND_ROUNDS = 300 };

struct churn_arg {
    kvs_client *c;
    int id;
    void *first; /* allocated before the senders' buffers */
    atomic_int *stop;
    int failed;
};

static void *churner_main(void *p)
{
    struct churn_arg *a = p;
    void *b = a->first;
    for (int r = 0; r < CHURN_ROUNDS && !atomic_load(a->stop) && !a->failed; r++) {
        if (kvs_free_buffer(a->c, b) != 0 || kvs_alloc_buffer(a->c, 1 << 16, &b) != 0)
            a->failed = 1;
    }
    if (!a->failed && kvs_free_buffer(a->c, b) != 0) a->failed = 1;
    return NULL;
}

static void *sender_main(void *p)
{
    struct churn_arg *a = p;
    uint8_t *b = a->first;
    for (int r = 0; r < SEND_ROUNDS && !a->failed; r++) {
        char key[32];
        snprintf(key, sizeof(key), "send%d-%d", a->id, r % 8);
        if (!put_get_checked(a->c, b, key, (unsigned)r + 1)) a->failed = 1;
    }
    atomic_store(a->stop, 1);
    return NULL;
}

static void test_numbers_reused_while_others_send(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "reuse.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "up", "x", 1), 0);
    atomic_int stop = 0;
    struct churn_arg args[CHURNERS + SENDERS];
    for (int i = 0; i < CHURNERS + SENDERS; i++) { /* churners' numbers first: 1, 2; then 3, 4 */
        args[i] = (struct churn_arg){.c = c, .id = i, .stop = &stop};
        assert_int_equal(kvs_alloc_buffer(c, i < CHURNERS ? 1 << 16 : 2 * SLOT, &args[i].first), 0);
    }
    long long before = kvt_server_counter(c, "client_shm_in_place");
    pthread_t tid[CHURNERS + SENDERS];
    for (int i = 0; i < CHURNERS + SENDERS; i++)
        assert_int_equal(
            pthread_create(&tid[i], NULL, i < CHURNERS ? churner_main : sender_main, &args[i]), 0);
    for (int i = 0; i < CHURNERS + SENDERS; i++) {
        pthread_join(tid[i], NULL);
        assert_int_equal(args[i].failed, 0);
    }
    assert_int_equal(kvt_server_counter(c, "client_shm_in_place"),
                     before + 2 * SENDERS * SEND_ROUNDS);
    for (int i = CHURNERS; i < CHURNERS + SENDERS; i++)
        assert_int_equal(kvs_free_buffer(c, args[i].first), 0);
    assert_int_equal(wait_mappings(s.pid, 0), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--client") == 0)
        return killed_client_main(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_move_in_place),
        cmocka_unit_test(test_allocated_while_connected_and_reconnected),
        cmocka_unit_test(test_client_killed_leaves_no_mapping),
        cmocka_unit_test(test_close_does_not_wait_for_a_stopped_server),
        cmocka_unit_test(test_refused_or_tcp_still_right),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_raw_peer_buffer_frames),
        cmocka_unit_test(test_threads_alloc_use_free),
        cmocka_unit_test(test_numbers_reused_while_others_send),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

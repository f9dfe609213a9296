/*
 * test_shm.c - values through a region shared with kvstored (docs/shm.md):
 * batches over the local socket go through the region (and not with
 * KVSTORE_SHM_SIZE=0 or over TCP; a request too large for it goes in the
 * stream); a raw local peer passing descriptors of the wrong kind (none, a
 * pipe, a directory, a socket, a disk file, an unsealed, write-sealed,
 * read-only, too small or too large memfd) is refused, counted, and goes
 * on; offsets and lengths outside its region are refused per key and
 * counted; clients SIGKILLed mid-put and mid-get leave no torn value, no
 * pin and no mapping in kvstored; a server SIGKILLed mid-batch fails every
 * op and the client reconnects with a new region; and (as root) a peer of
 * another uid reaches neither the socket nor the region.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstore.h"
#include "kvtest.h"
#include "rawwire.h"
#include "values.h"

#define REGION (1u << 20) /* the raw peers' regions */

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    return kvt_private_dir(dir, sizeof(dir), "shm");
}

static int group_teardown(void **state)
{
    (void)state;
    return kvt_remove_dir(dir);
}

/* kvstored with its local socket at dir/name (and extra arguments); url gets unix://PATH. */
static void start_local(struct kvt_server *s, const char *name, const char *extra, char *path,
                        size_t plen, char *url, size_t ulen)
{
    assert_int_equal(kvt_server_start_local(s, dir, name, extra, path, plen), 0);
    snprintf(url, ulen, "unix://%s", path);
}

/*
 * SHM_MAP declaring size, with passfd attached (-1: none). 0 if kvstored
 * mapped it, else the status of its ERROR reply.
 */
static int raw_map(int fd, int passfd, uint64_t size)
{
    uint8_t out[KVS_WIRE_SHM_MAP_FRAME_LEN], body[256] = {0};
    struct kvs_wire_hdr h = {0};
    kvs_wire_shm_map_encode(out, 7, size);
    kvt_raw_send_fd(fd, out, sizeof(out), passfd);
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.id, 7);
    if (h.opcode == (KVS_OP_SHM_MAP | KVS_OP_REPLY)) {
        assert_int_equal(h.body_len, 0);
        return 0;
    }
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    return (int32_t)kvs_get_u32(body);
}

/* A memfd of size bytes with seals (0: none; -1: made without MFD_ALLOW_SEALING). */
static int make_memfd(size_t size, int seals)
{
    int fd = memfd_create("test-region", MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (seals > 0) assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

#define GOOD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* One SHM_PUT / SHM_GET entry: key, len, then the offset and the region (0: the ring). */
static void shm_entry(struct kvt_reqbuf *b, const char *key, uint32_t len, uint64_t off,
                      uint32_t region)
{
    uint8_t t[KVS_WIRE_SHM_OFF_LEN];
    kvt_req_entry(b, key, len, NULL);
    kvs_put_u64(t, off);
    kvs_put_u32(t + 8, region);
    kvt_reqbuf_put(b, t, sizeof(t));
}

/* Reads a keyed reply of n statuses (no data) into st / len. */
static void read_statuses(int fd, uint8_t opcode, uint32_t n, int32_t *st, uint32_t *len)
{
    uint8_t body[4096];
    struct kvs_wire_hdr h;
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, opcode | KVS_OP_REPLY);
    assert_int_equal(h.count, n);
    assert_int_equal(h.body_len, n * KVS_WIRE_STATUS_LEN);
    for (uint32_t i = 0; i < n; i++) {
        st[i] = (int32_t)kvs_get_u32(body + i * KVS_WIRE_STATUS_LEN);
        len[i] = kvs_get_u32(body + i * KVS_WIRE_STATUS_LEN + 4);
    }
}

/* Batched puts and gets of n values of len bytes; every one checked. */
static void batch_roundtrip(kvs_client *c, const char *prefix, int n, size_t len)
{
    char names[64][24];
    const char *keys[64];
    const void *vals[64];
    void *bufs[64];
    size_t lens[64], caps[64];
    int st[64];
    ssize_t got[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s%d", prefix, i);
        keys[i] = names[i];
        void *v = malloc(len);
        bufs[i] = malloc(len);
        assert_non_null(v);
        assert_non_null(bufs[i]);
        kvval_fill(v, len, names[i], 1);
        vals[i] = v;
        lens[i] = caps[i] = len;
    }
    assert_int_equal(kvs_batch_put(c, n, keys, vals, lens, st), n);
    assert_int_equal(kvs_batch_get(c, n, keys, bufs, caps, got), n);
    for (int i = 0; i < n; i++) {
        unsigned version = 0;
        assert_int_equal(got[i], (ssize_t)len);
        assert_true(kvval_check(bufs[i], len, names[i], &version));
        assert_int_equal(version, 1);
        free((void *)vals[i]);
        free(bufs[i]);
    }
}

static void test_values_through_the_region(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "through.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    batch_roundtrip(c, "r", 32, 64 * 1024);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    assert_int_equal(kvt_server_counter(c, "shm_maps"), 1);
    assert_true(kvt_server_counter(c, "requests_shm_put") >= 1);
    assert_true(kvt_server_counter(c, "requests_shm_get") >= 1);
    long long in = kvt_server_counter(c, "bytes_in");
    assert_true(in < 32 * 1024); /* the 2 MiB of values did not come through the socket */
    /* Statuses as over the stream: a value larger than the buffer, an absent key. */
    char small[8];
    assert_int_equal(kvs_get(c, "r0", small, sizeof(small)), -ERANGE);
    assert_int_equal(kvs_get(c, "absent", small, sizeof(small)), -ENOENT);
    assert_int_equal(kvs_put(c, "empty", NULL, 0), 0);
    assert_int_equal(kvs_get(c, "empty", small, sizeof(small)), 0);
    kvs_close(c);

    /* KVSTORE_SHM_SIZE=0: values in the socket. */
    setenv("KVSTORE_SHM_SIZE", "0", 1);
    c = kvs_open(url);
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    long long puts = kvt_server_counter(c, "requests_shm_put");
    batch_roundtrip(c, "z", 8, 4096);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 0);
    assert_int_equal(kvt_server_counter(c, "requests_shm_put"), puts);
    kvs_close(c);

    /* A region of 64 KiB: a 2 MiB batch goes in the stream, whole and right. */
    setenv("KVSTORE_SHM_SIZE", "64K", 1);
    c = kvs_open(url);
    unsetenv("KVSTORE_SHM_SIZE");
    assert_non_null(c);
    batch_roundtrip(c, "f", 32, 64 * 1024);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 1);
    assert_true(kvt_server_counter(c, "client_shm_fallbacks") >= 2);
    kvs_close(c);

    /* Over TCP, the server offers no shared memory. */
    setenv("KVSTORE_TRANSPORT", "tcp", 1);
    c = kvs_open(s.addr);
    unsetenv("KVSTORE_TRANSPORT");
    assert_non_null(c);
    batch_roundtrip(c, "t", 4, 4096);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 0);
    kvs_close(c);
    kvt_server_stop(&s);

    /* kvstored --shm-max 0: none offered on the local socket either. */
    start_local(&s, "noshm.sock", "--shm-max 0", path, sizeof(path), url, sizeof(url));
    c = kvs_open(url);
    assert_non_null(c);
    batch_roundtrip(c, "n", 4, 4096);
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 0);
    assert_int_equal(kvt_server_counter(c, "shm_maps"), 0);
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_wrong_descriptors_refused(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "fds.sock", "--shm-max 1M", path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "other", "value", 5), 0);
    long long refused = kvt_server_counter(c, "shm_refused");

    int fd = kvt_raw_local(path);
    assert_true(fd >= 0);
    assert_true(kvt_raw_hello(fd) & KVS_FEAT_SHM);
    int p[2];
    assert_int_equal(pipe(p), 0);
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dirfd >= 0);
    char disk[128];
    snprintf(disk, sizeof(disk), "%s", kvt_build_path("shm-disk-file"));
    int diskfd = open(disk, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(diskfd >= 0);
    assert_int_equal(ftruncate(diskfd, REGION), 0);
    int unsealed = make_memfd(REGION, 0);
    int unsealable = make_memfd(REGION, -1);
    int shrinkable = make_memfd(REGION, F_SEAL_GROW | F_SEAL_SEAL);
    int wsealed = make_memfd(REGION, GOOD_SEALS | F_SEAL_WRITE);
    int small = make_memfd(REGION / 2, GOOD_SEALS);
    int large = make_memfd(2 * REGION, GOOD_SEALS);
    int good = make_memfd(REGION, GOOD_SEALS);
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", good);
    int rdonly = open(self, O_RDONLY);
    assert_true(rdonly >= 0);
    struct {
        const char *what;
        int fd;
        uint64_t size;
    } bad[] = {
        {"no descriptor", -1, REGION},
        {"a pipe", p[0], REGION},
        {"a socket", sp[0], REGION},
        {"a directory", dirfd, REGION},
        {"a file on disk", diskfd, REGION},
        {"an unsealed memfd", unsealed, REGION},
        {"a memfd that cannot be sealed", unsealable, REGION},
        {"a memfd that may shrink", shrinkable, REGION},
        {"a memfd sealed against writes", wsealed, REGION},
        {"a memfd smaller than declared", small, REGION},
        {"a memfd over --shm-max", large, 2 * REGION},
        {"a memfd opened read-only", rdonly, REGION},
        {"a good memfd, a size below the minimum", good, 4096},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = raw_map(fd, bad[i].fd, bad[i].size);
        if (rc != -EINVAL) fprintf(stderr, "%s: %d\n", bad[i].what, rc);
        assert_int_equal(rc, -EINVAL);
        assert_int_equal(kvt_server_counter(c, "shm_refused"), refused + (long long)i + 1);
    }
    /* Refused, the connection goes on: SHM_PUT without a region is not served, HELLO is. */
    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_SHM_PUT, 9);
    shm_entry(&b, "k", 4, 0, 0);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    uint8_t body[256];
    struct kvs_wire_hdr h;
    kvt_raw_read_reply(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -ENOTSUP);
    assert_true(kvt_raw_hello(fd) & KVS_FEAT_SHM);
    /* The good one maps; a second region on the same connection does not. */
    assert_int_equal(raw_map(fd, good, REGION), 0);
    assert_int_equal(raw_map(fd, good, REGION), -EBUSY);
    assert_int_equal(kvt_server_counter(c, "shm_maps"), 1);
    char buf[8];
    assert_int_equal(kvs_get(c, "other", buf, sizeof(buf)), 5); /* others unaffected */
    close(fd);
    free(b.p);

    /* Over TCP, SHM_MAP is not served (no descriptor can come) and the connection goes on. */
    fd = kvt_raw_connect(s.port, 5);
    assert_false(kvt_raw_hello(fd) & KVS_FEAT_SHM);
    assert_int_equal(raw_map(fd, -1, REGION), -ENOTSUP);
    kvt_raw_hello(fd);
    close(fd);

    int fds[] = {p[0],       p[1],       sp[0],   sp[1], dirfd, diskfd, unsealed,
                 unsealable, shrinkable, wsealed, small, large, good,   rdonly};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        close(fds[i]);
    unlink(disk);
    kvs_close(c);
    kvt_server_stop(&s);
}

static void test_bad_offsets_refused(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "off.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "other", "value", 5), 0);

    int fd = kvt_raw_local(path);
    assert_true(fd >= 0);
    kvt_raw_hello(fd);
    int mfd = make_memfd(REGION, GOOD_SEALS);
    uint8_t *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    assert_true(region != MAP_FAILED);
    assert_int_equal(raw_map(fd, mfd, REGION), 0);
    close(mfd);
    long long bad_before = kvt_server_counter(c, "shm_bad_ranges");
    kvval_fill(region, 100, "good", 3);

    struct kvt_reqbuf b = {0};
    kvt_req_begin(&b, KVS_OP_SHM_PUT, 10);
    shm_entry(&b, "good", 100, 0, 0);
    shm_entry(&b, "past", 100, REGION - 50, 0);      /* runs past the end */
    shm_entry(&b, "wrap", 100, UINT64_MAX - 10, 0);  /* offset + length overflows */
    shm_entry(&b, "beyond", 1, (uint64_t)REGION, 0); /* starts at the end */
    shm_entry(&b, "last", 100, REGION - 100, 0);     /* ends at the end: fine */
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    int32_t st[8];
    uint32_t len[8];
    read_statuses(fd, KVS_OP_SHM_PUT, 5, st, len);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], -EINVAL);
    assert_int_equal(st[2], -EINVAL);
    assert_int_equal(st[3], -EINVAL);
    assert_int_equal(st[4], 0);

    b.len = 0;
    kvt_req_begin(&b, KVS_OP_SHM_GET, 11);
    shm_entry(&b, "good", 100, 8192, 0);
    shm_entry(&b, "good", 100, REGION - 99, 0); /* the capacity runs past the end */
    shm_entry(&b, "other", 5, UINT64_MAX, 0);
    shm_entry(&b, "past", 100, 0, 0); /* never stored */
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    read_statuses(fd, KVS_OP_SHM_GET, 4, st, len);
    assert_int_equal(st[0], 0);
    assert_int_equal(len[0], 100);
    unsigned version = 0;
    assert_true(kvval_check(region + 8192, 100, "good", &version));
    assert_int_equal(version, 3);
    assert_int_equal(st[1], -EINVAL);
    assert_int_equal(st[2], -EINVAL);
    assert_int_equal(st[3], -ENOENT);
    assert_int_equal(kvt_server_counter(c, "shm_bad_ranges"), bad_before + 5);

    /* What the raw peer stored is what others read; their own keys are untouched. */
    char buf[128];
    assert_int_equal(kvs_get(c, "good", buf, sizeof(buf)), 100);
    assert_true(kvval_check(buf, 100, "good", &version));
    assert_int_equal(kvs_get(c, "other", buf, sizeof(buf)), 5);

    /* A buffer region nobody mapped: that key alone is refused, as a range outside. */
    b.len = 0;
    kvt_req_begin(&b, KVS_OP_SHM_GET, 13);
    shm_entry(&b, "good", 100, 0, 1);
    shm_entry(&b, "good", 100, 0, KVS_WIRE_SHM_BUFFERS);
    shm_entry(&b, "good", 100, 0, 0);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    read_statuses(fd, KVS_OP_SHM_GET, 3, st, len);
    assert_int_equal(st[0], -EINVAL);
    assert_int_equal(st[1], -EINVAL);
    assert_int_equal(st[2], 0);
    assert_int_equal(kvt_server_counter(c, "shm_bad_ranges"), bad_before + 7);

    /* A region number past KVS_WIRE_SHM_BUFFERS is a malformed entry: ERROR, closed. */
    long long proto = kvt_server_counter(c, "errors_protocol");
    b.len = 0;
    kvt_req_begin(&b, KVS_OP_SHM_PUT, 12);
    shm_entry(&b, "good", 100, 0, KVS_WIRE_SHM_BUFFERS + 1);
    kvt_req_end(&b);
    kvt_raw_send_all(fd, b.p, b.len);
    struct kvs_wire_hdr h;
    kvt_raw_read_reply(fd, &h, (uint8_t *)buf, sizeof(buf));
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32((uint8_t *)buf), -EBADMSG);
    assert_true(recv(fd, buf, sizeof(buf), 0) <= 0);
    assert_int_equal(kvt_server_counter(c, "errors_protocol"), proto + 1);
    assert_int_equal(kvs_get(c, "other", buf, sizeof(buf)), 5);
    close(fd);
    munmap(region, REGION);
    free(b.p);
    kvs_close(c);
    kvt_server_stop(&s);
}

/* Mappings of a client's region in process pid (its /proc/PID/maps lines naming the memfd). */
static int region_mappings(pid_t pid)
{
    int n = kvt_memfd_mappings(pid, "kvstore-shm");
    assert_true(n >= 0);
    return n;
}

/* Waits (bounded) until the server counts want connections. */
static void wait_connections(kvs_client *c, long long want)
{
    for (int i = 0; i < 100 && kvt_server_counter(c, "connections_current") != want; i++)
        usleep(50000);
    assert_int_equal(kvt_server_counter(c, "connections_current"), want);
}

enum { KEYS = 16, VLEN = 64 * 1024 };

/*
 * A child's life: batches of puts (versions counting up) or of gets, until
 * it is killed; a byte on ready after its first batch.
 */
static void __attribute__((noreturn)) child_loop(const char *url, int gets, int ready)
{
    kvs_client *c = kvs_open(url);
    if (!c) _exit(2);
    char names[KEYS][16];
    const char *keys[KEYS];
    void *bufs[KEYS];
    size_t lens[KEYS];
    int st[KEYS];
    ssize_t got[KEYS];
    for (int i = 0; i < KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "kill%d", i);
        keys[i] = names[i];
        bufs[i] = malloc(VLEN);
        if (!bufs[i]) _exit(2);
        lens[i] = VLEN;
    }
    for (unsigned v = 2; v < 1000000; v++) {
        if (gets) {
            kvs_batch_get(c, KEYS, keys, bufs, lens, got);
        } else {
            for (int i = 0; i < KEYS; i++)
                kvval_fill(bufs[i], VLEN, names[i], v);
            kvs_batch_put(c, KEYS, keys, (const void *const *)bufs, lens, st);
        }
        if (v == 2 && write(ready, "r", 1) != 1) _exit(2);
    }
    _exit(0);
}

/* Clients SIGKILLed at moments spread over their batches (gets: mid-get), then the checks. */
static void kill_clients(int gets)
{
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, gets ? "killget.sock" : "killput.sock", NULL, path, sizeof(path), url,
                sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    batch_roundtrip(c, "kill", KEYS, VLEN); /* the keys exist, version 1 */
    for (int round = 0; round < 8; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) child_loop(url, gets, p[1]);
        close(p[1]);
        char r;
        assert_int_equal(read(p[0], &r, 1), 1); /* it has done a batch: it is mapped and busy */
        close(p[0]);
        usleep((useconds_t)round * 1500); /* then at moments spread over its next batches */
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
    }
    wait_connections(c, 1);
    assert_int_equal(region_mappings(s.pid), 1); /* only our own client's region is mapped */
    assert_int_equal(kvt_server_counter(c, "pinned_items"), 0);
    assert_true(kvt_server_counter(c, "shm_maps") >= 9);
    char *buf = malloc(VLEN);
    assert_non_null(buf);
    for (int i = 0; i < KEYS; i++) {
        char key[16];
        unsigned version = 0;
        snprintf(key, sizeof(key), "kill%d", i);
        assert_int_equal(kvs_get(c, key, buf, VLEN), VLEN);
        assert_true(kvval_check(buf, VLEN, key, &version)); /* whole: one put's bytes */
        if (gets) assert_int_equal(version, 1);
    }
    free(buf);
    kvs_close(c);
    for (int i = 0; i < 100 && region_mappings(s.pid) != 0; i++)
        usleep(50000);
    assert_int_equal(region_mappings(s.pid), 0);
    kvt_server_stop(&s);
}

static void test_client_killed_mid_put(void **state)
{
    (void)state;
    kill_clients(0);
}

static void test_client_killed_mid_get(void **state)
{
    (void)state;
    kill_clients(1);
}

static void test_server_killed_mid_batch(void **state)
{
    (void)state;
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "srvkill.sock", NULL, path, sizeof(path), url, sizeof(url));
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    batch_roundtrip(c, "s", 4, 4096);
    enum { N = 64, LEN = 64 * 1024 };
    char *vals = malloc((size_t)N * LEN);
    assert_non_null(vals);
    memset(vals, 'x', (size_t)N * LEN);
    const char *keys[N];
    char names[N][16];
    const void *vp[N];
    size_t lens[N];
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "b%d", i);
        keys[i] = names[i];
        vp[i] = vals + (size_t)i * LEN;
        lens[i] = LEN;
        st[i] = 1; /* no status a put ends with */
    }
    kvs_op *op = NULL;
    assert_int_equal(kvs_batch_put_async(c, N, keys, vp, lens, st, NULL, NULL, &op), 0);
    kvt_server_kill(&s);
    ssize_t nok = kvs_wait(op);
    int failed = 0;
    for (int i = 0; i < N; i++) {
        assert_true(st[i] == 0 || st[i] < 0);
        failed += st[i] < 0;
    }
    assert_int_equal(nok + failed, N);
    assert_int_equal(kvt_server_restart(&s), 0);
    int ok = -1;
    for (int i = 0; i < 50 && ok != 0; i++) {
        ok = kvs_put(c, "after", "v", 1);
        if (ok != 0) usleep(100000);
    }
    assert_int_equal(ok, 0);
    batch_roundtrip(c, "s", 4, 4096); /* through the new connection's new region */
    assert_int_equal(kvt_server_counter(c, "client_shm_connects"), 2);
    assert_int_equal(kvt_server_counter(c, "shm_maps"), 1);
    kvs_close(c);
    free(vals);
    kvt_server_stop(&s);
}

static void test_other_uid_reaches_nothing(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: needs root to run a peer as nobody\n");
        skip();
        return;
    }
    struct passwd *nobody = getpwnam("nobody");
    assert_non_null(nobody);
    struct kvt_server s;
    char path[96], url[128];
    start_local(&s, "uid.sock", NULL, path, sizeof(path), url, sizeof(url));
    assert_int_equal(chmod(dir, 0755), 0); /* nobody may reach the socket: the policies decide */
    kvs_client *c = kvs_open(url);
    assert_non_null(c);
    assert_int_equal(kvs_put(c, "secret", "value", 5), 0);
    /* Where our region is mapped, in kvstored and in this process. */
    char maps[2][64], line[512];
    pid_t pids[2] = {s.pid, getpid()};
    for (int i = 0; i < 2; i++) {
        snprintf(maps[i], sizeof(maps[i]), "/proc/%d/maps", (int)pids[i]);
        FILE *f = fopen(maps[i], "r");
        assert_non_null(f);
        maps[i][0] = '\0';
        while (fgets(line, sizeof(line), f))
            if (strstr(line, "memfd:kvstore-shm")) {
                unsigned long lo, hi;
                assert_int_equal(sscanf(line, "%lx-%lx", &lo, &hi), 2);
                snprintf(maps[i], sizeof(maps[i]), "/proc/%d/map_files/%lx-%lx", (int)pids[i], lo,
                         hi);
                break;
            }
        fclose(f);
        assert_true(maps[i][0] != '\0');
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(nobody->pw_gid) < 0 || setuid(nobody->pw_uid) < 0) _exit(2);
        /* The region's mappings, the two processes' memory and descriptors: all closed to it. */
        for (int i = 0; i < 2; i++) {
            char mem[64], fdn[64];
            snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)pids[i]);
            snprintf(fdn, sizeof(fdn), "/proc/%d/fd", (int)pids[i]);
            if (open(maps[i], O_RDONLY) >= 0) _exit(3);
            if (open(mem, O_RDONLY) >= 0) _exit(4);
            if (opendir(fdn) != NULL) _exit(5);
        }
        /* The socket: closed unanswered (SO_PEERCRED). */
        int fd = kvt_raw_local(path);
        if (fd < 0) _exit(6);
        struct kvt_reqbuf b = {0};
        kvt_req_get(&b, 1, "secret", 8);
        send(fd, b.p, b.len, MSG_NOSIGNAL);
        uint8_t reply[64];
        ssize_t n = recv(fd, reply, sizeof(reply), 0);
        _exit(n > 0 ? 7 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(kvt_server_counter(c, "connections_refused_peer"), 1);
    kvs_close(c);
    kvt_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_through_the_region),
        cmocka_unit_test(test_wrong_descriptors_refused),
        cmocka_unit_test(test_bad_offsets_refused),
        cmocka_unit_test(test_client_killed_mid_put),
        cmocka_unit_test(test_client_killed_mid_get),
        cmocka_unit_test(test_server_killed_mid_batch),
        cmocka_unit_test(test_other_uid_reaches_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

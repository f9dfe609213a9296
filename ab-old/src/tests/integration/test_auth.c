/*
 * test_auth.c - shared-secret authentication against a real kvstored
 * --auth-file on 127.0.0.1: the right secret works; a wrong secret, no
 * secret, or a secret against a server without authentication fail every
 * key with -EACCES and a warning naming KVSTORE_AUTH_FILE; a raw socket
 * sending requests before AUTH gets -EACCES and is closed; an AUTH frame
 * replayed on a new connection fails (the server nonce is fresh); bad secret
 * files are refused by both ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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

#include "auth.h"
#include "kvstore.h"
#include "kvtest.h"
#include "rawwire.h"
#include "wire.h"

#define SECRET "correct horse battery staple"

static char dir[32];
static char good_file[128], wrong_file[128], empty_file[128], open_file[128], missing_file[128];
static struct kvt_server auth_srv, plain_srv;

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kvs-auth-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(good_file, sizeof(good_file), "%s/good", dir);
    snprintf(wrong_file, sizeof(wrong_file), "%s/wrong", dir);
    snprintf(empty_file, sizeof(empty_file), "%s/empty", dir);
    snprintf(open_file, sizeof(open_file), "%s/open", dir);
    snprintf(missing_file, sizeof(missing_file), "%s/missing", dir);
    write_file(good_file, SECRET "\n", 0600);
    write_file(wrong_file, "not the secret\n", 0600);
    write_file(empty_file, "\n", 0600);
    write_file(open_file, SECRET "\n", 0644);

    char args[256];
    snprintf(args, sizeof(args), "--memory 16M --auth-file %s", good_file);
    if (kvt_server_start(&auth_srv, 0, args) < 0) return -1;
    if (kvt_server_start(&plain_srv, 0, "--memory 16M") < 0) return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kvt_server_stop(&auth_srv);
    kvt_server_stop(&plain_srv);
    unlink(good_file);
    unlink(wrong_file);
    unlink(empty_file);
    unlink(open_file);
    rmdir(dir);
    return 0;
}

/* stderr capture (what the client library warns): kvt_capture_begin/end in tests/lib. */
static void capture_begin(struct kvt_capture *cap)
{
    assert_int_equal(kvt_capture_begin(cap, dir), 0);
}

static char *capture_end(struct kvt_capture *cap)
{
    char *text = kvt_capture_end(cap);
    assert_non_null(text);
    return text;
}

/* ---- through libkvstore ---- */

#define NKEYS 4

/* A batch put + get of NKEYS keys with KVSTORE_AUTH_FILE = file (NULL: unset). */
static void batch_roundtrip(const char *addr, const char *file, int want, const char *want_text)
{
    if (file)
        setenv("KVSTORE_AUTH_FILE", file, 1);
    else
        unsetenv("KVSTORE_AUTH_FILE");
    struct kvt_capture cap;
    capture_begin(&cap);
    kvs_client *c = kvs_open(addr);
    assert_non_null(c);
    const char *keys[NKEYS] = {"auth/a", "auth/b", "auth/c", "auth/d"};
    char vals[NKEYS][24], got[NKEYS][24];
    const void *vp[NKEYS];
    void *gp[NKEYS];
    size_t lens[NKEYS], caps[NKEYS];
    int status[NKEYS];
    ssize_t results[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        snprintf(vals[i], sizeof(vals[i]), "value-%d", i);
        vp[i] = vals[i];
        gp[i] = got[i];
        lens[i] = strlen(vals[i]);
        caps[i] = sizeof(got[i]);
    }
    int ok = kvs_batch_put(c, NKEYS, keys, vp, lens, status);
    int ok_get = kvs_batch_get(c, NKEYS, keys, gp, caps, results);
    kvs_close(c);
    char *text = capture_end(&cap);
    unsetenv("KVSTORE_AUTH_FILE");

    if (want == 0) {
        assert_int_equal(ok, NKEYS);
        assert_int_equal(ok_get, NKEYS);
        for (int i = 0; i < NKEYS; i++) {
            assert_int_equal(results[i], (ssize_t)lens[i]);
            assert_memory_equal(got[i], vals[i], lens[i]);
        }
    } else {
        assert_int_equal(ok, 0);
        assert_int_equal(ok_get, 0);
        for (int i = 0; i < NKEYS; i++) {
            assert_int_equal(status[i], want);
            assert_int_equal(results[i], want);
        }
    }
    if (want_text) assert_non_null(strstr(text, want_text));
    free(text);
}

static void test_right_secret_works(void **state)
{
    (void)state;
    batch_roundtrip(auth_srv.addr, good_file, 0, NULL);
}

static void test_wrong_secret_refused(void **state)
{
    (void)state;
    batch_roundtrip(auth_srv.addr, wrong_file, -EACCES,
                    "refused authentication: KVSTORE_AUTH_FILE does not hold");
}

static void test_no_secret_refused(void **state)
{
    (void)state;
    batch_roundtrip(auth_srv.addr, NULL, -EACCES, "requires authentication; set KVSTORE_AUTH_FILE");
}

static void test_secret_against_plain_server_refused(void **state)
{
    (void)state;
    batch_roundtrip(plain_srv.addr, good_file, -EACCES,
                    "KVSTORE_AUTH_FILE is set but the server does not authenticate");
    /* And without a secret that server works as before. */
    batch_roundtrip(plain_srv.addr, NULL, 0, NULL);
}

/* kvs_open refuses an unusable KVSTORE_AUTH_FILE, naming it. */
static void test_client_refuses_bad_secret_files(void **state)
{
    (void)state;
    const char *files[] = {open_file, empty_file, missing_file};
    const int codes[] = {EACCES, EINVAL, ENOENT};
    for (int i = 0; i < 3; i++) {
        setenv("KVSTORE_AUTH_FILE", files[i], 1);
        struct kvt_capture cap;
        capture_begin(&cap);
        errno = 0;
        kvs_client *c = kvs_open(auth_srv.addr);
        int err = errno;
        char *text = capture_end(&cap);
        unsetenv("KVSTORE_AUTH_FILE");
        assert_null(c);
        assert_int_equal(err, codes[i]);
        assert_non_null(strstr(text, "KVSTORE_AUTH_FILE"));
        assert_non_null(strstr(text, files[i]));
        free(text);
    }
}

/* kvstored refuses an unusable --auth-file with a message naming it. */
static void test_server_refuses_bad_secret_files(void **state)
{
    (void)state;
    const char *files[] = {open_file, empty_file, missing_file};
    const char *why[] = {"accessible by group or others", "is empty", "cannot read"};
    for (int i = 0; i < 3; i++) {
        char cmd[512], out[96];
        snprintf(out, sizeof(out), "%s/kvstored-err", dir);
        snprintf(cmd, sizeof(cmd),
                 "timeout 10 %s --listen 127.0.0.1:0 --memory 1M --auth-file %s >/dev/null 2>%s",
                 kvt_build_path("bin/kvstored"), files[i], out);
        int st = system(cmd);
        assert_true(st != -1 && WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 1);
        char text[1024] = "";
        FILE *f = fopen(out, "r");
        assert_non_null(f);
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        text[n] = '\0';
        fclose(f);
        unlink(out);
        assert_non_null(strstr(text, why[i]));
        assert_non_null(strstr(text, files[i]));
    }
}

/* ---- raw sockets ---- */

/* Reads one reply frame; body_len is checked against cap. */
static void read_frame(int fd, struct kvs_wire_hdr *h, uint8_t *body, size_t cap)
{
    uint8_t hdr[KVS_WIRE_HDR_LEN];
    assert_int_equal(kvt_raw_recv_all(fd, hdr, sizeof(hdr)), 0);
    assert_int_equal(kvs_wire_hdr_decode(hdr, h, 1u << 20), 0);
    assert_true(h->body_len <= cap);
    assert_int_equal(kvt_raw_recv_all(fd, body, h->body_len), 0);
}

/* Asserts that the next frame is ERROR(-EACCES) and that the server then closes. */
static void expect_eacces_and_close(int fd)
{
    struct kvs_wire_hdr h;
    uint8_t body[256], byte;
    read_frame(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_ERROR | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -EACCES);
    assert_int_equal(recv(fd, &byte, 1, 0), 0); /* EOF */
}

/* HELLO; returns the features and fills nonce (when the server sends one). */
static uint32_t raw_hello(int fd, uint8_t nonce[KVS_WIRE_NONCE_LEN])
{
    uint8_t out[KVS_WIRE_HDR_LEN], body[256];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO};
    kvs_wire_hdr_encode(out, &h);
    kvt_raw_send_all(fd, out, sizeof(out));
    read_frame(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_HELLO | KVS_OP_REPLY);
    struct kvs_wire_hello hello;
    assert_int_equal(kvs_wire_hello_decode(body, h.body_len, &hello), 0);
    if (hello.features & KVS_FEAT_AUTH) {
        assert_int_equal(h.body_len, KVS_WIRE_HELLO_AUTH_LEN);
        assert_int_equal(kvs_wire_hello_nonce(body, h.body_len, &hello, nonce), 0);
    }
    return hello.features;
}

/* An AUTH frame answering server_nonce with client_nonce and the secret. */
static void auth_frame(uint8_t out[KVS_WIRE_HDR_LEN + KVS_WIRE_AUTH_LEN],
                       const uint8_t server_nonce[KVS_WIRE_NONCE_LEN],
                       const uint8_t client_nonce[KVS_WIRE_NONCE_LEN], const char *secret)
{
    uint8_t mac[KVS_WIRE_MAC_LEN];
    kvs_auth_client_mac((const uint8_t *)secret, strlen(secret), server_nonce, client_nonce, mac);
    struct kvs_wire_hdr h = {.opcode = KVS_OP_AUTH, .body_len = KVS_WIRE_AUTH_LEN, .id = 7};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_auth_encode(out + KVS_WIRE_HDR_LEN, client_nonce, mac);
}

/* A one-key GET frame. */
static size_t get_frame(uint8_t *out, const char *key)
{
    size_t klen = strlen(key);
    struct kvs_wire_hdr h = {.opcode = KVS_OP_GET,
                             .count = 1,
                             .body_len = (uint32_t)(KVS_WIRE_ENTRY_LEN + klen),
                             .id = 9};
    kvs_wire_hdr_encode(out, &h);
    kvs_wire_entry_encode(out + KVS_WIRE_HDR_LEN, (uint16_t)klen, 64);
    memcpy(out + KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN, key, klen);
    return KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN + klen;
}

/* STATS on an authenticated raw connection: the value of counter name. */
static unsigned long long raw_stat(int fd, const char *name)
{
    static uint8_t body[1u << 16];
    uint8_t out[KVS_WIRE_HDR_LEN];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_STATS, .id = 3};
    kvs_wire_hdr_encode(out, &h);
    kvt_raw_send_all(fd, out, sizeof(out));
    read_frame(fd, &h, body, sizeof(body) - 1);
    assert_int_equal(h.opcode, KVS_OP_STATS | KVS_OP_REPLY);
    body[h.body_len] = '\0';
    char pat[64];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr((const char *)body, pat);
    assert_non_null(p);
    return strtoull(p + strlen(pat), NULL, 10);
}

/* A raw connection that passed AUTH with the right secret (the server's proof checked). */
static int authed_conn(void)
{
    int fd = kvt_raw_connect(auth_srv.port, 10);
    uint8_t snonce[KVS_WIRE_NONCE_LEN], cnonce[KVS_WIRE_NONCE_LEN], frame[88], body[256];
    assert_true(raw_hello(fd, snonce) & KVS_FEAT_AUTH);
    kvs_auth_nonce(cnonce);
    auth_frame(frame, snonce, cnonce, SECRET);
    kvt_raw_send_all(fd, frame, sizeof(frame));
    struct kvs_wire_hdr h;
    read_frame(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_AUTH | KVS_OP_REPLY);
    assert_int_equal(h.id, 7);
    assert_int_equal(h.body_len, KVS_WIRE_MAC_LEN);
    uint8_t want[KVS_WIRE_MAC_LEN];
    kvs_auth_server_mac((const uint8_t *)SECRET, strlen(SECRET), cnonce, snonce, want);
    assert_memory_equal(body, want, KVS_WIRE_MAC_LEN);
    return fd;
}

static void test_raw_request_before_auth_refused(void **state)
{
    (void)state;
    int admin = authed_conn();
    unsigned long long failures = raw_stat(admin, "auth_failures");

    /* A GET with no HELLO at all. */
    uint8_t frame[128];
    int fd = kvt_raw_connect(auth_srv.port, 10);
    kvt_raw_send_all(fd, frame, get_frame(frame, "auth/a"));
    expect_eacces_and_close(fd);
    close(fd);

    /* A PUT after HELLO, before AUTH. */
    uint8_t nonce[KVS_WIRE_NONCE_LEN];
    fd = kvt_raw_connect(auth_srv.port, 10);
    raw_hello(fd, nonce);
    struct kvs_wire_hdr h = {
        .opcode = KVS_OP_PUT, .count = 1, .body_len = KVS_WIRE_ENTRY_LEN + 6 + 5, .id = 4};
    kvs_wire_hdr_encode(frame, &h);
    kvs_wire_entry_encode(frame + KVS_WIRE_HDR_LEN, 6, 5);
    memcpy(frame + KVS_WIRE_HDR_LEN + KVS_WIRE_ENTRY_LEN,
           "auth/x"
           "hello",
           11);
    kvt_raw_send_all(fd, frame, KVS_WIRE_HDR_LEN + h.body_len);
    expect_eacces_and_close(fd);
    close(fd);

    /* STATS is refused too: counters are not for strangers. */
    fd = kvt_raw_connect(auth_srv.port, 10);
    h = (struct kvs_wire_hdr){.opcode = KVS_OP_STATS, .id = 5};
    kvs_wire_hdr_encode(frame, &h);
    kvt_raw_send_all(fd, frame, KVS_WIRE_HDR_LEN);
    expect_eacces_and_close(fd);
    close(fd);

    /* Nothing was stored, and the refusals were counted. */
    assert_int_equal(raw_stat(admin, "auth_failures"), failures + 3);
    kvt_raw_send_all(admin, frame, get_frame(frame, "auth/x"));
    uint8_t body[256];
    read_frame(admin, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_GET | KVS_OP_REPLY);
    assert_int_equal((int32_t)kvs_get_u32(body), -ENOENT);
    close(admin);
}

static void test_wrong_mac_refused(void **state)
{
    (void)state;
    int admin = authed_conn();
    unsigned long long failures = raw_stat(admin, "auth_failures");
    int fd = kvt_raw_connect(auth_srv.port, 10);
    uint8_t snonce[KVS_WIRE_NONCE_LEN], cnonce[KVS_WIRE_NONCE_LEN], frame[88];
    raw_hello(fd, snonce);
    kvs_auth_nonce(cnonce);
    auth_frame(frame, snonce, cnonce, "not the secret");
    kvt_raw_send_all(fd, frame, sizeof(frame));
    expect_eacces_and_close(fd);
    close(fd);
    assert_int_equal(raw_stat(admin, "auth_failures"), failures + 1);
    close(admin);
}

/* An AUTH frame that worked once fails on a new connection: its server nonce is new. */
static void test_replayed_auth_refused(void **state)
{
    (void)state;
    uint8_t n1[KVS_WIRE_NONCE_LEN], n2[KVS_WIRE_NONCE_LEN], cnonce[KVS_WIRE_NONCE_LEN];
    uint8_t frame[88], body[256];
    struct kvs_wire_hdr h;

    int fd = kvt_raw_connect(auth_srv.port, 10);
    raw_hello(fd, n1);
    kvs_auth_nonce(cnonce);
    auth_frame(frame, n1, cnonce, SECRET);
    kvt_raw_send_all(fd, frame, sizeof(frame));
    read_frame(fd, &h, body, sizeof(body));
    assert_int_equal(h.opcode, KVS_OP_AUTH | KVS_OP_REPLY); /* accepted there */
    /* The same frame again on that connection: its nonce is used up. */
    kvt_raw_send_all(fd, frame, sizeof(frame));
    expect_eacces_and_close(fd);
    close(fd);

    fd = kvt_raw_connect(auth_srv.port, 10);
    raw_hello(fd, n2);
    assert_memory_not_equal(n1, n2, KVS_WIRE_NONCE_LEN);
    kvt_raw_send_all(fd, frame, sizeof(frame)); /* the recorded frame */
    expect_eacces_and_close(fd);
    close(fd);
}

/* A connection that never authenticates is cut by --stall-timeout, even when idle. */
static void test_unauthenticated_idle_cut(void **state)
{
    (void)state;
    struct kvt_server s;
    char args[256];
    snprintf(args, sizeof(args), "--memory 16M --stall-timeout 1 --auth-file %s", good_file);
    assert_int_equal(kvt_server_start(&s, 0, args), 0);
    int fd = kvt_raw_connect(s.port, 10);
    uint8_t nonce[KVS_WIRE_NONCE_LEN], byte;
    raw_hello(fd, nonce);
    /* The server closes it within a few sweeps; the socket's own timeout bounds the wait (10 s). */
    assert_int_equal(recv(fd, &byte, 1, 0), 0);
    close(fd);
    kvt_server_stop(&s);
}

/* A server without --auth-file sends the 32-byte HELLO and no nonce, as before. */
static void test_plain_server_hello_unchanged(void **state)
{
    (void)state;
    int fd = kvt_raw_connect(plain_srv.port, 10);
    uint8_t out[KVS_WIRE_HDR_LEN], body[256];
    struct kvs_wire_hdr h = {.opcode = KVS_OP_HELLO};
    kvs_wire_hdr_encode(out, &h);
    kvt_raw_send_all(fd, out, sizeof(out));
    read_frame(fd, &h, body, sizeof(body));
    assert_int_equal(h.body_len, KVS_WIRE_HELLO_LEN);
    struct kvs_wire_hello hello;
    assert_int_equal(kvs_wire_hello_decode(body, h.body_len, &hello), 0);
    assert_false(hello.features & KVS_FEAT_AUTH);
    close(fd);
}

int main(void)
{
    assert_int_equal(kvs_auth_init(), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_secret_works),
        cmocka_unit_test(test_wrong_secret_refused),
        cmocka_unit_test(test_no_secret_refused),
        cmocka_unit_test(test_secret_against_plain_server_refused),
        cmocka_unit_test(test_client_refuses_bad_secret_files),
        cmocka_unit_test(test_server_refuses_bad_secret_files),
        cmocka_unit_test(test_raw_request_before_auth_refused),
        cmocka_unit_test(test_wrong_mac_refused),
        cmocka_unit_test(test_replayed_auth_refused),
        cmocka_unit_test(test_plain_server_hello_unchanged),
        cmocka_unit_test(test_unauthenticated_idle_cut),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

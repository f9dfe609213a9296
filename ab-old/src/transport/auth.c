/*
 * auth.c - secret loading and the MACs of the AUTH exchange (see auth.h).
 * No hand-written crypto: HMAC-SHA256, comparison and randomness are
 * libsodium's.
 */
#include "auth.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLIENT_LABEL "kvbatch-auth-v1 client"
#define SERVER_LABEL "kvbatch-auth-v1 server"

int kvs_auth_init(void)
{
    return sodium_init() < 0 ? -EIO : 0;
}

long kvs_auth_load_secret(const char *path, uint8_t secret[KVS_AUTH_MAX_SECRET], char *err,
                          size_t errlen)
{
    long rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read secret file %s: %s", path, strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot stat secret file %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EACCES;
        snprintf(err, errlen, "secret file %s is not a regular file", path);
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = -EACCES;
        snprintf(err, errlen,
                 "secret file %s is accessible by group or others (mode %03o); chmod 600 it", path,
                 (unsigned)(st.st_mode & 0777));
        goto out;
    }
    /* One byte more than the cap tells a file that is too large. */
    uint8_t buf[KVS_AUTH_MAX_SECRET + 1];
    size_t len = 0;
    while (len < sizeof(buf)) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = -errno;
            snprintf(err, errlen, "cannot read secret file %s: %s", path, strerror(errno));
            goto out_wipe;
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    if (len > KVS_AUTH_MAX_SECRET) {
        rc = -EFBIG;
        snprintf(err, errlen, "secret file %s is larger than %d bytes", path, KVS_AUTH_MAX_SECRET);
        goto out_wipe;
    }
    if (len > 0 && buf[len - 1] == '\n') len--;
    if (len == 0) {
        rc = -EINVAL;
        snprintf(err, errlen, "secret file %s is empty", path);
        goto out_wipe;
    }
    memcpy(secret, buf, len);
    rc = (long)len;
out_wipe:
    sodium_memzero(buf, sizeof(buf));
out:
    close(fd);
    return rc;
}

const char *kvs_auth_client_refusal(uint32_t features, size_t secret_len, int *run)
{
    int server_wants = (features & KVS_FEAT_AUTH) != 0;
    *run = server_wants && secret_len > 0;
    if (server_wants == (secret_len > 0)) return NULL;
    return server_wants ? "the server requires authentication; set KVSTORE_AUTH_FILE to a file "
                          "holding its shared secret"
                        : "KVSTORE_AUTH_FILE is set but the server does not authenticate "
                          "(started without --auth-file); refusing it";
}

int kvs_auth_client_open(struct kvs_auth_client *a, const char *transport, const char *peer,
                         const uint8_t *secret, size_t slen, const uint8_t *hello_body,
                         size_t hello_len, const struct kvs_wire_hello *hello)
{
    int run;
    const char *refusal = kvs_auth_client_refusal(hello->features, slen, &run);
    if (refusal) {
        kvs_log(KVS_LOG_WARN, "%s %s: %s", transport, peer, refusal);
        return -EACCES;
    }
    if (!run) return 0;
    if (kvs_wire_hello_nonce(hello_body, hello_len, hello, a->server_nonce) < 0) return -EPROTO;
    kvs_auth_nonce(a->client_nonce);
    kvs_auth_client_mac(secret, slen, a->server_nonce, a->client_nonce, a->mac);
    return 1;
}

int kvs_auth_client_verdict(const struct kvs_auth_client *a, const char *transport,
                            const char *peer, const uint8_t *secret, size_t slen,
                            int32_t error_status, const uint8_t *proof, size_t proof_len)
{
    if (error_status == -EACCES) {
        kvs_log(KVS_LOG_WARN, "%s %s: " KVS_AUTH_REFUSED_TEXT, transport, peer);
        return -EACCES;
    }
    if (error_status != 0 || proof_len != KVS_WIRE_MAC_LEN) return -EPROTO;
    uint8_t want[KVS_WIRE_MAC_LEN];
    kvs_auth_server_mac(secret, slen, a->client_nonce, a->server_nonce, want);
    int ok = kvs_auth_mac_equal(proof, want);
    kvs_auth_wipe(want, sizeof(want));
    if (ok) return 0;
    kvs_log(KVS_LOG_WARN, "%s %s: " KVS_AUTH_BAD_SERVER_TEXT, transport, peer);
    return -EACCES;
}

void kvs_auth_nonce(uint8_t nonce[KVS_WIRE_NONCE_LEN])
{
    randombytes_buf(nonce, KVS_WIRE_NONCE_LEN);
}

void kvs_auth_hmac(const uint8_t *key, size_t klen, const void *const parts[], const size_t lens[],
                   int n, uint8_t mac[KVS_WIRE_MAC_LEN])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, klen);
    for (int i = 0; i < n; i++)
        crypto_auth_hmacsha256_update(&st, parts[i], lens[i]);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

void kvs_auth_client_mac(const uint8_t *secret, size_t slen,
                         const uint8_t server_nonce[KVS_WIRE_NONCE_LEN],
                         const uint8_t client_nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN])
{
    const void *parts[] = {CLIENT_LABEL, server_nonce, client_nonce};
    const size_t lens[] = {sizeof(CLIENT_LABEL) - 1, KVS_WIRE_NONCE_LEN, KVS_WIRE_NONCE_LEN};
    kvs_auth_hmac(secret, slen, parts, lens, 3, mac);
}

void kvs_auth_server_mac(const uint8_t *secret, size_t slen,
                         const uint8_t client_nonce[KVS_WIRE_NONCE_LEN],
                         const uint8_t server_nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN])
{
    const void *parts[] = {SERVER_LABEL, client_nonce, server_nonce};
    const size_t lens[] = {sizeof(SERVER_LABEL) - 1, KVS_WIRE_NONCE_LEN, KVS_WIRE_NONCE_LEN};
    kvs_auth_hmac(secret, slen, parts, lens, 3, mac);
}

int kvs_auth_mac_equal(const uint8_t a[KVS_WIRE_MAC_LEN], const uint8_t b[KVS_WIRE_MAC_LEN])
{
    return sodium_memcmp(a, b, KVS_WIRE_MAC_LEN) == 0;
}

void kvs_auth_wipe(void *p, size_t n)
{
    sodium_memzero(p, n);
}

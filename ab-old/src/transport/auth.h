/*
 * auth.h - the shared-secret challenge-response of KVS_OP_AUTH, shared by
 * kvstored and libkvstore (docs/PROTOCOL.md "Authentication",
 * docs/SECURITY.md). The crypto is libsodium's: HMAC-SHA256, constant-time
 * comparison, the kernel's random source.
 *
 *   client MAC = HMAC-SHA256(secret, "kvbatch-auth-v1 client" | server nonce | client nonce)
 *   server MAC = HMAC-SHA256(secret, "kvbatch-auth-v1 server" | client nonce | server nonce)
 */
#ifndef KVS_AUTH_H
#define KVS_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define KVS_AUTH_MAX_SECRET 1024 /* bytes of secret file kept */

/* Initialises libsodium (idempotent, thread-safe). 0 or -EIO. */
int kvs_auth_init(void);

/*
 * Reads the secret from path into secret[0..KVS_AUTH_MAX_SECRET), stripping
 * one trailing newline. Refuses a file that cannot be read (-errno), that is
 * not a regular file or is readable by group or others (-EACCES), that is
 * empty (-EINVAL) or larger than KVS_AUTH_MAX_SECRET (-EFBIG); err gets a
 * one-line reason naming the file. Returns the secret's length (> 0) or a
 * negative errno.
 */
long kvs_auth_load_secret(const char *path, uint8_t secret[KVS_AUTH_MAX_SECRET], char *err,
                          size_t errlen);

/*
 * The client's rule, the same on every transport, for whether to run AUTH
 * after a HELLO announcing features, holding a secret of secret_len bytes:
 * NULL with *run = 0 (neither side wants it) or 1 (both do), or the reason to
 * refuse the server with -EACCES (exactly one side has a secret).
 */
const char *kvs_auth_client_refusal(uint32_t features, size_t secret_len, int *run);

/* The client's half of one AUTH exchange, the same on every transport. */
struct kvs_auth_client {
    uint8_t server_nonce[KVS_WIRE_NONCE_LEN];
    uint8_t client_nonce[KVS_WIRE_NONCE_LEN];
    uint8_t mac[KVS_WIRE_MAC_LEN]; /* our proof, to send in AUTH */
};

/* What the client logs (after "tcp|rdma HOST:PORT: ") when the server refuses its proof. */
#define KVS_AUTH_REFUSED_TEXT                                                                      \
    "the server refused authentication: KVSTORE_AUTH_FILE does not hold its shared secret"
/* ... and when the server's own proof is wrong. */
#define KVS_AUTH_BAD_SERVER_TEXT                                                                   \
    "the server's authentication proof is wrong: it does not hold the secret of "                  \
    "KVSTORE_AUTH_FILE"

/*
 * Opens the client's half of AUTH after a HELLO whose body is
 * hello_body[0..hello_len), the same on every transport: 0 when neither side
 * wants AUTH; 1 when the exchange runs (a then holds our proof, to send with
 * kvs_wire_auth_encode); -EACCES after one warning "<transport> <peer>:
 * <reason>" when exactly one side has a secret (kvs_auth_client_refusal);
 * -EPROTO when the HELLO carries no nonce.
 */
int kvs_auth_client_open(struct kvs_auth_client *a, const char *transport, const char *peer,
                         const uint8_t *secret, size_t slen, const uint8_t *hello_body,
                         size_t hello_len, const struct kvs_wire_hello *hello);

/*
 * The client's verdict on the server's answer to our AUTH, the same on every
 * transport. error_status: the status of an ERROR reply, or 0 when the server
 * answered AUTH with proof[0..proof_len). 0: both hold the secret; -EACCES
 * after one warning when the server refused our proof (ERROR -EACCES) or its
 * own proof is wrong; -EPROTO for any other answer.
 */
int kvs_auth_client_verdict(const struct kvs_auth_client *a, const char *transport,
                            const char *peer, const uint8_t *secret, size_t slen,
                            int32_t error_status, const uint8_t *proof, size_t proof_len);

/* Fills nonce with fresh random bytes (libsodium: getrandom on Linux). */
void kvs_auth_nonce(uint8_t nonce[KVS_WIRE_NONCE_LEN]);

/* HMAC-SHA256 with a key of any length over the concatenation of n parts. */
void kvs_auth_hmac(const uint8_t *key, size_t klen, const void *const parts[], const size_t lens[],
                   int n, uint8_t mac[KVS_WIRE_MAC_LEN]);

/* The client's proof for (server nonce, client nonce). */
void kvs_auth_client_mac(const uint8_t *secret, size_t slen,
                         const uint8_t server_nonce[KVS_WIRE_NONCE_LEN],
                         const uint8_t client_nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN]);
/* The server's proof for (client nonce, server nonce). */
void kvs_auth_server_mac(const uint8_t *secret, size_t slen,
                         const uint8_t client_nonce[KVS_WIRE_NONCE_LEN],
                         const uint8_t server_nonce[KVS_WIRE_NONCE_LEN],
                         uint8_t mac[KVS_WIRE_MAC_LEN]);

/* 1 if the two MACs are equal, compared in constant time; else 0. */
int kvs_auth_mac_equal(const uint8_t a[KVS_WIRE_MAC_LEN], const uint8_t b[KVS_WIRE_MAC_LEN]);

/* Overwrites n bytes in a way the compiler does not elide. */
void kvs_auth_wipe(void *p, size_t n);

#endif /* KVS_AUTH_H */

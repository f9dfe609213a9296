/*
 * store_c.h - Mooncake Store's C API, served by kvstored (libkvstore_mooncake.so).
 *
 * The declarations are those of mooncake-store/include/store_c.h in
 * kvcache-ai/Mooncake (the function names, argument types and the layout of
 * struct mooncake_replicate_config), so a program written for Mooncake's
 * header builds unchanged with -Iinclude/mooncake and links with
 * -lkvstore_mooncake. Only the empty parameter lists are spelled (void), as C
 * wants; every call written for the original compiles the same.
 *
 * What each call does here, its return values and how kvstored's statuses
 * map to Mooncake's error codes: docs/mooncake.md. In short: 0 (or a byte
 * count, a count, 1/0 for existence) on success; -1 for a NULL argument, as
 * Mooncake's C layer does; otherwise a Mooncake ErrorCode value, e.g. -704
 * (object not found), -600 (invalid parameters: a buffer too small, a store
 * not set up...), -200 (store full), -900 (kvstored unreachable).
 *
 * Memory behind the pointer arguments is not used after a call returns.
 * Every call may be made from any thread once setup has returned 0.
 */
#ifndef MOONCAKE_STORE_C_H
#define MOONCAKE_STORE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *mooncake_store_t;

/* Accepted and checked (replica_num must not be 0); kvstored keeps one copy of a key. */
struct mooncake_replicate_config {
    size_t replica_num;
    int with_soft_pin;
    int with_hard_pin;
    const char **preferred_segments;
    size_t preferred_segments_count;
};
typedef struct mooncake_replicate_config mooncake_replicate_config_t;

/* ---- lifecycle ---- */

/* A store handle, not connected yet (NULL if out of memory). */
mooncake_store_t mooncake_store_create(void);
/* Closes the connections and frees the handle; NULL is a no-op. */
void mooncake_store_destroy(mooncake_store_t store);

/*
 * Connects to the kvstored servers named by master_server_addr
 * ("host:port[,host:port...]"; NULL or "": $KVSTORE_SERVERS, else
 * 127.0.0.1:7070) over protocol "tcp" (also NULL or "") or "rdma", and
 * checks that every server answers. local_hostname (required) is what
 * mooncake_store_get_hostname returns. metadata_server, global_segment_size,
 * local_buffer_size and device_name are accepted and not used: kvstored owns
 * the memory and needs no metadata service.
 */
int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server, uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol, const char *device_name,
                         const char *master_server_addr);

/* Setup with defaults: servers from $KVSTORE_SERVERS, hostname "localhost:12345". */
int mooncake_store_init_all(mooncake_store_t store, const char *protocol, const char *device_name,
                            uint64_t mount_segment_size);

/* 0 when every server answers a round trip now, 1 when not set up, 2 when one does not. */
int mooncake_store_health_check(mooncake_store_t store);

/* ---- put ---- */

int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
                       const mooncake_replicate_config_t *config);

int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
                            const mooncake_replicate_config_t *config);

/* 0 when the call ran, with one result per key in results_out (0 or a negative code). */
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count,
                                  const mooncake_replicate_config_t *config, int *results_out);

/* ---- get ---- */

/* The value's length, or a negative code (-600 when it does not fit size: nothing is copied). */
int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer, size_t size);

/* 0 when the call ran, with one length or negative code per key in results_out. */
int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count, int64_t *results_out);

/* ---- existence, size, hostname ---- */

/* 1 present, 0 absent, or a negative code. */
int mooncake_store_is_exist(mooncake_store_t store, const char *key);

int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                  int *results_out);

/* The value's length (nothing is transferred), or a negative code. */
int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);

/* Copies the setup's local_hostname, NUL-terminated; -1 if it does not fit buf_len. */
int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len);

/* ---- remove ---- */

/* force is accepted: kvstored removes a key even while a read is in flight (the reader keeps its
 * copy). */
int mooncake_store_remove(mooncake_store_t store, const char *key, int force);

/* The number of keys removed, or a negative code. */
int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force);

int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/* ---- buffer registration (zero-copy RDMA; bookkeeping only over TCP) ---- */

int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size);

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STORE_C_H */

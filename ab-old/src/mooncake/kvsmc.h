/*
 * kvsmc.h - inside the Mooncake drop-in (mooncake/store_c.c): the error codes
 * it returns and the calls that Mooncake's C header lacks but its Python API
 * needs. Not exported from libkvstore_mooncake.so; the `mooncake.store`
 * Python module links the same objects.
 */
#ifndef KVSMC_H
#define KVSMC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "store_c.h"

/*
 * The Mooncake ErrorCode values (mooncake-store/include/types.h) this
 * library returns. -1 doubles as what Mooncake's C layer returns for a NULL
 * argument.
 */
enum kvsmc_code {
    KVSMC_OK = 0,
    KVSMC_INTERNAL_ERROR = -1,
    KVSMC_NO_AVAILABLE_HANDLE = -200,
    KVSMC_INVALID_PARAMS = -600,
    KVSMC_ILLEGAL_CLIENT = -601,
    KVSMC_OBJECT_NOT_FOUND = -704,
    KVSMC_RPC_FAIL = -900,
    KVSMC_RPC_TIMEOUT = -901,
    KVSMC_NOT_SUPPORTED = -1012,
};

/* mooncake_store_health_check's results (Mooncake's HealthCheckStatus). */
enum { KVSMC_HC_HEALTHY = 0, KVSMC_HC_NOT_INITIALIZED = 1, KVSMC_HC_UNREACHABLE = 2 };

/* The Mooncake code for a libkvstore status (>= 0 passes through). */
int64_t kvsmc_code(int64_t kvs_status);

/*
 * mooncake_store_get_into; with needed not NULL, a value that does not fit
 * (result KVSMC_INVALID_PARAMS) also has its length put in *needed (else 0),
 * at the cost of one more round trip, so that a caller can allocate and try
 * again.
 */
int64_t kvsmc_get_into_len(mooncake_store_t store, const char *key, void *buffer, size_t size,
                           size_t *needed);

/*
 * The lengths of count values (or a negative code per key) in one batch
 * round trip, transferring no value: mooncake_store_get_size for a batch.
 * 0, or a code when the call could not run.
 */
int kvsmc_batch_get_size(mooncake_store_t store, size_t count, const char *const keys[],
                         int64_t results_out[]);

/*
 * One key's value gathered from / scattered into several buffers, for
 * Mooncake's multi_buffers calls and put_parts. results_out as the batch
 * calls: per key 0 (put) or the value's length (get), or a negative code;
 * the call returns 0, or a code when it could not run. The segments are
 * passed to libkvstore's scatter-gather batch calls (kvs_batch_putv /
 * _getv): no value is staged or copied here.
 */
int kvsmc_batch_put_parts(mooncake_store_t store, size_t count, const char *const keys[],
                          const struct iovec *const iovs[], const size_t niov[],
                          const mooncake_replicate_config_t *config, int results_out[]);
int kvsmc_batch_get_parts(mooncake_store_t store, size_t count, const char *const keys[],
                          const struct iovec *const iovs[], const size_t niov[],
                          int64_t results_out[]);

#endif /* KVSMC_H */

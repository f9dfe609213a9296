/*
 * libkvs_reenter.c - a test double preloaded after the shim
 * (LD_PRELOAD="libkvbatch.so libkvs_reenter.so"): the shim finds this
 * kvs_batch_put_async with dlsym(RTLD_NEXT), and it stores each key with
 * kvs_put, which the dynamic linker binds to the shim's own kvs_put. That is
 * the shape of the Mooncake drop-in under the shim: a batch call the shim's
 * backend makes reaches a call the shim interposes. Each key's status is the
 * single-key call's.
 */
#include <stddef.h>
#include <sys/types.h>

#include "kvstore.h"

__attribute__((visibility("default"))) int
kvs_batch_put_async(kvs_client *c, size_t n, const char *const keys[], const void *const vals[],
                    const size_t lens[], int status[], kvs_done_fn done, void *arg, kvs_op **op)
{
    ssize_t nok = 0;
    for (size_t i = 0; i < n; i++) {
        status[i] = kvs_put(c, keys[i], vals[i], lens[i]);
        nok += status[i] == 0;
    }
    if (op) *op = NULL;
    if (done) done(arg, nok);
    return 0;
}

/*
 * backend_kvs.h - the batcher's backend over one libkvstore client: batches
 * go to kvs_batch_*_async, single-key calls to kvs_put / kvs_get /
 * kvs_exists, reached through a table of those functions (the shim's are the
 * real ones it found with dlsym(RTLD_NEXT): calling libkvstore by name from
 * inside the shim would reach the shim's own kvs_put).
 */
#ifndef KVB_BACKEND_KVS_H
#define KVB_BACKEND_KVS_H

#include "backend.h"
#include "kvstore.h"

struct kvb_kvs_calls {
    int (*batch_put_async)(kvs_client *, size_t, const char *const[], const void *const[],
                           const size_t[], int[], kvs_done_fn, void *, kvs_op **);
    int (*batch_get_async)(kvs_client *, size_t, const char *const[], void *const[], const size_t[],
                           ssize_t[], kvs_done_fn, void *, kvs_op **);
    int (*batch_exists_async)(kvs_client *, size_t, const char *const[], int[], kvs_done_fn, void *,
                              kvs_op **);
    int (*put)(kvs_client *, const char *, const void *, size_t);
    ssize_t (*get)(kvs_client *, const char *, void *, size_t);
    int (*exists)(kvs_client *, const char *);
};

/*
 * Fills *be with a backend over client c through calls (which must outlive
 * it). 0, or -ENOMEM. The batcher given *be owns it (ops->release frees it);
 * until then, kvb_backend_release does.
 */
int kvb_backend_kvs(const struct kvb_kvs_calls *calls, kvs_client *c, struct kvb_backend *be);

#endif

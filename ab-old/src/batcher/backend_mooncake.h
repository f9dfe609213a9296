/*
 * backend_mooncake.h - the batcher's backend over one Mooncake Store handle
 * (mooncake_store_t, Mooncake's C API: store_c.h), whichever library
 * provides that API: Mooncake's own or kvbatch's drop-in.
 *
 * Mooncake's batch calls block, so batches run on a pool of submit threads
 * (at most max_threads, started on demand: the batcher keeps at most
 * KVBATCH_MAX_INFLIGHT batches in flight) and report through `done` as an
 * asynchronous library would. Every library call is a backend call
 * (backend.h). Per key, the result is what the single-key call returns:
 *
 *   put      0 or a negative code (mooncake_store_put_from / _put)
 *   get      the value's length or a negative code (mooncake_store_get_into);
 *            the batcher's size probe (NULL, 0) is mooncake_store_get_size
 *   exists   1, 0 or a negative code (mooncake_store_is_exist)
 *
 * A batch call that fails as a whole (Mooncake returns -1 for a bad
 * argument or a caught exception) is redone key by key with the single-key
 * calls. A batch holding one key twice goes as several calls, in order, each
 * with distinct keys (Mooncake's batch put keys its slices by key).
 *
 * Puts carry a group (kvb_put_group): a replicate config, compared by value
 * (preferred segments included), and a copy mode. A put_from batch passes the
 * caller's buffers (zero-copy: Mooncake wants them registered); a copy-mode
 * batch - mooncake_store_put's values, or write-behind copies, which live in
 * the batcher's memory - is first copied into a staging buffer of the
 * submit thread, registered once with mooncake_store_register_buffer, and
 * sent from there (a value larger than the staging buffer, or a library that
 * refuses to register it, goes through mooncake_store_put, which copies).
 */
#ifndef KVB_BACKEND_MOONCAKE_H
#define KVB_BACKEND_MOONCAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mooncake/store_c.h"
#include "status.h"

/* The library's functions the backend calls (the shim's: found with dlsym(RTLD_NEXT)). */
struct kvb_mc_calls {
    int (*batch_put_from)(mooncake_store_t, const char **, void **, const size_t *, size_t,
                          const mooncake_replicate_config_t *, int *);
    int (*batch_get_into)(mooncake_store_t, const char **, void **, const size_t *, size_t,
                          int64_t *);
    int (*batch_is_exist)(mooncake_store_t, const char **, size_t, int *);
    int (*put)(mooncake_store_t, const char *, const void *, size_t,
               const mooncake_replicate_config_t *);
    int (*put_from)(mooncake_store_t, const char *, void *, size_t,
                    const mooncake_replicate_config_t *);
    int64_t (*get_into)(mooncake_store_t, const char *, void *, size_t);
    int (*is_exist)(mooncake_store_t, const char *);
    int64_t (*get_size)(mooncake_store_t, const char *);
    int (*register_buffer)(mooncake_store_t, void *, size_t); /* NULL: staging is not registered */
    int (*unregister_buffer)(mooncake_store_t, void *);       /* NULL with register_buffer */
};

/* How many distinct (replicate config, copy mode) groups one backend tells apart. */
#define KVB_MC_MAX_GROUPS 64

struct kvb_mc_backend;

/*
 * Fills *be with a backend over store through calls (which must outlive it):
 * at most max_threads submit threads (>= 1), each staging copy-mode puts in
 * up to stage_bytes (> 0). *mc is the backend's handle for kvb_mc_group,
 * valid as long as the backend (the batcher given *be owns it; until then
 * kvb_backend_release frees it). 0, -EINVAL, or -ENOMEM.
 */
int kvb_backend_mooncake(const struct kvb_mc_calls *calls, mooncake_store_t store,
                         unsigned max_threads, size_t stage_bytes, struct kvb_backend *be,
                         struct kvb_mc_backend **mc);

/*
 * The group of a put with config (NULL: the library's default; else compared
 * by value, preferred segments included) and copy mode (true: the value
 * does not stay where it is after the call, or is not in memory the caller
 * registered). Group 0 is (NULL, false). A group's config is copied: the
 * caller's may change after the call. -ENOSPC when KVB_MC_MAX_GROUPS
 * distinct groups are taken (the caller passes the put through), -ENOMEM.
 * Safe from any thread.
 */
int kvb_mc_group(struct kvb_mc_backend *mc, const mooncake_replicate_config_t *config, bool copy);

/* Submit threads started so far. */
unsigned kvb_mc_threads(struct kvb_mc_backend *mc);

/*
 * The stats class of a Mooncake code (its ErrorCode, mooncake-store/include/
 * types.h), for struct kvb_stats' classify: the errno class of the same
 * meaning - -704 OBJECT_NOT_FOUND ENOENT, -600 INVALID_PARAMS EINVAL (a
 * buffer too small included), -10 BUFFER_OVERFLOW ERANGE, -200
 * NO_AVAILABLE_HANDLE ENOSPC, -900 RPC_FAIL EIO, -901 RPC_TIMEOUT ETIMEDOUT,
 * -1012 NOT_SUPPORTED ENOTSUP; any other code: other.
 */
enum kvs_status_class kvb_mc_status_class(long code);

#endif

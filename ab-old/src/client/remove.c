/*
 * remove.c - kvs_remove_matching: one REMOVE_MATCHING request to every
 * server (keys live on all of them), the counts summed.
 */
#include "client_int.h"

#include <errno.h>
#include <string.h>

/* One server's part is in (its key carries the status and the count). */
static void remove_done(struct kvs_req *req)
{
    struct kvs_op *op = req->arg;
    kvc_note_error(op->c, req->keys[0].status < 0 ? req->keys[0].status : req->status);
    kvc_op_put(op, false);
}

ssize_t kvs_remove_matching(kvs_client *c, const char *pattern)
{
    if (!c || !pattern) return -EINVAL;
    size_t plen = strlen(pattern);
    if (plen == 0 || plen > KVS_MAX_KEY) return -EINVAL;
    size_t ns = c->nservers;
    struct kvs_op *op = kvc_op_alloc(c, KVS_OP_REMOVE_MATCHING, ns);
    if (!op) return -ENOMEM;
    for (size_t s = 0; s < ns; s++) {
        struct kvs_key_io *k = &op->keys[s];
        struct kvs_req *req = &op->reqs[s];
        memset(k, 0, sizeof(*k));
        memset(req, 0, sizeof(*req));
        k->key = pattern;
        k->klen = (uint32_t)plen;
        k->index = (uint32_t)s;
        req->opcode = KVS_OP_REMOVE_MATCHING;
        req->n = 1;
        req->keys = k;
        req->done = remove_done;
        req->arg = op;
    }
    kvc_op_run_per_server(op);
    /* A server that could not answer fails the call: its keys may still be there. */
    ssize_t total = 0;
    int first_err = 0;
    for (size_t s = 0; s < ns; s++) {
        int st = op->reqs[s].status < 0 ? op->reqs[s].status : op->keys[s].status;
        if (st < 0 && !first_err) first_err = st;
        if (st == 0) total += (ssize_t)op->keys[s].vlen;
    }
    kvc_op_free(op);
    return first_err ? first_err : total;
}

/*
 * status.h - the one table of kvbatch's result codes: 0, 1 (exists:
 * present) and the negative errno values a call, a key or the wire can
 * carry. Each failure code has its name (also its label in the shim's
 * kvbatch_errors_total{status=...}), the text kvs_strerror() gives, and
 * whether the protocol carries it (the wire code is the negative Linux errno
 * itself, docs/PROTOCOL.md) or whether it is a transport failure (the
 * connection, not the key: what kvs_flush() reports).
 */
#ifndef KVS_STATUS_H
#define KVS_STATUS_H

#include <errno.h>
#include <stddef.h>

#define KVS_STATUS_WIRE      1u /* the protocol carries it (a status a decoder accepts) */
#define KVS_STATUS_TRANSPORT 2u /* a failure of the link to a server, not of one key */

/* X(errno name, kvs_strerror text, flags): the failure codes, in metric-label order. */
#define KVS_STATUS_FAILURES(X)                                                                     \
    X(ENOENT, "key not found", KVS_STATUS_WIRE)                                                    \
    X(ERANGE, "buffer smaller than the value", KVS_STATUS_WIRE)                                    \
    X(E2BIG, "key or value too large", KVS_STATUS_WIRE)                                            \
    X(ENOSPC, "store full, nothing evictable", KVS_STATUS_WIRE)                                    \
    X(EINVAL, "invalid argument", KVS_STATUS_WIRE)                                                 \
    X(ENOMEM, "out of memory", KVS_STATUS_WIRE)                                                    \
    X(ECONNREFUSED, "connection refused", KVS_STATUS_TRANSPORT)                                    \
    X(ECONNRESET, "connection lost", KVS_STATUS_TRANSPORT)                                         \
    X(ETIMEDOUT, "timed out", KVS_STATUS_WIRE | KVS_STATUS_TRANSPORT)                              \
    X(EIO, "transport I/O error", KVS_STATUS_WIRE | KVS_STATUS_TRANSPORT)                          \
    X(EPROTO, "protocol error", KVS_STATUS_WIRE | KVS_STATUS_TRANSPORT)                            \
    X(EBADMSG, "malformed message", KVS_STATUS_WIRE)                                               \
    X(ENOTSUP, "not supported", KVS_STATUS_WIRE)                                                   \
    X(EMSGSIZE, "message too large", KVS_STATUS_WIRE)                                              \
    X(EBUSY, "busy", KVS_STATUS_WIRE)                                                              \
    X(EACCES, "access denied", KVS_STATUS_WIRE)                                                    \
    X(EHOSTUNREACH, "cannot resolve or reach the host", KVS_STATUS_TRANSPORT)                      \
    X(ENODEV, "no RDMA device on this machine", KVS_STATUS_TRANSPORT)

/*
 * Classes for per-status counters: one per failure code (KVS_STATUS_C_ENOENT
 * ...) and KVS_STATUS_C_OTHER for any other negative status.
 */
enum kvs_status_class {
#define KVS_STATUS_CLASS_(e, text, flags) KVS_STATUS_C_##e,
    KVS_STATUS_FAILURES(KVS_STATUS_CLASS_)
#undef KVS_STATUS_CLASS_
        KVS_STATUS_C_OTHER,
    KVS_STATUS_CLASSES
};

/* The class of a negative status (KVS_STATUS_C_OTHER if it is not in the table). */
enum kvs_status_class kvs_status_class(long status);
/* A class's name ("ENOENT"...; "other"): the stats label. */
const char *kvs_status_class_name(enum kvs_status_class c);
/* The negative code of a class (0 for KVS_STATUS_C_OTHER). */
int kvs_status_class_code(enum kvs_status_class c);

/*
 * The text of any status: "success", "present", a failure's text, or
 * "unknown error -N" (in a per-thread buffer, valid until the thread's next
 * call) for a code the table does not hold.
 */
const char *kvs_status_text(long status);
/* The errno name of a failure code ("ENOENT"), or NULL for 0, 1 and unknown codes. */
const char *kvs_status_name(long status);
/* True if the protocol carries status: 0, 1, or a failure flagged KVS_STATUS_WIRE. */
int kvs_status_on_wire(long status);
/* True if status is a transport failure (KVS_STATUS_TRANSPORT). */
int kvs_status_is_transport(long status);

#endif /* KVS_STATUS_H */

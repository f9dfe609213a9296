/*
 * errors.c - the names of libkvstore's result codes (kvs_strerror).
 */
#include "client_int.h"

#include <errno.h>
#include <stdio.h>

const char *kvc_strerror(int status)
{
    static __thread char unknown[48];
    if (status >= 0) return status == 1 ? "present" : "success";
    switch (-status) {
    case ENOENT:
        return "key not found";
    case ERANGE:
        return "buffer smaller than the value";
    case E2BIG:
        return "key or value too large";
    case ENOSPC:
        return "store full, nothing evictable";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory";
    case ECONNREFUSED:
        return "connection refused";
    case ECONNRESET:
        return "connection lost";
    case ETIMEDOUT:
        return "timed out";
    case EIO:
        return "transport I/O error";
    case EPROTO:
        return "protocol error";
    case EBADMSG:
        return "malformed message";
    case ENOTSUP:
        return "not supported";
    case EMSGSIZE:
        return "message too large";
    case EBUSY:
        return "busy";
    case EACCES:
        return "access denied";
    default:
        snprintf(unknown, sizeof(unknown), "unknown error %d", status);
        return unknown;
    }
}

const char *kvs_strerror(int status)
{
    return kvc_strerror(status);
}

/*
 * errors.c - the names of libkvstore's result codes (kvs_strerror), from the
 * one status table (common/status.c).
 */
#include "client_int.h"

#include "status.h"

const char *kvc_strerror(int status)
{
    return kvs_status_text(status);
}

const char *kvs_strerror(int status)
{
    return kvc_strerror(status);
}

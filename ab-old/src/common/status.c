/*
 * status.c - the table of result codes (status.h) and its look-ups.
 */
#include "status.h"

#include <stdio.h>

struct status_row {
    int code; /* negative */
    const char *name, *text;
    unsigned flags;
};

static const struct status_row rows[KVS_STATUS_C_OTHER] = {
#define KVS_STATUS_ROW_(e, text, flags) {-(e), #e, text, flags},
    KVS_STATUS_FAILURES(KVS_STATUS_ROW_)
#undef KVS_STATUS_ROW_
};

/* The row of a negative status, or NULL. */
static const struct status_row *row_of(long status)
{
    for (size_t i = 0; i < KVS_STATUS_C_OTHER; i++)
        if (rows[i].code == status) return &rows[i];
    return NULL;
}

enum kvs_status_class kvs_status_class(long status)
{
    const struct status_row *r = row_of(status);
    return r ? (enum kvs_status_class)(r - rows) : KVS_STATUS_C_OTHER;
}

const char *kvs_status_class_name(enum kvs_status_class c)
{
    return (unsigned)c < KVS_STATUS_C_OTHER ? rows[c].name : "other";
}

int kvs_status_class_code(enum kvs_status_class c)
{
    return (unsigned)c < KVS_STATUS_C_OTHER ? rows[c].code : 0;
}

const char *kvs_status_text(long status)
{
    static __thread char unknown[48];
    if (status >= 0) return status == 1 ? "present" : "success";
    const struct status_row *r = row_of(status);
    if (r) return r->text;
    snprintf(unknown, sizeof(unknown), "unknown error %ld", status);
    return unknown;
}

const char *kvs_status_name(long status)
{
    const struct status_row *r = row_of(status);
    return r ? r->name : NULL;
}

int kvs_status_on_wire(long status)
{
    if (status == 0 || status == 1) return 1; /* the common case first: a reply's every key */
    const struct status_row *r = row_of(status);
    return r && (r->flags & KVS_STATUS_WIRE);
}

int kvs_status_is_transport(long status)
{
    const struct status_row *r = row_of(status);
    return r && (r->flags & KVS_STATUS_TRANSPORT);
}

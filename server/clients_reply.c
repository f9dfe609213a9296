/*
 * clients_reply.c - renders kvstored's CLIENTS body (clients_reply.h) from
 * what proto.c keeps of each connection (kvsd_proto_info).
 */
#include "clients_reply.h"

#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "wire.h"

/* One connection's line at out (room for KVSD_CLIENTS_LINE_MAX + 1); its length. */
static size_t client_line(const struct kvsd_conn_info *ci, char *out)
{
    char cred[40] = "";
    if (ci->peer->pid >= 0)
        snprintf(cred, sizeof(cred), " pid=%d uid=%u", ci->peer->pid, (unsigned)ci->peer->uid);
    int n = snprintf(out, KVSD_CLIENTS_LINE_MAX + 1,
                     "id=%llu addr=%s transport=%s%s age=%llu idle=%llu requests=%llu "
                     "keys_put=%llu keys_get=%llu bytes_in=%llu bytes_out=%llu reply_queue=%llu "
                     "auth=%d\n",
                     (unsigned long long)ci->id, ci->peer->addr, ci->transport, cred,
                     (unsigned long long)(ci->age_ms / 1000),
                     (unsigned long long)(ci->idle_ms / 1000), (unsigned long long)ci->requests,
                     (unsigned long long)ci->keys_put, (unsigned long long)ci->keys_get,
                     (unsigned long long)ci->bytes_in, (unsigned long long)ci->bytes_out,
                     (unsigned long long)ci->reply_queue, ci->authenticated);
    if (n < 0) return 0;
    return (size_t)n < KVSD_CLIENTS_LINE_MAX ? (size_t)n : KVSD_CLIENTS_LINE_MAX;
}

size_t kvsd_clients_text(const struct kvsd_server *srv, uint64_t now_ms, char *buf, size_t cap)
{
    size_t used = 0, room = cap - KVSD_CLIENTS_TRAILER_MAX;
    unsigned listed = 0;
    unsigned long long omitted = 0;
    int full = 0;
    for (const struct kvsd_proto_conn *c = kvsd_proto_next(srv, NULL); c;
         c = kvsd_proto_next(srv, c)) {
        if (!full && listed < KVS_WIRE_CLIENTS_MAX) {
            char line[KVSD_CLIENTS_LINE_MAX + 1];
            struct kvsd_conn_info ci;
            kvsd_proto_info(c, now_ms, &ci);
            size_t n = client_line(&ci, line);
            if (n > 0 && used + n <= room) {
                memcpy(buf + used, line, n);
                used += n;
                listed++;
                continue;
            }
            full = 1; /* the rest are counted: newest first stays a prefix */
        }
        omitted++;
    }
    char trailer[KVSD_CLIENTS_TRAILER_MAX];
    int n = snprintf(trailer, sizeof(trailer), "# listed %u omitted %llu\n", listed, omitted);
    if (n > 0) {
        memcpy(buf + used, trailer, (size_t)n);
        used += (size_t)n;
    }
    return used;
}

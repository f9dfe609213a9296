/*
 * parse.h - the one grammar for the numbers, sizes, durations and endpoints
 * that options and environment variables take, whoever reads them (the
 * shim's KVBATCH_*, libkvstore's KVSTORE_*, kvstored's and the tools'
 * options). Each parser takes the whole string: no blanks, no sign, nothing
 * after the value. Each returns 0 or -EINVAL and writes its output only on 0.
 */
#ifndef KVS_PARSE_H
#define KVS_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* A count: decimal digits only ("0", "128"); refuses "", "-1", "+1", " 1", "0x10", overflow. */
int kvs_parse_uint(const char *s, uint64_t *out);

/*
 * A byte size: decimal digits with an optional unit, case-insensitive:
 * B (bytes); K, KB, KiB; M, MB, MiB; G, GB, GiB. Every unit is a power of
 * 1024 ("4K" = "4KiB" = "4kb" = 4096). Refuses "", "K", "4X", "1.5M",
 * "4 K", " 4K", "-1" and anything over UINT64_MAX bytes.
 */
int kvs_parse_size(const char *s, uint64_t *bytes);

/*
 * A duration: a decimal number, optionally with a fraction ("1.5"), and an
 * optional unit ns, us, ms or s (case-insensitive); a bare number is in
 * bare_unit_ns, the natural unit of the setting (1000 for KVBATCH_WINDOW_US).
 * The result must be a whole number of nanoseconds that fits in 64 bits.
 * Refuses "", "ms", ".5", "5.", "5 ms", "-5", "1e3", "5m".
 */
int kvs_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *ns);

/*
 * A duration for a setting kept in whole units of unit_ns (milliseconds for
 * KVSTORE_TIMEOUT_MS): as kvs_parse_duration with that bare unit, then
 * *units = the duration / unit_ns; refuses one that is not a whole number
 * of units ("1500us" for milliseconds).
 */
int kvs_parse_duration_units(const char *s, uint64_t unit_ns, uint64_t *units);

/* One server or listening address. */
struct kvs_endpoint {
    char scheme[8]; /* "tcp", "rdma", "unix" or "shm" as written (a client may also set "auto"); ""
                       if none */
    /*
     * unix:// and shm:// only: the local socket's path (host and port are
     * then empty, name is the path). The client sets try_local on a bare
     * host:port under KVSTORE_TRANSPORT=auto (docs/client.md).
     */
    char path[108];
    int try_local;
    char host[256];  /* name, IPv4 address or IPv6 address, without brackets */
    char port[8];    /* decimal, no leading zeros (for getaddrinfo) */
    unsigned portno; /* the same port as a number */
    char name[272];  /* "host:port" as written (brackets kept), port as above: the routing name */
};

#define KVS_EP_SCHEME 1u /* a "tcp://" or "rdma://" prefix is allowed */
#define KVS_EP_LOCAL  4u /* so is "unix:///PATH" or "shm:///PATH" (with KVS_EP_SCHEME) */
#define KVS_EP_PORT0  2u /* port 0 is allowed (listen on a free port) */

/*
 * An endpoint: [scheme://]host:port over the len bytes at s. host is a name
 * or an IPv4 address, or any address in brackets ("[::1]:7070"; an IPv6
 * address needs them); it holds no blank, '/', ',' or bracket of its own.
 * port is 1 to 5 digits, 1..65535 (0 too with KVS_EP_PORT0).
 * With KVS_EP_LOCAL, "unix://PATH" or "shm://PATH" names a local socket:
 * PATH is absolute ("unix:///run/kvstored/7070.sock"), at most 107 bytes,
 * without NUL, blank or ','.
 */
int kvs_parse_endpoint(const char *s, size_t len, unsigned flags, struct kvs_endpoint *ep);

struct sockaddr;
/*
 * The other way: an IPv4 or IPv6 socket address as this grammar writes it,
 * "HOST:PORT" or "[V6ADDR]:PORT", numeric, into buf. 0, or -EINVAL (another
 * family, or buf too small).
 */
int kvs_format_sockaddr(const struct sockaddr *sa, unsigned salen, char *buf, size_t cap);

/*
 * The address in kvstored's ready line ("listening on HOST:PORT",
 * "rdma listening on HOST:PORT"): finds marker in text and parses what
 * follows it, up to the end of the line or of text. 0, -ENOENT (no marker)
 * or -EINVAL.
 */
int kvs_parse_listening(const char *text, const char *marker, struct kvs_endpoint *ep);

/*
 * The items of a comma-separated list ("a:1, b:2"): each call gives the next
 * item in *item / *len without the blanks (space, tab) around it and returns
 * 1; a list of n commas has n + 1 items (an empty one included, for the
 * caller to refuse); then it returns 0. *p starts at the list and is the
 * cursor (NULL once the list is done).
 */
int kvs_list_next(const char **p, const char **item, size_t *len);

#endif /* KVS_PARSE_H */

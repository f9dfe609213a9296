/*
 * parse.c - the one grammar for counts, sizes, durations and endpoints
 * (parse.h says what each accepts).
 */
#include "parse.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "clock.h"

struct unit {
    const char *suffix;
    uint64_t mult;
};

/* Reads the leading decimal digits of s into *v; returns the rest, or NULL on none/overflow. */
static const char *parse_digits(const char *s, uint64_t *v)
{
    uint64_t acc = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (acc > (UINT64_MAX - d) / 10) return NULL;
        acc = acc * 10 + d;
    }
    if (p == s) return NULL;
    *v = acc;
    return p;
}

/* Multiplies with an overflow check. */
static int mul_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b) return -EINVAL;
    *out = a * b;
    return 0;
}

/* The multiplier of the unit named by rest (the whole of it), or 0. */
static uint64_t unit_of(const struct unit *units, size_t n, const char *rest)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(rest, units[i].suffix) == 0) return units[i].mult;
    return 0;
}

int kvs_parse_uint(const char *s, uint64_t *out)
{
    uint64_t n;
    const char *rest = s ? parse_digits(s, &n) : NULL;
    if (!rest || *rest) return -EINVAL;
    *out = n;
    return 0;
}

int kvs_parse_size(const char *s, uint64_t *bytes)
{
    static const struct unit units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ull << 10},
        {"kb", 1ull << 10},
        {"kib", 1ull << 10},
        {"m", 1ull << 20},
        {"mb", 1ull << 20},
        {"mib", 1ull << 20},
        {"g", 1ull << 30},
        {"gb", 1ull << 30},
        {"gib", 1ull << 30},
    };
    uint64_t n;
    const char *rest = s ? parse_digits(s, &n) : NULL;
    if (!rest) return -EINVAL;
    uint64_t mult = unit_of(units, sizeof(units) / sizeof(units[0]), rest);
    if (!mult) return -EINVAL;
    return mul_checked(n, mult, bytes);
}

int kvs_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *ns)
{
    static const struct unit units[] = {
        {"ns", 1},
        {"us", KVS_NS_PER_US},
        {"ms", KVS_NS_PER_MS},
        {"s", KVS_NS_PER_S},
    };
    uint64_t whole, frac = 0, scale = 1;
    const char *rest = s ? parse_digits(s, &whole) : NULL;
    if (!rest) return -EINVAL;
    if (*rest == '.') {
        const char *f = ++rest;
        /* Trailing zeros add no precision; more than 9 other digits cannot be whole ns. */
        const char *last = f;
        for (; *rest >= '0' && *rest <= '9'; rest++)
            if (*rest != '0') last = rest + 1;
        if (rest == f || last - f > 9) return -EINVAL;
        for (const char *p = f; p < last; p++) {
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    uint64_t mult = *rest ? unit_of(units, sizeof(units) / sizeof(units[0]), rest) : bare_unit_ns;
    if (!mult && *rest) return -EINVAL;
    uint64_t w, f;
    if (mul_checked(whole, mult, &w) < 0 || mul_checked(frac, mult, &f) < 0) return -EINVAL;
    if (f % scale != 0) return -EINVAL; /* finer than a nanosecond */
    f /= scale;
    if (w > UINT64_MAX - f) return -EINVAL;
    *ns = w + f;
    return 0;
}

int kvs_parse_duration_units(const char *s, uint64_t unit_ns, uint64_t *units)
{
    uint64_t ns;
    if (unit_ns == 0 || kvs_parse_duration(s, unit_ns, &ns) < 0 || ns % unit_ns != 0)
        return -EINVAL;
    *units = ns / unit_ns;
    return 0;
}

int kvs_parse_listening(const char *text, const char *marker, struct kvs_endpoint *ep)
{
    const char *at = strstr(text, marker);
    if (!at) return -ENOENT;
    at += strlen(marker);
    return kvs_parse_endpoint(at, strcspn(at, "\n"), 0, ep);
}

int kvs_list_next(const char **p, const char **item, size_t *len)
{
    const char *s = *p;
    if (!s) return 0;
    const char *end = strchr(s, ',');
    *p = end ? end + 1 : NULL;
    if (!end) end = s + strlen(s);
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *item = s;
    *len = (size_t)(end - s);
    return 1;
}

/* "unix://PATH" / "shm://PATH" (scheme slen bytes at s) into *ep, as kvs_parse_endpoint. */
static int parse_local(const char *s, size_t len, size_t slen, unsigned flags,
                       struct kvs_endpoint *ep)
{
    static const char *const schemes[] = {"unix", "shm"};
    struct kvs_endpoint e;
    memset(&e, 0, sizeof(e));
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (slen == strlen(schemes[i]) && memcmp(s, schemes[i], slen) == 0)
            memcpy(e.scheme, schemes[i], slen + 1);
    if (!e.scheme[0] || !(flags & KVS_EP_LOCAL)) return -EINVAL;
    const char *path = s + slen + 3;
    size_t plen = len - slen - 3;
    if (plen < 2 || path[0] != '/' || plen >= sizeof(e.path)) return -EINVAL;
    for (size_t i = 0; i < plen; i++)
        if (strchr(" \t,", path[i]) || path[i] == '\0') return -EINVAL;
    memcpy(e.path, path, plen);
    memcpy(e.name, path, plen);
    *ep = e;
    return 0;
}

int kvs_parse_endpoint(const char *s, size_t len, unsigned flags, struct kvs_endpoint *ep)
{
    static const char *const schemes[] = {"tcp", "rdma"};
    struct kvs_endpoint e;
    memset(&e, 0, sizeof(e));
    if (!s) return -EINVAL;
    const char *sep = memmem(s, len, "://", 3);
    if (sep) {
        size_t slen = (size_t)(sep - s);
        if (!(flags & KVS_EP_SCHEME)) return -EINVAL;
        for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
            if (slen == strlen(schemes[i]) && memcmp(s, schemes[i], slen) == 0)
                memcpy(e.scheme, schemes[i], slen + 1);
        if (!e.scheme[0]) return parse_local(s, len, slen, flags, ep);
        len -= slen + 3;
        s = sep + 3;
    }
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ':') colon = s + i;
    if (!colon) return -EINVAL;
    size_t hlen = (size_t)(colon - s), plen = len - hlen - 1;
    const char *host = s;
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    } else if (memchr(host, ':', hlen)) {
        return -EINVAL; /* an IPv6 address needs brackets */
    }
    if (hlen == 0 || hlen >= sizeof(e.host) || plen == 0 || plen > 5) return -EINVAL;
    for (size_t i = 0; i < hlen; i++)
        if (strchr(" \t/,[]", host[i]) || host[i] == '\0') return -EINVAL;
    unsigned port = 0;
    for (size_t i = 0; i < plen; i++) {
        if (colon[1 + i] < '0' || colon[1 + i] > '9') return -EINVAL;
        port = port * 10 + (unsigned)(colon[1 + i] - '0');
    }
    if (port > 65535 || (port == 0 && !(flags & KVS_EP_PORT0))) return -EINVAL;
    memcpy(e.host, host, hlen);
    snprintf(e.port, sizeof(e.port), "%u", port);
    e.portno = port;
    snprintf(e.name, sizeof(e.name), "%.*s:%u", (int)(colon - s), s, port);
    *ep = e;
    return 0;
}

int kvs_format_sockaddr(const struct sockaddr *sa, unsigned salen, char *buf, size_t cap)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
        getnameinfo(sa, (socklen_t)salen, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return -EINVAL;
    int n = snprintf(buf, cap, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
    return n > 0 && (size_t)n < cap ? 0 : -EINVAL;
}

/*
 * config.c - a client's configuration: the environment (KVSTORE_TIMEOUT_MS,
 * KVSTORE_CONNECT_TIMEOUT_MS, KVSTORE_SHM_SIZE, KVSTORE_AUTH_FILE, KVSTORE_TRANSPORT,
 * KVSTORE_SERVERS) and the server list "[scheme://]host:port[,...]", each
 * entry with the transport that serves it.
 *
 * A bad timeout gets one warning naming the variable and its default is
 * used; a bad server list or auth file makes kvs_open fail.
 */
#include "client_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"

#define DEFAULT_TIMEOUT_MS 10000
#define MAX_CONNECT_MS     5000
#define DEFAULT_SHM_SIZE   (32ull << 20)
#define SHM_ALIGN          KVS_WIRE_SHM_MIN /* and the smallest ring */

/* An environment variable holding milliseconds in [1, max], else def (with a warning). */
static int env_ms(const char *name, int def, int max)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    uint64_t ms;
    if (kvs_parse_duration_units(v, KVS_NS_PER_MS, &ms) < 0 || ms < 1 || ms > (uint64_t)max) {
        kvs_log(KVS_LOG_WARN, "%s=%s is not a duration of 1..%dms (bare number: ms); using %d",
                name, v, max, def);
        return def;
    }
    return (int)ms;
}

/*
 * KVSTORE_SHM_SIZE: a size of 0 (no shared memory) or 64 KiB..16 GiB,
 * rounded up to 64 KiB; else the default (with a warning).
 */
static uint64_t env_shm_size(void)
{
    const char *v = getenv("KVSTORE_SHM_SIZE");
    if (!v || !*v) return DEFAULT_SHM_SIZE;
    uint64_t n;
    if (kvs_parse_size(v, &n) < 0 || (n != 0 && (n < SHM_ALIGN || n > KVC_SHM_MAX))) {
        kvs_log(KVS_LOG_WARN, "KVSTORE_SHM_SIZE=%s is not 0 or a size of 64KiB..16GiB; using %llu",
                v, (unsigned long long)DEFAULT_SHM_SIZE);
        return DEFAULT_SHM_SIZE;
    }
    return (n + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
}

/*
 * Parses one "[scheme://]host:port" or "unix://PATH" / "shm://PATH" into ep.
 * host may be a name, an IPv4 address or a bracketed IPv6 address. A bare
 * host:port follows KVSTORE_TRANSPORT=tcp|rdma|auto: unset or auto lets the
 * tcp transport use the server's local socket when the server is on this
 * host (ep->try_local), auto also composes it with rdma (transport/auto.c);
 * tcp is TCP only. 0, -EINVAL, -EBADR (KVSTORE_TRANSPORT is none of
 * tcp|rdma|auto) or -ENOTSUP (no such transport in this build).
 */
static int parse_endpoint(const char *s, size_t len, struct kvs_endpoint *ep,
                          const struct kvs_transport_ops **ops)
{
    int rc = kvs_parse_endpoint(s, len, KVS_EP_SCHEME | KVS_EP_LOCAL, ep);
    if (rc < 0) return rc;
    *ops = &kvs_tcp_transport; /* it also serves unix:// and shm:// (tcp_local.c) */
    if (!ep->scheme[0]) {
        const char *t = getenv("KVSTORE_TRANSPORT");
        ep->try_local = !t || !*t || strcmp(t, "auto") == 0;
        if (t && *t) {
            if (strcmp(t, "tcp") != 0 && strcmp(t, "rdma") != 0 && strcmp(t, "auto") != 0)
                return -EBADR;
            snprintf(ep->scheme, sizeof(ep->scheme), "%s", t);
        }
    }
    if (strcmp(ep->scheme, "rdma") == 0) {
        if (&kvs_rdma_transport == NULL) return -ENOTSUP;
        *ops = &kvs_rdma_transport;
    } else if (strcmp(ep->scheme, "auto") == 0) {
        if (&kvs_auto_transport == NULL) return -ENOTSUP;
        *ops = &kvs_auto_transport;
    }
    if (!ep->scheme[0]) snprintf(ep->scheme, sizeof(ep->scheme), "tcp");
    return 0;
}

/* Parses the server list into c->servers; 0, -EINVAL, -EBADR (bad KVSTORE_TRANSPORT), -ENOTSUP or
 * -ENOMEM. */
static int parse_servers(kvs_client *c, const char *list)
{
    size_t max = 1;
    for (const char *p = list; *p; p++)
        if (*p == ',') max++;
    c->servers = calloc(max, sizeof(*c->servers));
    c->server_hashes = calloc(max, sizeof(*c->server_hashes));
    if (!c->servers || !c->server_hashes) return -ENOMEM;
    const char *p = list, *item;
    size_t len;
    while (kvs_list_next(&p, &item, &len)) {
        struct server_link *sv = &c->servers[c->nservers];
        int rc = parse_endpoint(item, len, &sv->ep, &sv->ops);
        if (rc < 0) return rc;
        for (size_t i = 0; i < c->nservers; i++)
            if (strcmp(c->servers[i].ep.name, sv->ep.name) == 0) return -EINVAL; /* listed twice */
        c->server_hashes[c->nservers] = kvs_route_server_hash(sv->ep.name);
        c->nservers++;
    }
    return 0;
}

/* KVSTORE_AUTH_FILE's secret into cfg (none when unset); 0 or the file's error. */
static int load_auth(struct kvs_transport_config *cfg)
{
    const char *auth_file = getenv("KVSTORE_AUTH_FILE");
    if (!auth_file || !*auth_file) return 0;
    char why[512] = "cannot initialise libsodium";
    long len = kvs_auth_init();
    if (len == 0) len = kvs_auth_load_secret(auth_file, cfg->auth_secret, why, sizeof(why));
    if (len < 0) {
        kvs_log(KVS_LOG_ERROR, "KVSTORE_AUTH_FILE: %s", why);
        return (int)len;
    }
    cfg->auth_secret_len = (size_t)len;
    return 0;
}

int kvc_config_load(kvs_client *c, const char *servers)
{
    if (!servers) {
        servers = getenv("KVSTORE_SERVERS");
        if (!servers || !*servers) servers = KVS_DEFAULT_SERVERS;
    }
    c->cfg.timeout_ms = env_ms("KVSTORE_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 3600 * 1000);
    int conn_def = c->cfg.timeout_ms < MAX_CONNECT_MS ? c->cfg.timeout_ms : MAX_CONNECT_MS;
    c->cfg.connect_timeout_ms = env_ms("KVSTORE_CONNECT_TIMEOUT_MS", conn_def, 3600 * 1000);
    c->cfg.shm_size = env_shm_size();

    int rc = parse_servers(c, servers);
    if (rc == -EBADR) {
        kvs_log(KVS_LOG_ERROR, "KVSTORE_TRANSPORT=%s: expected tcp, rdma or auto",
                getenv("KVSTORE_TRANSPORT"));
        return -EINVAL;
    }
    if (rc < 0) {
        kvs_log(KVS_LOG_ERROR, "bad server list \"%s\": %s", servers,
                rc == -ENOTSUP ? "this build has no such transport"
                               : "expected [tcp://]host:port or unix:///PATH[,...]");
        return rc;
    }
    return load_auth(&c->cfg);
}

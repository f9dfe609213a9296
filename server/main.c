/*
 * main.c - kvstored: options, signals, start and stop. The work is done by
 * net (sockets), proto (requests) and store/pool (memory).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"
#include "clock.h"
#include "local.h"
#include "parse.h"
#include "proto.h"
#include "rdma.h"

#define EXIT_USAGE 2

struct options {
    char host[256];
    char port[8];
    uint64_t memory;
    uint64_t max_object;
    uint64_t max_frame;
    long max_conns;
    long stall_timeout_s;
    uint64_t put_timeout_ms;
    int verbose;
    int rdma; /* --rdma-listen given */
    char rdma_host[256];
    char rdma_port[8];
    long rdma_lease_ms;
    const char *auth_file; /* --auth-file, or NULL */
    const char *unix_path; /* --unix PATH, "none", or NULL: the default (common/local.h) */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvstored [--listen HOST:PORT] [--memory SIZE] [--max-object SIZE]\n"
            "                [--max-frame SIZE] [--max-conns N] [--stall-timeout S]\n"
            "                [--put-timeout S]\n"
            "                [--rdma-listen HOST:PORT] [--rdma-lease-ms N] [--auth-file PATH]\n"
            "                [--unix PATH|none] [--verbose] [--help] [--version]\n"
            "\n"
            "  --listen HOST:PORT  address to bind, nothing else (default 127.0.0.1:7070;\n"
            "                      port 0 picks a free port; [v6addr]:PORT for IPv6)\n"
            "  --memory SIZE       value memory, allocated once (default 1GiB, at least 1MiB)\n"
            "  --max-object SIZE   largest value (default 64MiB, or --memory if smaller)\n"
            "  --max-frame SIZE    largest request body (default 256MiB, below 4GiB)\n"
            "  --max-conns N       connections served at once (default 1024)\n"
            "  --stall-timeout S   close a connection stuck S seconds mid-request or with\n"
            "                      unsent replies (default 60; 0: never)\n"
            "  --put-timeout S     drop a PUT slot whose value is not all in S seconds after\n"
            "                      it was reserved, and close its connection (default 30;\n"
            "                      0: never)\n"
            "  --rdma-listen HOST:PORT  also serve RDMA on an RDMA device's address\n"
            "                      (off, with one line on stderr, when there is no device)\n"
            "  --rdma-lease-ms N   cut a client holding an RDMA slot longer (default 10000)\n"
            "  --auth-file PATH    require clients to prove they hold the secret in PATH\n"
            "                      (mode 600; clients: KVSTORE_AUTH_FILE), on TCP and RDMA\n"
            "  --unix PATH|none    the same-host socket (default $KVSTORE_RUNTIME_DIR, else\n"
            "                      $XDG_RUNTIME_DIR, else /tmp, /kvstored-PORT-NETNS.sock:\n"
            "                      where clients on this host look; none: TCP only).\n"
            "                      Peers must run as kvstored's uid or root\n"
            "  --verbose           log connections and protocol errors on stderr\n"
            "\n"
            "SIZE is bytes, or a number with B, K, KB, KiB, M, MB, MiB, G, GB, GiB (any\n"
            "case): powers of 1024. A duration (S, N) is a number, optionally with a\n"
            "fraction and a unit ns, us, ms or s; a bare number is in the option's unit.\n"
            "Prints \"listening on HOST:PORT\" (then \"local socket PATH\") once ready; SIGTERM or "
            "SIGINT stop it cleanly.\n");
}

/* HOST:PORT or [V6]:PORT (port 0: a free one) into host / port. */
static int parse_listen(const char *s, char host[256], char port[8])
{
    struct kvs_endpoint ep;
    if (kvs_parse_endpoint(s, strlen(s), KVS_EP_PORT0, &ep) < 0) return -1;
    memcpy(host, ep.host, sizeof(ep.host));
    memcpy(port, ep.port, sizeof(ep.port));
    return 0;
}

static int bad_option(const char *name, const char *value, const char *accepted)
{
    fprintf(stderr, "kvstored: bad %s '%s': %s\n", name, value, accepted);
    return -1;
}

static int parse_options(int argc, char **argv, struct options *opt)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"memory", required_argument, NULL, 'm'},
        {"max-object", required_argument, NULL, 'o'},
        {"max-frame", required_argument, NULL, 'f'},
        {"max-conns", required_argument, NULL, 'c'},
        {"stall-timeout", required_argument, NULL, 's'},
        {"put-timeout", required_argument, NULL, 'p'},
        {"rdma-listen", required_argument, NULL, 'r'},
        {"rdma-lease-ms", required_argument, NULL, 'L'},
        {"auth-file", required_argument, NULL, 'a'},
        {"unix", required_argument, NULL, 'u'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    *opt = (struct options){.host = "127.0.0.1",
                            .port = "7070",
                            .memory = 1ull << 30,
                            .max_object = 64ull << 20,
                            .max_frame = 256ull << 20,
                            .max_conns = 1024,
                            .stall_timeout_s = 60,
                            .put_timeout_ms = 30000,
                            .rdma_lease_ms = 10000};
    opterr = 0;
    int ch, max_object_set = 0;
    while ((ch = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        uint64_t v;
        switch (ch) {
        case 'l':
            if (parse_listen(optarg, opt->host, opt->port) < 0)
                return bad_option("--listen", optarg, "expected HOST:PORT, port 0..65535");
            break;
        case 'm':
            if (kvs_parse_size(optarg, &opt->memory) < 0 || opt->memory < (1u << 20) ||
                opt->memory > (1ull << 44))
                return bad_option("--memory", optarg, "a size from 1MiB to 16TiB (e.g. 512M, 4G)");
            break;
        case 'o':
            if (kvs_parse_size(optarg, &opt->max_object) < 0 || opt->max_object == 0 ||
                opt->max_object > UINT32_MAX)
                return bad_option("--max-object", optarg, "a size from 1 byte to 4GiB-1");
            max_object_set = 1;
            break;
        case 'f':
            if (kvs_parse_size(optarg, &opt->max_frame) < 0 || opt->max_frame < 1024 ||
                opt->max_frame > UINT32_MAX)
                return bad_option("--max-frame", optarg, "a size from 1KiB to 4GiB-1");
            break;
        case 'c':
            if (kvs_parse_uint(optarg, &v) < 0 || v < 1 || v > 1000000)
                return bad_option("--max-conns", optarg, "a number from 1 to 1000000");
            opt->max_conns = (long)v;
            break;
        case 'r':
            if (parse_listen(optarg, opt->rdma_host, opt->rdma_port) < 0)
                return bad_option("--rdma-listen", optarg, "expected HOST:PORT, port 0..65535");
            opt->rdma = 1;
            break;
        case 'L':
            if (kvs_parse_duration_units(optarg, KVS_NS_PER_MS, &v) < 0 || v < 10 || v > 3600000)
                return bad_option("--rdma-lease-ms", optarg,
                                  "a duration from 10ms to 3600s (bare number: ms)");
            opt->rdma_lease_ms = (long)v;
            break;
        case 's':
            if (kvs_parse_duration_units(optarg, KVS_NS_PER_S, &v) < 0 || v > 86400)
                return bad_option("--stall-timeout", optarg,
                                  "whole seconds from 0 (never) to 86400 (bare number: s)");
            opt->stall_timeout_s = (long)v;
            break;
        case 'p':
            if (kvs_parse_duration(optarg, KVS_NS_PER_S, &v) < 0 || v % KVS_NS_PER_MS != 0 ||
                v > 86400 * KVS_NS_PER_S)
                return bad_option(
                    "--put-timeout", optarg,
                    "a duration from 0 (never) to 86400s in whole ms (bare number: s)");
            opt->put_timeout_ms = v / KVS_NS_PER_MS;
            break;
        case 'v':
            opt->verbose = 1;
            break;
        case 'a':
            opt->auth_file = optarg;
            break;
        case 'u':
            if (optarg[0] != '/' && strcmp(optarg, "none") != 0)
                return bad_option("--unix", optarg, "an absolute path, or none");
            opt->unix_path = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("kvstored %s\n", KVS_VERSION_STRING);
            exit(0);
        case ':':
            fprintf(stderr, "kvstored: %s needs a value\n", argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "kvstored: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvstored: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    uint64_t pool = opt->memory / (1u << 20) * (1u << 20);
    /* The default follows a small --memory down; an explicit larger value is an error. */
    if (!max_object_set && opt->max_object > pool) opt->max_object = pool;
    if (opt->max_object > pool) {
        fprintf(stderr, "kvstored: --max-object (%llu bytes) is larger than --memory (%llu)\n",
                (unsigned long long)opt->max_object, (unsigned long long)pool);
        return -1;
    }
    return 0;
}

/*
 * The local socket (--unix): the given path, or the default one for the
 * port bound (addr: "HOST:PORT"), into upath ("" when none). An explicit
 * path that cannot be served is an error; the default one gets a line on
 * stderr and kvstored serves TCP only.
 */
static int listen_local(struct kvsd_net *net, const struct options *opt, const char *addr,
                        char *upath, size_t len)
{
    char err[256];
    struct kvs_endpoint ep;
    if (opt->unix_path && strcmp(opt->unix_path, "none") == 0) return 0;
    if (opt->unix_path) {
        snprintf(upath, len, "%s", opt->unix_path);
    } else if (kvs_parse_endpoint(addr, strlen(addr), 0, &ep) < 0 ||
               kvs_local_default_path(ep.portno, upath, len) < 0) {
        fprintf(stderr, "kvstored: no default local socket for %s; serving TCP only\n", addr);
        upath[0] = '\0';
        return 0;
    }
    int rc = kvsd_net_listen_local(net, upath, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvstored: %s%s\n", err, opt->unix_path ? "" : "; serving TCP only");
        upath[0] = '\0';
        return opt->unix_path ? rc : 0;
    }
    return 0;
}

/* SIGTERM/SIGINT arrive on a signalfd that the event loop watches. */
static int open_signalfd(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) return -errno;
    int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return fd < 0 ? -errno : fd;
}

int main(int argc, char **argv)
{
    struct options opt;
    if (parse_options(argc, argv, &opt) < 0) return EXIT_USAGE;
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    /* The secret is read once, before anything listens; it stays in this buffer. */
    static uint8_t secret[KVS_AUTH_MAX_SECRET];
    long secret_len = 0;
    if (opt.auth_file) {
        char why[512];
        if (kvs_auth_init() < 0) {
            fprintf(stderr, "kvstored: cannot initialise libsodium\n");
            return 1;
        }
        secret_len = kvs_auth_load_secret(opt.auth_file, secret, why, sizeof(why));
        if (secret_len < 0) {
            fprintf(stderr, "kvstored: --auth-file: %s\n", why);
            return 1;
        }
    }
    int sfd = open_signalfd();
    if (sfd < 0) {
        fprintf(stderr, "kvstored: signalfd: %s\n", strerror(-sfd));
        goto out;
    }

    struct kvsd_server srv;
    struct kvsd_server_limits limits = {.max_object = opt.max_object,
                                        .max_frame = (uint32_t)opt.max_frame,
                                        .out_limit = 4u << 20,
                                        .out_heap_limit = 1u << 20,
                                        .rbuf_size = 64u << 10};
    int rc = kvsd_server_init(&srv, opt.memory, &limits);
    if (rc < 0) {
        fprintf(stderr, "kvstored: cannot allocate %llu bytes of memory: %s\n",
                (unsigned long long)opt.memory, strerror(-rc));
        goto out_signal;
    }
    if (secret_len > 0) {
        srv.auth_secret = secret;
        srv.auth_secret_len = (size_t)secret_len;
        srv.features |= KVS_FEAT_AUTH;
    }

    struct kvsd_net *net;
    char err[256];
    struct kvsd_net_config ncfg = {.host = opt.host,
                                   .port = opt.port,
                                   .max_conns = (int)opt.max_conns,
                                   .stall_timeout_ms = (unsigned)opt.stall_timeout_s * 1000u,
                                   .put_timeout_ms = (unsigned)opt.put_timeout_ms,
                                   .verbose = opt.verbose};
    rc = kvsd_net_create(&srv, &ncfg, &net, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvstored: %s\n", err);
        goto out_server;
    }

    /* Up before "listening on" is printed: whoever waits for that line may connect at once. */
    struct kvsd_rdma *rdma = NULL;
    char rdma_addr[300] = "";
    /* With --auth-file, RDMA peers pass the same AUTH before any slot (server/rdma.c). */
    if (opt.rdma) {
        struct kvsd_rdma_config rcfg = {.host = opt.rdma_host,
                                        .port = opt.rdma_port,
                                        .lease_ms = (unsigned)opt.rdma_lease_ms,
                                        .verbose = opt.verbose};
        rc = kvsd_rdma_create(&srv, &rcfg, &rdma, err, sizeof(err));
        if (rc == -ENODEV) {
            fprintf(stderr, "kvstored: rdma off: %s; serving TCP only\n", err);
        } else if (rc < 0) {
            fprintf(stderr, "kvstored: --rdma-listen %s:%s: %s\n", opt.rdma_host, opt.rdma_port,
                    err);
            goto out_net;
        } else if ((rc = kvsd_net_watch(net, kvsd_rdma_fd(rdma), kvsd_rdma_service, rdma)) < 0 ||
                   (rc = kvsd_rdma_local_addr(rdma, rdma_addr, sizeof(rdma_addr))) < 0) {
            fprintf(stderr, "kvstored: rdma: %s\n", strerror(-rc));
            goto out_net;
        } else {
            srv.features |= KVS_FEAT_RDMA | kvsd_rdma_features(rdma);
            srv.stats_extra = kvsd_rdma_stats;
            srv.stats_extra_arg = rdma;
        }
    }

    char addr[300];
    rc = kvsd_net_local_addr(net, addr, sizeof(addr));
    if (rc < 0) {
        fprintf(stderr, "kvstored: getsockname: %s\n", strerror(-rc));
        goto out_net;
    }
    char upath[108] = "";
    rc = listen_local(net, &opt, addr, upath, sizeof(upath));
    if (rc < 0) goto out_net;
    printf("listening on %s\n", addr);
    if (rdma) printf("rdma listening on %s\n", rdma_addr);
    if (upath[0]) printf("local socket %s\n", upath);
    fflush(stdout);
    if (opt.verbose)
        fprintf(stderr, "kvstored: memory %zu bytes, max object %llu, max frame %llu\n",
                kvsd_pool_size(kvsd_store_pool(srv.store)), (unsigned long long)opt.max_object,
                (unsigned long long)opt.max_frame);

    rc = kvsd_net_run(net, sfd);
    if (rc < 0) {
        fprintf(stderr, "kvstored: event loop: %s\n", strerror(-rc));
        goto out_net;
    }
    if (opt.verbose) fprintf(stderr, "kvstored: stopping\n");
    status = 0;

out_net:
    kvsd_rdma_destroy(rdma);
    kvsd_net_destroy(net);
out_server:
    kvsd_server_fini(&srv);
out_signal:
    close(sfd);
out:
    kvs_auth_wipe(secret, sizeof(secret));
    return status;
}

/*
 * main.c - kvstored: options, signals, start and stop. The work is done by
 * net (sockets), proto (requests) and store/pool (memory).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"
#include "clock.h"
#include "local.h"
#include "log.h"
#include "opts.h"
#include "parse.h"
#include "proto.h"
#include "rdma.h"

struct options {
    struct kvs_endpoint listen;
    uint64_t memory;
    uint64_t max_object; /* 0: not given (64 MiB, or --memory if smaller) */
    uint64_t max_frame;
    int max_conns;
    unsigned stall_timeout_s;
    unsigned put_timeout_ms;
    struct kvs_endpoint rdma_listen; /* host "": no --rdma-listen */
    unsigned rdma_lease_ms;
    int verbose;
    int prefault;          /* --prefault: touch the whole pool at start */
    const char *auth_file; /* --auth-file, or NULL */
    const char *unix_path; /* --unix PATH, "none", or NULL: the default (common/local.h) */
    uint64_t shm_max;      /* --shm-max: the largest region a local client may map; 0: none */
};

#define DEFAULT_MAX_OBJECT (64ull << 20)

static const char usage_text[] = "usage: kvstored [OPTION]...\n"
                                 "The store node: serves libkvstore clients over TCP, a same-host "
                                 "socket and, with --rdma-listen, RDMA.\n\n";

static const char footer_text[] =
    "\nSIZE is bytes, or a number with B, K, KB, KiB, M, MB, MiB, G, GB, GiB (any case):\n"
    "powers of 1024. A duration is a number, optionally with a fraction and a unit ns,\n"
    "us, ms or s; a bare number is in the option's unit.\n"
    "Prints \"listening on HOST:PORT\" (then \"local socket PATH\") once ready; SIGTERM or\n"
    "SIGINT stop it cleanly.\n";

/*
 * The pool is mapped once and touched as it fills: a --memory beyond this
 * machine's RAM + swap would start fine and be killed by the OOM killer
 * later, under load. Refused at start-up instead (a bad option: exit 2).
 */
static int check_memory(uint64_t pool)
{
    struct sysinfo si;
    if (sysinfo(&si) != 0) return 0; /* cannot tell: the kernel will */
    uint64_t unit = si.mem_unit ? si.mem_unit : 1;
    uint64_t ram = (uint64_t)si.totalram * unit, swap = (uint64_t)si.totalswap * unit;
    if (pool <= ram + swap) return 0;
    fprintf(stderr,
            "kvstored: --memory %.1f GiB is more than this machine has (RAM %.1f GiB + swap %.1f "
            "GiB): the pool would be killed when it fills; give at most %.1f GiB\n",
            (double)pool / (1 << 30), (double)ram / (1 << 30), (double)swap / (1 << 30),
            (double)(ram + swap) / (1 << 30));
    return -EINVAL;
}

/* Parses argv into opt: 0, KVOPT_HELP (help or version printed) or -EINVAL (said why). */
static int parse_options(int argc, char **argv, struct options *opt)
{
    *opt = (struct options){.listen = {.host = "127.0.0.1", .port = "7070", .portno = 7070},
                            .memory = 1ull << 30,
                            .max_frame = 256ull << 20,
                            .max_conns = 1024,
                            .stall_timeout_s = 60,
                            .put_timeout_ms = 30000,
                            .rdma_lease_ms = 10000,
                            .shm_max = 1ull << 30};
    const struct kvopt table[] = {
        {"listen", 0, KVOPT_ENDPOINT, KVOPT_TO(opt->listen), "HOST:PORT",
         "address to bind, nothing else (port 0 picks a free port)", .lo = KVS_EP_PORT0},
        {"memory", 0, KVOPT_SIZE, KVOPT_TO(opt->memory), "SIZE", "value memory, allocated once",
         .lo = 1 << 20, .hi = 1ll << 44},
        {"max-object", 0, KVOPT_SIZE, KVOPT_TO(opt->max_object), "SIZE", "largest value", .lo = 1,
         .hi = UINT32_MAX, .dflt = "64M, or --memory if smaller"},
        {"max-frame", 0, KVOPT_SIZE, KVOPT_TO(opt->max_frame), "SIZE", "largest request body",
         .lo = 1024, .hi = UINT32_MAX},
        {"max-conns", 0, KVOPT_COUNT, KVOPT_TO(opt->max_conns), "N", "connections served at once",
         .lo = 1, .hi = 1000000},
        {"stall-timeout", 0, KVOPT_DURATION, KVOPT_TO(opt->stall_timeout_s), "S",
         "close a connection stuck this long mid-request or with unsent replies (0: never)",
         .hi = 86400, .unit_ns = KVS_NS_PER_S},
        {"put-timeout", 0, KVOPT_DURATION, KVOPT_TO(opt->put_timeout_ms), "S",
         "drop a PUT slot whose value is not all in this long after it was reserved, and close "
         "its connection (0: never)",
         .hi = 86400000, .unit_ns = KVS_NS_PER_MS, .bare_ns = KVS_NS_PER_S},
        {"rdma-listen", 0, KVOPT_ENDPOINT, KVOPT_TO(opt->rdma_listen), "HOST:PORT",
         "also serve RDMA on an RDMA device's address (off, with one line on stderr, when there "
         "is no device)",
         .lo = KVS_EP_PORT0, .dflt = "off"},
        {"rdma-lease-ms", 0, KVOPT_DURATION, KVOPT_TO(opt->rdma_lease_ms), "N",
         "cut a client holding an RDMA slot longer", .lo = 10, .hi = 3600000,
         .unit_ns = KVS_NS_PER_MS},
        {"auth-file", 0, KVOPT_STRING, KVOPT_TO(opt->auth_file), "PATH",
         "require clients to prove they hold the secret in PATH (mode 600; clients: "
         "KVSTORE_AUTH_FILE), on TCP, RDMA and the local socket",
         .lo = 1, .dflt = "none"},
        {"unix", 0, KVOPT_STRING, KVOPT_TO(opt->unix_path), "PATH|none",
         "the same-host socket, where clients on this host look (none: TCP only); peers must "
         "run as kvstored's uid or root",
         .accepted = "an absolute path, or none",
         .dflt = "$KVSTORE_RUNTIME_DIR, else $XDG_RUNTIME_DIR, else /tmp, "
                 "/kvstored-PORT-NETNS.sock"},
        {"shm-max", 0, KVOPT_SIZE, KVOPT_TO(opt->shm_max), "SIZE",
         "the largest region of shared memory a client on the local socket may map for its "
         "values (0: values in the socket; docs/shm.md)",
         .lo = 0, .hi = 1ll << 44},
        {"prefault", 0, KVOPT_FLAG, KVOPT_TO(opt->prefault), NULL,
         "take all of --memory at start (else pages as values first reach them): no page "
         "faults later, steady latency from the first request"},
        {"verbose", 'v', KVOPT_FLAG, KVOPT_TO(opt->verbose), NULL,
         "log connections and protocol errors on stderr"},
        {0},
    };
    const struct kvopt_cmd cmd = {
        .name = "kvstored", .usage = usage_text, .footer = footer_text, .opts = table};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc != 0) return rc;
    if (opt->unix_path && opt->unix_path[0] != '/' && strcmp(opt->unix_path, "none") != 0)
        return kvopt_bad("kvstored", "--unix", opt->unix_path, "an absolute path, or none");
    uint64_t pool = opt->memory / (1u << 20) * (1u << 20);
    /* The default follows a small --memory down; an explicit larger value is an error. */
    if (opt->max_object == 0)
        opt->max_object = DEFAULT_MAX_OBJECT < pool ? DEFAULT_MAX_OBJECT : pool;
    if (opt->max_object > pool) {
        fprintf(stderr, "kvstored: --max-object (%llu bytes) is larger than --memory (%llu)\n",
                (unsigned long long)opt->max_object, (unsigned long long)pool);
        return -EINVAL;
    }
    return check_memory(pool);
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

/* Reads --auth-file's secret into secret: its length, 0 without the option, -1 (said why). */
static long load_secret(const struct options *opt, uint8_t secret[KVS_AUTH_MAX_SECRET])
{
    char why[512];
    if (!opt->auth_file) return 0;
    if (kvs_auth_init() < 0) {
        fprintf(stderr, "kvstored: cannot initialise libsodium\n");
        return -1;
    }
    long len = kvs_auth_load_secret(opt->auth_file, secret, why, sizeof(why));
    if (len < 0) fprintf(stderr, "kvstored: --auth-file: %s\n", why);
    return len < 0 ? -1 : len;
}

/*
 * --rdma-listen: the RDMA side, watched by net's loop, its address in addr.
 * No device is no error (TCP only, one line); any other failure is. With
 * --auth-file, RDMA peers pass the same AUTH before any slot (server/rdma.c).
 */
static int start_rdma(struct kvsd_server *srv, struct kvsd_net *net, const struct options *opt,
                      struct kvsd_rdma **out, char *addr, size_t len)
{
    char err[256];
    struct kvsd_rdma *rdma;
    struct kvsd_rdma_config rcfg = {.host = opt->rdma_listen.host,
                                    .port = opt->rdma_listen.port,
                                    .lease_ms = opt->rdma_lease_ms,
                                    .verbose = opt->verbose};
    *out = NULL;
    if (!opt->rdma_listen.host[0]) return 0;
    int rc = kvsd_rdma_create(srv, &rcfg, &rdma, err, sizeof(err));
    if (rc == -ENODEV) {
        fprintf(stderr, "kvstored: rdma off: %s; serving TCP only\n", err);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "kvstored: --rdma-listen %s:%s: %s\n", rcfg.host, rcfg.port, err);
        return rc;
    }
    if ((rc = kvsd_net_watch(net, kvsd_rdma_fd(rdma), kvsd_rdma_service, rdma)) < 0 ||
        (rc = kvsd_rdma_local_addr(rdma, addr, len)) < 0) {
        fprintf(stderr, "kvstored: rdma: %s\n", strerror(-rc));
        kvsd_rdma_destroy(rdma);
        return rc;
    }
    srv->features |= KVS_FEAT_RDMA | kvsd_rdma_features(rdma);
    srv->stats_extra = kvsd_rdma_stats;
    srv->stats_extra_arg = rdma;
    *out = rdma;
    return 0;
}

/*
 * Binds the local socket and prints the lines whoever started kvstored
 * waits for; after them, clients may connect at once.
 */
static int announce(struct kvsd_net *net, const struct kvsd_server *srv, const struct options *opt,
                    const char *rdma_addr)
{
    char addr[300], upath[108] = "";
    int rc = kvsd_net_local_addr(net, addr, sizeof(addr));
    if (rc < 0) {
        fprintf(stderr, "kvstored: getsockname: %s\n", strerror(-rc));
        return rc;
    }
    rc = listen_local(net, opt, addr, upath, sizeof(upath));
    if (rc < 0) return rc;
    printf("listening on %s\n", addr);
    if (rdma_addr[0]) printf("rdma listening on %s\n", rdma_addr);
    if (upath[0]) printf("local socket %s\n", upath);
    fflush(stdout);
    if (opt->verbose)
        kvs_log_server("kvstored", "memory %zu bytes, max object %llu, max frame %llu",
                       kvsd_pool_size(kvsd_store_pool(srv->store)),
                       (unsigned long long)opt->max_object, (unsigned long long)opt->max_frame);
    return 0;
}

int main(int argc, char **argv)
{
    struct options opt;
    int rc = parse_options(argc, argv, &opt);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    /* The secret is read once, before anything listens; it stays in this buffer. */
    static uint8_t secret[KVS_AUTH_MAX_SECRET];
    long secret_len = load_secret(&opt, secret);
    if (secret_len < 0) goto out;
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
                                        .rbuf_size = 64u << 10,
                                        .shm_max = opt.shm_max};
    rc = kvsd_server_init(&srv, opt.memory, &limits);
    if (rc < 0) {
        fprintf(stderr, "kvstored: cannot allocate %llu bytes of memory: %s\n",
                (unsigned long long)opt.memory, strerror(-rc));
        goto out_signal;
    }
    if (opt.prefault && (rc = kvsd_pool_prefault(kvsd_store_pool(srv.store))) < 0) {
        fprintf(stderr, "kvstored: --prefault: cannot take %llu bytes of memory now: %s\n",
                (unsigned long long)opt.memory, strerror(-rc));
        kvsd_server_fini(&srv);
        goto out_signal;
    }
    if (secret_len > 0) {
        srv.auth_secret = secret;
        srv.auth_secret_len = (size_t)secret_len;
        srv.features |= KVS_FEAT_AUTH;
    }

    struct kvsd_net *net;
    char err[256];
    struct kvsd_net_config ncfg = {.host = opt.listen.host,
                                   .port = opt.listen.port,
                                   .max_conns = opt.max_conns,
                                   .stall_timeout_ms = opt.stall_timeout_s * 1000u,
                                   .put_timeout_ms = opt.put_timeout_ms,
                                   .verbose = opt.verbose};
    rc = kvsd_net_create(&srv, &ncfg, &net, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvstored: %s\n", err);
        goto out_server;
    }
    /* Up before "listening on" is printed: whoever waits for that line may connect at once. */
    struct kvsd_rdma *rdma = NULL;
    char rdma_addr[300] = "";
    if (start_rdma(&srv, net, &opt, &rdma, rdma_addr, sizeof(rdma_addr)) < 0 ||
        announce(net, &srv, &opt, rdma_addr) < 0)
        goto out_net;

    rc = kvsd_net_run(net, sfd);
    if (rc < 0) {
        fprintf(stderr, "kvstored: event loop: %s\n", strerror(-rc));
        goto out_net;
    }
    if (opt.verbose) kvs_log_server("kvstored", "stopping");
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

/*
 * kvs-cli.c - a command-line client of kvstored, in the spirit of redis-cli:
 * one command per run, values from the command line or standard input, the
 * result on stdout and in the exit status, so that shell scripts can use it.
 *
 *     kvs-cli [--server LIST] put KEY [VALUE|-]    (no VALUE, or -: stdin)
 *     kvs-cli [--server LIST] get KEY              (the value's bytes, as stored)
 *     kvs-cli [--server LIST] exists KEY...
 *     kvs-cli [--server LIST] remove KEY...        (del: the same)
 *     kvs-cli [--server LIST] remove-matching REGEX
 *     kvs-cli [--server LIST] stats                (every STATS line, as sent)
 *     kvs-cli [--server LIST] info [SECTION...]    (the STATS, grouped and readable)
 *     kvs-cli [--server LIST] clients [FIELD=VALUE...]  (the servers' connections)
 *
 * Exit status: 0 done (every key found / removed / present); 1 a key was not
 * found or does not exist; 2 bad usage; 3 the call failed (no server, a
 * refused value, ...), with one line on stderr naming the key and the reason.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kvstore.h"
#include "opts.h"

#define EXIT_NO     1
#define EXIT_FAILED 3

static const char USAGE[] =
    "usage: kvs-cli [--server LIST] COMMAND [ARGS...]\n"
    "commands:\n"
    "  put KEY [VALUE|-]      store VALUE (none or -: standard input, to its end)\n"
    "  get KEY                write the value's bytes to standard output\n"
    "  exists KEY...          print 1 or 0 per key\n"
    "  remove KEY..., del KEY...  remove keys\n"
    "  remove-matching REGEX  remove every key the POSIX extended REGEX matches; print how many\n"
    "  stats                  every server's STATS counters, one 'name value' line each\n"
    "  info [SECTION...]      the counters grouped and readable, 'name:value' lines under\n"
    "                         '# Section' (server, clients, memory, operations, errors,\n"
    "                         classes, rdma, shm, client, other)\n"
    "  clients [FIELD=VALUE...]  every server's connections, one 'id=... addr=...' line\n"
    "                         each (only those matching every FIELD=VALUE given)\n";
static const char FOOTER[] = "exit status: 0 done, 1 a key not found or absent, 2 bad usage,\n"
                             "3 the call failed (the reason on stderr)\n";

static int fail(const char *what, const char *key, int status)
{
    if (key)
        fprintf(stderr, "kvs-cli: %s '%.80s%s': %s\n", what, key, strlen(key) > 80 ? "..." : "",
                kvs_strerror(status));
    else
        fprintf(stderr, "kvs-cli: %s: %s\n", what, kvs_strerror(status));
    return EXIT_FAILED;
}

/* Reads all of fd into a malloc'ed buffer; its length in *len. NULL on failure (errno). */
static char *read_all(int fd, size_t *len)
{
    size_t cap = 64 * 1024, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            errno = e;
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    *len = n;
    return buf;
}

static int cmd_put(kvs_client *c, int argc, const char **argv)
{
    if (argc < 1 || argc > 2) {
        fprintf(stderr, "kvs-cli put: KEY [VALUE|-] (no VALUE or -: standard input)\n");
        return KVOPT_EXIT_USAGE;
    }
    const char *key = argv[0];
    if (argc == 2 && strcmp(argv[1], "-") != 0) {
        int rc = kvs_put(c, key, argv[1], strlen(argv[1]));
        return rc < 0 ? fail("put", key, rc) : 0;
    }
    size_t len;
    char *val = read_all(STDIN_FILENO, &len);
    if (!val) {
        fprintf(stderr, "kvs-cli put: reading standard input: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    int rc = kvs_put(c, key, val, len);
    free(val);
    return rc < 0 ? fail("put", key, rc) : 0;
}

/* Writes len bytes to stdout; 0 or -errno. */
static int write_out(const char *p, size_t len)
{
    while (len) {
        ssize_t w = write(STDOUT_FILENO, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int cmd_get(kvs_client *c, int argc, const char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "kvs-cli get: one KEY\n");
        return KVOPT_EXIT_USAGE;
    }
    const char *key = argv[0];
    /* The length, then the value; a put in between that made it longer: ask again. */
    for (int tries = 0; tries < 8; tries++) {
        ssize_t n = kvs_get(c, key, NULL, 0);
        if (n == -ENOENT) {
            fprintf(stderr, "kvs-cli: get '%.80s': not found\n", key);
            return EXIT_NO;
        }
        if (n < 0 && n != -ERANGE) return fail("get", key, (int)n);
        if (n == 0) return 0;
        size_t cap = (size_t)n;
        char *buf = malloc(cap);
        if (!buf) return fail("get", key, -ENOMEM);
        n = kvs_get(c, key, buf, cap);
        if (n == -ERANGE) {
            free(buf);
            continue;
        }
        if (n == -ENOENT) {
            free(buf);
            fprintf(stderr, "kvs-cli: get '%.80s': not found\n", key);
            return EXIT_NO;
        }
        if (n < 0) {
            free(buf);
            return fail("get", key, (int)n);
        }
        int w = write_out(buf, (size_t)n);
        free(buf);
        if (w < 0) {
            fprintf(stderr, "kvs-cli get: writing standard output: %s\n", strerror(-w));
            return EXIT_FAILED;
        }
        return 0;
    }
    return fail("get", key, -ERANGE);
}

static int cmd_exists(kvs_client *c, int argc, const char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "kvs-cli exists: KEY...\n");
        return KVOPT_EXIT_USAGE;
    }
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        int r = kvs_exists(c, argv[i]);
        if (r < 0) return fail("exists", argv[i], r);
        printf("%d\n", r);
        if (!r) rc = EXIT_NO;
    }
    return rc;
}

static int cmd_remove(kvs_client *c, int argc, const char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "kvs-cli remove: KEY...\n");
        return KVOPT_EXIT_USAGE;
    }
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        int r = kvs_remove(c, argv[i]);
        if (r == -ENOENT) {
            fprintf(stderr, "kvs-cli: remove '%.80s': not found\n", argv[i]);
            rc = EXIT_NO;
        } else if (r < 0) {
            return fail("remove", argv[i], r);
        }
    }
    return rc;
}

static int cmd_remove_matching(kvs_client *c, int argc, const char **argv)
{
    if (argc != 1) {
        fprintf(stderr,
                "kvs-cli remove-matching: one REGEX (POSIX extended; ^ matches every key)\n");
        return KVOPT_EXIT_USAGE;
    }
    ssize_t n = kvs_remove_matching(c, argv[0]);
    if (n < 0) return fail("remove-matching", argv[0], (int)n);
    printf("%zd\n", n);
    return 0;
}

/*
 * Every server's text from fetch (kvs_server_stats, kvs_server_clients),
 * malloc'ed; NULL after a message naming what.
 */
static char *server_text(kvs_client *c, const char *what,
                         ssize_t (*fetch)(kvs_client *c, char *buf, size_t cap))
{
    for (size_t cap = 64 * 1024; cap <= ((size_t)64 << 20); cap *= 4) {
        char *buf = malloc(cap);
        if (!buf) break;
        ssize_t n = fetch(c, buf, cap);
        if (n < 0) {
            free(buf);
            fail(what, NULL, (int)n);
            return NULL;
        }
        if ((size_t)n < cap - 1) return buf;
        free(buf);
    }
    fail(what, NULL, -ENOMEM);
    return NULL;
}

static char *stats_text(kvs_client *c)
{
    return server_text(c, "stats", kvs_server_stats);
}

/* 1 if a server block of text is an error ("# error ..." at a line's start). */
static int has_error(const char *text)
{
    return strstr(text, "\n# error") || strncmp(text, "# error", 7) == 0;
}

/*
 * A server's block of the STATS text: its lines, each marked once shown, so
 * that info can print the counters it has no section for under "# Other".
 */
struct stat_line {
    const char *name, *value;
    int shown;
};

struct block {
    const char *server; /* after "# server " */
    const char *error;  /* "# error ..." instead of counters, or NULL */
    struct stat_line *lines;
    int n;
};

/* The value of name in b (marked shown), or NULL. */
static const char *val(struct block *b, const char *name)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->lines[i].name, name) == 0) {
            b->lines[i].shown = 1;
            return b->lines[i].value;
        }
    return NULL;
}

static unsigned long long num(struct block *b, const char *name)
{
    const char *v = val(b, name);
    return v ? strtoull(v, NULL, 10) : 0;
}

/* Where info's lines go: stdout, or a discarded stream for a section not asked for. */
static FILE *info_out;

/* "1.50M"-style: redis-cli's *_human values. */
static void human_bytes(unsigned long long v, char *out, size_t cap)
{
    static const char units[] = "BKMGTP";
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%lluB", v);
    else
        snprintf(out, cap, "%.2f%c", d, units[u]);
}

/* "name:value" if the server sent name (under the name info shows). */
static void show(struct block *b, const char *label, const char *name)
{
    const char *v = val(b, name);
    if (v) fprintf(info_out, "%s:%s\n", label, v);
}

static void show_bytes(struct block *b, const char *label, const char *name)
{
    const char *v = val(b, name);
    if (!v) return;
    char h[32];
    human_bytes(strtoull(v, NULL, 10), h, sizeof(h));
    fprintf(info_out, "%s:%s\n%s_human:%s\n", label, v, label, h);
}

/* Whether SECTION was asked for (no sections given: all). */
static int wanted(const char *section, int nsel, const char **sel)
{
    if (nsel == 0) return 1;
    for (int i = 0; i < nsel; i++)
        if (strcasecmp(sel[i], section) == 0 || strcasecmp(sel[i], "all") == 0) return 1;
    return 0;
}

static void info_server(struct block *b)
{
    fprintf(info_out, "server:%s\n", b->server);
    show(b, "kvstored_version", "version");
    show(b, "process_id", "pid");
    unsigned long long up = num(b, "uptime_seconds");
    fprintf(info_out, "uptime_in_seconds:%llu\n", up);
    fprintf(info_out, "uptime_human:%llud %02llu:%02llu:%02llu\n", up / 86400, up / 3600 % 24,
            up / 60 % 60, up % 60);
    show_bytes(b, "rss", "rss_bytes");
    show_bytes(b, "max_object", "max_object");
    show_bytes(b, "max_frame", "max_frame");
}

static void info_clients(struct block *b)
{
    show(b, "connected_clients", "connections_current");
    show(b, "total_connections_received", "connections_total");
    show(b, "local_connections_received", "connections_local");
    show(b, "rejected_connections", "connections_refused");
    show(b, "rejected_connections_wrong_user", "connections_refused_peer");
    show(b, "stalled_connections_closed", "connections_stalled");
    show_bytes(b, "connection_memory", "connection_memory");
    show(b, "auth_ok", "auth_ok");
    show(b, "auth_failures", "auth_failures");
}

static void info_memory(struct block *b)
{
    unsigned long long total = num(b, "memory_total"), used = num(b, "memory_used");
    show_bytes(b, "pool_memory", "memory_total");
    show_bytes(b, "pool_memory_used", "memory_used");
    if (total) fprintf(info_out, "pool_memory_used_ratio:%.3f\n", (double)used / (double)total);
    show_bytes(b, "value_bytes", "value_bytes");
    show(b, "pages_total", "pages_total");
    show(b, "pages_free", "pages_free");
    show(b, "items", "items");
    show(b, "pinned_items", "pinned_items");
    show(b, "evictions", "evictions");
    show(b, "page_reclaims", "page_reclaims");
}

static void info_operations(struct block *b)
{
    static const char *ops[] = {"put",   "get",  "exists", "remove", "remove_matching",
                                "stats", "hello"};
    char name[64];
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        snprintf(name, sizeof(name), "requests_%s", ops[i]);
        const char *r = val(b, name);
        snprintf(name, sizeof(name), "keys_%s", ops[i]);
        const char *k = val(b, name);
        if (r && k)
            fprintf(info_out, "op_%s:requests=%s,keys=%s\n", ops[i], r, k);
        else if (r)
            fprintf(info_out, "op_%s:requests=%s\n", ops[i], r);
    }
    /* opcodes newer than this list (the shared-memory ones: their own section) */
    for (int i = 0; i < b->n; i++) {
        const char *nm = b->lines[i].name;
        if (b->lines[i].shown || strncmp(nm, "requests_shm_", 13) == 0) continue;
        if (strncmp(nm, "requests_", 9) == 0 || strncmp(nm, "keys_", 5) == 0) {
            b->lines[i].shown = 1;
            fprintf(info_out, "%s:%s\n", nm, b->lines[i].value);
        }
    }
    unsigned long long hits = num(b, "get_hits"), misses = num(b, "get_misses");
    fprintf(info_out, "get_hits:%llu\nget_misses:%llu\n", hits, misses);
    if (hits + misses)
        fprintf(info_out, "get_hit_ratio:%.3f\n", (double)hits / (double)(hits + misses));
    show(b, "get_range", "get_range");
    show(b, "removed_matching", "removed_matching");
    show_bytes(b, "bytes_in", "bytes_in");
    show_bytes(b, "bytes_out", "bytes_out");
}

static void info_errors(struct block *b)
{
    show(b, "put_too_big", "put_too_big");
    show(b, "put_no_space", "put_no_space");
    show(b, "put_expired", "put_expired");
    show(b, "key_invalid", "key_invalid");
    show(b, "errors_protocol", "errors_protocol");
    show(b, "errors_unsupported", "errors_unsupported");
    show(b, "errors_nomem", "errors_nomem");
}

/* One line per slab class in use, then the large runs: where the memory went. */
static void info_classes(struct block *b)
{
    for (int i = 0; i < b->n; i++) {
        const char *nm = b->lines[i].name;
        char *end;
        if (strncmp(nm, "class_", 6) != 0 || nm[6] < '0' || nm[6] > '9') continue;
        long id = strtol(nm + 6, &end, 10);
        if (strcmp(end, "_chunk_size") != 0) continue;
        char name[64];
        unsigned long long chunk = strtoull(b->lines[i].value, NULL, 10);
        b->lines[i].shown = 1;
        snprintf(name, sizeof(name), "class_%ld_pages", id);
        unsigned long long pages = num(b, name);
        snprintf(name, sizeof(name), "class_%ld_items", id);
        unsigned long long items = num(b, name);
        snprintf(name, sizeof(name), "class_%ld_evictions", id);
        unsigned long long ev = num(b, name);
        fprintf(info_out, "class_%ld:chunk_size=%llu,pages=%llu,items=%llu,evictions=%llu\n", id,
                chunk, pages, items, ev);
    }
    if (val(b, "large_pages"))
        fprintf(info_out, "large:pages=%llu,items=%llu,evictions=%llu\n", num(b, "large_pages"),
                num(b, "large_items"), num(b, "large_evictions"));
}

static void info_prefixed(struct block *b, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (int i = 0; i < b->n; i++)
        if (!b->lines[i].shown && strncmp(b->lines[i].name, prefix, pl) == 0) {
            b->lines[i].shown = 1;
            fprintf(info_out, "%s:%s\n", b->lines[i].name, b->lines[i].value);
        }
}

static void info_other(struct block *b)
{
    for (int i = 0; i < b->n; i++)
        if (!b->lines[i].shown) fprintf(info_out, "%s:%s\n", b->lines[i].name, b->lines[i].value);
}

/* Splits the STATS text (modified in place) into server blocks; their count, or -ENOMEM. */
static int parse_blocks(char *text, struct block **out)
{
    struct block *bs = NULL;
    int nb = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "# server ", 9) == 0) {
            struct block *nbs = realloc(bs, (size_t)(nb + 1) * sizeof(*bs));
            if (!nbs) goto nomem;
            bs = nbs;
            bs[nb++] = (struct block){.server = l + 9};
            continue;
        }
        if (nb == 0) continue;
        struct block *b = &bs[nb - 1];
        if (strncmp(l, "# error", 7) == 0) {
            b->error = l[7] == ' ' ? l + 8 : l + 7;
            continue;
        }
        if (l[0] == '#') continue;
        char *sp = strchr(l, ' ');
        if (!sp) continue;
        *sp = '\0';
        struct stat_line *nl = realloc(b->lines, (size_t)(b->n + 1) * sizeof(*nl));
        if (!nl) goto nomem;
        b->lines = nl;
        b->lines[b->n++] = (struct stat_line){.name = l, .value = sp + 1};
    }
    *out = bs;
    return nb;
nomem:
    for (int i = 0; i < nb; i++)
        free(bs[i].lines);
    free(bs);
    return -ENOMEM;
}

static const char *SECTIONS[] = {"server",  "clients", "memory", "operations", "errors",
                                 "classes", "rdma",    "shm",    "client",     "other"};

static int cmd_info(kvs_client *c, int argc, const char **argv)
{
    for (int i = 0; i < argc; i++) {
        int known = strcasecmp(argv[i], "all") == 0;
        for (size_t s = 0; s < sizeof(SECTIONS) / sizeof(SECTIONS[0]); s++)
            known |= strcasecmp(argv[i], SECTIONS[s]) == 0;
        if (!known) {
            fprintf(stderr,
                    "kvs-cli info: unknown section '%s' (accepted: all, server, clients, memory, "
                    "operations, errors, classes, rdma, shm, client, other)\n",
                    argv[i]);
            return KVOPT_EXIT_USAGE;
        }
    }
    char *text = stats_text(c);
    if (!text) return EXIT_FAILED;
    struct block *bs = NULL;
    int nb = parse_blocks(text, &bs);
    if (nb < 0) {
        free(text);
        return fail("info", NULL, nb);
    }
    char *sunk = NULL;
    size_t sunk_len = 0;
    FILE *sink = open_memstream(&sunk, &sunk_len);
    if (!sink) {
        for (int i = 0; i < nb; i++)
            free(bs[i].lines);
        free(bs);
        free(text);
        return fail("info", NULL, -ENOMEM);
    }
    int rc = 0;
    static void (*const show_section[])(struct block *) = {
        info_server, info_clients, info_memory, info_operations, info_errors, info_classes};
    /* Sections without a function of their own: the lines of their prefix. */
    static const struct {
        const char *section, *title, *prefix;
    } rest[] = {{"rdma", "RDMA", "rdma_"},
                {"shm", "Shm", "requests_shm_"},
                {"shm", "", "shm_"},
                {"client", "Client", "client_"}};
    for (int i = 0; i < nb; i++) {
        struct block *b = &bs[i];
        if (i) putchar('\n');
        if (b->error) {
            printf("# Server\nserver:%s\nerror:%s\n", b->server, b->error);
            fprintf(stderr, "kvs-cli: info %s: %s\n", b->server, b->error);
            rc = EXIT_FAILED;
            continue;
        }
        int first = 1;
        /* Every section runs, so that Other gets only what no section showed; those not
           asked for write into the sink. */
        for (size_t s = 0; s < sizeof(show_section) / sizeof(show_section[0]); s++) {
            info_out = wanted(SECTIONS[s], argc, argv) ? stdout : sink;
            fprintf(info_out, "%s# %c%s\n", first ? "" : "\n", SECTIONS[s][0] - 'a' + 'A',
                    SECTIONS[s] + 1);
            if (info_out == stdout) first = 0;
            show_section[s](b);
        }
        for (size_t s = 0; s < sizeof(rest) / sizeof(rest[0]); s++) {
            int any = 0;
            for (int k = 0; k < b->n; k++)
                any |= strncmp(b->lines[k].name, rest[s].prefix, strlen(rest[s].prefix)) == 0;
            info_out = any && wanted(rest[s].section, argc, argv) ? stdout : sink;
            if (rest[s].title[0]) /* "": more lines of the section before it */
                fprintf(info_out, "%s# %s\n", first ? "" : "\n", rest[s].title);
            if (info_out == stdout) first = 0;
            info_prefixed(b, rest[s].prefix);
        }
        int any = 0;
        for (int k = 0; k < b->n; k++)
            any |= !b->lines[k].shown;
        info_out = any && wanted("other", argc, argv) ? stdout : sink;
        fprintf(info_out, "%s# Other\n", first ? "" : "\n");
        info_other(b);
        rewind(sink);
    }
    fclose(sink);
    free(sunk);
    for (int i = 0; i < nb; i++)
        free(bs[i].lines);
    free(bs);
    free(text);
    return rc;
}

static int cmd_stats(kvs_client *c, int argc, const char **argv)
{
    (void)argv;
    if (argc != 0) {
        fprintf(stderr, "kvs-cli stats: no arguments\n");
        return KVOPT_EXIT_USAGE;
    }
    char *text = stats_text(c);
    if (!text) return EXIT_FAILED;
    fputs(text, stdout);
    int rc = has_error(text) ? EXIT_FAILED : 0;
    free(text);
    return rc;
}

/* The fields of a CLIENTS line (docs/server.md "Clients"): what a filter may name. */
static const char *const CLIENT_FIELDS[] = {
    "id",       "addr",     "transport", "pid",       "uid",         "age",  "idle", "requests",
    "keys_put", "keys_get", "bytes_in",  "bytes_out", "reply_queue", "auth", NULL};

/* 1 if the connection line has every FIELD=VALUE of filters[0..n) among its fields. */
static int line_matches(const char *line, int n, const char **filters)
{
    for (int i = 0; i < n; i++) {
        size_t fl = strlen(filters[i]);
        const char *p = line;
        int found = 0;
        while (!found && p && *p) {
            found = strncmp(p, filters[i], fl) == 0 && (p[fl] == ' ' || p[fl] == '\0');
            p = strchr(p, ' ');
            if (p) p++;
        }
        if (!found) return 0;
    }
    return 1;
}

static int cmd_clients(kvs_client *c, int argc, const char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        int known = 0;
        for (int f = 0; eq && eq > argv[i] && CLIENT_FIELDS[f]; f++)
            known |= strlen(CLIENT_FIELDS[f]) == (size_t)(eq - argv[i]) &&
                     strncmp(argv[i], CLIENT_FIELDS[f], (size_t)(eq - argv[i])) == 0;
        if (!known) {
            fprintf(stderr, "kvs-cli clients: '%s' is not FIELD=VALUE with FIELD one of ", argv[i]);
            for (int f = 0; CLIENT_FIELDS[f]; f++)
                fprintf(stderr, "%s%s", f ? ", " : "", CLIENT_FIELDS[f]);
            fputc('\n', stderr);
            return KVOPT_EXIT_USAGE;
        }
    }
    char *text = server_text(c, "clients", kvs_server_clients);
    if (!text) return EXIT_FAILED;
    int rc = has_error(text) ? EXIT_FAILED : 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] != '#' && !line_matches(l, argc, argv)) continue;
        puts(l);
    }
    free(text);
    return rc;
}

static const struct {
    const char *name;
    int (*run)(kvs_client *c, int argc, const char **argv);
} COMMANDS[] = {
    {"put", cmd_put},       {"get", cmd_get},    {"exists", cmd_exists},
    {"remove", cmd_remove}, {"del", cmd_remove}, {"remove-matching", cmd_remove_matching},
    {"stats", cmd_stats},   {"info", cmd_info},  {"clients", cmd_clients},
};

int main(int argc, char **argv)
{
    const char *servers = NULL;
    const struct kvopt opts[] = {
        {"server", 's', KVOPT_STRING, KVOPT_TO(servers), "LIST",
         "host:port, unix:///PATH, tcp:// or rdma://host:port; a comma list routes keys as "
         "libkvstore does",
         .lo = 1, .dflt = "$KVSTORE_SERVERS or " KVS_DEFAULT_SERVERS},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvs-cli", .usage = USAGE, .footer = FOOTER, .opts = opts};
    /* Options come before the command; what follows it is its own (a value may start with -). */
    int first = 1;
    while (first < argc && argv[first][0] == '-' && argv[first][1] && strcmp(argv[first], "--")) {
        int takes = strcmp(argv[first], "--server") == 0 || strcmp(argv[first], "-s") == 0;
        first += takes && first + 1 < argc ? 2 : 1;
    }
    int rc = kvopt_parse(&cmd, first, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc) {
        fputs(USAGE, stderr);
        return KVOPT_EXIT_USAGE;
    }
    const char **args = (const char **)argv + first;
    int nargs = argc - first;
    size_t i = 0;
    while (i < sizeof(COMMANDS) / sizeof(COMMANDS[0]) && strcmp(COMMANDS[i].name, args[0]) != 0)
        i++;
    if (i == sizeof(COMMANDS) / sizeof(COMMANDS[0])) {
        fprintf(stderr,
                "kvs-cli: unknown command '%s' (accepted: put, get, exists, remove, del, "
                "remove-matching, stats, info, clients)\n",
                args[0]);
        return KVOPT_EXIT_USAGE;
    }
    kvs_client *c = kvs_open(servers);
    if (!c) {
        fprintf(stderr, "kvs-cli: bad server list '%s': %s\n",
                servers ? servers : "$KVSTORE_SERVERS", strerror(errno));
        return KVOPT_EXIT_USAGE;
    }
    rc = COMMANDS[i].run(c, nargs - 1, args + 1);
    kvs_close(c);
    return rc;
}

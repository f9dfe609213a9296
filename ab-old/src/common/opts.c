/*
 * opts.c - the table-driven command-line parser of every program (opts.h): one walk
 * over argv, one value parser per type, one message for a refused value,
 * and the --help text generated from the same table.
 */
#include "opts.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "parse.h"

#define HELP_WIDTH 100 /* columns of the generated --help */
#define HELP_LEFT  24  /* widest "--name ARG" column before the text moves to its own line */

int kvopt_bad(const char *who, const char *what, const char *value, const char *accepted)
{
    fprintf(stderr, "%s: bad %s '%s' (accepted: %s)\n", who, what, value, accepted);
    return -EINVAL;
}

static int is_end(const struct kvopt *o)
{
    return !o->name && !o->shortopt;
}

static int takes_value(const struct kvopt *o)
{
    return o->type != KVOPT_FLAG;
}

static const struct kvopt *find_long(const struct kvopt_cmd *cmd, const char *name, size_t len)
{
    for (const struct kvopt *o = cmd->opts; !is_end(o); o++)
        if (o->name && strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
}

static const struct kvopt *find_short(const struct kvopt_cmd *cmd, char c)
{
    for (const struct kvopt *o = cmd->opts; !is_end(o); o++)
        if (o->shortopt == c) return o;
    return NULL;
}

/* ---- integers of any width in and out of a destination ---- */

static int store_int(void *dest, size_t size, long long v)
{
    switch (size) {
    case 1: {
        int8_t x = (int8_t)v;
        memcpy(dest, &x, 1);
        return 0;
    }
    case 2: {
        int16_t x = (int16_t)v;
        memcpy(dest, &x, 2);
        return 0;
    }
    case 4: {
        int32_t x = (int32_t)v;
        memcpy(dest, &x, 4);
        return 0;
    }
    case 8:
        memcpy(dest, &v, 8);
        return 0;
    default:
        return -EINVAL;
    }
}

static long long load_int(const void *src, size_t size)
{
    switch (size) {
    case 1: {
        int8_t x;
        memcpy(&x, src, 1);
        return x;
    }
    case 2: {
        int16_t x;
        memcpy(&x, src, 2);
        return x;
    }
    case 4: {
        int32_t x;
        memcpy(&x, src, 4);
        return x;
    }
    default: {
        long long x;
        memcpy(&x, src, 8);
        return x;
    }
    }
}

/* ---- one value of each type ---- */

/* An integer: kvs_parse_uint's digits, optionally after a '-'. */
static int parse_count(const char *s, long long *out)
{
    uint64_t v;
    int neg = s[0] == '-';
    if (kvs_parse_uint(s + neg, &v) < 0 || v > (uint64_t)LLONG_MAX) return -EINVAL;
    *out = neg ? -(long long)v : (long long)v;
    return 0;
}

/* A size in kvs_parse_size's grammar ("4096", "4K", "64KiB", "1M"). */
static int parse_size(const char *s, long long *out)
{
    uint64_t v;
    if (kvs_parse_size(s, &v) < 0 || v > (uint64_t)LLONG_MAX) return -EINVAL;
    *out = (long long)v;
    return 0;
}

/* A duration in kvs_parse_duration's grammar; a bare number is seconds ("0.25", "500ms"). */
static int parse_seconds(const char *s, double *out)
{
    uint64_t ns;
    if (kvs_parse_duration(s, KVS_NS_PER_S, &ns) < 0) return -EINVAL;
    *out = (double)ns / 1e9;
    return 0;
}

/* Parses s as one value of o and stores it at dest (one element of a list). */
static int parse_one(const struct kvopt *o, const char *s, void *dest)
{
    long long v;
    switch (o->type) {
    case KVOPT_COUNT:
        if (parse_count(s, &v) < 0 || v < o->lo || v > o->hi) return -EINVAL;
        return store_int(dest, o->dest_size, v);
    case KVOPT_SIZE:
        if (parse_size(s, &v) < 0 || v < o->lo || v > o->hi) return -EINVAL;
        return store_int(dest, o->dest_size, v);
    case KVOPT_SECONDS: {
        double d;
        if (parse_seconds(s, &d) < 0 || !(d > (double)o->lo && d <= (double)o->hi)) return -EINVAL;
        if (o->dest_size != sizeof(double)) return -EINVAL;
        memcpy(dest, &d, sizeof(d));
        return 0;
    }
    case KVOPT_STRING: {
        size_t n = strlen(s);
        if (n < (size_t)o->lo || (o->hi > 0 && n > (size_t)o->hi)) return -EINVAL;
        if (o->dest_size != sizeof(const char *)) return -EINVAL;
        memcpy(dest, &s, sizeof(s));
        return 0;
    }
    case KVOPT_ENUM:
        for (const struct kvopt_choice *c = o->choices; c && c->name; c++)
            if (strcmp(c->name, s) == 0) return store_int(dest, o->dest_size, c->value);
        return -EINVAL;
    case KVOPT_DURATION: {
        uint64_t ns, bare = o->bare_ns ? o->bare_ns : o->unit_ns;
        if (o->unit_ns == 0 || kvs_parse_duration(s, bare, &ns) < 0 || ns % o->unit_ns != 0)
            return -EINVAL;
        uint64_t units = ns / o->unit_ns;
        if (units > (uint64_t)o->hi || (long long)units < o->lo) return -EINVAL;
        return store_int(dest, o->dest_size, (long long)units);
    }
    case KVOPT_ENDPOINT: {
        struct kvs_endpoint ep;
        if (o->dest_size != sizeof(ep) ||
            kvs_parse_endpoint(s, strlen(s), (unsigned)o->lo, &ep) < 0)
            return -EINVAL;
        memcpy(dest, &ep, sizeof(ep));
        return 0;
    }
    case KVOPT_FLAG:
        break;
    }
    return -EINVAL;
}

/* ---- what is accepted, and the default, as text ---- */

static void put_size(char *buf, size_t cap, long long v)
{
    static const char unit[] = "KMGT";
    int u = -1;
    while (u < 3 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, cap, "%lld", v);
    else
        snprintf(buf, cap, "%lld%c", v, unit[u]);
}

static const char *unit_name(uint64_t unit_ns)
{
    switch (unit_ns) {
    case KVS_NS_PER_S:
        return "s";
    case KVS_NS_PER_MS:
        return "ms";
    case KVS_NS_PER_US:
        return "us";
    default:
        return "ns";
    }
}

/* A duration in the largest of s, ms, us, ns that holds it whole ("86400s", "250ms", "0"). */
static void put_duration(char *buf, size_t cap, uint64_t ns)
{
    static const uint64_t units[] = {KVS_NS_PER_S, KVS_NS_PER_MS, KVS_NS_PER_US, 1};
    size_t u = 0;
    while (ns != 0 && ns % units[u] != 0)
        u++;
    if (ns == 0)
        snprintf(buf, cap, "0");
    else
        snprintf(buf, cap, "%llu%s", (unsigned long long)(ns / units[u]), unit_name(units[u]));
}

/* Appends printf text to buf (cap bytes, always terminated). */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t cap, const char *fmt,
                                                         ...)
{
    size_t at = strlen(buf);
    if (at + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, cap - at, fmt, ap);
    va_end(ap);
}

static void accepted_text(const struct kvopt *o, char *buf, size_t cap)
{
    char lo[32], hi[32];
    buf[0] = '\0';
    if (o->accepted) {
        append(buf, cap, "%s", o->accepted);
    } else {
        switch (o->type) {
        case KVOPT_COUNT:
            append(buf, cap, "%lld..%lld", o->lo, o->hi);
            break;
        case KVOPT_SIZE:
            put_size(lo, sizeof(lo), o->lo);
            put_size(hi, sizeof(hi), o->hi);
            append(buf, cap, "%s..%s, e.g. 4096, 4K, 64KiB, 1M", lo, hi);
            break;
        case KVOPT_SECONDS:
            append(buf, cap, "seconds in (%lld, %lld]", o->lo, o->hi);
            break;
        case KVOPT_STRING:
            if (o->hi > 0) append(buf, cap, "%lld..%lld characters", o->lo, o->hi);
            break;
        case KVOPT_DURATION: {
            uint64_t bare = o->bare_ns ? o->bare_ns : o->unit_ns;
            put_duration(lo, sizeof(lo), (uint64_t)o->lo * o->unit_ns);
            put_duration(hi, sizeof(hi), (uint64_t)o->hi * o->unit_ns);
            append(buf, cap, "%s..%s", lo, hi);
            if (o->unit_ns > 1) append(buf, cap, " in whole %s", unit_name(o->unit_ns));
            append(buf, cap, ", e.g. 500ms, 2s; a bare number is %s", unit_name(bare));
            break;
        }
        case KVOPT_ENDPOINT:
            append(buf, cap, "HOST:PORT or [V6ADDR]:PORT, port %s..65535",
                   o->lo & KVS_EP_PORT0 ? "0" : "1");
            break;
        case KVOPT_ENUM:
            for (const struct kvopt_choice *c = o->choices; c && c->name; c++)
                append(buf, cap, "%s%s", c == o->choices ? "" : ", ", c->name);
            break;
        case KVOPT_FLAG:
            break;
        }
    }
    if (o->list_max > 0) append(buf, cap, "; a comma list of up to %d", o->list_max);
}

/* One element's current value as text; "" when it is no value the option accepts. */
static void value_text(const struct kvopt *o, const void *p, char *buf, size_t cap)
{
    buf[0] = '\0';
    long long v = 0;
    if (o->type == KVOPT_COUNT || o->type == KVOPT_SIZE || o->type == KVOPT_ENUM ||
        o->type == KVOPT_DURATION)
        v = load_int(p, o->dest_size);
    switch (o->type) {
    case KVOPT_COUNT:
        if (v >= o->lo && v <= o->hi) snprintf(buf, cap, "%lld", v);
        break;
    case KVOPT_SIZE:
        if (v >= o->lo && v <= o->hi) put_size(buf, cap, v);
        break;
    case KVOPT_SECONDS: {
        double d;
        memcpy(&d, p, sizeof(d));
        if (d > (double)o->lo && d <= (double)o->hi) snprintf(buf, cap, "%g", d);
        break;
    }
    case KVOPT_STRING: {
        const char *s;
        memcpy(&s, p, sizeof(s));
        if (s) snprintf(buf, cap, "%s", s);
        break;
    }
    case KVOPT_ENUM:
        for (const struct kvopt_choice *c = o->choices; c && c->name; c++)
            if (c->value == v) {
                snprintf(buf, cap, "%s", c->name);
                break;
            }
        break;
    case KVOPT_DURATION:
        if (v >= o->lo && v <= o->hi) put_duration(buf, cap, (uint64_t)v * o->unit_ns);
        break;
    case KVOPT_ENDPOINT: {
        struct kvs_endpoint ep;
        memcpy(&ep, p, sizeof(ep));
        if (ep.host[0])
            snprintf(buf, cap, strchr(ep.host, ':') ? "[%s]:%s" : "%s:%s", ep.host, ep.port);
        break;
    }
    case KVOPT_FLAG:
        break;
    }
}

static void default_text(const struct kvopt *o, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (o->dflt) {
        snprintf(buf, cap, "%s", o->dflt);
        return;
    }
    if (o->type == KVOPT_FLAG) return;
    int n = o->list_max > 0 ? *o->list_len : 1;
    for (int i = 0; i < n; i++) {
        char one[128];
        value_text(o, (const char *)o->dest + (size_t)i * o->dest_size, one, sizeof(one));
        if (!one[0]) return; /* not a value it accepts: a "not given" mark, no default */
        append(buf, cap, "%s%s", i ? "," : "", one);
    }
}

/* ---- --help ---- */

static void option_left(const struct kvopt *o, int shorts, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (o->shortopt)
        append(buf, cap, "-%c%s", o->shortopt, o->name ? ", " : "");
    else if (shorts)
        append(buf, cap, "    ");
    if (o->name) append(buf, cap, "--%s", o->name);
    if (o->arg) append(buf, cap, " %s", o->arg);
}

/* Writes text from column col, wrapping at HELP_WIDTH; '\n' in text starts a line. */
static void write_wrapped(FILE *f, const char *text, int col, int at)
{
    const char *p = text;
    while (*p) {
        size_t word = strcspn(p, " \n");
        if (at > col && at + 1 + (int)word > HELP_WIDTH) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', f);
            at++;
        }
        fprintf(f, "%.*s", (int)word, p);
        at += (int)word;
        p += word;
        if (*p == '\n') {
            fprintf(f, "\n%*s", col, "");
            at = col;
            p++;
        }
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void kvopt_help(const struct kvopt_cmd *cmd, FILE *f)
{
    int shorts = 0, width = 10; /* "-h, --help" */
    for (const struct kvopt *o = cmd->opts; !is_end(o); o++)
        shorts |= o->shortopt != 0;
    for (const struct kvopt *o = cmd->opts; !is_end(o); o++) {
        char left[64];
        option_left(o, shorts, left, sizeof(left));
        if ((int)strlen(left) <= HELP_LEFT && (int)strlen(left) > width) width = (int)strlen(left);
    }
    if (cmd->usage) fputs(cmd->usage, f);
    fputs("options:\n", f);
    int col = 2 + width + 2;
    for (const struct kvopt *o = cmd->opts; !is_end(o); o++) {
        char left[64], acc[256], dflt[256], text[1024];
        option_left(o, shorts, left, sizeof(left));
        accepted_text(o, acc, sizeof(acc));
        default_text(o, dflt, sizeof(dflt));
        snprintf(text, sizeof(text), "%s", o->help ? o->help : "");
        if (acc[0] || dflt[0])
            append(text, sizeof(text), " (%s%s%s%s)", acc, acc[0] && dflt[0] ? "; " : "",
                   dflt[0] ? "default " : "", dflt);
        int at = fprintf(f, "  %s", left);
        if (at > col - 2) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        } else {
            fprintf(f, "%*s", col - at, "");
            at = col;
        }
        write_wrapped(f, text, col, at);
    }
    fprintf(f, "  %-*s  %s\n", width, "-h, --help", "this text");
    fprintf(f, "  %-*s  %s\n", width, "--version", "the kvbatch version");
    if (cmd->footer) fputs(cmd->footer, f);
}

/* ---- the walk over argv ---- */

static int refuse(const struct kvopt_cmd *cmd, const struct kvopt *o, const char *value)
{
    char what[64], acc[256];
    if (o->name)
        snprintf(what, sizeof(what), "--%s", o->name);
    else
        snprintf(what, sizeof(what), "-%c", o->shortopt);
    accepted_text(o, acc, sizeof(acc));
    return kvopt_bad(cmd->name, what, value, acc[0] ? acc : "(no value)");
}

/* Stores value (NULL for a flag) into o's destination. */
static int apply(const struct kvopt_cmd *cmd, const struct kvopt *o, const char *value)
{
    if (o->type == KVOPT_FLAG) {
        int one = 1;
        if (o->dest_size != sizeof(int)) return refuse(cmd, o, "(flag)");
        memcpy(o->dest, &one, sizeof(one));
        return 0;
    }
    if (o->list_max <= 0) return parse_one(o, value, o->dest) < 0 ? refuse(cmd, o, value) : 0;
    /* A list: every element is checked before any is stored. */
    char *copy = strdup(value);
    if (!copy) {
        fprintf(stderr, "%s: out of memory\n", cmd->name);
        return -ENOMEM;
    }
    int n = 0, rc = 0;
    char *p = copy;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (n == o->list_max) {
            rc = refuse(cmd, o, value);
            break;
        }
        /* strings in a list would point into copy: only scalar types are listed */
        if (o->type == KVOPT_STRING ||
            parse_one(o, p, (char *)o->dest + (size_t)n * o->dest_size) < 0) {
            rc = refuse(cmd, o, p);
            break;
        }
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    if (rc == 0) *o->list_len = n;
    free(copy);
    return rc;
}

static int unknown(const struct kvopt_cmd *cmd, const char *word)
{
    fprintf(stderr, "%s: unknown option '%s' (%s --help lists them)\n", cmd->name, word, cmd->name);
    return -EINVAL;
}

static int missing(const struct kvopt_cmd *cmd, const struct kvopt *o)
{
    char acc[256];
    accepted_text(o, acc, sizeof(acc));
    if (o->name)
        fprintf(stderr, "%s: --%s needs a value", cmd->name, o->name);
    else
        fprintf(stderr, "%s: -%c needs a value", cmd->name, o->shortopt);
    fprintf(stderr, " (%s%s%s)\n", o->arg ? o->arg : "", o->arg && acc[0] ? ": " : "", acc);
    return -EINVAL;
}

/*
 * One option word at argv[*i]: finds its entry and its value (attached, or
 * the next word), applies it and advances *i past what it used. With
 * dry_run, only says whether it is --help (1) and skips its value.
 */
static int one_option(const struct kvopt_cmd *cmd, int argc, char **argv, int *i, int dry_run)
{
    const char *word = argv[*i];
    const struct kvopt *o;
    const char *value = NULL;
    if (word[1] == '-') {
        const char *name = word + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (!eq && strcmp(name, "help") == 0) return 1;
        if (!eq && strcmp(name, "version") == 0 && !find_long(cmd, name, len)) return 2;
        o = find_long(cmd, name, len);
        if (o && eq) value = eq + 1;
        if (o && eq && !takes_value(o)) {
            if (dry_run) return 0;
            fprintf(stderr, "%s: --%s takes no value, not '%s'\n", cmd->name, o->name, eq + 1);
            return -EINVAL;
        }
    } else {
        if (strcmp(word, "-h") == 0 && !find_short(cmd, 'h')) return 1;
        o = find_short(cmd, word[1]);
        if (o && word[2]) {
            if (!takes_value(o))
                o = NULL; /* no bundled flags: "-sx" is unknown */
            else
                value = word + 2;
        }
    }
    if (!o) return dry_run ? 0 : unknown(cmd, word);
    if (takes_value(o) && !value) {
        if (*i + 1 >= argc) return dry_run ? 0 : missing(cmd, o);
        value = argv[++*i];
    }
    return dry_run ? 0 : apply(cmd, o, value);
}

/* Whether argv asks for --help (1) or --version (2): a word that is not some option's value. */
static int wants_help(const struct kvopt_cmd *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        int rc = argv[i][0] == '-' && argv[i][1] ? one_option(cmd, argc, argv, &i, 1) : 0;
        if (rc > 0) return rc;
    }
    return 0;
}

void kvopt_version(const char *prog, FILE *f)
{
    fprintf(f, "%.*s %s\n", (int)strcspn(prog, " "), prog, KVS_VERSION_STRING);
}

int kvopt_parse(const struct kvopt_cmd *cmd, int argc, char **argv)
{
    int asked = wants_help(cmd, argc, argv);
    if (asked == 2) {
        kvopt_version(cmd->name, stdout);
        return KVOPT_HELP;
    }
    if (asked) {
        kvopt_help(cmd, stdout);
        return KVOPT_HELP;
    }
    int nargs = 0, options = 1;
    for (int i = 1; i < argc; i++) {
        const char *word = argv[i];
        if (options && strcmp(word, "--") == 0) {
            options = 0;
            continue;
        }
        if (options && word[0] == '-' && word[1]) {
            int rc = one_option(cmd, argc, argv, &i, 0);
            if (rc < 0) return rc;
            continue;
        }
        if (!cmd->args || nargs == cmd->max_args) {
            fprintf(stderr, "%s: unexpected argument '%s'\n", cmd->name, word);
            return -EINVAL;
        }
        cmd->args[nargs++] = word;
    }
    if (cmd->nargs) *cmd->nargs = nargs;
    return 0;
}

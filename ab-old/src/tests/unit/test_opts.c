/*
 * test_opts.c - the option parser of every program (common/opts.c): every type into
 * destinations of every width, lists, positional arguments and "--"; bad
 * values, unknown options and missing values refused with one line naming
 * the option, its value and what is accepted, destinations left as they
 * were; --help generated from the table, with accepted values and defaults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opts.h"

/* The destinations of the test command, with their defaults. */
struct dests {
    int threads;
    uint64_t keys;
    size_t size;
    uint32_t small;
    double seconds;
    const char *servers;
    const char *prefix;
    int quiet;
    int mode;
    int sizes_n;
    size_t sizes[3];
    int modes_n;
    int modes[4];
    unsigned timeout_ms;
    struct kvs_endpoint at;
    const char *args[2];
    int nargs;
};

static const struct kvopt_choice modes[] = {
    {"single", 10}, {"batch", 20}, {"async", 30}, {NULL, 0}};

static struct dests d;
static struct kvopt table[16];
static struct kvopt_cmd cmd;

static int setup(void **state)
{
    (void)state;
    memset(&d, 0, sizeof(d));
    d.threads = 1;
    d.keys = 4096;
    d.size = 4096;
    d.small = 7;
    d.seconds = 30;
    d.mode = 10;
    d.sizes_n = 2;
    d.sizes[0] = 1024;
    d.sizes[1] = 1 << 20;
    d.modes_n = 1;
    d.modes[0] = 20;
    d.timeout_ms = 30000;
    snprintf(d.at.host, sizeof(d.at.host), "127.0.0.1");
    snprintf(d.at.port, sizeof(d.at.port), "7070");
    const struct kvopt t[] = {
        {"servers", 0, KVOPT_STRING, KVOPT_TO(d.servers), "S", "where the servers are"},
        {"threads", 't', KVOPT_COUNT, KVOPT_TO(d.threads), "N", "client threads", .lo = 1,
         .hi = 1024},
        {"keys", 0, KVOPT_COUNT, KVOPT_TO(d.keys), "N", "key space", .lo = 1, .hi = 100000000000LL},
        {"size", 'z', KVOPT_SIZE, KVOPT_TO(d.size), "SIZE", "value size", .lo = 0, .hi = 64 << 20},
        {"small", 0, KVOPT_COUNT, KVOPT_TO(d.small), "N", "a 4-byte unsigned", .lo = 0,
         .hi = 4000000000LL},
        {"seconds", 'w', KVOPT_SECONDS, KVOPT_TO(d.seconds), "S", "time bound", .lo = 0,
         .hi = 86400},
        {"prefix", 0, KVOPT_STRING, KVOPT_TO(d.prefix), "P", "key prefix", .lo = 1, .hi = 8,
         .dflt = "kvb.<pid>"},
        {"quiet", 'q', KVOPT_FLAG, KVOPT_TO(d.quiet), NULL, "no progress line"},
        {"mode", 0, KVOPT_ENUM, KVOPT_TO(d.mode), "M", "one path", .choices = modes},
        {"sizes", 0, KVOPT_SIZE, KVOPT_LIST(d.sizes, d.sizes_n), "L", "value sizes", .lo = 1,
         .hi = 1 << 30},
        {"modes", 0, KVOPT_ENUM, KVOPT_LIST(d.modes, d.modes_n), "L", "paths", .choices = modes},
        {"timeout", 0, KVOPT_DURATION, KVOPT_TO(d.timeout_ms), "T", "a timeout", .lo = 0,
         .hi = 60000, .unit_ns = 1000000, .bare_ns = 1000000000},
        {"listen", 0, KVOPT_ENDPOINT, KVOPT_TO(d.at), "HOST:PORT", "where", .lo = KVS_EP_PORT0},
        {0}};
    memcpy(table, t, sizeof(t));
    cmd = (struct kvopt_cmd){.name = "tool sub",
                             .usage = "usage: tool sub [options] [FILE...]\n",
                             .footer = "exit status: 0 ok\n",
                             .opts = table,
                             .args = d.args,
                             .max_args = 2,
                             .nargs = &d.nargs};
    return 0;
}

/* What one stream (stdout or stderr) received while f ran: a malloc'ed string. */
struct captured {
    int rc;
    char *text;
};

static struct captured capture(int fd, int (*f)(void *), void *arg)
{
    struct captured c = {0, NULL};
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(fd == 1 ? stdout : stderr);
    int saved = dup(fd);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), fd) >= 0);
    c.rc = f(arg);
    fflush(fd == 1 ? stdout : stderr);
    assert_true(dup2(saved, fd) >= 0);
    close(saved);
    off_t len = lseek(fileno(tmp), 0, SEEK_END);
    assert_true(len >= 0);
    c.text = calloc(1, (size_t)len + 1);
    assert_non_null(c.text);
    assert_int_equal(pread(fileno(tmp), c.text, (size_t)len, 0), len);
    fclose(tmp);
    return c;
}

/* argv of one parse: "tool" then the words, NULL-ended. */
struct words {
    const char *w[24];
};

static int parse_words(void *arg)
{
    struct words *ws = arg;
    int argc = 0;
    while (ws->w[argc])
        argc++;
    return kvopt_parse(&cmd, argc, (char **)ws->w);
}

/* Parses the words, expecting rc; returns what went to stderr (malloc'ed). */
static char *parse_expect(int rc, struct words ws)
{
    struct captured c = capture(2, parse_words, &ws);
    if (c.rc != rc) fail_msg("rc %d, expected %d; stderr: %s", c.rc, rc, c.text);
    return c.text;
}

static void assert_refused(struct words ws, const char *message)
{
    struct dests before = d;
    char *err = parse_expect(-EINVAL, ws);
    if (!strstr(err, message)) fail_msg("stderr '%s' does not say '%s'", err, message);
    /* one line, and nothing written where a refused value would have gone */
    int lines = 0;
    for (const char *p = err; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 1);
    assert_int_equal(d.threads, before.threads);
    assert_true(d.size == before.size && d.keys == before.keys && d.seconds == before.seconds);
    assert_int_equal(d.mode, before.mode);
    assert_int_equal(d.sizes_n, before.sizes_n);
    assert_int_equal(d.timeout_ms, before.timeout_ms);
    assert_memory_equal(&d.at, &before.at, sizeof(d.at));
    free(err);
}

static void test_every_type_is_parsed(void **state)
{
    (void)state;
    free(parse_expect(
        0, (struct words){{"tool", "--servers", "h:1", "--threads", "16", "--keys", "50000000000",
                           "--size", "64KiB", "--small", "3999999999", "--seconds", "0.25",
                           "--prefix", "pfx", "--quiet", "--mode", "async", NULL}}));
    assert_string_equal(d.servers, "h:1");
    assert_int_equal(d.threads, 16);
    assert_true(d.keys == 50000000000ull);
    assert_int_equal(d.size, 65536);
    assert_true(d.small == 3999999999u);
    assert_true(d.seconds == 0.25);
    assert_string_equal(d.prefix, "pfx");
    assert_int_equal(d.quiet, 1);
    assert_int_equal(d.mode, 30);
    assert_int_equal(d.nargs, 0);
}

static void test_spellings_of_a_value(void **state)
{
    (void)state;
    free(parse_expect(0, (struct words){{"tool", "--threads=3", "-z", "1M", "-w2", NULL}}));
    assert_int_equal(d.threads, 3);
    assert_int_equal(d.size, 1 << 20);
    assert_true(d.seconds == 2);
    /* a later option overrides an earlier one; short and long are the same option */
    free(parse_expect(0, (struct words){{"tool", "-t", "5", "--threads", "6", "-q", NULL}}));
    assert_int_equal(d.threads, 6);
    assert_int_equal(d.quiet, 1);
    /* a value may start with '-' when its option takes one */
    free(parse_expect(0, (struct words){{"tool", "--prefix", "-x", NULL}}));
    assert_string_equal(d.prefix, "-x");
}

static void test_sizes(void **state)
{
    (void)state;
    const char *good[][2] = {{"0", "0"},     {"4096", "4096"},   {"4K", "4096"},
                             {"4k", "4096"}, {"4KiB", "4096"},   {"4KB", "4096"},
                             {"10B", "10"},  {"64M", "67108864"}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        free(parse_expect(0, (struct words){{"tool", "--size", good[i][0], NULL}}));
        assert_int_equal(d.size, strtoull(good[i][1], NULL, 10));
    }
    const char *bad[] = {
        "4Q", "4X", "", "K", "-1", " 4K", "4K ", "1.5M", "0x10", "65M", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char msg[96];
        snprintf(msg, sizeof(msg), "tool sub: bad --size '%s' (accepted: 0..64M", bad[i]);
        assert_refused((struct words){{"tool", "--size", bad[i], NULL}}, msg);
    }
}

static void test_counts_and_seconds(void **state)
{
    (void)state;
    free(parse_expect(0, (struct words){{"tool", "--threads", "1024", NULL}}));
    assert_int_equal(d.threads, 1024);
    free(parse_expect(0, (struct words){{"tool", "--threads", "1", NULL}}));
    assert_int_equal(d.threads, 1);
    const char *bad[] = {"0",  "1025", "-5",   "",   "1e3",
                         " 5", "5 ",   "0x10", "4K", "9999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char msg[96];
        snprintf(msg, sizeof(msg), "tool sub: bad --threads '%s' (accepted: 1..1024)", bad[i]);
        assert_refused((struct words){{"tool", "--threads", bad[i], NULL}}, msg);
    }
    /* --seconds is a duration of the one grammar (common/parse.h): a bare number is seconds. */
    static const struct {
        const char *s;
        double v;
    } secs[] = {{"2", 2}, {"0.25", 0.25}, {"1s", 1}, {"500ms", 0.5}, {"86400", 86400}};
    for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++) {
        free(parse_expect(0, (struct words){{"tool", "--seconds", secs[i].s, NULL}}));
        assert_true(d.seconds == secs[i].v);
    }
    const char *bad_secs[] = {"0", "-1", "86401", "inf", "nan", "1e3", ".5", "2 s", "1m", ""};
    for (size_t i = 0; i < sizeof(bad_secs) / sizeof(bad_secs[0]); i++) {
        char msg[96];
        snprintf(msg, sizeof(msg), "bad --seconds '%s' (accepted: seconds in (0, 86400])",
                 bad_secs[i]);
        assert_refused((struct words){{"tool", "--seconds", bad_secs[i], NULL}}, msg);
    }
    /* a refused short option is named as given in the table: by its long name */
    assert_refused((struct words){{"tool", "-t", "0", NULL}}, "bad --threads '0'");
}

/*
 * A duration kept in whole units (here ms, a bare number in seconds), and
 * an endpoint (port 0 allowed here): kvstored's --put-timeout and --listen.
 */
static void test_durations_and_endpoints(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        unsigned ms;
    } good[] = {{"0", 0},       {"2", 2000},    {"1.5", 1500},
                {"250ms", 250}, {"60s", 60000}, {"1000us", 1}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        free(parse_expect(0, (struct words){{"tool", "--timeout", good[i].s, NULL}}));
        assert_int_equal(d.timeout_ms, good[i].ms);
    }
    const char *bad[] = {"1500us", "61", "-1", "", "ms", "1e3", "5m", "0.0001"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "bad --timeout '%s' (accepted: 0..60s in whole ms, e.g. 500ms, 2s; a bare "
                 "number is s)",
                 bad[i]);
        assert_refused((struct words){{"tool", "--timeout", bad[i], NULL}}, msg);
    }
    free(parse_expect(0, (struct words){{"tool", "--listen", "[::1]:0", NULL}}));
    assert_string_equal(d.at.host, "::1");
    assert_string_equal(d.at.port, "0");
    free(parse_expect(0, (struct words){{"tool", "--listen=10.0.0.1:65535", NULL}}));
    assert_string_equal(d.at.host, "10.0.0.1");
    assert_int_equal(d.at.portno, 65535);
    const char *bad_ep[] = {"127.0.0.1", "127.0.0.1:65536", ":7070", "h:", "h:x", ""};
    for (size_t i = 0; i < sizeof(bad_ep) / sizeof(bad_ep[0]); i++) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "bad --listen '%s' (accepted: HOST:PORT or [V6ADDR]:PORT, port 0..65535)",
                 bad_ep[i]);
        assert_refused((struct words){{"tool", "--listen", bad_ep[i], NULL}}, msg);
    }
}

static void test_strings_and_enums(void **state)
{
    (void)state;
    assert_refused((struct words){{"tool", "--prefix", "", NULL}},
                   "bad --prefix '' (accepted: 1..8 characters)");
    assert_refused((struct words){{"tool", "--prefix", "123456789", NULL}}, "bad --prefix");
    assert_refused((struct words){{"tool", "--mode", "sideways", NULL}},
                   "bad --mode 'sideways' (accepted: single, batch, async)");
    assert_refused((struct words){{"tool", "--mode", "Single", NULL}}, "bad --mode 'Single'");
}

static void test_lists(void **state)
{
    (void)state;
    free(parse_expect(
        0, (struct words){{"tool", "--sizes", "1K,2K,4K", "--modes", "async,single", NULL}}));
    assert_int_equal(d.sizes_n, 3);
    assert_int_equal(d.sizes[0], 1024);
    assert_int_equal(d.sizes[2], 4096);
    assert_int_equal(d.modes_n, 2);
    assert_int_equal(d.modes[0], 30);
    assert_int_equal(d.modes[1], 10);
    /* the element that is wrong is named; too many is the whole list */
    assert_refused((struct words){{"tool", "--modes", "single,nope", NULL}},
                   "bad --modes 'nope' (accepted: single, batch, async; a comma list of up to 4)");
    assert_refused((struct words){{"tool", "--sizes", "1K,,4K", NULL}}, "bad --sizes ''");
    assert_refused((struct words){{"tool", "--sizes", "1K,2K,3K,4K", NULL}},
                   "bad --sizes '1K,2K,3K,4K' (accepted: 1..1G, e.g. 4096, 4K, 64KiB, 1M; a comma "
                   "list of up to 3)");
    assert_int_equal(d.sizes[0], 1024); /* not half-written by a refused list */
}

static void test_unknown_and_missing(void **state)
{
    (void)state;
    assert_refused((struct words){{"tool", "--no-such-option", NULL}},
                   "tool sub: unknown option '--no-such-option' (tool sub --help lists them)");
    assert_refused((struct words){{"tool", "--thread", "4", NULL}}, "unknown option '--thread'");
    assert_refused((struct words){{"tool", "-x", NULL}}, "unknown option '-x'");
    assert_refused((struct words){{"tool", "-qt", "4", NULL}}, "unknown option '-qt'");
    assert_refused((struct words){{"tool", "--threads", NULL}},
                   "tool sub: --threads needs a value (N: 1..1024)");
    assert_refused((struct words){{"tool", "-z", NULL}}, "--size needs a value (SIZE: 0..64M");
    assert_refused((struct words){{"tool", "--quiet=1", NULL}},
                   "tool sub: --quiet takes no value, not '1'");
}

static void test_positional_arguments(void **state)
{
    (void)state;
    free(parse_expect(0, (struct words){{"tool", "a", "--threads", "2", "--", "--quiet", NULL}}));
    assert_int_equal(d.nargs, 2);
    assert_string_equal(d.args[0], "a");
    assert_string_equal(d.args[1], "--quiet"); /* after "--": an argument, not the flag */
    assert_int_equal(d.quiet, 0);
    assert_refused((struct words){{"tool", "a", "b", "c", NULL}},
                   "tool sub: unexpected argument 'c'");
    cmd.args = NULL;
    assert_refused((struct words){{"tool", "a", NULL}}, "unexpected argument 'a'");
}

static void test_help(void **state)
{
    (void)state;
    struct dests before = d;
    struct words ws = {{"tool", "--threads", "9", "--help", NULL}};
    struct captured c = capture(1, parse_words, &ws);
    assert_int_equal(c.rc, KVOPT_HELP);
    assert_int_equal(d.threads, before.threads); /* --help writes no destination */
    const char *expect[] = {
        "usage: tool sub [options] [FILE...]\n",
        "-t, --threads N",
        "client threads (1..1024; default 1)",
        "value size (0..64M, e.g. 4096, 4K, 64KiB, 1M; default 4K)",
        "time bound (seconds in (0, 86400]; default 30)",
        "key prefix (1..8 characters; default kvb.<pid>)",
        "-q, --quiet",
        "one path (single, batch, async; default single)",
        "1K,1M)",
        "paths (single, batch, async; a comma list of up to 4; default batch)",
        "a timeout (0..60s in whole ms,",
        " 30s)\n",
        "default 127.0.0.1:7070)",
        "-h, --help",
        "exit status: 0 ok\n",
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
        if (!strstr(c.text, expect[i])) fail_msg("--help has no '%s':\n%s", expect[i], c.text);
    /* a string option with no default shows none */
    assert_null(strstr(c.text, "where the servers are ("));
    free(c.text);

    ws = (struct words){{"tool", "-h", NULL}};
    c = capture(1, parse_words, &ws);
    assert_int_equal(c.rc, KVOPT_HELP);
    assert_non_null(strstr(c.text, "--threads"));
    free(c.text);

    /* "--help" as the value of an option, or after "--", is no request for help */
    free(parse_expect(0, (struct words){{"tool", "--prefix", "--help", "--", "--help", NULL}}));
    assert_string_equal(d.prefix, "--help");
    assert_string_equal(d.args[0], "--help");
}

static int bad_in_check(void *arg)
{
    (void)arg;
    return kvopt_bad("tool sub", "--rank", "(>= tp)", "0..tp-1");
}

static void test_bad_across_options(void **state)
{
    (void)state;
    struct captured c = capture(2, bad_in_check, NULL);
    assert_int_equal(c.rc, -EINVAL);
    assert_string_equal(c.text, "tool sub: bad --rank '(>= tp)' (accepted: 0..tp-1)\n");
    free(c.text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_type_is_parsed, setup),
        cmocka_unit_test_setup(test_spellings_of_a_value, setup),
        cmocka_unit_test_setup(test_sizes, setup),
        cmocka_unit_test_setup(test_counts_and_seconds, setup),
        cmocka_unit_test_setup(test_durations_and_endpoints, setup),
        cmocka_unit_test_setup(test_strings_and_enums, setup),
        cmocka_unit_test_setup(test_lists, setup),
        cmocka_unit_test_setup(test_unknown_and_missing, setup),
        cmocka_unit_test_setup(test_positional_arguments, setup),
        cmocka_unit_test_setup(test_help, setup),
        cmocka_unit_test_setup(test_bad_across_options, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

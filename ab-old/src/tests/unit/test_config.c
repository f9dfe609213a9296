/*
 * test_config.c - the KVBATCH_* loader: %p, ranges, and the one-line
 * message and the variable's default on a bad value (the size and duration grammar
 * itself: test_parse.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "config.h"

/* A fake environment: NULL-terminated name/value pairs. */
static const char *const *fake_env;

static const char *fake_get(const char *name)
{
    for (const char *const *p = fake_env; p && *p; p += 2)
        if (strcmp(p[0], name) == 0) return p[1];
    return NULL;
}

static void test_expand_pid(void **state)
{
    char out[64];
    (void)state;
    assert_int_equal(kvb_expand_path("/tmp/kvb-%p.prom", 1234, out, sizeof(out)), 0);
    assert_string_equal(out, "/tmp/kvb-1234.prom");
    assert_int_equal(kvb_expand_path("a%%b", 1, out, sizeof(out)), 0);
    assert_string_equal(out, "a%b");
    assert_int_equal(kvb_expand_path("a%x", 1, out, sizeof(out)), -EINVAL);
    assert_int_equal(kvb_expand_path("a%", 1, out, sizeof(out)), -EINVAL);
    assert_int_equal(kvb_expand_path("/0123456789/%p", 123456, out, 16), -ENAMETOOLONG);
}

static void test_defaults(void **state)
{
    struct kvb_config c;
    char err[256];
    (void)state;
    fake_env = NULL;
    assert_int_equal(kvb_config_load(&c, fake_get, 1, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_int_equal(c.policy, KVB_POLICY_AUTO);
    assert_int_equal(c.latency_target_ns, 0);
    assert_int_equal(c.window_ns, 50000);
    assert_int_equal(c.put_mode, KVB_PUT_SYNC);
    assert_int_equal(c.stats_interval_ns, 1000000000ull);
    assert_string_equal(c.stats_file, "");
}

static void test_all_variables(void **state)
{
    static const char *const env[] = {"KVBATCH_POLICY",
                                      "fixed",
                                      "KVBATCH_WINDOW_US",
                                      "2ms",
                                      "KVBATCH_MAX_OPS",
                                      "512",
                                      "KVBATCH_MAX_BYTES",
                                      "4MiB",
                                      "KVBATCH_MAX_INFLIGHT",
                                      "8",
                                      "KVBATCH_LATENCY_TARGET",
                                      "500",
                                      "KVBATCH_PUT_MODE",
                                      "writeback",
                                      "KVBATCH_BATCH_CALLS",
                                      "pass",
                                      "KVBATCH_WRITEBACK_BYTES",
                                      "1G",
                                      "KVBATCH_STATS_FILE",
                                      "/tmp/s-%p.prom",
                                      "KVBATCH_STATS_INTERVAL_MS",
                                      "250",
                                      "KVBATCH_STATS_AT_EXIT",
                                      "remove",
                                      "KVBATCH_EXIT_TIMEOUT_MS",
                                      "3s",
                                      "KVBATCH_LOG",
                                      "debug",
                                      NULL};
    struct kvb_config c;
    char err[256], text[1024];
    (void)state;
    fake_env = env;
    assert_int_equal(kvb_config_load(&c, fake_get, 42, err, sizeof(err)), 0);
    assert_int_equal(c.policy, KVB_POLICY_FIXED);
    assert_int_equal(c.window_ns, 2000000);
    assert_int_equal(c.max_ops, 512);
    assert_int_equal(c.max_bytes, 4u << 20);
    assert_int_equal(c.max_inflight, 8);
    assert_int_equal(c.latency_target_ns, 500000);
    assert_int_equal(c.put_mode, KVB_PUT_WRITEBACK);
    assert_int_equal(c.batch_calls, KVB_CALLS_PASS);
    assert_int_equal(c.writeback_bytes, 1ull << 30);
    assert_string_equal(c.stats_file, "/tmp/s-42.prom");
    assert_int_equal(c.stats_interval_ns, 250000000ull);
    assert_int_equal(c.stats_at_exit, KVB_STATS_REMOVE);
    assert_int_equal(c.exit_timeout_ns, 3000000000ull);
    assert_int_equal(c.log_level, KVS_LOG_DEBUG);
    kvb_config_describe(&c, text, sizeof(text));
    assert_non_null(strstr(text, "KVBATCH_POLICY=fixed\n"));
    assert_non_null(strstr(text, "KVBATCH_WINDOW_US=2000us\n"));
    assert_non_null(strstr(text, "KVBATCH_LATENCY_TARGET=500us\n"));
    assert_non_null(strstr(text, "KVBATCH_STATS_FILE=/tmp/s-42.prom\n"));
    assert_non_null(strstr(text, "KVBATCH_BATCH_CALLS=pass\n"));
}

/* Every policy by name, any case; auto is the default. */
static void test_policies(void **state)
{
    static const char *const names[] = {"adaptive", "FIXED", "off", "Auto"};
    static const char *const shown[] = {"adaptive", "fixed", "off", "auto"};
    static const enum kvb_policy want[] = {KVB_POLICY_ADAPTIVE, KVB_POLICY_FIXED, KVB_POLICY_OFF,
                                           KVB_POLICY_AUTO};
    (void)state;
    for (size_t i = 0; i < 4; i++) {
        const char *env[] = {"KVBATCH_POLICY", names[i], NULL};
        struct kvb_config c;
        char err[256];
        fake_env = env;
        assert_int_equal(kvb_config_load(&c, fake_get, 1, err, sizeof(err)), 0);
        assert_int_equal(c.policy, want[i]);
        assert_string_equal(kvb_policy_name(c.policy), shown[i]);
    }
}

/*
 * Each bad value: -EINVAL, one line naming variable, value, what is accepted
 * and the default it keeps; the other variables as given (batching stays on).
 */
static void test_bad_values_keep_their_default(void **state)
{
    static const char *const cases[][3] = {
        {"KVBATCH_POLICY", "fast", "auto"},       {"KVBATCH_WINDOW_US", "5 ms", NULL},
        {"KVBATCH_WINDOW_US", "2s", NULL},        {"KVBATCH_MAX_OPS", "0", NULL},
        {"KVBATCH_MAX_OPS", "12x", NULL},         {"KVBATCH_MAX_OPS", "100000", NULL},
        {"KVBATCH_MAX_BYTES", "1K", NULL},        {"KVBATCH_MAX_BYTES", "1T", NULL},
        {"KVBATCH_MAX_INFLIGHT", "0", NULL},      {"KVBATCH_MAX_INFLIGHT", "65", NULL},
        {"KVBATCH_LATENCY_TARGET", "11s", NULL},  {"KVBATCH_LATENCY_TARGET", "-1", NULL},
        {"KVBATCH_PUT_MODE", "async", "sync"},    {"KVBATCH_WRITEBACK_BYTES", "1K", NULL},
        {"KVBATCH_STATS_INTERVAL_MS", "1", NULL}, {"KVBATCH_STATS_INTERVAL_MS", "2h", NULL},
        {"KVBATCH_EXIT_TIMEOUT_MS", "61s", NULL}, {"KVBATCH_STATS_AT_EXIT", "delete", "keep"},
        {"KVBATCH_LOG", "verbose", "warn"},       {"KVBATCH_STATS_FILE", "/tmp/%q", "(none)"},
    };
    (void)state;
    struct kvb_config defaults;
    kvb_config_defaults(&defaults);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* A good KVBATCH_POLICY beside the bad one (unless it is the bad one) is kept. */
        int bad_policy = strcmp(cases[i][0], "KVBATCH_POLICY") == 0;
        const char *env[] = {cases[i][0], cases[i][1], bad_policy ? "KVBATCH_X" : "KVBATCH_POLICY",
                             "fixed", NULL};
        struct kvb_config c;
        char err[512], want[128], text[4096], deftext[4096];
        fake_env = env;
        assert_int_equal(kvb_config_load(&c, fake_get, 1, err, sizeof(err)), -EINVAL);
        assert_int_equal(c.policy, bad_policy ? defaults.policy : KVB_POLICY_FIXED);
        assert_non_null(strstr(err, cases[i][0]));
        assert_non_null(strstr(err, cases[i][1]));
        assert_non_null(strstr(err, "accepted"));
        assert_non_null(strstr(err, "using the default"));
        if (cases[i][2]) {
            snprintf(want, sizeof(want), "using the default %s", cases[i][2]);
            assert_non_null(strstr(err, want));
        }
        assert_null(strchr(err, '\n'));
        /* The bad variable's line in the description is the default's. */
        kvb_config_describe(&c, text, sizeof(text));
        kvb_config_describe(&defaults, deftext, sizeof(deftext));
        snprintf(want, sizeof(want), "%s=", cases[i][0]);
        const char *got = strstr(text, want), *def = strstr(deftext, want);
        assert_non_null(got);
        assert_non_null(def);
        assert_int_equal(strcspn(got, "\n"), strcspn(def, "\n"));
        assert_memory_equal(got, def, strcspn(def, "\n"));
    }
}

/* Every bad variable is reported, one line each. */
static void test_every_error_reported(void **state)
{
    static const char *const env[] = {"KVBATCH_POLICY", "bogus", "KVBATCH_MAX_OPS", "-3", NULL};
    struct kvb_config c;
    char err[512];
    (void)state;
    fake_env = env;
    assert_int_equal(kvb_config_load(&c, fake_get, 1, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "KVBATCH_POLICY='bogus'"));
    assert_non_null(strstr(err, "KVBATCH_MAX_OPS='-3'"));
    assert_non_null(strchr(err, '\n'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand_pid),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_all_variables),
        cmocka_unit_test(test_policies),
        cmocka_unit_test(test_bad_values_keep_their_default),
        cmocka_unit_test(test_every_error_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

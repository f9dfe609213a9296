/*
 * test_status.c - the one status table (common/status.c): every code
 * round-trips through its class, name and text; kvs_strerror, the wire
 * decoder, the client's transport-error rule and the shim's stats labels
 * all read it; an unknown code gets a clear text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>

#include "kvstore.h"
#include "metrics.h"
#include "stats.h"
#include "status.h"
#include "wire.h"

static void test_every_code_round_trips(void **state)
{
    (void)state;
    for (int c = 0; c < KVS_STATUS_C_OTHER; c++) {
        int code = kvs_status_class_code(c);
        assert_true(code < 0);
        assert_int_equal(kvs_status_class(code), c);
        const char *name = kvs_status_class_name(c);
        assert_non_null(kvs_status_name(code));
        assert_string_equal(kvs_status_name(code), name);
        assert_true(name[0] == 'E');
        const char *text = kvs_status_text(code);
        assert_true(strlen(text) > 0);
        assert_null(strstr(text, "unknown"));
        assert_string_equal(kvs_strerror(code), text); /* the exported call reads the table */
        for (int d = 0; d < c; d++) {                  /* one row per code, one name per row */
            assert_int_not_equal(kvs_status_class_code(d), code);
            assert_string_not_equal(kvs_status_class_name(d), name);
        }
    }
    assert_int_equal(kvs_status_class_code(KVS_STATUS_C_OTHER), 0);
    assert_string_equal(kvs_status_class_name(KVS_STATUS_C_OTHER), "other");
}

static void test_known_texts(void **state)
{
    (void)state;
    assert_string_equal(kvs_strerror(0), "success");
    assert_string_equal(kvs_strerror(4096), "success"); /* a get's length */
    assert_string_equal(kvs_strerror(1), "present");
    assert_string_equal(kvs_strerror(-ENOENT), "key not found");
    assert_string_equal(kvs_strerror(-E2BIG), "key or value too large");
    assert_string_equal(kvs_strerror(-EACCES), "access denied");
    assert_string_equal(kvs_status_name(-ECONNRESET), "ECONNRESET");
}

static void test_unknown_code(void **state)
{
    (void)state;
    assert_string_equal(kvs_strerror(-9999), "unknown error -9999");
    assert_string_equal(kvs_status_text(-EPIPE), "unknown error -32");
    assert_null(kvs_status_name(-9999));
    assert_null(kvs_status_name(0));
    assert_int_equal(kvs_status_class(-9999), KVS_STATUS_C_OTHER);
    assert_int_equal(kvs_status_class(0), KVS_STATUS_C_OTHER);
    assert_false(kvs_status_on_wire(-9999));
    assert_false(kvs_status_on_wire(2));
    assert_false(kvs_status_is_transport(-9999));
}

/* The wire decoder accepts exactly the codes the table marks as carried by the protocol. */
static void test_wire_carries_the_table(void **state)
{
    (void)state;
    for (int c = 0; c <= KVS_STATUS_C_OTHER; c++) {
        int code = c < KVS_STATUS_C_OTHER ? kvs_status_class_code(c) : -EPIPE;
        int on_wire = code != -ECONNREFUSED && code != -ECONNRESET && code != -EPIPE &&
                      code != -EHOSTUNREACH && code != -ENODEV;
        assert_int_equal(kvs_status_on_wire(code), on_wire);
        uint8_t buf[KVS_WIRE_STATUS_LEN];
        struct kvs_wire_status s;
        kvs_wire_status_encode(buf, code, 0);
        assert_int_equal(kvs_wire_status_decode(buf, KVS_OP_PUT, &s), on_wire ? 0 : -EBADMSG);
    }
    assert_true(kvs_status_on_wire(0));
    assert_true(kvs_status_on_wire(1));
}

static void test_transport_failures(void **state)
{
    (void)state;
    const int transport[] = {-ECONNREFUSED, -ECONNRESET,   -ETIMEDOUT, -EIO,
                             -EPROTO,       -EHOSTUNREACH, -ENODEV};
    int n = 0;
    for (int c = 0; c < KVS_STATUS_C_OTHER; c++)
        n += kvs_status_is_transport(kvs_status_class_code(c));
    assert_int_equal(n, sizeof(transport) / sizeof(transport[0]));
    for (size_t i = 0; i < sizeof(transport) / sizeof(transport[0]); i++)
        assert_true(kvs_status_is_transport(transport[i]));
    assert_false(kvs_status_is_transport(-ENOENT));
    assert_false(kvs_status_is_transport(0));
}

/* The shim's kvbatch_errors_total labels come from the table: every code has its own. */
static void test_stats_labels(void **state)
{
    (void)state;
    static struct kvb_stats st;
    static char text[65536];
    kvb_stats_init(&st);
    kvb_count_result(&st, KVB_OP_PUT, -EACCES);
    kvb_count_result(&st, KVB_OP_PUT, -EBADMSG);
    kvb_count_result(&st, KVB_OP_GET, -EPIPE);
    struct kvb_stats_source src = {"kvs", &st};
    assert_true(kvb_stats_render(&src, 1, 7, text, sizeof(text)) < sizeof(text));
    assert_non_null(strstr(
        text, "kvbatch_errors_total{pid=\"7\",backend=\"kvs\",op=\"put\",status=\"EACCES\"} 1\n"));
    assert_non_null(strstr(
        text, "kvbatch_errors_total{pid=\"7\",backend=\"kvs\",op=\"put\",status=\"EBADMSG\"} 1\n"));
    assert_non_null(strstr(
        text, "kvbatch_errors_total{pid=\"7\",backend=\"kvs\",op=\"get\",status=\"other\"} 1\n"));
    assert_null(strstr(
        text, "kvbatch_errors_total{pid=\"7\",backend=\"kvs\",op=\"put\",status=\"other\"}"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_round_trips),
        cmocka_unit_test(test_known_texts),
        cmocka_unit_test(test_unknown_code),
        cmocka_unit_test(test_wire_carries_the_table),
        cmocka_unit_test(test_transport_failures),
        cmocka_unit_test(test_stats_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

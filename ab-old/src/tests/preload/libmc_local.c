/*
 * libmc_local.c - a library on Mooncake's C API (over libmc_double.so, its
 * DT_NEEDED) that tests/preload/mc_dlopen loads RTLD_LOCAL, as CPython loads
 * an extension module: its calls bind to the shim (the global scope comes
 * first), and the shim must find the Mooncake library outside the global
 * scope, where dlsym(RTLD_NEXT) does not look.
 */
#include <stdint.h>
#include <string.h>

#include "store_c.h"

/* A few calls on one store; 0 when each returned what it should. */
__attribute__((visibility("default"))) int mc_local_run(void)
{
    char val[] = "local", buf[16];
    int bad = 0;
    mooncake_store_t s = mooncake_store_create();
    if (!s || mooncake_store_setup(s, "local:1", "", 0, 0, "tcp", "", "") != 0) return 1;
    for (int i = 0; i < 20; i++) {
        bad += mooncake_store_put_from(s, "ml.key", val, 5, NULL) != 0;
        bad += mooncake_store_get_into(s, "ml.key", buf, sizeof(buf)) != 5 || memcmp(buf, val, 5);
        bad += mooncake_store_is_exist(s, "ml.key") != 1;
        bad += mooncake_store_is_exist(s, "ml.missing") != 0;
    }
    mooncake_store_destroy(s);
    return bad != 0;
}

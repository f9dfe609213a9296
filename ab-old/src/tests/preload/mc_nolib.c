/*
 * mc_nolib - a program that calls Mooncake's C API with no library under
 * the shim that provides it: linked against libkvbatch.so itself, whose
 * mooncake_store_* then find no real function. Each call must return -1,
 * and the shim say why once on stderr.
 */
#include <stdint.h>
#include <stdio.h>

#include "store_c.h"

int main(void)
{
    char buf[8];
    mooncake_store_t s = (mooncake_store_t)buf; /* never set up: nothing may touch it */
    int bad = 0;
    bad += mooncake_store_put_from(s, "k", buf, 1, NULL) != -1;
    bad += mooncake_store_put(s, "k", buf, 1, NULL) != -1;
    bad += mooncake_store_get_into(s, "k", buf, sizeof(buf)) != -1;
    bad += mooncake_store_is_exist(s, "k") != -1;
    bad += mooncake_store_get_size(s, "k") != -1;
    bad += mooncake_store_remove(s, "k", 0) != -1;
    mooncake_store_destroy(s);
    printf("%d calls did not return -1\n", bad);
    return bad != 0;
}

/*
 * kvbench_memcpy.c - "kvbench memcpy": one thread's memcpy bandwidth for
 * blocks of --size bytes, the yardstick of the shared-memory transport
 * (docs/shm.md: a put and a get are each two such copies). Blocks are taken
 * in turn from a --span source and written to a --span destination (64 MiB
 * each by default: larger than the caches, as values arriving from an
 * engine are), both touched once before timing. Prints
 * "memcpy SIZE bytes: N bytes/s (B bytes in S s)"; --out FILE also writes
 * the bytes/s alone, for scripts.
 */
#include "kvbench.h"

#include <stdlib.h>
#include <string.h>

struct memcpy_cmd {
    size_t size, span;
    double seconds;
    const char *out;
};

int bench_memcpy_main(int argc, char **argv)
{
    struct memcpy_cmd mc = {.size = 64 * 1024, .span = 64u << 20, .seconds = 2};
    const struct kvopt opts[] = {
        {"size", 0, KVOPT_SIZE, KVOPT_TO(mc.size), "B", "block size", .lo = 1, .hi = 1u << 30},
        {"span", 0, KVOPT_SIZE, KVOPT_TO(mc.span), "B", "bytes the blocks walk through", .lo = 1,
         .hi = 4ull << 30},
        {"seconds", 0, KVOPT_SECONDS, KVOPT_TO(mc.seconds), "S", "time bound", .lo = 0, .hi = 3600},
        {"out", 0, KVOPT_STRING, KVOPT_TO(mc.out), "FILE", "write the bytes/s to FILE"},
        {0}};
    const struct kvopt_cmd cmd = {
        .name = "kvbench memcpy", .usage = "usage: kvbench memcpy [options]\n", .opts = opts};
    int rc = kvopt_parse(&cmd, argc, argv);
    if (rc == KVOPT_HELP) return 0;
    if (rc < 0) return KVOPT_EXIT_USAGE;
    if (mc.span < mc.size) mc.span = mc.size;
    size_t blocks = mc.span / mc.size;
    char *src = malloc(blocks * mc.size), *dst = malloc(blocks * mc.size);
    if (!src || !dst) {
        fprintf(stderr, "kvbench memcpy: cannot allocate 2 x %zu bytes\n", blocks * mc.size);
        free(src);
        free(dst);
        return 1;
    }
    memset(src, 0x5a, blocks * mc.size);
    memset(dst, 0, blocks * mc.size);
    uint64_t start = kvs_now_ns(), end = start + (uint64_t)(mc.seconds * 1e9), now = start;
    uint64_t bytes = 0;
    for (size_t i = 0; now < end; i = (i + 1) % blocks) {
        memcpy(dst + i * mc.size, src + i * mc.size, mc.size);
        __asm__ volatile("" : : "r"(dst) : "memory"); /* the copy is not optimised away */
        bytes += mc.size;
        if ((bytes / mc.size) % 64 == 0) now = kvs_now_ns();
    }
    now = kvs_now_ns();
    double secs = (double)(now - start) / 1e9;
    double rate = secs > 0 ? (double)bytes / secs : 0;
    printf("memcpy %zu bytes: %.0f bytes/s (%llu bytes in %.3f s)\n", mc.size, rate,
           (unsigned long long)bytes, secs);
    rc = 0;
    if (mc.out) {
        FILE *f = fopen(mc.out, "w");
        if (!f || fprintf(f, "%.0f\n", rate) < 0 || fclose(f) != 0) {
            fprintf(stderr, "kvbench memcpy: cannot write %s\n", mc.out);
            rc = 1;
        }
    }
    free(src);
    free(dst);
    return rc;
}

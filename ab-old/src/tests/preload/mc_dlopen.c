/*
 * mc_dlopen LIB - loads LIB with RTLD_LOCAL (tests/preload/libmc_local.so)
 * and runs its mc_local_run; exit status 0 when that returned 0.
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    int (*run)(void) = h ? (int (*)(void))dlsym(h, "mc_local_run") : NULL;
    if (!run) {
        fprintf(stderr, "mc_dlopen: %s\n", dlerror());
        return 2;
    }
    int rc = run();
    printf("mc_local_run: %d\n", rc);
    return rc;
}

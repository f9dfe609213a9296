/*
 * replay.c - main() of test_fuzz_<target>: every stored input of a libFuzzer
 * target, run once through its LLVMFuzzerTestOneInput by a program built
 * like the unit tests (gcc, the build's flags and sanitizers), so that
 * `make test` replays the seed corpus (tests/fuzz/corpus/<target>/) and every
 * crash the fuzzers found (tests/fuzz/regress/<target>/, one file per bug).
 *
 * The target is named by the program: test_fuzz_server replays "server".
 * Given arguments (files or directories), it replays those instead: e.g. a
 * campaign's corpus (build-fuzz/corpus/fuzz_server) under this build's
 * sanitizers, which check more than the libFuzzer build (UBSan alignment).
 * A target reports a broken invariant by aborting, a memory error shows
 * under `make test SAN=asan`; either fails the program. Each input gets a
 * buffer of exactly its size, as libFuzzer gives it, so an over-read of the
 * input is caught too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef KVS_FUZZ_DIR
#define KVS_FUZZ_DIR "tests/fuzz"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *target; /* "server", "wire", ... */

/* Reads a whole file into a buffer of exactly its size. 0 or a negative errno. */
static int read_input(const char *path, uint8_t **out, size_t *size)
{
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out_fd;
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        rc = -ENOMEM;
        goto out_fd;
    }
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            free(buf);
            goto out_fd;
        }
        got += (size_t)n;
    }
    *out = buf;
    *size = len;
out_fd:
    close(fd);
    return rc;
}

static int is_input(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

static char **given; /* files or directories named on the command line */
static int ngiven;

/* Runs one file through the target. */
static void replay_file(const char *path)
{
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = read_input(path, &data, &size);
    if (rc < 0) fail_msg("%s: %s", path, strerror(-rc));
    print_message("%s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
}

/* Runs every file of dir through the target, in name order; returns how many (-1: no dir). */
static int replay_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, is_input, alphasort);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        replay_file(path);
        free(names[i]);
    }
    free(names);
    return n;
}

/* KVS_FUZZ_DIR/kind/target: the stored inputs of one kind. */
static int replay_stored(const char *kind)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/%s/%s", KVS_FUZZ_DIR, kind, target);
    return replay_dir(dir);
}

/* The seed corpus: every target has one, so an empty or missing one is an error. */
static void test_seed_corpus(void **state)
{
    (void)state;
    int n = replay_stored("corpus");
    if (n <= 0) fail_msg("no seed inputs in %s/corpus/%s", KVS_FUZZ_DIR, target);
}

/* The crashes found by fuzzing, each fixed: none may crash again. */
static void test_regressions(void **state)
{
    (void)state;
    int n = replay_stored("regress");
    if (n <= 0) skip(); /* this target never crashed */
}

/* The files and directories given as arguments. */
static void test_given_inputs(void **state)
{
    (void)state;
    for (int i = 0; i < ngiven; i++) {
        struct stat st;
        if (stat(given[i], &st) < 0) fail_msg("%s: %s", given[i], strerror(errno));
        if (S_ISDIR(st.st_mode))
            replay_dir(given[i]);
        else
            replay_file(given[i]);
    }
}

int main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    const char *prefix = "test_fuzz_";
    if (strncmp(base, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "%s: the program must be named test_fuzz_<target>\n", base);
        return 2;
    }
    target = base + strlen(prefix);
    if (argc > 1) {
        given = argv + 1;
        ngiven = argc - 1;
        const struct CMUnitTest one[] = {cmocka_unit_test(test_given_inputs)};
        return cmocka_run_group_tests_name(base, one, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_corpus),
        cmocka_unit_test(test_regressions),
    };
    return cmocka_run_group_tests_name(base, tests, NULL, NULL);
}

/*
 * kvpreload.h - running a built test program with and without the shim
 * (LD_PRELOAD=libkvbatch.so), for the tests that compare the two, and
 * reading what it wrote (its output, the shim's stats file). No cmocka
 * here: tests/preload programs link tests/lib too. A helper that cannot do
 * its job says why on stderr and aborts the test program.
 */
#ifndef KVPRELOAD_H
#define KVPRELOAD_H

#include <stddef.h>

/* Absolute path of the built file rel (LD_PRELOAD wants one) into out. */
const char *kvt_abs_build(const char *rel, char *out, size_t cap);

/*
 * "LD_PRELOAD=..." into out: the sanitizer runtime this process runs with
 * (ASan and TSan must come first), libkvbatch.so, then the built libraries
 * named in more (space-separated paths relative to the build; NULL: none).
 */
const char *kvt_preload_env(const char *more, char *out, size_t cap);

/*
 * Runs the built program prog (relative to the build) with the arguments
 * args (NULL-ended), the environment extended by env (NULL-ended
 * "NAME=value" list), stdout into out_path and stderr into err_path.
 * Returns its exit status, or -1 (killed, or could not run).
 */
int kvt_run(const char *prog, const char *const args[], const char *const env[],
            const char *out_path, const char *err_path);

/* The contents of path, NUL-terminated (malloc'ed; up to 1 MiB). */
char *kvt_slurp(const char *path);

/*
 * The value of the sample "name value" in a stats file's text, its pid
 * label left out of the comparison (name is e.g.
 * kvbatch_ops_total{backend="kvs",op="put"}), or -1.
 */
double kvt_metric(const char *text, const char *name);

/*
 * The sum of the samples of name (pid label left out): every sample of the
 * family when name has no labels, else the samples with exactly these
 * labels; -1 when there is none.
 */
double kvt_metric_sum(const char *text, const char *name);

#endif

/*
 * values.h - self-checking values, for the tools (kvbench, kvstress) and the
 * tests: what a get returns can be told apart from any other bytes.
 *
 * A value written for (key, version) of len bytes is: the version (4 bytes,
 * host order), a hash of (key, version, len) (8 bytes), then bytes derived
 * from (key, version, offset). A value of another key or version, a torn
 * one (two puts mixed), a truncated or a damaged one fails the check.
 * Values shorter than 12 bytes hold a prefix of that layout.
 */
#ifndef KVBATCH_TOOLS_VALUES_H
#define KVBATCH_TOOLS_VALUES_H

#include <stddef.h>

/* How many bytes at each end kvval_stamp_ends writes and kvval_check_ends reads. */
#define KVVAL_ENDS 64

/* Fills buf[0..len) with the value of (key, version). */
void kvval_fill(void *buf, size_t len, const char *key, unsigned version);

/*
 * 1 if buf[0..len) is a whole value kvval_fill wrote for key (any version;
 * *version, if not NULL, gets it), else 0. Shorter than 4 bytes: 1 (too
 * short to carry a version, nothing to check).
 */
int kvval_check(const void *buf, size_t len, const char *key, unsigned *version);

/*
 * For values too large to write or check whole on a measured path: writes
 * only the first and last KVVAL_ENDS bytes of the value of (key, version)
 * (all of a value shorter than 2 * KVVAL_ENDS), and checks only those.
 */
void kvval_stamp_ends(void *buf, size_t len, const char *key, unsigned version);
/* 1 if the ends of buf[0..len) are those of the value of (key, version), else 0. */
int kvval_check_ends(const void *buf, size_t len, const char *key, unsigned version);

#endif /* KVBATCH_TOOLS_VALUES_H */

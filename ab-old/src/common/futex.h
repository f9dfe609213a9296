/*
 * futex.h - process-private futex wait and wake on a 32-bit atomic word: a
 * waiter sleeps only while the word still holds the value it read, so a
 * wake between its read and its sleep is never lost.
 */
#ifndef KVS_FUTEX_H
#define KVS_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"

/* Sleeps while *w == val (or until a wake or a signal); callers recheck their condition. */
static inline void kvs_futex_wait(atomic_int *w, int val)
{
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

/* As kvs_futex_wait, but returns at the latest at `deadline` (kvs_now_ns() time). */
static inline void kvs_futex_wait_until(atomic_int *w, int val, uint64_t deadline)
{
    struct timespec ts = kvs_ns_to_timespec(deadline);
    syscall(SYS_futex, w, FUTEX_WAIT_BITSET_PRIVATE, val, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* Wakes every thread sleeping on w. */
static inline void kvs_futex_wake_all(atomic_int *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

#endif /* KVS_FUTEX_H */

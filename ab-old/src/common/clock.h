/*
 * clock.h - the monotonic clock every room reads (CLOCK_MONOTONIC), the
 * conversion of one of its instants into a struct timespec for the calls
 * that take an absolute deadline (futex bitset waits, condition variables
 * set to CLOCK_MONOTONIC), and the two uses of the wall clock
 * (CLOCK_REALTIME): deadlines of calls that only take that clock, and
 * timestamps.
 */
#ifndef KVS_CLOCK_H
#define KVS_CLOCK_H

#include <stdint.h>
#include <time.h>

#define KVS_NS_PER_US 1000ull
#define KVS_NS_PER_MS 1000000ull
#define KVS_NS_PER_S  1000000000ull

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t kvs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * KVS_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Milliseconds on CLOCK_MONOTONIC. */
static inline uint64_t kvs_now_ms(void)
{
    return kvs_now_ns() / KVS_NS_PER_MS;
}

/* ns (an instant or a span) as a timespec. */
static inline struct timespec kvs_ns_to_timespec(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / KVS_NS_PER_S), (long)(ns % KVS_NS_PER_S)};
    return ts;
}

/*
 * The CLOCK_REALTIME instant ns from now: the deadline that
 * pthread_cond_timedwait (on a condition variable with the default clock)
 * and pthread_timedjoin_np take.
 */
static inline struct timespec kvs_realtime_in(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return kvs_ns_to_timespec((uint64_t)ts.tv_sec * KVS_NS_PER_S + (uint64_t)ts.tv_nsec + ns);
}

/* Wall-clock time in Unix seconds (CLOCK_REALTIME), for timestamps that files and people read. */
static inline double kvs_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif /* KVS_CLOCK_H */

/*
 * controller.h - the online tuner of KVBATCH_POLICY=auto: it picks the
 * batcher's window and batches-in-flight limit while the program runs, from
 * what the batcher observes, in the manner of a NIC's dynamic interrupt
 * moderation (Linux's net_dim): settings sit on one ladder of levels from
 * "every op that finds a free slot goes as its caller's own single-key call"
 * to "fewest, fullest batches"; each epoch the controller scores the level it
 * holds (ops per second, mean op latency, the p99 against a latency target); a walk
 * scans neighbours, keeps a better level only when a second epoch confirms
 * it, else goes back, and parks. Parked, it looks again when the load or the
 * latency changes, and probes one neighbour now and then.
 *
 * Pure logic: no clock, no lock, no thread. The batcher feeds it each
 * completed op's latency (a batched op's with its caller's wake-up,
 * kvb_ctl_op_woken), and the ops outstanding (under its own lock) and
 * calls kvb_ctl_tick with the time at completions; tests feed it made-up
 * observations with a made-up clock. Nothing runs while no op completes.
 */
#ifndef KVB_CONTROLLER_H
#define KVB_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>

/* Why the controller last changed (or set) its level. */
enum kvb_ctl_reason {
    KVB_CTL_START,       /* pass-through at first, then the start level once callers overlap */
    KVB_CTL_EXPLORE,     /* first step of a walk: the neighbour toward the callers' needs */
    KVB_CTL_BETTER,      /* the step lowered latency: one more, or settled on the best seen */
    KVB_CTL_WORSE,       /* the step raised latency: the other way, or back, parked */
    KVB_CTL_TIE,         /* no level scored better: back to the start, or pass-through if it tied */
    KVB_CTL_OVER_TARGET, /* the p99 went over the latency target: walk again */
    KVB_CTL_LOAD,        /* the ops outstanding or the latency changed: walk again */
    KVB_CTL_PROBE,       /* parked a while: try a neighbour */
    KVB_CTL_REASONS
};

/* One setting of the ladder. */
struct kvb_ctl_level {
    uint64_t window_ns; /* how long a forming batch may wait for expected company */
    uint32_t inflight;  /* batches (and direct calls) in flight at once */
};

/* What one epoch measured at one level. */
struct kvb_ctl_score {
    uint64_t ops;         /* ops completed */
    uint64_t per_op_ns;   /* the epoch's length / ops: the inverse of its throughput */
    uint64_t mean_ns;     /* their mean latency, the slowest TRIM_PERCENT left out */
    uint64_t err_ns;      /* that mean's standard error (their spread / sqrt(ops)) */
    uint64_t p99_ns;      /* their 99th percentile (interpolated in a bucket under 6.25 % wide) */
    uint32_t outstanding; /* most ops accepted and not completed at once */
};

#define KVB_CTL_MAX_LEVELS 16
#define KVB_CTL_SUB_BITS   4                        /* 16 buckets per power of two: */
#define KVB_CTL_BUCKETS    (64 << KVB_CTL_SUB_BITS) /* each under 6.25 % wide */

/*
 * Epochs: at least this long and this many ops. One that is due with fewer
 * ops ends on time alone once it has THIN_OPS (a thin epoch: its scores
 * compare with a margin widened by their standard error); thinner still, it
 * runs on, and one that has not reached THIN_OPS by its cap is dropped.
 */
#define KVB_CTL_EPOCH_NS     (20ull * 1000 * 1000)
#define KVB_CTL_EPOCH_OPS    1024
#define KVB_CTL_THIN_OPS     32
#define KVB_CTL_EPOCH_MAX_NS (1000ull * 1000 * 1000) /* still thinner than THIN_OPS: dropped */
#define KVB_CTL_TRIM_PERCENT 2 /* an epoch's mean leaves out this share of its slowest ops */

/* The walk's margins (percent) and patience (epochs). */
#define KVB_CTL_SAME_PERCENT  8   /* scores within this are the same ... */
#define KVB_CTL_NOISE_SIGMAS  2   /* ... or within this many standard errors of their difference */
#define KVB_CTL_NOISE_PERCENT 50  /* (a margin capped at this) */
#define KVB_CTL_EARLY_PERCENT 50  /* a level tried this much worse after EARLY_OPS ops ... */
#define KVB_CTL_EARLY_OPS     256 /* ... is judged at once */
#define KVB_CTL_OUT_EPOCHS    2   /* outstanding moved by half, or p99 over target, this long */
#define KVB_CTL_LOAD_PERCENT  50  /* a parked level's mean latency moved by this ... */
#define KVB_CTL_LOAD_EPOCHS   3   /* ... this many epochs in a row: walk again */
#define KVB_CTL_HOLD_EPOCHS   10  /* parked at least this long before a latency move counts */
#define KVB_CTL_PROBE_EPOCHS  50  /* parked this long: probe a neighbour */

struct kvb_ctl {
    /* The ladder (kvb_ctl_init), 0 = most direct. */
    struct kvb_ctl_level level[KVB_CTL_MAX_LEVELS];
    unsigned nlevels;
    uint64_t target_ns; /* p99 bound, 0 = none */

    /* What it holds and why. */
    unsigned cur;
    enum kvb_ctl_reason reason;
    uint64_t changes;
    struct kvb_ctl_score last; /* the last epoch's score */

    /* The walk. */
    int state;               /* enum in controller.c */
    int dir;                 /* -1 toward direct, +1 toward fuller batches */
    int probe_dir;           /* the next probe's direction (alternates) */
    unsigned same;           /* "same" results in a row on this walk */
    bool turned;             /* this walk has turned around */
    bool probing;            /* this walk is a probe that has not paid yet */
    bool tie_direct;         /* confirming pass-through, which tied with the start */
    bool started;            /* left pass-through for the start level (once callers overlapped) */
    enum kvb_ctl_reason why; /* measuring: the reason of the walk that follows */
    unsigned moved_out;      /* epochs in a row whose ops outstanding moved by half */
    unsigned over_epochs;    /* parked epochs in a row over the target the reference met */
    unsigned pivot;          /* the level the walk started from */
    unsigned lowest;         /* the level of the lowest score on this walk */
    unsigned settle;         /* rechecking: the level confirmed, kept if it beats the start again */
    uint32_t seen_mask;      /* levels scored on this walk */
    struct kvb_ctl_score seen[KVB_CTL_MAX_LEVELS];
    unsigned parked;          /* epochs since it parked */
    unsigned moved;           /* parked epochs in a row whose latency moved by LOAD_PERCENT */
    struct kvb_ctl_score ref; /* the score the next epoch is compared with */

    /*
     * The latest mean time from a batch's completion to its synchronous
     * callers running again (kvb_ctl_resumed): a direct call's latency
     * includes its caller's wake-up, a batched op's, taken at the
     * completion, does not until this is added (kvb_ctl_op_woken). Kept
     * across epochs.
     */
    uint64_t resume_ns;

    /* This epoch's observations. */
    uint64_t epoch_start;
    uint64_t ops, sum_ns;
    uint64_t over; /* ops over the target */
    uint32_t outstanding;
    uint32_t hist[KVB_CTL_BUCKETS];
};

/*
 * Level 0, pass-through: no window and KVB_CTL_PASS_INFLIGHT in flight, so
 * every op of a synchronous caller goes direct, as without the shim: where
 * merging saves nothing (large values: a round trip is small beside their
 * copy) an in-flight limit below the callers' count would only make them
 * queue. Auto holds it through its first epoch (connections, first touches:
 * a level that queues callers makes those slower still) and while ops come
 * one at a time, then goes to KVB_CTL_START_LEVEL, where the walks begin.
 */
#define KVB_CTL_PASS_INFLIGHT 1024
#define KVB_CTL_START_LEVEL   1

/*
 * Builds the ladder under the ceilings (KVBATCH_WINDOW_US, KVBATCH_MAX_INFLIGHT):
 * level 0 is pass-through (above); level 1 is (inflight_max, no window): an
 * op that finds a slot free and no batch forming goes direct, ops merge only
 * behind busy slots - where the walks begin, as it adds no wait of its own
 * and still merges when callers outnumber the slots; level 2 is (inflight_max,
 * window_max), the static adaptive policy's setting; then the limit halves
 * down to 1 at window_max. (No windows between 0 and window_max: waiting for
 * a caller that comes back late pays only if the wait is long enough to
 * catch it, so a shorter window measured worse than both ends - not a slope
 * a walk can climb.) The first epoch begins at now. target_ns: the p99
 * bound, 0 for none.
 */
void kvb_ctl_init(struct kvb_ctl *c, uint64_t window_max_ns, uint32_t inflight_max,
                  uint64_t target_ns, uint64_t now);

/* Bucket of a latency in hist[]: its power of two, then the next KVB_CTL_SUB_BITS bits. */
static inline unsigned kvb_ctl_bucket(uint64_t ns)
{
    if (ns < (1u << KVB_CTL_SUB_BITS)) return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* ns in [2^e, 2^(e+1)) */
    unsigned sub = (unsigned)(ns >> (e - KVB_CTL_SUB_BITS)) & ((1u << KVB_CTL_SUB_BITS) - 1);
    return (e << KVB_CTL_SUB_BITS) + sub;
}

/* One op completed after latency_ns. */
static inline void kvb_ctl_op(struct kvb_ctl *c, uint64_t latency_ns)
{
    c->ops++;
    c->sum_ns += latency_ns;
    c->over += c->target_ns && latency_ns > c->target_ns;
    c->hist[kvb_ctl_bucket(latency_ns)]++;
}

/*
 * n synchronous callers of batches ran again sum_ns after their batches'
 * completions, all told (n 0: nothing new, the estimate stands).
 */
static inline void kvb_ctl_resumed(struct kvb_ctl *c, uint64_t sum_ns, uint64_t n)
{
    if (n) c->resume_ns = sum_ns / n;
}

/*
 * A batched op whose caller sleeps until it completes, latency_ns from its
 * call to the completion: scored with its caller's wake-up as last
 * measured, so that it compares with a direct call's. (On a host whose
 * wake-ups cost tens of microseconds, leaving it out made batching look
 * faster than direct calls it was slower than.)
 */
static inline void kvb_ctl_op_woken(struct kvb_ctl *c, uint64_t latency_ns)
{
    kvb_ctl_op(c, latency_ns + c->resume_ns);
}

/* The ops accepted and not completed right now (the batcher's `active`). */
static inline void kvb_ctl_outstanding(struct kvb_ctl *c, uint32_t n)
{
    if (n > c->outstanding) c->outstanding = n;
}

/*
 * Called at completions with the time: ends the epoch if it is due and
 * decides. True if the level changed (the caller applies kvb_ctl_setting).
 */
bool kvb_ctl_tick(struct kvb_ctl *c, uint64_t now);

/* The setting it holds now. */
static inline const struct kvb_ctl_level *kvb_ctl_setting(const struct kvb_ctl *c)
{
    return &c->level[c->cur];
}

const char *kvb_ctl_reason_name(enum kvb_ctl_reason r);

#endif

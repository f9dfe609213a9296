/*
 * test_controller.c - the KVBATCH_POLICY=auto controller (batcher/controller.c)
 * driven with a made-up clock by a scripted backend: a closed-loop model of
 * T synchronous callers over a store with a per-request cost, a per-op cost
 * and a parallelism, which turns the level the controller holds into the op
 * latencies of one epoch (the mean, and a tail that sets the p99). Nothing
 * here reads a clock or sleeps, so every run is the same.
 *
 * The model, per epoch at level (window W, in-flight limit L), T callers:
 *   requests in flight R = min(T, L), fewer when batches wait up to W for
 *   expected callers (R * (1 - W / 2 W_max)); ops per request k = T / R;
 *   a request takes s = a + c k; the store serves P at once, so ops
 *   complete at X = k min(R, P) / s and an op's mean latency is T / X, plus
 *   a quarter of W for the waits. A lone caller never waits (nothing is in
 *   flight when it calls), whatever the level. p99 = 1.5 mean + W.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "controller.h"

#define US   1000ull
#define WMAX (50 * US)

struct model {
    double callers;   /* T */
    double a_ns;      /* per request */
    double c_ns;      /* per op */
    double parallel;  /* P */
    double noise;     /* epoch-to-epoch multiplicative noise, +-noise */
    int hiccup_every; /* every this many epochs one is 3 times slower (the host's hiccup); 0: none
                       */
    int epochs;
    uint64_t rng;
    bool flat;      /* every level the same: a + c per op (callers whose rate is their own) */
    double lucky;   /* the next epoch only: its latencies times this (0: none) */
    double tail_ns; /* the p99 at every level (the host's tail, not the level's); 0: model_p99 */
};

static double model_rand(struct model *m) /* uniform [0, 1) */
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return (double)(m->rng >> 11) / 9007199254740992.0;
}

static double model_mean(const struct model *m, const struct kvb_ctl_level *l)
{
    double T = m->callers, W = (double)l->window_ns;
    if (T <= 1 || m->flat) return m->a_ns + m->c_ns;
    double R = T < l->inflight ? T : l->inflight;
    R *= 1 - W / (2.0 * WMAX);
    if (R < 1) R = 1;
    double k = T / R, s = m->a_ns + m->c_ns * k;
    double X = k * (R < m->parallel ? R : m->parallel) / s;
    return T / X + W / 4;
}

static double model_p99(const struct model *m, const struct kvb_ctl_level *l)
{
    return 1.5 * model_mean(m, l) + (m->callers > 1 ? (double)l->window_ns : 0);
}

/*
 * The level with the lowest model mean (within target if one is set and can
 * be met); pass-through, else the start level, if its mean is within
 * KVB_CTL_SAME_PERCENT of that one's (a walk scores the levels below the
 * start before it parks). It moves only on a difference beyond the margin,
 * and where pass-through ties it passes through.
 */
static unsigned model_best(const struct model *m, const struct kvb_ctl *c, uint64_t target)
{
    unsigned best = 0;
    bool best_ok = false;
    for (unsigned i = 0; i < c->nlevels; i++) {
        bool ok = !target || model_p99(m, &c->level[i]) <= (double)target;
        double v = model_mean(m, &c->level[i]), bv = model_mean(m, &c->level[best]);
        if ((ok && !best_ok) || (ok == best_ok && v < bv)) best = i, best_ok = ok;
    }
    unsigned st = c->nlevels > KVB_CTL_START_LEVEL ? KVB_CTL_START_LEVEL : 0;
    for (unsigned i = 0; i <= st && i < best; i++) { /* 0, then the start (level 1) */
        bool ok = !target || model_p99(m, &c->level[i]) <= (double)target;
        if (ok == best_ok && model_mean(m, &c->level[i]) * 100 <=
                                 model_mean(m, &c->level[best]) * (100 + KVB_CTL_SAME_PERCENT))
            return i;
    }
    return best;
}

/* One epoch at the level c holds: 2000 ops fed, the clock moved past the epoch, a tick. */
static bool epoch(struct kvb_ctl *c, struct model *m, uint64_t *now)
{
    const struct kvb_ctl_level *l = kvb_ctl_setting(c);
    double f = 1 + m->noise * (2 * model_rand(m) - 1);
    if (m->hiccup_every && ++m->epochs % m->hiccup_every == 0) f *= 3;
    if (m->lucky > 0) f *= m->lucky, m->lucky = 0;
    double mean = model_mean(m, l) * f, p99 = (m->tail_ns ? m->tail_ns : model_p99(m, l)) * f;
    /*
     * 1975 ops around the mean and 25 at the p99: the mean without the
     * slowest 2 % (the score) is `mean`, and rank 1980 is in the tail.
     */
    kvb_ctl_outstanding(c, (uint32_t)m->callers);
    for (int i = 0; i < 1975; i++)
        kvb_ctl_op(c, (uint64_t)(mean * (0.95 + 0.1 * (i % 11) / 10.0)));
    for (int i = 0; i < 25; i++)
        kvb_ctl_op(c, (uint64_t)(p99 * (0.98 + 0.04 * i / 25)));
    *now += KVB_CTL_EPOCH_NS + 1000;
    bool r = kvb_ctl_tick(c, *now);
    if (getenv("CTL_TRACE"))
        fprintf(stderr, "T=%.0f lvl %u mean %.1f p99 %.1f (measured %.1f) -> lvl %u %s st %d\n",
                m->callers, (unsigned)(l - c->level), mean / 1e3, p99 / 1e3,
                (double)c->last.p99_ns / 1e3, c->cur, kvb_ctl_reason_name(c->reason), c->state);
    return r;
}

static void run(struct kvb_ctl *c, struct model *m, uint64_t *now, int epochs)
{
    for (int i = 0; i < epochs; i++)
        epoch(c, m, now);
}

/* Epochs of `epochs` spent at level `want` (or next to it, with slack 1). */
static int epochs_at(struct kvb_ctl *c, struct model *m, uint64_t *now, int epochs, unsigned want,
                     unsigned slack)
{
    int at = 0;
    for (int i = 0; i < epochs; i++) {
        epoch(c, m, now);
        unsigned cur = c->cur;
        if (cur + slack >= want && cur <= want + slack) at++;
    }
    return at;
}

/*
 * Epochs from a change of callers to the new level held: the change seen
 * (OUT_EPOCHS), the level scored afresh, a walk over the ladder and its turn,
 * the confirming epoch.
 */
static int react(const struct kvb_ctl *c)
{
    return KVB_CTL_OUT_EPOCHS + 1 + (int)c->nlevels + 2;
}

static void init(struct kvb_ctl *c, uint64_t target, uint64_t *now)
{
    *now = 1000000000ull;
    kvb_ctl_init(c, WMAX, 4, target, *now);
}

static struct model few_callers(void)
{
    struct model m = {2, 30000, 2000, 2, 0, 0, 0, 88172645463325252ull};
    return m;
}

/* 8 callers over a store serving 8 at once: pass-through is best, level 1 a third worse. */
static struct model eight_callers(void)
{
    struct model m = {8, 10000, 5000, 8, 0, 0, 0, 88172645463325252ull, false, 0};
    return m;
}

static void test_ladder(void **state)
{
    struct kvb_ctl c;
    (void)state;
    kvb_ctl_init(&c, WMAX, 4, 0, 0);
    assert_int_equal(c.nlevels, 5);
    static const uint64_t w[] = {0, 0, WMAX, WMAX, WMAX};
    static const uint32_t l[] = {KVB_CTL_PASS_INFLIGHT, 4, 4, 2, 1};
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(c.level[i].window_ns, w[i]);
        assert_int_equal(c.level[i].inflight, l[i]);
    }
    /* It warms up passing through (level 0); callers seen to overlap, it goes to level 1. */
    assert_int_equal(c.cur, 0);
    assert_int_equal(c.reason, KVB_CTL_START);
    kvb_ctl_outstanding(&c, 2);
    for (int i = 0; i < KVB_CTL_THIN_OPS; i++)
        kvb_ctl_op(&c, 100 * US);
    assert_true(kvb_ctl_tick(&c, KVB_CTL_EPOCH_NS));
    assert_int_equal(c.cur, KVB_CTL_START_LEVEL);
    assert_int_equal(c.reason, KVB_CTL_START);
    kvb_ctl_init(&c, 1000 * US, 64, 0, 0);
    assert_int_equal(c.nlevels, 9);
    assert_int_equal(c.level[8].inflight, 1);
    kvb_ctl_init(&c, 0, 1, 0, 0); /* only pass-through or one at a time */
    assert_int_equal(c.nlevels, 2);
    assert_int_equal(kvb_ctl_setting(&c)->inflight, KVB_CTL_PASS_INFLIGHT); /* until they overlap */
    assert_int_equal(c.level[KVB_CTL_START_LEVEL].inflight, 1);
}

static void test_epoch_score(void **state)
{
    struct kvb_ctl c;
    (void)state;
    kvb_ctl_init(&c, WMAX, 4, 0, 0);
    /*
     * 1..2000 us, one op each: the mean of all but the slowest 2 % is that of
     * 1..1960, 980.5 us; the p99 1980 us (both within the buckets' 6.25 %).
     */
    for (int i = 1; i <= 2000; i++)
        kvb_ctl_op(&c, (uint64_t)i * US);
    kvb_ctl_outstanding(&c, 7);
    assert_false(kvb_ctl_tick(&c, KVB_CTL_EPOCH_NS - 1)); /* not over yet */
    assert_int_equal(c.ops, 2000);
    kvb_ctl_tick(&c, KVB_CTL_EPOCH_NS);
    assert_int_equal(c.last.ops, 2000);
    assert_true(c.last.mean_ns >= 980500 * 97 / 100 && c.last.mean_ns <= 980500 * 103 / 100);
    assert_true(c.last.p99_ns >= 1980 * US * 95 / 100 && c.last.p99_ns <= 1980 * US * 105 / 100);
    assert_int_equal(c.last.outstanding, 7);
    assert_int_equal(c.ops, 0); /* the next epoch starts empty */
    /* An epoch thinner than THIN_OPS is not judged: it runs on, and after its cap it is dropped. */
    for (int i = 0; i < KVB_CTL_THIN_OPS - 1; i++)
        kvb_ctl_op(&c, 10 * US);
    unsigned cur = c.cur;
    uint64_t changes = c.changes, last_ops = c.last.ops;
    assert_false(kvb_ctl_tick(&c, 2 * KVB_CTL_EPOCH_NS));
    assert_int_equal(c.ops, KVB_CTL_THIN_OPS - 1);
    assert_false(kvb_ctl_tick(&c, KVB_CTL_EPOCH_NS + KVB_CTL_EPOCH_MAX_NS));
    assert_int_equal(c.ops, 0);
    assert_int_equal(c.last.ops, last_ops);
    assert_int_equal(c.cur, cur);
    assert_int_equal(c.changes, changes);
    /*
     * With THIN_OPS it ends on time alone, its score carrying the standard
     * error of its mean: 40 ops of 100 and 300 us, sd 100 us, error 100 / sqrt(39) us.
     */
    uint64_t t0 = KVB_CTL_EPOCH_NS + KVB_CTL_EPOCH_MAX_NS;
    for (int i = 0; i < 40; i++)
        kvb_ctl_op(&c, (i % 2 ? 300 : 100) * US);
    assert_false(kvb_ctl_tick(&c, t0 + KVB_CTL_EPOCH_NS - 1));
    kvb_ctl_tick(&c, t0 + KVB_CTL_EPOCH_NS);
    assert_int_equal(c.last.ops, 40);
    assert_int_equal(c.last.per_op_ns, KVB_CTL_EPOCH_NS / 40);
    assert_true(c.last.mean_ns >= 200 * US * 97 / 100 && c.last.mean_ns <= 200 * US * 103 / 100);
    assert_true(c.last.err_ns >= 16 * US * 94 / 100 && c.last.err_ns <= 16 * US * 106 / 100);
    assert_int_equal(c.ops, 0);
}

/*
 * One op at a time goes direct at every level (nothing is in flight when it
 * is called): there is nothing to choose, and the controller does not walk.
 */
static void test_single_caller_holds(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 1;
    init(&c, 0, &now);
    run(&c, &m, &now, 200);
    assert_int_equal(c.changes, 0);
    assert_int_equal(c.reason, KVB_CTL_START);
    assert_int_equal(c.last.outstanding, 1);
    /* A second caller arrives: now it walks, and stays where ops go direct. */
    m.callers = 2;
    run(&c, &m, &now, 10);
    assert_true(c.changes > 0);
    assert_int_equal(c.cur, model_best(&m, &c, 0));
    assert_int_equal(c.level[c.cur].window_ns, 0);
}

/*
 * Two callers over a store that serves two at once: merging cannot pay,
 * direct calls win. The two direct levels tie (two callers never fill four
 * slots), and it takes the one that merges nothing: pass-through.
 */
static void test_few_callers_fall_back_to_direct(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    init(&c, 0, &now);
    unsigned best = model_best(&m, &c, 0);
    assert_int_equal(best, 0);
    assert_true(model_mean(&m, &c.level[0]) == model_mean(&m, &c.level[KVB_CTL_START_LEVEL]));
    run(&c, &m, &now, 6);
    assert_int_equal(c.cur, best);
    assert_true(epochs_at(&c, &m, &now, 300, best, 0) >= 290);
}

/* Sixteen callers over a 2-way store: merging pays; it finds the model's best and stays. */
static void test_many_callers_converge(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    init(&c, 0, &now);
    unsigned best = model_best(&m, &c, 0);
    assert_int_equal(best, KVB_CTL_START_LEVEL + 1); /* the model's optimum is inside the ladder */
    c.cur = 0;                                       /* start away from it */
    run(&c, &m, &now, 8);
    assert_int_equal(c.cur, best);
    assert_true(epochs_at(&c, &m, &now, 300, best, 0) >= 285);
}

/* A store that serves 16 at once does not need merged requests: direct again. */
static void test_wide_store_prefers_direct(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    m.parallel = 16;
    init(&c, 0, &now);
    unsigned best = model_best(&m, &c, 0);
    assert_int_equal(best, 0);
    run(&c, &m, &now, 8);
    assert_int_equal(c.cur, best);
}

/*
 * Six callers, four slots, large values (a request costs little beside its
 * ops): merging behind busy slots saves nothing and the limit only makes
 * callers queue, so it goes to pass-through, every op direct, and stays.
 */
static void test_large_values_pass_through(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 6;
    m.a_ns = 2000;
    m.c_ns = 30000;
    m.parallel = 6;
    init(&c, 0, &now);
    assert_int_equal(model_best(&m, &c, 0), 0);
    assert_int_equal(c.level[0].inflight, KVB_CTL_PASS_INFLIGHT);
    run(&c, &m, &now, react(&c));
    assert_int_equal(c.cur, 0);
    assert_true(epochs_at(&c, &m, &now, 300, 0, 0) >= 285);
}

/*
 * Batching levels whose ops look faster (lower mean, call to result) but
 * whose callers get through fewer ops per second (their results wait for
 * the callers to be woken, which an op's latency does not see): the
 * throughput decides, and it stays where callers go direct.
 */
static void test_throughput_beats_a_lower_latency(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    (void)state;
    init(&c, 0, &now);
    int batched_epochs = 0;
    for (int e = 0; e < 60; e++) {
        bool batching = c.level[c.cur].window_ns > 0;
        uint64_t mean = batching ? 50 * US : 60 * US, per_op = batching ? 16 * US : 11 * US;
        batched_epochs += batching;
        kvb_ctl_outstanding(&c, 6);
        for (int i = 0; i < 2000; i++)
            kvb_ctl_op(&c, mean - mean / 20 + (mean / 10) * (uint64_t)(i % 11) / 10);
        now += 2000 * per_op;
        kvb_ctl_tick(&c, now);
    }
    assert_int_equal(c.level[c.cur].window_ns, 0);
    assert_true(batched_epochs <= 6); /* tried, and left */
}

/* Load steps 2 -> 64 -> 2 callers: each time it walks to the new best within a few epochs. */
static void test_load_step_up_and_down(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    init(&c, 0, &now);
    unsigned direct = model_best(&m, &c, 0);
    run(&c, &m, &now, 20);
    assert_int_equal(c.cur, direct);
    m.callers = 64;
    unsigned best = model_best(&m, &c, 0);
    assert_true(best > KVB_CTL_START_LEVEL);
    run(&c, &m, &now, react(&c));
    assert_int_equal(c.cur, best);
    m.callers = 2;
    run(&c, &m, &now, react(&c));
    assert_int_equal(c.cur, direct);
}

/* A burst of 256 callers for three epochs, then 4: back to the best for 4 afterwards. */
static void test_burst(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 4;
    init(&c, 0, &now);
    unsigned best4 = model_best(&m, &c, 0);
    run(&c, &m, &now, 20);
    assert_int_equal(c.cur, best4);
    m.callers = 256;
    run(&c, &m, &now, 3);
    m.callers = 4;
    run(&c, &m, &now, react(&c));
    assert_int_equal(c.cur, best4);
}

/* The store gets three times slower per request: the latency jump makes it look again. */
static void test_backend_gets_slower(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 8;
    m.parallel = 8;
    init(&c, 0, &now);
    unsigned before = model_best(&m, &c, 0);
    run(&c, &m, &now, 30);
    assert_int_equal(c.cur, before);
    m.a_ns *= 3;
    m.c_ns *= 3;
    m.parallel = 2; /* and serves fewer at once */
    unsigned after = model_best(&m, &c, 0);
    assert_int_not_equal(before, after);
    uint64_t changes = c.changes;
    run(&c, &m, &now, KVB_CTL_HOLD_EPOCHS + KVB_CTL_LOAD_EPOCHS + react(&c));
    assert_int_equal(c.cur, after);
    assert_true(c.changes > changes);
}

/*
 * With a p99 target that the lowest-mean level misses but others meet, it
 * settles on one that meets it; the p99 it reports stays within the target.
 */
static void test_stays_within_latency_target(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    const uint64_t target = 120 * US;
    init(&c, target, &now);
    unsigned unbounded = model_best(&m, &c, 0), bounded = model_best(&m, &c, target);
    assert_true(model_p99(&m, &c.level[unbounded]) > (double)target);
    assert_true(model_p99(&m, &c.level[bounded]) <= (double)target);
    run(&c, &m, &now, 2 * react(&c));
    assert_true(c.last.p99_ns <= target);
    int within = 0;
    for (int i = 0; i < 300; i++) {
        epoch(&c, &m, &now);
        within += c.last.p99_ns <= target;
    }
    assert_true(within >= 290); /* probes step out of the target now and then, and back */
}

/*
 * A target no level meets, and a p99 the same at every level (set by the
 * host's tail, not by the level): the p99s tie, so the level is picked as
 * without a target, by throughput - not held wherever it started.
 */
static void test_target_missed_everywhere_picks_by_throughput(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    m.tail_ns = 5000 * US;
    init(&c, 500 * US, &now);
    unsigned best = model_best(&m, &c, 0);
    assert_int_not_equal(best, KVB_CTL_START_LEVEL); /* else staying put would pass */
    assert_true(model_mean(&m, &c.level[best]) * 100 <
                model_mean(&m, &c.level[KVB_CTL_START_LEVEL]) * (100 - 2 * KVB_CTL_SAME_PERCENT));
    run(&c, &m, &now, 2 * react(&c));
    assert_int_equal(c.cur, best);
    assert_true(c.last.p99_ns > 500 * US);
}

/* A p99 that goes over the target while parked makes it walk at once, saying why. */
static void test_over_target_walks_again(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    init(&c, 300 * US, &now);
    run(&c, &m, &now, 20);
    unsigned parked = c.cur;
    assert_true(c.last.p99_ns <= 300 * US);
    m.a_ns *= 8; /* every level's p99 now misses 300 us, callers unchanged */
    uint64_t changes = c.changes;
    for (int i = 0; i < KVB_CTL_OUT_EPOCHS; i++)
        epoch(&c, &m, &now); /* over the target for OUT_EPOCHS: the level is scored afresh ... */
    assert_int_equal(c.changes, changes);
    epoch(&c, &m, &now); /* ... and the walk starts, saying why */
    assert_int_equal(c.reason, KVB_CTL_OVER_TARGET);
    assert_int_not_equal(c.cur, parked);
}

/*
 * Noise above the "same" margin (+-10 % per epoch): the walk still stops -
 * changes stay bounded by the probes and walks, and it spends most epochs at
 * or next to the best level.
 */
static void test_noise_does_not_oscillate_without_bound(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    m.noise = 0.10;
    init(&c, 0, &now);
    unsigned best = model_best(&m, &c, 0);
    run(&c, &m, &now, 20);
    uint64_t changes = c.changes;
    int near = epochs_at(&c, &m, &now, 3000, best, 1);
    /* A probe every PROBE_EPOCHS; one walk of at most nlevels + 5 changes from each. */
    uint64_t bound = (3000 / KVB_CTL_PROBE_EPOCHS + 1) * (c.nlevels + 5);
    if (getenv("CTL_TRACE"))
        fprintf(stderr, "noise: %llu changes (bound %llu), %d of 3000 epochs at or next to %u\n",
                (unsigned long long)(c.changes - changes), (unsigned long long)bound, near, best);
    assert_true(c.changes - changes <= bound);
    assert_true(near >= 2700);
}

/*
 * Every 7th epoch the host stalls (3 times the latency, at whatever level it
 * holds): no single slow epoch is a new load, and none decides a step, so it
 * stays at the best level but for probes.
 */
static void test_hiccups_do_not_move_it(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 16;
    init(&c, 0, &now);
    unsigned best = model_best(&m, &c, 0);
    run(&c, &m, &now, 20);
    assert_int_equal(c.cur, best);
    m.hiccup_every = 7;
    uint64_t changes = c.changes;
    int at = epochs_at(&c, &m, &now, 700, best, 0);
    if (getenv("CTL_TRACE"))
        fprintf(stderr, "hiccups: %d of 700 epochs at %u, %llu changes\n", at, best,
                (unsigned long long)(c.changes - changes));
    assert_true(at >= 660);
    assert_true(c.changes - changes <= 4 * (700 / KVB_CTL_PROBE_EPOCHS + 1));
}

/*
 * The start level's one scored epoch is lucky (0.68 of its latency): below
 * pass-through's by 10 %, so the walk parks there, on a level a third worse
 * than pass-through; its next epochs are 47 % slower than that score (not
 * the 50 % of a load change). Once HOLD_EPOCHS parked epochs have corrected
 * its score, the level the walk saw beat it is probed, and taken: within
 * HOLD_EPOCHS + 6 epochs (the probe, its confirmation, the start scored
 * again), not at the first timed probe (PROBE_EPOCHS).
 */
static void test_lucky_epoch_does_not_trap_it(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = eight_callers();
    (void)state;
    init(&c, 0, &now);
    assert_int_equal(model_best(&m, &c, 0), 0);
    assert_true(model_mean(&m, &c.level[1]) > 1.3 * model_mean(&m, &c.level[0]));
    epoch(&c, &m, &now); /* warm-up */
    m.lucky = 0.68;
    epoch(&c, &m, &now); /* the start level scored, lucky: the walk begins */
    int n = 0;
    while (n < KVB_CTL_HOLD_EPOCHS + 6 && !(c.cur == 0 && c.state == 4))
        epoch(&c, &m, &now), n++;
    assert_int_equal(c.cur, 0);
    assert_true(n < KVB_CTL_PROBE_EPOCHS);
    assert_true(epochs_at(&c, &m, &now, 100, 0, 0) >= 95);
}

/*
 * The program warms up while the first walk runs: its first four epochs
 * are 8, 8, 4 and 2 times slower than the model (the first, warm-up, is not
 * scored), then as the model, so
 * the last level stepped to scores lowest, and its confirming epoch beats
 * the start's warm-up score too. Scored again against the start measured
 * afterwards it loses, and the side not walked yet is: the model's best
 * (pass-through) is held from the 13th epoch on, and no level worse than
 * the start after the 8th.
 */
static void test_warm_up_does_not_trap_it(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = eight_callers();
    (void)state;
    init(&c, 0, &now);
    assert_int_equal(model_best(&m, &c, 0), 0);
    static const double warm[] = {8, 8, 4, 2};
    for (unsigned i = 0; i < sizeof(warm) / sizeof(warm[0]); i++) {
        m.lucky = warm[i];
        epoch(&c, &m, &now);
    }
    run(&c, &m, &now, 4);
    double start = model_mean(&m, &c.level[KVB_CTL_START_LEVEL]);
    int worse = 0, best = 0;
    for (int i = 0; i < 40; i++) {
        epoch(&c, &m, &now);
        worse += model_mean(&m, &c.level[c.cur]) > start * 1.05;
        best += i >= 4 && c.cur == 0;
    }
    assert_int_equal(worse, 0);
    assert_int_equal(best, 36);
}

/*
 * Trying a level that is plainly worse costs EPOCH_OPS ops, not an epoch:
 * 256 callers, the first step (half the batches in flight) doubles the
 * latency; fed op by op at epoch()'s rate, the walk moves on after EARLY_OPS of them.
 */
static void test_plainly_worse_level_is_left_at_once(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = few_callers();
    (void)state;
    m.callers = 256;
    init(&c, 0, &now);
    epoch(&c, &m, &now);             /* warm-up, passing through; then the start level */
    c.cur = KVB_CTL_START_LEVEL + 1; /* adaptive's setting, where fuller batches hurt */
    epoch(&c, &m, &now);             /* that level scored; the walk steps toward fuller batches */
    unsigned tried = c.cur;
    assert_int_equal(c.reason, KVB_CTL_EXPLORE);
    assert_true(model_mean(&m, &c.level[tried]) >
                1.5 * model_mean(&m, &c.level[KVB_CTL_START_LEVEL + 1]));
    int n = 0;
    for (; n < 10000 && c.cur == tried; n++) {
        kvb_ctl_outstanding(&c, 256);
        kvb_ctl_op(&c, (uint64_t)model_mean(&m, &c.level[tried]));
        now += (KVB_CTL_EPOCH_NS + 1000) / 2000; /* the ops per second of epoch(): the same rate */
        kvb_ctl_tick(&c, now);
    }
    assert_int_equal(n, KVB_CTL_EARLY_OPS);
    assert_int_equal(c.reason, KVB_CTL_WORSE);
}

/*
 * Completions one by one, as the batcher feeds them: T callers in a closed
 * loop at the level held, each op's latency the model's mean spread
 * uniformly by +-spread, the clock moved by latency / T per op (the rate T
 * callers get), a tick after each. Returns the epochs it ended.
 */
static int ops_run(struct kvb_ctl *c, struct model *m, uint64_t *now, int ops, double spread)
{
    int epochs = 0;
    for (int i = 0; i < ops; i++) {
        double lat = model_mean(m, kvb_ctl_setting(c)) * (1 + spread * (2 * model_rand(m) - 1));
        kvb_ctl_outstanding(c, (uint32_t)m->callers);
        kvb_ctl_op(c, (uint64_t)lat);
        *now += (uint64_t)(lat / m->callers);
        uint64_t start = c->epoch_start;
        kvb_ctl_tick(c, *now);
        epochs += c->epoch_start != start && c->ops == 0;
        if (getenv("CTL_TRACE") && c->epoch_start != start)
            fprintf(stderr, "op %d: epoch of %llu ops, mean %.0f us +- %.1f -> lvl %u %s\n", i,
                    (unsigned long long)c->last.ops, (double)c->last.mean_ns / 1e3,
                    (double)c->last.err_ns / 1e3, c->cur, kvb_ctl_reason_name(c->reason));
    }
    return epochs;
}

/* Six callers of large values, milliseconds per op: the model's test_large_values_pass_through. */
static struct model slow_large_values(void)
{
    struct model m = few_callers();
    m.callers = 6;
    m.a_ns = 200 * US;
    m.c_ns = 3000 * US;
    m.parallel = 6;
    return m;
}

/*
 * A short program (300 ops of 6 callers, under 250 ms,
 * as LMCache saving a few hundred chunks): epochs never reach EPOCH_OPS, so
 * they end on time alone, and it still finds pass-through, which the start
 * level's 4 slots lose to by a third.
 */
static void test_short_run_decides_on_time(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = slow_large_values();
    (void)state;
    init(&c, 0, &now);
    assert_int_equal(model_best(&m, &c, 0), 0);
    assert_true(model_mean(&m, &c.level[KVB_CTL_START_LEVEL]) > 1.4 * model_mean(&m, &c.level[0]));
    uint64_t t0 = now;
    int epochs = ops_run(&c, &m, &now, 300, 0.5);
    assert_true(now - t0 < 250 * 1000 * US);
    assert_true(epochs >= 5);
    assert_true(c.last.ops < KVB_CTL_EPOCH_OPS);
    assert_int_equal(c.cur, 0);
    assert_int_equal(c.level[c.cur].inflight, KVB_CTL_PASS_INFLIGHT);
}

/*
 * Thin epochs are noisy: 32 ops each, spread +-90 % (a standard deviation
 * of half the mean: about 9 % on an epoch's mean, 13 % on the difference of
 * two). Four callers whose latency is the same at every level: nothing
 * beats anything, and the noise alone must not move it - the margin widens
 * with the epochs' own error. It leaves the start only for the most direct
 * level that tied, and moves only on probes, each undone at once.
 */
static void test_thin_noisy_epochs_hold(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    struct model m = slow_large_values();
    (void)state;
    m.callers = 4;
    m.flat = true;
    init(&c, 0, &now);
    ops_run(&c, &m, &now, 400, 0.9);
    uint64_t changes = c.changes;
    int epochs = 0, at0 = 0;
    while (epochs < 1000) {
        int e = ops_run(&c, &m, &now, 1, 0.9);
        epochs += e;
        if (e) at0 += c.cur == 0;
    }
    if (getenv("CTL_TRACE"))
        fprintf(stderr, "thin noise: %llu changes, %d of %d epochs at 0, last %llu ops\n",
                (unsigned long long)(c.changes - changes), at0, epochs,
                (unsigned long long)c.last.ops);
    assert_true(c.last.ops < 64);
    assert_true(at0 >= 950);
    assert_true(c.changes - changes <= 2 * (1000 / KVB_CTL_PROBE_EPOCHS + 1));
}

/* No completions: no tick, no change, however long. */
static void test_idle_changes_nothing(void **state)
{
    struct kvb_ctl c;
    uint64_t now;
    (void)state;
    init(&c, 0, &now);
    unsigned cur = c.cur;
    for (int i = 0; i < 100; i++) {
        now += KVB_CTL_EPOCH_MAX_NS;
        assert_false(kvb_ctl_tick(&c, now));
    }
    assert_int_equal(c.cur, cur);
    assert_int_equal(c.changes, 0);
}

/*
 * A batched op is scored from its call to its caller running again, as a
 * direct call is: its latency to the completion plus the wake-up last
 * measured (kvb_ctl_resumed, kept across epochs). Then batches that
 * complete sooner than direct calls (60 us against 80) but whose callers
 * take 30 us more to run again lose to the direct calls, as they do in
 * throughput: the walk ends at pass-through.
 */
static void test_batched_ops_count_their_callers_wake_up(void **state)
{
    struct kvb_ctl c;
    (void)state;
    kvb_ctl_init(&c, WMAX, 4, 0, 0);
    kvb_ctl_op_woken(&c, 50 * US); /* nothing measured yet: as it is */
    assert_int_equal(c.sum_ns, 50 * US);
    kvb_ctl_resumed(&c, 300 * US, 10);
    kvb_ctl_op_woken(&c, 50 * US);
    assert_int_equal(c.sum_ns, 130 * US);
    assert_int_equal(c.hist[kvb_ctl_bucket(80 * US)], 1);
    kvb_ctl_resumed(&c, 0, 0); /* nothing new: the estimate stands */
    kvb_ctl_op(&c, 50 * US);   /* a direct call: its own latency */
    assert_int_equal(c.sum_ns, 180 * US);
    kvb_ctl_tick(&c, KVB_CTL_EPOCH_MAX_NS); /* too thin: dropped, a new epoch */
    kvb_ctl_op_woken(&c, 10 * US);
    assert_int_equal(c.sum_ns, 40 * US);

    kvb_ctl_init(&c, WMAX, 4, 0, 0);
    uint64_t now = 0;
    for (int e = 0; e < 400; e++) {
        for (int i = 0; i < KVB_CTL_EPOCH_OPS; i++) {
            if (c.cur == 0) {
                kvb_ctl_op(&c, 80 * US);
            } else {
                kvb_ctl_resumed(&c, 30 * US, 1);
                kvb_ctl_op_woken(&c, 60 * US);
            }
        }
        kvb_ctl_outstanding(&c, 8);
        now += KVB_CTL_EPOCH_NS;
        kvb_ctl_tick(&c, now);
    }
    assert_int_equal(c.cur, 0);
}

static void test_reason_names(void **state)
{
    (void)state;
    assert_string_equal(kvb_ctl_reason_name(KVB_CTL_START), "start");
    assert_string_equal(kvb_ctl_reason_name(KVB_CTL_OVER_TARGET), "over_target");
    assert_string_equal(kvb_ctl_reason_name(KVB_CTL_PROBE), "probe");
    assert_string_equal(kvb_ctl_reason_name(KVB_CTL_REASONS), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ladder),
        cmocka_unit_test(test_epoch_score),
        cmocka_unit_test(test_single_caller_holds),
        cmocka_unit_test(test_few_callers_fall_back_to_direct),
        cmocka_unit_test(test_many_callers_converge),
        cmocka_unit_test(test_wide_store_prefers_direct),
        cmocka_unit_test(test_large_values_pass_through),
        cmocka_unit_test(test_throughput_beats_a_lower_latency),
        cmocka_unit_test(test_load_step_up_and_down),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_backend_gets_slower),
        cmocka_unit_test(test_stays_within_latency_target),
        cmocka_unit_test(test_target_missed_everywhere_picks_by_throughput),
        cmocka_unit_test(test_over_target_walks_again),
        cmocka_unit_test(test_noise_does_not_oscillate_without_bound),
        cmocka_unit_test(test_hiccups_do_not_move_it),
        cmocka_unit_test(test_plainly_worse_level_is_left_at_once),
        cmocka_unit_test(test_lucky_epoch_does_not_trap_it),
        cmocka_unit_test(test_warm_up_does_not_trap_it),
        cmocka_unit_test(test_short_run_decides_on_time),
        cmocka_unit_test(test_thin_noisy_epochs_hold),
        cmocka_unit_test(test_idle_changes_nothing),
        cmocka_unit_test(test_batched_ops_count_their_callers_wake_up),
        cmocka_unit_test(test_reason_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

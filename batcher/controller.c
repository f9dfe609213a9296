/*
 * controller.c - the ladder, the epoch score and the walk of
 * KVBATCH_POLICY=auto (see controller.h).
 *
 * The walk is a hill climb on a noisy function, so it is built to stop and
 * to move only on evidence: a walk scans while levels are not worse than the
 * lowest it has seen (three ties in a row end it), turns once if the first
 * side gave nothing, and settles on the lowest only if it beats the start by
 * the margin twice (the second time in a confirming epoch) and then beats
 * the start scored afresh (a warming-up program makes each epoch faster than
 * the last); else it goes back (and walks the side it has not walked), or to
 * pass-through where that tied (confirmed the same way). The
 * margin is SAME_PERCENT, wider where the epochs' own noise (the standard
 * error of their means: thin or scattered epochs) says so. A parked controller moves again only
 * when the load it sees changes (the ops outstanding by half for KVB_CTL_OUT_EPOCHS, the p99
 * crossing the target, its latency by KVB_CTL_LOAD_PERCENT for KVB_CTL_LOAD_EPOCHS after
 * KVB_CTL_HOLD_EPOCHS) or once every KVB_CTL_PROBE_EPOCHS for a one-step
 * probe. So between two load changes it changes level at most nlevels + 5
 * times per walk plus twice per probe period.
 */
#include "controller.h"

#include <math.h>
#include <string.h>

enum { ST_WARMUP, ST_MEASURE, ST_WALK, ST_CONFIRM, ST_PARK, ST_RECHECK };
enum { BETTER = -1, SAME = 0, WORSE = 1 };

#define KVB_CTL_SAME_STEPS 3 /* ties in a row before a walk stops */

const char *kvb_ctl_reason_name(enum kvb_ctl_reason r)
{
    static const char *const names[KVB_CTL_REASONS] = {"start", "explore",     "better", "worse",
                                                       "tie",   "over_target", "load",   "probe"};
    return (unsigned)r < KVB_CTL_REASONS ? names[r] : "?";
}

static void add_level(struct kvb_ctl *c, uint64_t window_ns, uint32_t inflight)
{
    if (c->nlevels) {
        const struct kvb_ctl_level *l = &c->level[c->nlevels - 1];
        if (l->window_ns == window_ns && l->inflight == inflight) return;
    }
    if (c->nlevels == KVB_CTL_MAX_LEVELS) return;
    c->level[c->nlevels].window_ns = window_ns;
    c->level[c->nlevels].inflight = inflight;
    c->nlevels++;
}

/* Clears the epoch's observations; the next epoch begins at now. */
static void epoch_reset(struct kvb_ctl *c, uint64_t now)
{
    c->epoch_start = now;
    c->ops = c->sum_ns = c->over = 0;
    c->outstanding = 0;
    memset(c->hist, 0, sizeof(c->hist));
}

void kvb_ctl_init(struct kvb_ctl *c, uint64_t window_max_ns, uint32_t inflight_max,
                  uint64_t target_ns, uint64_t now)
{
    memset(c, 0, sizeof(*c));
    if (inflight_max == 0) inflight_max = 1;
    c->target_ns = target_ns;
    add_level(c, 0, KVB_CTL_PASS_INFLIGHT);
    add_level(c, 0, inflight_max);
    add_level(c, window_max_ns, inflight_max);
    for (uint32_t l = inflight_max; l > 1;) {
        l /= 2;
        add_level(c, window_max_ns, l);
    }
    c->cur = 0; /* pass-through until callers are seen to overlap (kvb_ctl_tick) */
    c->reason = KVB_CTL_START;
    c->state = ST_WARMUP;
    c->why = KVB_CTL_EXPLORE;
    c->probe_dir = -1;
    epoch_reset(c, now);
}

/* Lower and upper bound of the latencies in bucket i (kvb_ctl_bucket's inverse). */
static void bucket_bounds(unsigned i, uint64_t *lo, uint64_t *hi)
{
    const unsigned one = 1u << KVB_CTL_SUB_BITS;
    if (i < one) {
        *lo = i;
        *hi = i + 1;
        return;
    }
    unsigned e = i >> KVB_CTL_SUB_BITS, sub = i & (one - 1), shift = e - KVB_CTL_SUB_BITS;
    *lo = (uint64_t)(one + sub) << shift;
    *hi = e == 63 && sub == one - 1 ? UINT64_MAX : (uint64_t)(one + sub + 1) << shift;
}

/* The epoch's 99th percentile, interpolated inside its bucket. */
static uint64_t epoch_p99(const struct kvb_ctl *c)
{
    uint64_t rank = (c->ops * 99 + 99) / 100, cum = 0; /* ceil(0.99 ops) */
    for (unsigned i = 0; i < KVB_CTL_BUCKETS; i++) {
        if (!c->hist[i]) continue;
        if (cum + c->hist[i] >= rank) {
            uint64_t lo, hi;
            bucket_bounds(i, &lo, &hi);
            return lo + (uint64_t)((double)(hi - lo) * (double)(rank - cum) / c->hist[i]);
        }
        cum += c->hist[i];
    }
    return 0;
}

/*
 * The epoch's mean op latency without its slowest KVB_CTL_TRIM_PERCENT, and
 * that mean's standard error (from the histogram, each bucket at its middle):
 * the mean is what waiting callers' throughput follows, and the few slowest
 * ops of an epoch are most often the host's (a preemption, another program's
 * burst), not the level's. The error is what a thin epoch's few ops leave
 * uncertain.
 */
static uint64_t epoch_mean(const struct kvb_ctl *c, uint64_t *err)
{
    uint64_t keep = c->ops - c->ops * KVB_CTL_TRIM_PERCENT / 100, left = keep;
    double sum = 0, sq = 0;
    for (unsigned i = 0; i < KVB_CTL_BUCKETS && left; i++) {
        uint64_t n = c->hist[i] < left ? c->hist[i] : left, lo, hi;
        if (!n) continue;
        bucket_bounds(i, &lo, &hi);
        double mid = (double)lo + (double)(hi - lo) / 2;
        sum += (double)n * mid;
        sq += (double)n * mid * mid;
        left -= n;
    }
    *err = 0;
    if (!keep) return 0;
    double mean = sum / (double)keep, var = sq / (double)keep - mean * mean;
    if (keep > 1 && var > 0) *err = (uint64_t)sqrt(var / (double)(keep - 1));
    return (uint64_t)mean;
}

/*
 * The margin (percent) within which two scores are the same: SAME_PERCENT,
 * or NOISE_SIGMAS standard errors of the difference of their means where
 * that is wider (thin or scattered epochs), at most NOISE_PERCENT.
 */
static double margin(const struct kvb_ctl_score *a, const struct kvb_ctl_score *b)
{
    double ra = a->mean_ns ? (double)a->err_ns / (double)a->mean_ns : 0;
    double rb = b->mean_ns ? (double)b->err_ns / (double)b->mean_ns : 0;
    double m = 100.0 * KVB_CTL_NOISE_SIGMAS * sqrt(ra * ra + rb * rb);
    if (m < KVB_CTL_SAME_PERCENT) return KVB_CTL_SAME_PERCENT;
    return m < KVB_CTL_NOISE_PERCENT ? m : KVB_CTL_NOISE_PERCENT;
}

/* b against a when both are positive: BETTER if lower by more than pct percent. */
static int relative(uint64_t a, uint64_t b, double pct)
{
    if ((double)b * 100 < (double)a * (100 - pct)) return BETTER;
    if ((double)b * 100 > (double)a * (100 + pct)) return WORSE;
    return SAME;
}

/*
 * s against ref: with a target, a p99 over it loses to one within it, and
 * two over it compare by p99, then as below where their p99s are the same;
 * otherwise the higher throughput (the lower time per op) wins, and where
 * the two are the same, the lower mean op latency. (An epoch's p99 is one
 * of its slowest 1 % of ops, far noisier than its mean: two within the
 * margin are told apart by the steadier figures, which for synchronous
 * callers move with it.) Throughput first: a batched op's latency carries its callers'
 * wake-up only as the last measured mean (kvb_ctl_op_woken), and a batch
 * wakes several callers one CPU after the other, so a level whose ops look
 * fast can still leave callers slower; callers whose rate is their own (the
 * same throughput at every level) are told apart by their latency.
 */
static int compare(const struct kvb_ctl *c, const struct kvb_ctl_score *ref,
                   const struct kvb_ctl_score *s)
{
    double m = margin(ref, s);
    if (c->target_ns) {
        bool rv = ref->p99_ns > c->target_ns, sv = s->p99_ns > c->target_ns;
        if (rv != sv) return sv ? WORSE : BETTER;
        int r = rv ? relative(ref->p99_ns, s->p99_ns, m) : SAME;
        if (r != SAME) return r;
    }
    int r = relative(ref->per_op_ns, s->per_op_ns, m);
    return r != SAME ? r : relative(ref->mean_ns, s->mean_ns, m);
}

/*
 * The order compare() uses, without its margin on the mean: within the
 * target before over it, then a p99 over it lower by the margin, then a
 * time per op lower by the margin, else the lower mean.
 */
static bool lower(const struct kvb_ctl *c, const struct kvb_ctl_score *a,
                  const struct kvb_ctl_score *b)
{
    double m = margin(a, b);
    if (c->target_ns) {
        bool av = a->p99_ns > c->target_ns, bv = b->p99_ns > c->target_ns;
        if (av != bv) return bv;
        int r = av ? relative(b->p99_ns, a->p99_ns, m) : SAME;
        if (r != SAME) return r == BETTER;
    }
    int r = relative(b->per_op_ns, a->per_op_ns, m);
    if (r != SAME) return r == BETTER;
    return a->mean_ns < b->mean_ns;
}

/* Goes to level `to`; false (and no move) if there is none. */
static bool go(struct kvb_ctl *c, int to, enum kvb_ctl_reason why)
{
    if (to < 0 || to >= (int)c->nlevels) return false;
    if ((unsigned)to == c->cur) return true;
    c->cur = (unsigned)to;
    c->reason = why;
    c->changes++;
    return true;
}

static void park(struct kvb_ctl *c, const struct kvb_ctl_score *at)
{
    c->state = ST_PARK;
    c->parked = 0;
    c->moved = 0;
    c->moved_out = 0;
    c->over_epochs = 0;
    c->ref = *at;
}

/* Stays one epoch at the level held, to score it afresh before a walk (why: the walk's reason). */
static void measure(struct kvb_ctl *c, enum kvb_ctl_reason why)
{
    c->state = ST_MEASURE;
    c->why = why;
}

/* Notes the score of the level held, and whether it is the walk's lowest. */
static void walk_record(struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    c->seen[c->cur] = *s;
    c->seen_mask |= 1u << c->cur;
    if (c->cur != c->lowest && lower(c, s, &c->seen[c->lowest])) c->lowest = c->cur;
}

/*
 * Starts a walk from the level just scored (s), toward dir (the other way at
 * the end of the ladder). A walk scans levels one epoch each, keeping every
 * score, while they are not worse than the lowest it has seen.
 */
static bool walk_from(struct kvb_ctl *c, const struct kvb_ctl_score *s, int dir,
                      enum kvb_ctl_reason why)
{
    c->seen_mask = 0;
    c->lowest = c->pivot = c->cur;
    walk_record(c, s);
    c->same = 0;
    c->moved_out = 0;
    c->turned = false;
    c->probing = why == KVB_CTL_PROBE;
    c->dir = dir;
    if (!go(c, (int)c->cur + dir, why)) {
        c->dir = -dir;
        c->turned = true; /* only one way to go */
        if (!go(c, (int)c->cur - dir, why)) {
            park(c, s);
            return false;
        }
    }
    c->state = ST_WALK;
    return true;
}

/* Toward direct calls when every op outstanding could have a slot of its own, else fuller batches.
 */
static int first_dir(const struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    return s->outstanding <= c->level[c->cur].inflight ? -1 : 1;
}

/*
 * Level 0 (pass-through), if this walk scored it below `than` and its
 * score is not worse than that level's, and - when `better` - beats the
 * walk's start: else -1. Where merging measured no gain at all, ops go as
 * the program's own calls: the shim adds nothing it has not seen pay.
 * (Between two batching levels that tie, the walk keeps where it started.)
 */
static int tied_direct(const struct kvb_ctl *c, unsigned than, bool better)
{
    if (than == 0 || !(c->seen_mask & 1u)) return -1;
    if (compare(c, &c->seen[than], &c->seen[0]) == WORSE) return -1;
    if (better && compare(c, &c->seen[c->pivot], &c->seen[0]) != BETTER) return -1;
    return 0;
}

/*
 * The walk stops (why: the step was worse, ties ran out, or the ladder
 * ended). If nothing on this side beat where it started, it turns around
 * once, straight to the other side of that level (a probe does not: it is
 * one step). If the lowest score it saw beats the start by more than the
 * margin it goes there - or to pass-through if that tied with it - to
 * confirm it (one more epoch); else to pass-through if that tied with the
 * start, to confirm that it is not worse; else back where it started, and
 * parks. It moves only on evidence seen twice, and where merging measured
 * no gain it passes through.
 */
static bool walk_stop(struct kvb_ctl *c, enum kvb_ctl_reason why)
{
    if (c->lowest == c->pivot && !c->turned && !c->probing && go(c, (int)c->pivot - c->dir, why)) {
        c->dir = -c->dir;
        c->turned = true;
        c->same = 0;
        return true;
    }
    unsigned from = c->cur;
    int direct;
    c->tie_direct = false;
    if (c->lowest != c->pivot && compare(c, &c->seen[c->pivot], &c->seen[c->lowest]) == BETTER) {
        direct = tied_direct(c, c->lowest, true);
        go(c, direct >= 0 ? direct : (int)c->lowest, KVB_CTL_BETTER);
        c->state = ST_CONFIRM;
    } else if ((direct = tied_direct(c, c->pivot, false)) >= 0) {
        go(c, direct, KVB_CTL_TIE);
        c->tie_direct = true;
        c->state = ST_CONFIRM;
    } else {
        go(c, (int)c->pivot, why == KVB_CTL_BETTER ? KVB_CTL_TIE : why);
        park(c, &c->seen[c->pivot]);
    }
    return c->cur != from;
}

/* True if a and b differ by half or more (ops outstanding: the load changed). */
static bool load_moved(uint32_t a, uint32_t b)
{
    return (uint64_t)b * 2 >= (uint64_t)a * 3 || (uint64_t)a * 2 >= (uint64_t)b * 3;
}

/*
 * The ops outstanding moved away from `ref` by half or more for
 * KVB_CTL_OUT_EPOCHS in a row: a new load (one epoch can miss callers that
 * were slow to come back).
 */
static bool outstanding_changed(struct kvb_ctl *c, uint32_t ref, const struct kvb_ctl_score *s)
{
    c->moved_out = load_moved(ref, s->outstanding) ? c->moved_out + 1 : 0;
    return c->moved_out >= KVB_CTL_OUT_EPOCHS;
}

/*
 * A step of the walk has been scored (s, at the level held). Under another
 * load scores do not compare: back to where the walk started, to score it
 * afresh. A probe that does not pay at once ends there.
 */
static bool walk_scored(struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    if (outstanding_changed(c, c->seen[c->pivot].outstanding, s)) {
        unsigned from = c->cur;
        go(c, (int)c->pivot, KVB_CTL_LOAD);
        measure(c, KVB_CTL_LOAD);
        return c->cur != from;
    }
    int r = compare(c, &c->seen[c->lowest], s);
    walk_record(c, s);
    if (r == WORSE) return walk_stop(c, KVB_CTL_WORSE);
    if (c->probing && r == SAME) return walk_stop(c, KVB_CTL_TIE);
    c->probing = false;
    c->same = r == SAME ? c->same + 1 : 0;
    if (c->same >= KVB_CTL_SAME_STEPS) return walk_stop(c, KVB_CTL_TIE);
    if (go(c, (int)c->cur + c->dir, r == BETTER ? KVB_CTL_BETTER : KVB_CTL_TIE)) return true;
    return walk_stop(c, r == BETTER ? KVB_CTL_BETTER : KVB_CTL_TIE);
}

/*
 * The level the walk settled on, scored again: kept if it still beats the
 * start (a more direct level that tied: if it is still not worse), else
 * undone.
 */
static bool confirm_scored(struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    int r = compare(c, &c->seen[c->pivot], s);
    if (c->tie_direct && r != WORSE) {
        park(c, s);
        return false;
    }
    if (r == BETTER) { /* and once more against the start scored now: recheck_scored */
        c->settle = c->cur;
        c->seen[c->cur] = *s;
        go(c, (int)c->pivot, KVB_CTL_TIE);
        c->state = ST_RECHECK;
        return true;
    }
    go(c, (int)c->pivot, KVB_CTL_TIE);
    park(c, &c->seen[c->pivot]);
    return true;
}

/*
 * The walk's start scored afresh (s) after the level it settled on was
 * confirmed: that level is kept only if it still beats it. The walk's
 * scores were taken one after the other; while the program warms up (its
 * first touches of memory, connections, a new working set) each epoch is
 * faster than the one before, and the last level stepped to looked best
 * (6 threads x 256 KiB puts: a level twice as slow per op as pass-through
 * held for 1.1 s). Against the start measured after it, that is undone.
 */
static bool recheck_scored(struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    int r = compare(c, s, &c->seen[c->settle]);
    /* Pass-through is kept where it ties, as tied_direct has it. */
    if (r == BETTER || (c->settle == 0 && r == SAME)) {
        go(c, (int)c->settle, r == BETTER ? KVB_CTL_BETTER : KVB_CTL_TIE);
        park(c, &c->seen[c->settle]);
        return true;
    }
    /* That side's scores are spent; the other side, not walked yet, is walked from this score. */
    c->seen_mask = 1u << c->pivot;
    c->seen[c->pivot] = *s;
    c->lowest = c->pivot;
    if (!c->turned && !c->probing && go(c, (int)c->pivot - c->dir, KVB_CTL_EXPLORE)) {
        c->dir = -c->dir;
        c->turned = true;
        c->same = 0;
        c->state = ST_WALK;
        return true;
    }
    park(c, s);
    return false;
}

/*
 * The direction of a level the last walk scored that beats the parked
 * level's reference (by compare's margin), 0 if none does: the walk judged
 * each level on one epoch, and one lucky epoch of the level it parked on can
 * have hidden a better one.
 */
static int better_seen(const struct kvb_ctl *c)
{
    int best = -1;
    for (unsigned l = 0; l < c->nlevels; l++) {
        if (l == c->cur || !(c->seen_mask & (1u << l))) continue;
        if (compare(c, &c->ref, &c->seen[l]) != BETTER) continue;
        if (best < 0 || lower(c, &c->seen[l], &c->seen[best])) best = (int)l;
    }
    return best < 0 ? 0 : best < (int)c->cur ? -1 : 1;
}

/*
 * Parked, one more epoch scored: look again if the load moved, probe now and
 * then - and once, after HOLD_EPOCHS, toward a level the walk saw beat what
 * the parked level has scored since (better_seen).
 */
static bool parked_scored(struct kvb_ctl *c, const struct kvb_ctl_score *s)
{
    c->parked++;
    bool over = c->target_ns && s->p99_ns > c->target_ns && c->ref.p99_ns <= c->target_ns;
    c->over_epochs = over ? c->over_epochs + 1 : 0;
    if (c->over_epochs >= KVB_CTL_OUT_EPOCHS) {
        measure(c, KVB_CTL_OVER_TARGET);
        return false;
    }
    if (outstanding_changed(c, c->ref.outstanding, s)) {
        measure(c, KVB_CTL_LOAD);
        return false;
    }
    /* The latency moved for LOAD_EPOCHS in a row (fewer: a hiccup of the host, not a new load). */
    bool moved = (double)s->mean_ns * 100 > (double)c->ref.mean_ns * (100 + KVB_CTL_LOAD_PERCENT) ||
                 (double)s->mean_ns * 100 < (double)c->ref.mean_ns * (100 - KVB_CTL_LOAD_PERCENT);
    c->moved = moved ? c->moved + 1 : 0;
    if (c->parked >= KVB_CTL_HOLD_EPOCHS && c->moved >= KVB_CTL_LOAD_EPOCHS) {
        measure(c, KVB_CTL_LOAD);
        return false;
    }
    if (moved || c->moved_out || over) return false; /* not folded into the reference */
    if (c->parked >= KVB_CTL_PROBE_EPOCHS) {
        int dir = c->probe_dir;
        c->probe_dir = -dir;
        return walk_from(c, s, dir, KVB_CTL_PROBE);
    }
    /* Follow slow drift of the parked level's scores (a step change is caught above first). */
    c->ref.mean_ns = (3 * c->ref.mean_ns + s->mean_ns) / 4;
    c->ref.p99_ns = (3 * c->ref.p99_ns + s->p99_ns) / 4;
    c->ref.per_op_ns = (3 * c->ref.per_op_ns + s->per_op_ns) / 4;
    if (c->parked == KVB_CTL_HOLD_EPOCHS) {
        int dir = better_seen(c);
        if (dir) return walk_from(c, s, dir, KVB_CTL_PROBE);
    }
    return false;
}

/*
 * A level being tried (walking, or confirming) that is already plainly
 * worse than the one it is compared with - after EARLY_OPS ops, its mean
 * over that one's by KVB_CTL_EARLY_PERCENT, or over 2 % of its ops over a
 * target the other one meets - is judged at once, not after a whole epoch:
 * trying a bad level costs a few hundred ops, not 20 ms of them (nor the
 * p99 of the program's run).
 */
static bool plainly_worse(const struct kvb_ctl *c)
{
    if (c->ops < KVB_CTL_EARLY_OPS || (c->state != ST_WALK && c->state != ST_CONFIRM)) return false;
    const struct kvb_ctl_score *ref = &c->seen[c->state == ST_WALK ? c->lowest : c->pivot];
    if (c->target_ns && ref->p99_ns <= c->target_ns && c->over * 100 > c->ops * 2) return true;
    return (double)c->sum_ns * 100 >
           (double)c->ops * (double)ref->mean_ns * (100 + KVB_CTL_EARLY_PERCENT);
}

bool kvb_ctl_tick(struct kvb_ctl *c, uint64_t now)
{
    uint64_t elapsed = now - c->epoch_start;
    bool early = plainly_worse(c);
    if (elapsed < KVB_CTL_EPOCH_NS && !early) return false;
    /* Due: it ends with EPOCH_OPS ops, or on time alone with THIN_OPS (its margin is its noise). */
    if (c->ops < KVB_CTL_THIN_OPS && !early) {
        if (elapsed >= KVB_CTL_EPOCH_MAX_NS) epoch_reset(c, now); /* too thin to judge */
        return false;
    }
    struct kvb_ctl_score s = {.ops = c->ops,
                              .per_op_ns = elapsed / c->ops,
                              .p99_ns = epoch_p99(c),
                              .outstanding = c->outstanding};
    s.mean_ns = epoch_mean(c, &s.err_ns);
    c->last = s;
    epoch_reset(c, now);
    if (c->nlevels < 2) return false;
    switch (c->state) {
    case ST_WARMUP: /* the first epoch (connections, first touches) passes through */
    case ST_MEASURE:
        c->state = ST_MEASURE;
        /* One op at a time goes direct at every level: nothing to choose, no walk to waste. */
        if (s.outstanding <= 1) return false;
        /* Company seen for the first time: the start level is scored before a walk. */
        if (!c->started) {
            c->started = true;
            return go(c, KVB_CTL_START_LEVEL, KVB_CTL_START);
        }
        return walk_from(c, &s, first_dir(c, &s), c->why);
    case ST_WALK:
        return walk_scored(c, &s);
    case ST_CONFIRM:
        return confirm_scored(c, &s);
    case ST_RECHECK:
        return recheck_scored(c, &s);
    default:
        return parked_scored(c, &s);
    }
}

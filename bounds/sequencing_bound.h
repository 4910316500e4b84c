// A makespan lower bound from each rank's sequencing (docs/semantics.md, Metrics: lower_bound):
// a rank runs one op at a time, no op can start before its dependencies let it, nor before its
// rank can have run the ops that precede it (bounds/rank_load_heads.h), an F not before its
// rank has room for its activation (bounds/paced_heads.h), no B or F ends later than the
// rank's memory lets the rest of the schedule run after it (bounds/paced_tails.h), and after an
// op ends its microbatch still has the ops down the pipeline to run; where stages can recompute,
// the rank also runs the R time its memory needs (bounds/rank_memory_need.h), and as many Rs as
// the most activations it holds as their checkpoint at once, with its heads paced for no more
// checkpoints than that (bounds/paced_heads.h). The bound relaxes each rank to one machine whose
// jobs have release times (heads) and delivery times (tails), and solves that relaxation exactly
// with preemption allowed (Jackson's preemptive schedule).
#pragma once

#include <functional>

#include "bounds/lower_bound.h"
#include "model/problem.h"

namespace optpipe {

// What the bound is rounded down by, relative: floating-point sums of the same durations in
// another order differ in their last bits.
inline constexpr double kRoundingMargin = 1e-13;

// The largest, over the ranks, least makespan of the rank's F, B and W ops with these heads and
// tails. Every schedule within the budget has a makespan of at least this. Its source says
// whether the deciding rank's memory raised it (kMemoryPacing, kRecomputeTime) or its ops alone
// hold it there (kSequencing). `known` is a bound the caller already holds: the reloads'
// bisection (docs/semantics.md) is skipped where it could not end above `known`, so the bound
// returned is below the relaxation's own only where that is at most `known`.
// `stop`, asked between the steps of the reloads' bisection (its longest part: about 30 pacings),
// ends it early (the time limit, an interrupt) with the bound its steps have proven so far, which
// is valid but may be lower.
LowerBound sequencing_bound(const Problem& problem, double known = 0,
                            const std::function<bool()>& stop = nullptr);

}  // namespace optpipe

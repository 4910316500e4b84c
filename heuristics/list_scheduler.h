// Greedy list scheduling with split backward (Zero Bubble style): each rank, whenever it is free,
// runs the first ready op by priority B > F > W (or F > B, see ListPolicy), where an F is allowed
// only while the rank's in-flight count and memory limit allow it. W fills the time a rank would
// otherwise wait (or only what memory needs), and the remaining Ws drain at the end.
//
// Memory is byte-accurate (docs/semantics.md): live bytes on a rank = A of every F started, minus
// A - G at each B, minus G at each W, so G held by pending Ws counts. Because a rank runs one op at
// a time, its live bytes when it starts an F are known exactly, and the list order timed by the
// simulator reproduces them. An F is started only when its A fits under the limit and, with
// several chunks per rank, only when the rank stays able to finish its older microbatches in order
// (a banker's check: a microbatch whose forward already entered the rank needs room for its
// remaining chunks there). A W is forced when memory blocks an F. When the limit is below one
// microbatch's activations on a rank, the rank runs one microbatch at a time, the leanest order
// there is, and exceeds the limit.
//
// With ListPolicy::offload the scheduler also decides offloads and reloads as it goes
// (heuristics/list_offload.h); its orders then need the memory fence of simulate_within_budget.
//
// Cost: a rank that finds nothing to run sleeps until one of its next ops becomes ready (a commit
// elsewhere may wake it sooner) instead of stepping through every event, and ranks take turns
// through a heap, so a run costs about O(ops log R): 3-8 ms for R = 32, m = 256.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "heuristics/list_offload.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

enum class WeightTiming {
  kFillGaps,  // a pending W runs whenever the rank has no ready B or allowed F
  // A pending W enters the order only when memory blocks a ready F, or at the drain. Timed as soon
  // as possible it then runs in the idle time before that F, not in every earlier gap.
  kWhenMemoryNeeds,
  // The Zero Bubble heuristic's rule: a pending W fills a gap at least T_W long (or of unknown
  // length), or a shorter one when leaving it idle would make this rank's idle time the largest of
  // all ranks; memory and the drain force it as above.
  kGapAware
};

struct ListPolicy {
  // Per rank, or empty for no limit: microbatches in flight on the rank, counted as forwards of
  // its first stage started minus backwards (B) of its first stage started. With one chunk per
  // rank this is the Zero Bubble paper's count of activations awaiting their B.
  std::vector<int> max_in_flight;
  // Per rank, or empty for no limit: live activation bytes (static bytes excluded).
  std::vector<int64_t> memory_limit_bytes;
  bool backward_first = true;      // B > F when both can run; false: F > B
  bool later_chunk_first = false;  // among ready Fs, the later stage first (drains V-shapes)
  WeightTiming weights = WeightTiming::kFillGaps;
  // With problem.offload: offload decided while scheduling (heuristics/list_offload.h); the
  // order then lists OFFLOAD and RELOAD actions, and memory counts what they free and take.
  std::optional<ListOffloadPolicy> offload;
  // Give up as soon as the simulator's makespan of the order is sure to exceed this
  // (ListOutcome::abandoned), with offload too: a search over policies passes the best makespan
  // it has and skips the runs that cannot beat it.
  double abandon_above_makespan = std::numeric_limits<double>::infinity();
};

// For policies that cannot starve a rank: throws DeadlockError when no rank can make progress (an
// in-flight limit below 1).
Order list_schedule(const Problem& problem, const ListPolicy& policy);

// The order with the timing the scheduler gave it, which is the simulator's as-soon-as-possible
// timing of that order: a cheap prediction to rank many policies before simulating the best.
// With offload it is an estimate (transfers of ranks sharing a channel may run in another order).
struct ListOutcome {
  Order order;
  double makespan = 0;
  double span = 0;                       // longest rank span (docs/semantics.md)
  std::vector<int64_t> peak_live_bytes;  // per rank, static bytes excluded
  bool abandoned = false;  // passed ListPolicy::abandon_above_makespan; the rest is unset
  // Non-empty when no rank could make progress (a rank starved under the policy's limits); the
  // rest is unset. A search over policies reads it and moves on.
  std::string deadlock;
};
ListOutcome list_schedule_with_outcome(const Problem& problem, const ListPolicy& policy);

}  // namespace optpipe

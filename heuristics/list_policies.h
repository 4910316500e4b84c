// List-scheduling policies that keep each rank within its memory budget
// (heuristics/list_scheduler.h): the ones AdaOffload tries (heuristics/adaoffload.cc) and, for a
// search with time to spare, the neighbourhood of its offloading ones (the optimiser,
// solver/optimizer.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "heuristics/list_scheduler.h"
#include "heuristics/offload_placement.h"
#include "model/problem.h"

namespace optpipe {

// The Zero Bubble list scheduler under `factor` times each rank's activation budget (byte
// accurate, deadlock-free on any placement): as many forwards as that memory holds.
ListPolicy memory_limited_policy(const Problem& problem, double factor, bool later_chunk_first);

// The list scheduler deciding offloads as it goes (heuristics/list_offload.h) under `factor`
// times the budget: where the link cannot carry every in-flight activation, it offloads what the
// link can and admits forwards only as fast as the memory that frees allows.
ListPolicy offloading_list_policy(const Problem& problem, const ListOffloadPolicy& offload,
                                  bool later_chunk_first, double factor = 1);

// Whether the offloading lists also offload eagerly (ListOffloadPolicy::eager): on long
// pipelines (16 stages or more) a rank must admit many microbatches per round trip of its first
// stage, which it can only where its offloads have freed memory. On shorter ones eager lists
// win list runs but lead the optimiser's search into slower basins (docs/methods.md).
bool is_long_pipeline(const Problem& problem);

// The unit of the offloading lists' channel waits: the first stage's forward, or on long
// pipelines a 16th of its round trip where that is longer, since ranks sharing a channel there
// queue their offloads for several forwards.
double channel_wait_unit(const Problem& problem);

// Offloading list policies over every knob AdaOffload leaves at one value within its
// sub-second budget (W timing, B or F first, a limit 10% under the budget, how long an offload
// may wait for its channel; on long pipelines offloading only where memory needs it or
// eagerly) besides the ones it varies (how long-lived an activation must be to go, how early it
// comes back, which chunk's F first). About 1,800 at two chunks per rank (3,600 on long
// pipelines). Each knob's values that won most often on the benchmark suite come first, and the
// policies whose values come first on every knob come first.
std::vector<ListPolicy> offloading_policy_neighbourhood(const Problem& problem);

// The neighbours of `policy` (one with per-rank memory limits) in a descent over per-rank limits:
// one rank's memory limit scaled down by a few factors or raised back to its activation budget,
// or its microbatches in flight capped at 1 to 3. A rank held under what its budget allows admits
// forwards later, which can keep it from filling its memory with microbatches that then wait on
// the ranks after it (docs/solver.md, The search).
std::vector<ListPolicy> rank_limit_neighbours(const Problem& problem, const ListPolicy& policy);

// The order `policy` lists, timed by the simulator under `method`; where it exceeds the budget
// and stages can recompute, with recompute fitted (heuristics/offload_placement.h). nullopt when
// the run was abandoned (ListPolicy::abandon_above_makespan) or a rank starved.
std::optional<OffloadedSchedule> list_candidate(const Problem& problem, const ListPolicy& policy,
                                                const std::string& method);

}  // namespace optpipe

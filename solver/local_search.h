// Hill climbing over per-rank orders (docs/solver.md, The search). A move changes one rank's list:
// it swaps two adjacent actions (compute ops or transfers, whose place in the list is when they are
// issued) or moves one a few places, or lists a compute op on the critical path before the one it
// waits for on its rank (solver/critical_path.h), or it changes how one activation is handled: a
// kept one is offloaded (OFFLOAD right after its F, RELOAD a few actions before its backward) or
// recomputed (R right before its backward), an offloaded or recomputed one is kept. The order is
// then timed by the simulator, each allocation waiting for the offloads that make room for it
// (simulate_within_budget), and kept when it fits the budget and is no slower. Equal makespans are
// kept too, so the search walks across the plateaus where most moves leave the critical path as it
// was (an offload that frees memory pays only once a later swap lets an F use it); where no stage
// can recompute, only towards forwards that end no later in sum: orders that fill the pipeline
// early.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"
#include "solver/critical_path.h"

namespace optpipe {

class LocalSearch {
 public:
  // `start` must time, with the simulator, to a schedule within the budget; nullopt otherwise.
  static std::optional<LocalSearch> from(const Problem& problem, Order start, uint64_t seed);

  // Tries one move; true when it shortened the makespan.
  bool step();
  // Makes `moves` random moves that keep the order valid, however slow: a kick out of a local
  // optimum (iterated local search), from which step() climbs again.
  void perturb(int moves);

  const Order& order() const { return order_; }
  const Schedule& schedule() const { return schedule_; }
  double makespan() const { return makespan_; }

 private:
  LocalSearch(const Problem& problem, Order order, Schedule schedule, uint64_t seed);
  // Applies a random move to a random rank's list; keeps it when the order then times to a valid
  // schedule no slower than `limit` (`climbing`: and, where no faster than the current one and
  // early_forwards_, with forwards that end no later in sum), else restores the list. True when
  // kept.
  bool try_move(double limit, bool climbing);
  // What a move changed in one rank's list: positions [first, last) hold the same actions in
  // another order, or, without `last`, actions were added or taken out from `first` on.
  struct ListChange {
    size_t first;
    std::optional<size_t> last = std::nullopt;
  };
  // The move itself, on one rank's list: nullopt when none applies (the list is then restored).
  std::optional<ListChange> swap_adjacent(std::vector<OpRef>& refs);
  // Moves one action 2 to kMaxShift places earlier or later in the list.
  std::optional<ListChange> shift(std::vector<OpRef>& refs);
  // Lists `pair.after` right before `pair.before`: the critical op goes first.
  std::optional<ListChange> reorder(std::vector<OpRef>& refs, const CriticalPair& pair);
  std::optional<ListChange> toggle_activation(std::vector<OpRef>& refs);
  // A pair of compute ops on the critical path of the current schedule, if it has one.
  std::optional<CriticalPair> random_critical_pair();

  const Problem* problem_;
  bool toggles_;  // some activation can be offloaded or recomputed
  Order order_;
  Schedule schedule_;
  double makespan_;
  bool early_forwards_;  // plateau walks only towards a smaller forward_ends_
  double forward_ends_;  // of schedule_, where early_forwards_: the sum of its forwards' ends
  std::optional<std::vector<CriticalPair>> critical_;  // of schedule_, found when first needed
  std::mt19937_64 rng_;
};

}  // namespace optpipe

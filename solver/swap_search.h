// Hill climbing over per-rank orders (docs/solver.md, The search): swap two adjacent actions of a
// random rank (compute ops or transfers, whose place in the list is when they are issued), time
// the order with the simulator, keep it when it validates and is no slower. Equal makespans are
// kept too, so the search walks across the plateaus where most single swaps leave the critical
// path as it was. Where CBC can only re-optimise windows that keep the activations' choices, or
// not at all, this moves transfers and compute ops together.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

class SwapSearch {
 public:
  // `start` must time, with the simulator, to a schedule within the budget; nullopt otherwise.
  static std::optional<SwapSearch> from(const Problem& problem, Order start, uint64_t seed);

  // Tries one swap; true when it shortened the makespan.
  bool step();
  // Makes `swaps` random swaps that keep the order valid, however slow: a kick out of a local
  // optimum (iterated local search), from which step() climbs again.
  void perturb(int swaps);

  const Order& order() const { return order_; }
  const Schedule& schedule() const { return schedule_; }
  double makespan() const { return makespan_; }

 private:
  SwapSearch(const Problem& problem, Order order, Schedule schedule, uint64_t seed);
  // Swaps a random adjacent pair of a random rank; keeps it when the order then times to a valid
  // schedule no slower than `limit`, else swaps back. True when kept.
  bool try_swap(double limit);

  const Problem* problem_;
  Order order_;
  Schedule schedule_;
  double makespan_;
  std::mt19937_64 rng_;
};

}  // namespace optpipe

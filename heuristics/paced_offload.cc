#include "heuristics/paced_offload.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "heuristics/interleaved_1f1b.h"
#include "heuristics/offload_placement.h"
#include "heuristics/one_f_one_b.h"
#include "heuristics/zero_bubble_handcrafted.h"
#include "heuristics/zero_bubble_memory.h"
#include "timing/memory_timeline.h"
#include "timing/simulator.h"

namespace optpipe {

namespace {

constexpr const char* kMethod = "paced-offload";
// How many of the rank's compute ops before its B a RELOAD is listed: late enough that it does
// not take memory early, early enough to be back when its B comes.
constexpr int kLeads[] = {1, 2, 3, 4};

using OrderMaker = Order (*)(const Problem&);

// What builds the orders the family offloads from (none: it does not apply), without building
// them: each already places W where the pattern wants it, and 1F1B with W right after B frees the
// kept-for-W bytes at once.
std::vector<OrderMaker> base_orders(const Problem& problem) {
  if (problem.chunks_per_rank == 1) {
    return {[](const Problem& p) { return split_backward(one_f_one_b_order(p)); }, zb_h1_order,
            zb_h2_order};
  }
  if (problem.placement == PlacementKind::kVShape && problem.chunks_per_rank == 2) {
    return {zb_v_order, v_half_order, v_min_order};
  }
  if (problem.placement == PlacementKind::kLoop && problem.microbatches % problem.ranks == 0) {
    return {[](const Problem& p) { return split_backward(interleaved_1f1b_order(p)); }};
  }
  return {};
}

// The ranks whose base order, timed without transfers, holds more than their activation budget.
std::vector<uint8_t> ranks_over_budget(const Problem& problem, const Schedule& timing) {
  std::vector<uint8_t> over(problem.ranks, 0);
  for (int r = 0; r < problem.ranks; ++r) {
    over[r] =
        peak_live_bytes(memory_timeline(problem, timing.ranks[r])) > problem.activation_budget(r);
  }
  return over;
}

// Every activation of the ranks in `chosen`.
OffloadSet every_activation_of(const Problem& problem, const std::vector<uint8_t>& chosen) {
  OffloadSet offloaded(problem);
  for (int r = 0; r < problem.ranks; ++r) {
    if (!chosen[r]) continue;
    for (int s : problem.stages_of_rank(r)) {
      for (int j = 0; j < problem.microbatches; ++j) offloaded.add(s, j);
    }
  }
  return offloaded;
}

}  // namespace

std::string paced_offload_unsupported(const Problem& problem) {
  if (!problem.offload) return "needs a host link (the profile's \"offload\" section)";
  if (base_orders(problem).empty()) {
    return "needs one chunk per rank, the V-shape placement with 2 chunks, or the loop "
           "placement with pipeline.microbatches a multiple of ranks";
  }
  return {};
}

Order paced_offload_order(const Problem& problem) {
  const OpTable<int> no_delay(problem, 0);
  std::optional<OffloadedSchedule> best;
  for (const OrderMaker make : base_orders(problem)) {
    const Order base = make(problem);
    const SimulationOutcome compute_only = try_simulate(problem, base, kMethod);
    if (!compute_only.schedule) continue;
    // The ranks over budget, then every rank (where that is another set).
    std::vector<std::vector<uint8_t>> scopes = {
        ranks_over_budget(problem, *compute_only.schedule)};
    if (std::count(scopes[0].begin(), scopes[0].end(), 0) > 0) {
      scopes.emplace_back(problem.ranks, 1);
    }
    for (const std::vector<uint8_t>& scope : scopes) {
      const OffloadSet offloaded = every_activation_of(problem, scope);
      for (int lead : kLeads) {
        std::optional<OffloadedSchedule> candidate = try_time_with_simulator(
            problem, with_listed_transfers(problem, base, offloaded, lead, no_delay), kMethod);
        // A longer lead brings activations back earlier and holds more: where the shortest does
        // not fit, the others are not tried.
        const bool fits = candidate && candidate->fits();
        if (candidate && (!best || better_offloaded(*candidate, *best))) best = std::move(candidate);
        if (!fits && lead == kLeads[0]) break;
      }
    }
  }
  // No base order timed (each deadlocked): 1F1B as it is, which the compile ranks by its fit.
  if (!best) return split_backward(one_f_one_b_order(problem));
  return std::move(best->order);
}

}  // namespace optpipe

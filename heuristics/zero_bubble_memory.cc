#include "heuristics/zero_bubble_memory.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "heuristics/list_scheduler.h"
#include "heuristics/offload_placement.h"
#include "heuristics/vshape_auto.h"
#include "heuristics/vshape_patterns.h"
#include "heuristics/vshape_reorder.h"
#include "heuristics/zero_bubble_greedy.h"
#include "heuristics/zero_bubble_v_greedy.h"
#include "model/errors.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

enum class VShapeVariant { kZeroBubble, kHalf, kMin };

// Activation bytes of one microbatch on a rank: the sum of A over its chunks.
int64_t one_microbatch_bytes(const Problem& problem, int rank) {
  int64_t bytes = 0;
  for (int s : problem.stages_of_rank(rank)) bytes += problem.stages[s].activation_bytes;
  return bytes;
}

// The binary choices of the Zero Bubble heuristic, in list-scheduling terms: how far the warm-up
// may run ahead (memory only, ZB-H2's doubled count, ZB-H1's count), whether B or F goes first
// when both can run, whether W fills every gap or follows the paper's gap rule, and, with several
// chunks per rank, which chunk's F goes first. The likeliest winners come first: the search
// abandons a run once it cannot beat the best so far, so a fast early one prunes the rest.
std::vector<ListPolicy> policy_choices(const Problem& problem,
                                       const std::vector<int64_t>& activation_limit_bytes) {
  const bool several_chunks = problem.chunks_per_rank > 1;
  std::vector<std::vector<int>> in_flight_caps;
  if (several_chunks) {
    // As many microbatches as the limit holds whole: each admitted one finds room for its later
    // chunks. Under memory alone the first chunks can fill a rank and starve the later ones
    // (V-shape, R = 32, m = 256: 7 times the makespan).
    // A rank whose activations take no bytes holds every microbatch.
    std::vector<int> caps(problem.ranks, problem.microbatches);
    for (int r = 0; r < problem.ranks; ++r) {
      if (const int64_t one = one_microbatch_bytes(problem, r); one > 0) {
        caps[r] = static_cast<int>(
            std::clamp<int64_t>(activation_limit_bytes[r] / one, 1, problem.microbatches));
      }
    }
    in_flight_caps.push_back(caps);
  }
  in_flight_caps.push_back({});
  for (int factor : {2, 1}) {
    std::vector<int> caps(problem.ranks);
    for (int r = 0; r < problem.ranks; ++r) {
      const int ahead = problem.num_stages() - problem.stages_of_rank(r).front();
      caps[r] = factor == 2 ? 2 * ahead - 1 : ahead;
    }
    in_flight_caps.push_back(caps);
  }
  // The later chunk's F first drains the pipeline; the earlier first can starve it the same way.
  const std::vector<bool> later_chunk_first_choices =
      several_chunks ? std::vector<bool>{true, false} : std::vector<bool>{false};
  std::vector<ListPolicy> policies;
  for (const auto& caps : in_flight_caps) {
    for (bool backward_first : {true, false}) {
      for (bool later_chunk_first : later_chunk_first_choices) {
        // kWhenMemoryNeeds never beat both of these on random problems (tests at 300 budgets).
        for (WeightTiming weights : {WeightTiming::kFillGaps, WeightTiming::kGapAware}) {
          ListPolicy policy;
          policy.max_in_flight = caps;
          policy.memory_limit_bytes = activation_limit_bytes;
          policy.backward_first = backward_first;
          policy.later_chunk_first = later_chunk_first;
          policy.weights = weights;
          policies.push_back(policy);
        }
      }
    }
  }
  return policies;
}

struct Tried {
  Order order;
  bool within_budget = false;
  double makespan = 0;
  double span = 0;
  int64_t overshoot_bytes = 0;  // max over ranks of peak - budget
  int64_t peak_bytes = 0;       // max over ranks
};

// Preference: within budget; then less overshoot when over; then makespan, span, peak.
bool better(const Tried& a, const Tried& b) {
  if (a.within_budget != b.within_budget) return a.within_budget;
  if (!a.within_budget && a.overshoot_bytes != b.overshoot_bytes) {
    return a.overshoot_bytes < b.overshoot_bytes;
  }
  if (a.makespan != b.makespan) return a.makespan < b.makespan;
  if (a.span != b.span) return a.span < b.span;
  return a.peak_bytes < b.peak_bytes;
}

// Per rank, the highest live activation bytes of an order (docs/semantics.md): a rank runs one op
// at a time, so its memory depends on its own order only, whatever the timing.
std::vector<int64_t> order_peak_live_bytes(const Problem& problem, const Order& order) {
  std::vector<int64_t> peaks(problem.ranks, 0);
  for (int r = 0; r < problem.ranks; ++r) {
    int64_t live = 0;
    for (const OpRef& ref : order.ranks[r]) {
      const StageCosts& stage = problem.stages[ref.stage];
      switch (ref.op) {
        case Op::kForward:
          live += stage.activation_bytes;
          break;
        case Op::kBackwardInput:
          live -= stage.activation_bytes - stage.weight_grad_bytes;
          break;
        case Op::kBackwardWeight:
          live -= stage.weight_grad_bytes;
          break;
        default:
          break;
      }
      peaks[r] = std::max(peaks[r], live);
    }
  }
  return peaks;
}

bool fits_budget(const Problem& problem, const std::vector<int64_t>& peaks) {
  for (int r = 0; r < problem.ranks; ++r) {
    if (peaks[r] > problem.activation_budget(r)) return false;
  }
  return true;
}

// ZB-V: the memory-limited list scheduler with R microbatches' worth of each rank's two chunks.
// V-Half and V-Min: the paper's building block, squeezed or not, or the list scheduler held to
// the block's peak, whichever is fastest (they differ with unequal costs); when the block's peak
// exceeds the budget, the list scheduler at the budget.
Order vshape_order(const Problem& problem, VShapeVariant variant) {
  std::vector<int64_t> limits(problem.ranks);
  if (variant == VShapeVariant::kZeroBubble) {
    for (int r = 0; r < problem.ranks; ++r) {
      limits[r] =
          std::min(problem.activation_budget(r), problem.ranks * one_microbatch_bytes(problem, r));
    }
    std::vector<Order> candidates;
    if (std::optional<Order> greedy = best_zero_bubble_v_greedy_order(problem, limits)) {
      candidates.push_back(std::move(*greedy));
    }
    candidates.push_back(best_memory_limited_order(problem, limits));
    return fastest_within(problem, std::move(candidates), limits);
  }
  const VShapePattern kind =
      variant == VShapeVariant::kHalf ? VShapePattern::kHalf : VShapePattern::kMin;
  Order squeezed = vshape_pattern_order(problem, kind, true);
  Order block = vshape_pattern_order(problem, kind, false);
  // The unsqueezed block's peak is the block's: the squeeze never raises it.
  const std::vector<int64_t> block_peaks = order_peak_live_bytes(problem, block);
  std::vector<Order> candidates;
  // The authors' order first (on ties it is the schedule users compare against), held to the
  // block's peak on its worst rank, as their reordering is.
  const int64_t block_peak = *std::max_element(block_peaks.begin(), block_peaks.end());
  if (std::optional<Order> authors = vshape_reordered_pattern_order(problem, kind)) {
    const std::vector<int64_t> peaks = order_peak_live_bytes(problem, *authors);
    if (fits_budget(problem, peaks) &&
        *std::max_element(peaks.begin(), peaks.end()) <= block_peak) {
      candidates.push_back(std::move(*authors));
    }
  }
  if (fits_budget(problem, order_peak_live_bytes(problem, squeezed))) {
    candidates.push_back(std::move(squeezed));
  }
  if (fits_budget(problem, block_peaks)) candidates.push_back(std::move(block));
  for (int r = 0; r < problem.ranks; ++r) {
    limits[r] = std::min(problem.activation_budget(r), block_peaks[r]);
  }
  candidates.push_back(best_memory_limited_order(problem, limits));
  size_t best = 0;
  double best_makespan = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double makespan = makespan_of(simulate(problem, candidates[i], "v-shape candidate"));
    if (i == 0 || makespan < best_makespan) {
      best = i;
      best_makespan = makespan;
    }
  }
  return std::move(candidates[best]);
}

}  // namespace

Order best_memory_limited_order(const Problem& problem,
                                const std::vector<int64_t>& activation_limit_bytes) {
  std::vector<Tried> tried;
  double best_within_budget = std::numeric_limits<double>::infinity();
  for (ListPolicy& policy : policy_choices(problem, activation_limit_bytes)) {
    policy.abandon_above_makespan = best_within_budget;
    ListOutcome outcome = list_schedule_with_outcome(problem, policy);
    if (!outcome.deadlock.empty()) continue;  // an in-flight cap the placement cannot live with
    if (outcome.abandoned) continue;  // slower than a candidate within budget
    // Many choices coincide when memory or the caps do not bind.
    if (std::any_of(tried.begin(), tried.end(),
                    [&](const Tried& t) { return t.order.ranks == outcome.order.ranks; })) {
      continue;
    }
    Tried t;
    t.makespan = outcome.makespan;
    t.span = outcome.span;
    t.overshoot_bytes = std::numeric_limits<int64_t>::min();
    for (int r = 0; r < problem.ranks; ++r) {
      const int64_t peak = outcome.peak_live_bytes[r];
      t.overshoot_bytes = std::max(t.overshoot_bytes, peak - problem.activation_budget(r));
      t.peak_bytes = std::max(t.peak_bytes, peak);
    }
    t.within_budget = t.overshoot_bytes <= 0;
    if (t.within_budget) best_within_budget = std::min(best_within_budget, t.makespan);
    t.order = std::move(outcome.order);
    tried.push_back(std::move(t));
  }
  if (tried.empty())
    throw Error(ErrorKind::kInternal, "zero bubble: every list-scheduling policy deadlocked");
  std::stable_sort(tried.begin(), tried.end(), better);
  // The list scheduler's timing predicts the simulator's; the simulator and the validator have
  // the last word on what fits.
  for (Tried& t : tried) {
    if (!t.within_budget) break;
    if (!validate(problem, simulate(problem, t.order, "zero-bubble candidate"))) {
      return std::move(t.order);
    }
  }
  const auto leanest =
      std::find_if(tried.begin(), tried.end(), [](const Tried& t) { return !t.within_budget; });
  return std::move(leanest != tried.end() ? leanest->order : tried.front().order);
}

Order fastest_within(const Problem& problem, std::vector<Order> candidates,
                     const std::vector<int64_t>& limits) {
  size_t best = 0;
  double best_makespan = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::vector<int64_t> peaks = order_peak_live_bytes(problem, candidates[i]);
    if (!std::equal(peaks.begin(), peaks.end(), limits.begin(), std::less_equal<>())) continue;
    SimulationOutcome timed = try_simulate(problem, candidates[i], "zero-bubble candidate");
    if (!timed.schedule || validate(problem, *timed.schedule)) continue;
    if (const double makespan = makespan_of(*timed.schedule); makespan < best_makespan) {
      best = i;
      best_makespan = makespan;
    }
  }
  return std::move(candidates[best]);
}

Order zb_auto_order(const Problem& problem) {
  std::vector<int64_t> limits(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) limits[r] = problem.activation_budget(r);
  // The authors' greedies first: on ties theirs is the schedule users compare against.
  std::vector<Order> candidates;
  std::optional<Order> greedy;
  if (problem.chunks_per_rank == 1) {
    greedy = best_zero_bubble_greedy_order(problem, limits);
  } else if (needs_vshape(problem).empty()) {
    greedy = best_zero_bubble_v_greedy_order(problem, limits);
    // Below about 1F1B's peak the ZB-V greedy cannot start; there the authors search over
    // building blocks instead (as they do: ZB-V at 1F1B's memory, the blocks below it).
    if (!greedy) {
      if (std::optional<Order> blocks =
              vshape_auto_order(problem, chunk_activations_within_budget(problem))) {
        candidates.push_back(std::move(*blocks));
      }
    }
  }
  if (greedy) candidates.push_back(std::move(*greedy));
  candidates.push_back(best_memory_limited_order(problem, limits));
  return fastest_within(problem, std::move(candidates), limits);
}

Order zb_v_order(const Problem& problem) {
  return vshape_order(problem, VShapeVariant::kZeroBubble);
}
Order v_half_order(const Problem& problem) {
  return vshape_order(problem, VShapeVariant::kHalf);
}
Order v_min_order(const Problem& problem) {
  return vshape_order(problem, VShapeVariant::kMin);
}

std::string needs_vshape(const Problem& problem) {
  if (problem.placement == PlacementKind::kVShape && problem.chunks_per_rank == 2) return {};
  return "needs pipeline.placement = \"vshape\" with chunks_per_rank = 2";
}

}  // namespace optpipe

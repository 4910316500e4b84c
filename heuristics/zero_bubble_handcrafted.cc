#include "heuristics/zero_bubble_handcrafted.h"

#include <algorithm>

#include "heuristics/list_scheduler.h"
#include "heuristics/zero_bubble_greedy.h"
#include "heuristics/zero_bubble_memory.h"

namespace optpipe {

// ZB-H1 and ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): B and W split, W
// fills bubbles. H1 keeps 1F1B's in-flight count (S - s on stage s); H2 doubles the warm-up
// (2(S - s) - 1) so that forwards fill the start-up bubble too. One chunk per rank.
namespace {

Order zero_bubble_order(const Problem& problem, bool double_warmup) {
  ListPolicy policy;
  policy.max_in_flight.resize(problem.ranks);
  for (int s = 0; s < problem.num_stages(); ++s) {
    const int ahead = problem.num_stages() - s;
    policy.max_in_flight[problem.rank_of_stage[s]] = double_warmup ? 2 * ahead - 1 : ahead;
  }
  return list_schedule(problem, policy);
}

}  // namespace

// The authors build ZB-H1 with their greedy held to 1F1B's peak, R activations on every rank
// (with a late W, 1F1B's in-flight count alone holds more: the Gs of the Bs whose W waits). The
// list order with 1F1B's counts stays a candidate where it keeps to that peak and is faster.
Order zb_h1_order(const Problem& problem) {
  std::vector<Order> candidates;
  std::vector<int64_t> limits(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) limits[r] = problem.activation_budget(r);
  if (problem.chunks_per_rank == 1) {
    for (int s = 0; s < problem.num_stages(); ++s) {
      const int r = problem.rank_of_stage[s];
      limits[r] = std::min(limits[r], problem.ranks * problem.stages[s].activation_bytes);
    }
    if (std::optional<Order> greedy = best_zero_bubble_greedy_order(problem, limits)) {
      candidates.push_back(std::move(*greedy));
    }
  }
  candidates.push_back(zero_bubble_order(problem, false));
  return fastest_within(problem, std::move(candidates), limits);
}

Order zb_h2_order(const Problem& problem) {
  return zero_bubble_order(problem, true);
}

}  // namespace optpipe

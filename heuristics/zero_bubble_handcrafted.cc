#include "heuristics/zero_bubble_handcrafted.h"

#include "heuristics/list_scheduler.h"

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

Order zb_h1_order(const Problem& problem) {
  return zero_bubble_order(problem, false);
}
Order zb_h2_order(const Problem& problem) {
  return zero_bubble_order(problem, true);
}

}  // namespace optpipe

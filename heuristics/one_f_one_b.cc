#include "heuristics/one_f_one_b.h"

#include <algorithm>

#include "heuristics/warmup_steady_cooldown.h"

namespace optpipe {

// PipeDream-Flush / Megatron 1F1B: stage s runs S-1-s warm-up forwards, then alternates one
// forward and one fused backward, then drains the backwards. One chunk per rank.
Order one_f_one_b_order(const Problem& problem) {
  Order order;
  order.ranks.resize(problem.ranks);
  const int num_stages = problem.num_stages();
  for (int r = 0; r < problem.ranks; ++r) {
    const int s = problem.stages_of_rank(r).front();
    std::vector<OpRef> forwards, backwards;
    for (int j = 0; j < problem.microbatches; ++j) {
      forwards.push_back({Op::kForward, s, j});
      backwards.push_back({Op::kBackward, s, j});
    }
    const int warmup = std::min(num_stages - 1 - s, problem.microbatches);
    order.ranks[r] = warmup_steady_cooldown(forwards, backwards, warmup);
  }
  return order;
}

}  // namespace optpipe

#include "heuristics/gpipe.h"

#include <algorithm>

namespace optpipe {

// All forwards, then all fused backwards. Forwards in (stage, microbatch) order and backwards in
// (reverse stage, microbatch) order follow a global topological order, so no placement deadlocks.
Order gpipe_order(const Problem& problem) {
  Order order;
  order.ranks.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<int> stages = problem.stages_of_rank(r);
    auto& refs = order.ranks[r];
    for (int s : stages) {
      for (int j = 0; j < problem.microbatches; ++j) refs.push_back({Op::kForward, s, j});
    }
    for (auto s = stages.rbegin(); s != stages.rend(); ++s) {
      for (int j = 0; j < problem.microbatches; ++j) refs.push_back({Op::kBackward, *s, j});
    }
  }
  return order;
}

}  // namespace optpipe

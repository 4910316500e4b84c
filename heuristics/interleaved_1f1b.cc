#include "heuristics/interleaved_1f1b.h"

#include <algorithm>

#include "heuristics/warmup_steady_cooldown.h"

namespace optpipe {

// Megatron-LM's interleaved 1F1B on loop placement (stage c*R + r is chunk c of rank r).
// Microbatches (a multiple of R) go in groups of R: a group runs through chunk 0, then chunk 1, ...
// forward and through the chunks in reverse backward. Warm-up: 2(R-1-r) + (v-1)R forwards.
Order interleaved_1f1b_order(const Problem& problem) {
  const int ranks = problem.ranks;
  const int chunks = problem.chunks_per_rank;
  const int m = problem.microbatches;
  Order order;
  order.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<OpRef> forwards, backwards;
    for (int group_start = 0; group_start < m; group_start += ranks) {
      for (int c = 0; c < chunks; ++c) {
        for (int j = group_start; j < group_start + ranks; ++j) {
          forwards.push_back({Op::kForward, c * ranks + r, j});
          backwards.push_back({Op::kBackward, (chunks - 1 - c) * ranks + r, j});
        }
      }
    }
    const int warmup =
        std::min(static_cast<int>(forwards.size()), 2 * (ranks - 1 - r) + (chunks - 1) * ranks);
    order.ranks[r] = warmup_steady_cooldown(forwards, backwards, warmup);
  }
  return order;
}

}  // namespace optpipe

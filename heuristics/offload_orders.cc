#include "heuristics/offload_orders.h"

#include <algorithm>

#include "heuristics/warmup_steady_cooldown.h"

namespace optpipe {

Order grouped_interleaved_order(const Problem& problem, int group_size,
                                const std::vector<int>& warmup, bool split) {
  const int m = problem.microbatches;
  group_size = std::max(1, group_size);
  Order order;
  order.ranks.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<int> stages = problem.stages_of_rank(r);
    std::vector<OpRef> forwards, backwards;
    for (int group_start = 0; group_start < m; group_start += group_size) {
      const int group_end = std::min(m, group_start + group_size);
      for (size_t c = 0; c < stages.size(); ++c) {
        for (int j = group_start; j < group_end; ++j) {
          forwards.push_back({Op::kForward, stages[c], j});
          backwards.push_back({Op::kBackward, stages[stages.size() - 1 - c], j});
        }
      }
    }
    const int w = std::clamp(warmup[r], 0, static_cast<int>(forwards.size()));
    order.ranks[r] = warmup_steady_cooldown(forwards, backwards, w);
    if (split) order.ranks[r] = split_backward(order.ranks[r]);
  }
  return order;
}

std::vector<int> interleaved_warmup(const Problem& problem, int group_size, double extra_per_rank) {
  std::vector<int> warmup(problem.ranks, 0);
  const int chunks = problem.chunks_per_rank;
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<int> stages = problem.stages_of_rank(r);
    const int position = stages.empty() ? 0 : stages.front();
    warmup[r] = (chunks - 1) * group_size +
                static_cast<int>(extra_per_rank * (problem.ranks - 1 - position));
  }
  return warmup;
}

Order microbatch_serial_order(const Problem& problem, bool split) {
  Order order;
  order.ranks.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<int> stages = problem.stages_of_rank(r);
    auto& refs = order.ranks[r];
    for (int j = 0; j < problem.microbatches; ++j) {
      for (int s : stages) refs.push_back({Op::kForward, s, j});
      for (auto s = stages.rbegin(); s != stages.rend(); ++s)
        refs.push_back({Op::kBackward, *s, j});
    }
    if (split) refs = split_backward(refs);
  }
  return order;
}

}  // namespace optpipe

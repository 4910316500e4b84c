#include "bounds/deferred_weights.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace optpipe {

namespace {

// values[k] of the sorted list shifted by `most_deferred` + 1, plus `lag`; 0 before it. The k-th
// smallest of the per-op bounds bounds the k-th op of the rank, whichever family it is of: the
// k + 1 ops up to it are distinct, each at least its own bound.
std::vector<double> shifted(std::vector<double> values, int most_deferred, double lag) {
  std::sort(values.begin(), values.end());
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<double> result(values.size(), 0.0);
  for (int64_t k = static_cast<int64_t>(most_deferred) + 1; k < n; ++k) {
    result[k] = values[k - most_deferred - 1] + lag;
  }
  return result;
}

}  // namespace

int most_deferred_weights(const Problem& problem, int rank, int unlimited) {
  int64_t least_activation = std::numeric_limits<int64_t>::max();
  int64_t least_weight_grad = std::numeric_limits<int64_t>::max();
  for (int s : problem.stages_of_rank(rank)) {
    least_activation = std::min(least_activation, problem.stages[s].activation_bytes);
    least_weight_grad = std::min(least_weight_grad, problem.stages[s].weight_grad_bytes);
  }
  if (least_weight_grad <= 0) return unlimited;
  const int64_t room = problem.activation_budget(rank) - least_activation;
  if (room <= 0) return 0;  // no B fits at all: no schedule is within the budget
  return static_cast<int>(std::min<int64_t>(room / least_weight_grad, unlimited));
}

std::vector<double> deferred_weight_tails(std::vector<double> backward_tails, int most_deferred,
                                          double least_backward) {
  return shifted(std::move(backward_tails), most_deferred, least_backward);
}

std::vector<double> deferred_backward_heads(std::vector<double> weight_heads, int most_deferred,
                                            double least_weight) {
  return shifted(std::move(weight_heads), most_deferred, least_weight);
}

}  // namespace optpipe

#include "bounds/paced_tails.h"

#include <limits>

#include <utility>

#include "bounds/paced_heads.h"

namespace optpipe {

namespace {

// The problem read backwards in time. Its F is the B, allocating the whole activation where the
// B ends, its B is the F, releasing it where the F starts, and it has no W. Backwards, a W
// allocates G before its B: the mirror allocates it with the B, later, so it holds less at every
// moment, and every schedule of the problem read backwards fits the mirror's budget. A reload
// releases O where it starts and an offload allocates it where it ends: their roles and the
// links' directions swap. An activation held as its checkpoint (between its F and its R) lies
// between the mirror's F and B too.
Problem mirrored(const Problem& problem) {
  Problem mirror = problem;
  for (StageCosts& cost : mirror.stages) {
    std::swap(cost.forward, cost.backward_input);
    cost.backward_weight = 0;
    cost.weight_grad_bytes = 0;
  }
  if (mirror.offload) {
    std::swap(mirror.offload->d2h_bytes_per_time, mirror.offload->h2d_bytes_per_time);
  }
  return mirror;
}

}  // namespace

OpHeads paced_tails(const Problem& problem, const std::function<bool()>& stop) {
  const Problem mirror = mirrored(problem);
  const int m = problem.microbatches;
  // Backwards, the k-th B of a stage from the last follows k + 1 of its rank's Ws of that stage,
  // one at a time.
  OpHeads heads;
  for (int s = 0; s < problem.num_stages(); ++s) {
    std::vector<double>& first_ws = heads.forward.emplace_back(m);
    for (int k = 0; k < m; ++k) first_ws[k] = (k + 1) * problem.stages[s].backward_weight;
    heads.backward.emplace_back(m, 0.0);
    heads.weight.emplace_back(m, 0.0);
  }
  OpHeads paced = paced_heads(mirror, std::move(heads), std::numeric_limits<double>::infinity(),
                              nullptr, {}, stop);
  // The mirror's F is the B, its B the F.
  std::swap(paced.forward, paced.backward);
  paced.weight.clear();
  return paced;
}

}  // namespace optpipe

#include "heuristics/recomputing_lists.h"

#include <algorithm>
#include <cstdint>

#include "heuristics/list_policies.h"
#include "heuristics/list_scheduler.h"
#include "heuristics/offload_placement.h"
#include "model/op_table.h"

namespace optpipe {

Problem recomputing_view(const Problem& problem) {
  Problem view = problem;
  view.offload.reset();
  std::vector<int64_t> whole_room(problem.ranks, 0);
  for (int s = 0; s < problem.num_stages(); ++s) {
    if (!problem.recompute_frees_memory(s)) continue;
    const StageCosts& cost = problem.stages[s];
    StageCosts& seen = view.stages[s];
    seen.activation_bytes = std::max(*cost.checkpoint_bytes, cost.weight_grad_bytes);
    seen.offloadable_bytes = 0;
    seen.checkpoint_bytes.reset();
    seen.backward_input += cost.recompute_forward;
    int64_t& room = whole_room[problem.rank_of_stage[s]];
    room = std::max(room, cost.activation_bytes - seen.activation_bytes);
  }
  for (int r = 0; r < problem.ranks; ++r) view.budget_bytes[r] -= whole_room[r];
  return view;
}

std::optional<Order> recomputing_list_order(const Problem& problem, bool later_chunk_first) {
  const Problem view = recomputing_view(problem);
  const ListOutcome listed =
      list_schedule_with_outcome(view, memory_limited_policy(view, 1.0, later_chunk_first));
  if (!listed.deadlock.empty()) return std::nullopt;
  OpTable<uint8_t> recomputed(problem, 0);
  for (int s = 0; s < problem.num_stages(); ++s) {
    if (!problem.recompute_frees_memory(s)) continue;
    for (int j = 0; j < problem.microbatches; ++j) recomputed[{Op::kForward, s, j}] = 1;
  }
  return with_recompute(listed.order, recomputed);
}

}  // namespace optpipe

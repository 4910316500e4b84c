#include "model/dependencies.h"

#include <algorithm>

namespace optpipe {

double duration(const Problem& problem, const OpRef& ref) {
  const StageCosts& costs = problem.stages[ref.stage];
  switch (ref.op) {
    case Op::kForward:
      return costs.forward;
    case Op::kBackwardInput:
      return costs.backward_input;
    case Op::kBackwardWeight:
      return costs.backward_weight;
    case Op::kBackward:
      return costs.backward_input + costs.backward_weight;
    case Op::kOffload:
      return problem.offload_time(ref.stage);
    case Op::kReload:
      return problem.reload_time(ref.stage);
    case Op::kRecompute:
      return costs.recompute_forward;
  }
  return 0;
}

int64_t transfer_bytes(const Problem& problem, const OpRef& ref) {
  return is_transfer(ref.op) ? problem.stages[ref.stage].offloadable_bytes : 0;
}

int channel_of(const Problem& problem, int rank, Op transfer) {
  const int group = problem.offload ? problem.offload->link_group_of_rank[rank] : rank;
  const bool duplex = problem.offload && problem.offload->channels == ChannelMode::kDuplex;
  if (!duplex) return group;
  return 2 * group + (transfer == Op::kReload ? 1 : 0);
}

int num_channels(const Problem& problem) {
  int groups = problem.ranks;
  if (problem.offload && !problem.offload->link_group_of_rank.empty()) {
    groups = 1 + *std::max_element(problem.offload->link_group_of_rank.begin(),
                                   problem.offload->link_group_of_rank.end());
  }
  const bool duplex = problem.offload && problem.offload->channels == ChannelMode::kDuplex;
  return duplex ? 2 * groups : groups;
}

}  // namespace optpipe

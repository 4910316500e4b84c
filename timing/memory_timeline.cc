#include "timing/memory_timeline.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace optpipe {

namespace {

// At equal times: first the releases of ops that ended then (a caching allocator reuses their
// blocks), then the allocations, then the releases of ops that took no time. An op of no duration
// has not ended before the ops that start with it, so its release never cancels an allocation
// made at that moment, its own activation's included: a live activation counts, however short.
enum class ChangeOrder { kRelease = 0, kAllocation = 1, kInstantRelease = 2 };

struct Change {
  double time;
  ChangeOrder order;
  int64_t delta_bytes;
  OpRef cause;
};

using Activation = std::pair<int, int>;  // (stage, microbatch)

void add_changes(const Problem& problem, const Action& action,
                 const std::set<Activation>& recomputed, std::vector<Change>& changes) {
  const MemoryEffect effect =
      memory_effect(problem, action.ref, action.bytes,
                    recomputed.count({action.ref.stage, action.ref.microbatch}) > 0);
  if (effect.allocated_at_start) {
    changes.push_back(
        {action.start, ChangeOrder::kAllocation, effect.allocated_at_start, action.ref});
  }
  if (effect.released_at_end) {
    const ChangeOrder order =
        action.end > action.start ? ChangeOrder::kRelease : ChangeOrder::kInstantRelease;
    changes.push_back({action.end, order, -effect.released_at_end, action.ref});
  }
}

}  // namespace

MemoryEffect memory_effect(const Problem& problem, const OpRef& ref, int64_t transfer_bytes,
                           bool recomputed) {
  const StageCosts& costs = problem.stages[ref.stage];
  switch (ref.op) {
    case Op::kForward:
      return {costs.activation_bytes, recomputed ? costs.recomputed_bytes() : 0};
    case Op::kRecompute:
      return {costs.recomputed_bytes(), 0};
    case Op::kBackwardInput:
      return {0, costs.activation_bytes - costs.weight_grad_bytes};
    case Op::kBackwardWeight:
      return {0, costs.weight_grad_bytes};
    case Op::kBackward:
      return {0, costs.activation_bytes};
    case Op::kOffload:
      return {0, transfer_bytes};
    case Op::kReload:
      return {transfer_bytes, 0};
  }
  return {};
}

std::vector<MemoryStep> memory_timeline(const Problem& problem,
                                        const std::vector<Action>& actions) {
  std::set<Activation> recomputed;
  for (const Action& action : actions) {
    if (action.ref.op == Op::kRecompute) {
      recomputed.insert({action.ref.stage, action.ref.microbatch});
    }
  }
  std::vector<Change> changes;
  changes.reserve(actions.size());
  for (const Action& action : actions) add_changes(problem, action, recomputed, changes);
  std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return std::tie(a.time, a.order, a.delta_bytes) < std::tie(b.time, b.order, b.delta_bytes);
  });
  std::vector<MemoryStep> timeline;
  timeline.reserve(changes.size());
  int64_t live = 0;
  for (const Change& change : changes) {
    live += change.delta_bytes;
    timeline.push_back({change.time, live, change.cause});
  }
  return timeline;
}

int64_t peak_live_bytes(const std::vector<MemoryStep>& timeline) {
  int64_t peak = 0;
  for (const MemoryStep& step : timeline) peak = std::max(peak, step.live_bytes);
  return peak;
}

}  // namespace optpipe

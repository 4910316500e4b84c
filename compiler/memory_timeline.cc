#include "compiler/memory_timeline.h"

#include <algorithm>
#include <set>
#include <utility>

namespace optpipe {

namespace {

struct Change {
  double time;
  int64_t delta_bytes;
  OpRef cause;
};

using Activation = std::pair<int, int>;  // (stage, microbatch)

// A recomputed activation's F keeps only its checkpoint bytes after it ends.
void add_changes(const Problem& problem, const Action& action,
                 const std::set<Activation>& recomputed, std::vector<Change>& changes) {
  const StageCosts& costs = problem.stages[action.ref.stage];
  switch (action.ref.op) {
    case Op::kForward:
      changes.push_back({action.start, costs.activation_bytes, action.ref});
      if (recomputed.count({action.ref.stage, action.ref.microbatch})) {
        changes.push_back({action.end, -costs.recomputed_bytes(), action.ref});
      }
      break;
    case Op::kRecompute:
      changes.push_back({action.start, costs.recomputed_bytes(), action.ref});
      break;
    case Op::kBackwardInput:
      changes.push_back(
          {action.end, -(costs.activation_bytes - costs.weight_grad_bytes), action.ref});
      break;
    case Op::kBackwardWeight:
      changes.push_back({action.end, -costs.weight_grad_bytes, action.ref});
      break;
    case Op::kBackward:
      changes.push_back({action.end, -costs.activation_bytes, action.ref});
      break;
    case Op::kOffload:
      changes.push_back({action.end, -action.bytes, action.ref});
      break;
    case Op::kReload:
      changes.push_back({action.start, action.bytes, action.ref});
      break;
  }
}

}  // namespace

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
    return a.time < b.time || (a.time == b.time && a.delta_bytes < b.delta_bytes);
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

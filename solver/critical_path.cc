#include "solver/critical_path.h"

#include <cmath>

#include "model/dependencies.h"
#include "model/op_table.h"

namespace optpipe {

namespace {

// Times are sums of the same durations along different paths: equal up to rounding.
constexpr double kTolerance = 1e-9;

bool meets(double end, double start) {
  return std::abs(end - start) <= kTolerance;
}

// What `at`, an action of `actions`, waited for where no dependency and, for a compute op, no
// previous compute op explains its start: for a compute op, an offload that made room for it
// (the memory fence); for a transfer, the compute op after which it was issued or the transfer
// before it on its channel. Null when it waited for nothing.
const Action* waited_for(const Problem& problem, const std::vector<Action>& actions,
                         const Action& at) {
  const int rank = problem.rank_of_stage[at.ref.stage];
  for (size_t i = &at - actions.data(); i-- > 0;) {
    const Action& a = actions[i];
    if (!meets(a.end, at.start)) continue;
    const bool waited = is_compute(at.ref.op)
                            ? a.ref.op == Op::kOffload
                            : is_compute(a.ref.op) || channel_of(problem, rank, a.ref.op) ==
                                                          channel_of(problem, rank, at.ref.op);
    if (waited) return &a;
  }
  return nullptr;
}

}  // namespace

std::vector<CriticalPair> critical_pairs(const Problem& problem, const Schedule& schedule) {
  OpTable<const Action*> action_of(problem, nullptr);
  OpTable<const Action*> previous_compute(problem, nullptr);
  const Action* last = nullptr;
  for (const auto& actions : schedule.ranks) {
    const Action* previous = nullptr;
    for (const Action& a : actions) {
      action_of[a.ref] = &a;
      if (!is_compute(a.ref.op)) continue;
      previous_compute[a.ref] = previous;
      previous = &a;
      if (!last || a.end > last->end) last = &a;
    }
  }
  auto form = [&](int s, int j) {
    return action_of[{Op::kBackward, s, j}] ? BackwardForm::kFused : BackwardForm::kSplit;
  };
  auto offloaded = [&](int s, int j) { return action_of[{Op::kReload, s, j}] != nullptr; };
  auto recomputed = [&](int s, int j) { return action_of[{Op::kRecompute, s, j}] != nullptr; };

  std::vector<CriticalPair> pairs;
  size_t steps = 0;  // ops of no duration could otherwise lead the walk in a circle
  for (const auto& actions : schedule.ranks) steps += actions.size();
  for (const Action* at = last; at && steps > 0; --steps) {
    const Action* next = nullptr;
    for (const Predecessor& p : predecessors(problem, at->ref, form, offloaded, recomputed)) {
      const Action* pred = action_of[p.pred];
      if (pred && meets(pred->end + p.lag, at->start)) next = pred;
    }
    const int rank = problem.rank_of_stage[at->ref.stage];
    if (is_compute(at->ref.op)) {
      if (const Action* before = previous_compute[at->ref];
          before && meets(before->end, at->start)) {
        pairs.push_back({rank, before->ref, at->ref});
        if (!next) next = before;
      }
    }
    if (!next) {
      next = waited_for(problem, schedule.ranks[rank], *at);
      // A transfer held back by the action listed before it: issued before that one instead,
      // it can start earlier.
      if (next && !is_compute(at->ref.op)) pairs.push_back({rank, next->ref, at->ref});
    }
    at = next;
  }
  return pairs;
}

}  // namespace optpipe

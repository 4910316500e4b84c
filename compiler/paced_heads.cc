#include "compiler/paced_heads.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/microbatch_paths.h"

namespace optpipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Each round raises some heads and lets the others catch up; every round's heads are valid, so
// stopping early only weakens the bound (R = 32, m = 256 settles in about 30).
constexpr int kMaxRounds = 100;

bool raise(double& head, double at_least) {
  if (at_least <= head) return false;
  head = at_least;
  return true;
}

// The k-th F of stage s starts after k + 1 Fs of stage s - 1 have ended (one per microbatch that
// has reached stage s), so after the k-th of them, and after the (k - 1)-th F of stage s; the
// k-th B of the last stage after its k-th F, of another stage after the k-th B of the stage
// after it; the k-th W after the k-th B.
void raise_along_dependencies(const Problem& problem, OpHeads& heads) {
  const int stages = problem.num_stages();
  const int m = problem.microbatches;
  for (int s = 0; s < stages; ++s) {
    for (int k = 0; k < m; ++k) {
      if (s > 0) {
        raise(heads.forward[s][k],
              heads.forward[s - 1][k] + problem.stages[s - 1].forward + problem.p2p(s - 1, s));
      }
      if (k > 0) raise(heads.forward[s][k], heads.forward[s][k - 1] + problem.stages[s].forward);
    }
  }
  for (int s = stages - 1; s >= 0; --s) {
    const StageCosts& cost = problem.stages[s];
    for (int k = 0; k < m; ++k) {
      raise(heads.backward[s][k], s == stages - 1 ? heads.forward[s][k] + cost.forward
                                                  : heads.backward[s + 1][k] +
                                                        problem.stages[s + 1].backward_input +
                                                        problem.p2p(s + 1, s));
      if (k > 0) raise(heads.backward[s][k], heads.backward[s][k - 1] + cost.backward_input);
      raise(heads.weight[s][k], heads.backward[s][k] + cost.backward_input);
      if (k > 0) raise(heads.weight[s][k], heads.weight[s][k - 1] + cost.backward_weight);
    }
  }
}

// How many ops with these heads (non-decreasing) and duration can have ended by `time`.
int ended_by(const std::vector<double>& heads, double duration, double time) {
  return static_cast<int>(
      std::partition_point(heads.begin(), heads.end(),
                           [&](double head) { return head + duration <= time; }) -
      heads.begin());
}

// The memory of one rank as the pacing sees it, from the heads of the current round, in
// schedules of at most `makespan`.
class RankMemory {
 public:
  RankMemory(const Problem& problem, const MicrobatchPaths& paths, int rank, const OpHeads& heads,
             double makespan)
      : problem_(problem),
        heads_(heads),
        stages_(problem.stages_of_rank(rank)),
        budget_(static_cast<double>(problem.activation_budget(rank))),
        makespan_(makespan) {
    double offload_time = kInfinity;
    double shortest_forward = kInfinity;
    std::vector<double> forwards;
    for (int s : stages_) {
      const StageCosts& cost = problem.stages[s];
      shortest_forward = std::min(shortest_forward, cost.forward);
      forwards.insert(forwards.end(), heads.forward[s].begin(), heads.forward[s].end());
      if (problem.offload_frees_memory(s)) {
        moved_ = std::max(moved_, static_cast<double>(cost.offloadable_bytes));
        offload_time = std::min(offload_time, problem.offload_time(s));
        reload_time_ = std::min(reload_time_, problem.reload_time(s));
        after_reload_ = std::min(after_reload_, paths.backward_tail[s]);
      }
    }
    // The i-th offload to end (from 0) moves the activation of one of the rank's Fs from the
    // i-th on, after that F ends, and the channel moves one at a time.
    if (moved_ > 0) {
      std::sort(forwards.begin(), forwards.end());
      for (size_t i = 0; i < forwards.size(); ++i) {
        const double after_forward = forwards[i] + shortest_forward + offload_time;
        offloads_end_.push_back(
            i == 0 ? after_forward : std::max(after_forward, offloads_end_[i - 1] + offload_time));
      }
    }
    moments_ = offloads_end_;
    for (int s : stages_) {
      const StageCosts& cost = problem.stages[s];
      for (double head : heads.backward[s]) moments_.push_back(head + cost.backward_input);
      for (double head : heads.weight[s]) moments_.push_back(head + cost.backward_weight);
    }
    std::sort(moments_.begin(), moments_.end());
    for (size_t i = 0; i < stages_.size(); ++i) swap_order_.push_back(i);
    std::sort(swap_order_.begin(), swap_order_.end(),
              [&](size_t a, size_t b) { return after_backward(a) < after_backward(b); });
  }

  // The earliest moment from `head` on at which the k-th F of the rank's c-th stage fits. Where
  // nothing released by the heads makes it fit, no schedule fits the budget; the last release
  // then keeps the bound from falling as the budget does.
  double earliest_fit(size_t c, int k, double head) const {
    if (fits(c, k, head)) return head;
    const auto first = std::partition_point(moments_.begin(), moments_.end(),
                                            [&](double t) { return t <= head || !fits(c, k, t); });
    if (first != moments_.end()) return *first;
    return moments_.empty() ? head : std::max(head, moments_.back());
  }

 private:
  // Of the activations of the rank's i-th stage counted for the k-th F of its c-th stage (k + 1,
  // or k of the F's own stage), how many can be past their B and past their W at `time`.
  struct Released {
    int counted = 0;
    int backwards = 0;
    int weights = 0;
  };
  Released released(size_t i, size_t c, int k, double time) const {
    const StageCosts& cost = problem_.stages[stages_[i]];
    Released r;
    r.counted = i == c ? k : k + 1;
    r.backwards =
        std::min(r.counted, ended_by(heads_.backward[stages_[i]], cost.backward_input, time));
    r.weights =
        std::min(r.backwards, ended_by(heads_.weight[stages_[i]], cost.backward_weight, time));
    return r;
  }

  // Whether the bytes the k-th F of the c-th stage allocates fit at `time`: k + 1 activations of
  // each of the first c stages are allocated by then (the F's own included), less what can have
  // been released. An activation whose B has ended holds its G until its W ends, then nothing;
  // one whose offload has ended holds A - O until its reload, and at most one offload per counted
  // activation not past its B can have ended. A B that ended while its W did not may have run on
  // an activation other than these, leaving one of them to an offload that ended beyond those:
  // each such swap frees the largest O less A - G, largest first.
  bool fits(size_t c, int k, double time) const {
    double held = 0;
    int not_past_backward = 0;
    for (size_t i = 0; i <= c; ++i) {
      const StageCosts& cost = problem_.stages[stages_[i]];
      const Released r = released(i, c, k, time);
      held += (k + 1) * static_cast<double>(cost.activation_bytes) -
              r.weights * static_cast<double>(cost.activation_bytes) -
              (r.backwards - r.weights) * after_backward(i);
      not_past_backward += r.counted - r.backwards;
    }
    const int away = std::min(
        static_cast<int>(std::upper_bound(offloads_end_.begin(), offloads_end_.end(), time) -
                         offloads_end_.begin()),
        away_at_most(time));  // offloads ended, and not yet reloading
    const int offloaded = std::min(not_past_backward, away);
    held -= offloaded * moved_;
    int spare = away - offloaded;
    for (const size_t i : swap_order_) {
      if (spare == 0 || moved_ <= after_backward(i)) break;
      if (i > c) continue;
      const Released r = released(i, c, k, time);
      const int swapped = std::min(spare, r.backwards - r.weights);
      held -= swapped * (moved_ - after_backward(i));
      spare -= swapped;
    }
    return held <= budget_;
  }

  static constexpr int kUncapped = std::numeric_limits<int>::max();

  // How many activations can be away (offloaded, not yet reloading) at `time`: each comes back
  // after it by a reload of its own on the rank's channel, one at a time, and its B and the
  // backwards down to W(0) follow that reload before the makespan.
  int away_at_most(double time) const {
    if (makespan_ == kInfinity) return kUncapped;
    const double room = makespan_ - after_reload_ - time;
    if (room <= 0) return 0;
    return static_cast<int>(std::min(std::floor(room / reload_time_), double{kUncapped}));
  }

  // What a B of the rank's i-th stage frees: A - G.
  double after_backward(size_t i) const {
    const StageCosts& cost = problem_.stages[stages_[i]];
    return static_cast<double>(cost.activation_bytes - cost.weight_grad_bytes);
  }

  const Problem& problem_;
  const OpHeads& heads_;
  const std::vector<int> stages_;  // model order
  const double budget_;
  const double makespan_;
  double moved_ = 0;                  // the most an offload frees
  double reload_time_ = kInfinity;    // the least of the rank's reloads
  double after_reload_ = kInfinity;   // least time from a reload's end to the schedule's end
  std::vector<double> offloads_end_;  // the i-th offload to end ends no earlier than [i]
  std::vector<double> moments_;       // when a release can happen
  std::vector<size_t> swap_order_;    // the rank's stages by what a B frees, least first
};

// Raises the F heads of `rank` where its memory makes them wait; true when one rose.
bool pace_rank(const Problem& problem, const MicrobatchPaths& paths, int rank, OpHeads& heads,
               double makespan) {
  const std::vector<int> stages = problem.stages_of_rank(rank);
  for (int s : stages) {
    if (problem.recompute_frees_memory(s)) return false;  // R allocates too: not modelled
  }
  const RankMemory memory(problem, paths, rank, heads, makespan);
  std::vector<std::vector<double>> paced;  // applied once the round has read every head
  for (size_t c = 0; c < stages.size(); ++c) {
    paced.push_back(heads.forward[stages[c]]);
    for (int k = 0; k < problem.microbatches; ++k) {
      paced[c][k] = memory.earliest_fit(c, k, paced[c][k]);
    }
  }
  bool raised = false;
  for (size_t c = 0; c < stages.size(); ++c) {
    for (int k = 0; k < problem.microbatches; ++k) {
      raised |= raise(heads.forward[stages[c]][k], paced[c][k]);
    }
  }
  return raised;
}

}  // namespace

OpHeads paced_heads(const Problem& problem, OpHeads heads, double makespan) {
  const MicrobatchPaths paths = microbatch_paths(problem);
  for (int round = 0; round < kMaxRounds; ++round) {
    raise_along_dependencies(problem, heads);
    bool raised = false;
    for (int r = 0; r < problem.ranks; ++r) raised |= pace_rank(problem, paths, r, heads, makespan);
    if (!raised) return heads;
  }
  raise_along_dependencies(problem, heads);
  return heads;
}

}  // namespace optpipe

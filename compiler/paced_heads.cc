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

// The i-th offload to end (from 0) on one channel moves the activation of one of the Fs from the
// i-th on (`forwards`: their heads, sorted), after that F ends, and the channel moves one at a
// time: [i] is the earliest it can end.
std::vector<double> offload_ends(const std::vector<double>& forwards, double shortest_forward,
                                 double offload_time) {
  std::vector<double> ends;
  for (size_t i = 0; i < forwards.size(); ++i) {
    const double after_forward = forwards[i] + shortest_forward + offload_time;
    ends.push_back(i == 0 ? after_forward : std::max(after_forward, ends[i - 1] + offload_time));
  }
  return ends;
}

// How many of `ends` (sorted) are at most `time`.
int ended_by(const std::vector<double>& ends, double time) {
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), time) - ends.begin());
}

// The activations a check counts on one rank, per stage in model order: how many are allocated,
// and how many of those can be past their B or W.
struct Counted {
  std::vector<int> allocated;
  std::vector<int> releasable;
};

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
    for (int s : stages_) {
      const StageCosts& cost = problem.stages[s];
      shortest_forward_ = std::min(shortest_forward_, cost.forward);
      forwards_.insert(forwards_.end(), heads.forward[s].begin(), heads.forward[s].end());
      if (problem.offload_frees_memory(s)) {
        moved_ = std::max(moved_, static_cast<double>(cost.offloadable_bytes));
        offload_time_ = std::min(offload_time_, problem.offload_time(s));
        reload_time_ = std::min(reload_time_, problem.reload_time(s));
        after_reload_ = std::min(after_reload_, paths.backward_tail[s]);
      }
    }
    std::sort(forwards_.begin(), forwards_.end());
    if (moves()) offloads_end_ = offload_ends(forwards_, shortest_forward_, offload_time_);
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

  // At the k-th F of the rank's c-th stage: k + 1 activations of each of its first c stages, the
  // F's own included (which no release can have freed).
  Counted at_forward(size_t c, int k) const {
    Counted counted{std::vector<int>(stages_.size(), 0), {}};
    for (size_t i = 0; i <= c; ++i) counted.allocated[i] = k + 1;
    counted.releasable = counted.allocated;
    counted.releasable[c] = k;
    return counted;
  }
  // At the k-th F of `stage` on another rank: k + 1 activations of each of this rank's stages
  // before it, which those microbatches passed first.
  Counted before_stage(int stage, int k) const {
    Counted counted{std::vector<int>(stages_.size(), 0), {}};
    for (size_t i = 0; i < stages_.size(); ++i)
      counted.allocated[i] = stages_[i] < stage ? k + 1 : 0;
    counted.releasable = counted.allocated;
    return counted;
  }

  static constexpr int kNoneFits = std::numeric_limits<int>::max();

  // The fewest activations away at `time` with which `counted` fits the budget; kNoneFits where
  // no number the rank's channel can have moved by then makes it fit.
  int offloads_needed(const Counted& counted, double time) const {
    if (held(counted, time, 0) <= budget_) return 0;
    const int most = available_away(time);
    if (!moves() || held(counted, time, most) > budget_) return kNoneFits;
    int failing = 0;
    int fitting = most;
    while (fitting - failing > 1) {
      const int mid = failing + (fitting - failing) / 2;
      (held(counted, time, mid) <= budget_ ? fitting : failing) = mid;
    }
    return fitting;
  }

  bool moves() const { return moved_ > 0; }
  const std::vector<double>& moments() const { return moments_; }
  const std::vector<double>& forward_heads() const { return forwards_; }  // sorted
  double shortest_forward() const { return shortest_forward_; }
  double offload_time() const { return offload_time_; }

 private:
  // Of `counted` activations of the rank's i-th stage, how many can be past their B and past
  // their W at `time`.
  struct Released {
    int counted = 0;
    int backwards = 0;
    int weights = 0;
  };
  Released released(size_t i, int counted, double time) const {
    const StageCosts& cost = problem_.stages[stages_[i]];
    Released r;
    r.counted = counted;
    r.backwards =
        std::min(r.counted, ended_by(heads_.backward[stages_[i]], cost.backward_input, time));
    r.weights =
        std::min(r.backwards, ended_by(heads_.weight[stages_[i]], cost.backward_weight, time));
    return r;
  }

  // Whether the bytes the k-th F of the c-th stage allocates fit at `time`.
  bool fits(size_t c, int k, double time) const {
    return held(at_forward(c, k), time, available_away(time)) <= budget_;
  }

  // Offloads ended by `time` that can still be away: not yet reloading.
  int available_away(double time) const {
    return std::min(ended_by(offloads_end_, time), away_at_most(time));
  }

  // The least bytes `counted` can hold at `time` with `away` activations offloaded: the
  // allocated ones, less what can have been released. An activation whose B has ended holds its
  // G until its W ends, then nothing; one whose offload has ended holds A - O until its reload,
  // and at most one offload per counted activation not past its B can have ended. A B that ended
  // while its W did not may have run on an activation other than these, leaving one of them to
  // an offload beyond those: each such swap frees the largest O less A - G, largest first.
  double held(const Counted& counted, double time, int away) const {
    double held = 0;
    int not_past_backward = 0;
    for (size_t i = 0; i < stages_.size(); ++i) {
      const StageCosts& cost = problem_.stages[stages_[i]];
      const Released r = released(i, counted.releasable[i], time);
      held += counted.allocated[i] * static_cast<double>(cost.activation_bytes) -
              r.weights * static_cast<double>(cost.activation_bytes) -
              (r.backwards - r.weights) * after_backward(i);
      not_past_backward += r.counted - r.backwards;
    }
    const int offloaded = std::min(not_past_backward, away);
    held -= offloaded * moved_;
    int spare = away - offloaded;
    for (const size_t i : swap_order_) {
      if (spare == 0 || moved_ <= after_backward(i)) break;
      const Released r = released(i, counted.releasable[i], time);
      const int swapped = std::min(spare, r.backwards - r.weights);
      held -= swapped * (moved_ - after_backward(i));
      spare -= swapped;
    }
    return held;
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
  std::vector<double> forwards_;      // the heads of the rank's Fs, sorted
  double shortest_forward_ = kInfinity;
  double offload_time_ = kInfinity;  // the least of the rank's offloads
};

// The ranks that share a rank's copy channels (its link group) as the pacing of its Fs sees
// them. When the k-th F of a stage starts, k + 1 microbatches have passed every earlier stage, so
// each other rank of the group holds k + 1 activations of each of its stages before that one,
// and fits its own budget only with enough of them away: the group's offloads, one at a time on
// the shared channel, serve both ranks. Other ranks that can recompute are left out (R allocates
// too: not modelled), which only weakens the check.
class LinkGroup {
 public:
  LinkGroup(const Problem& problem, const MicrobatchPaths& paths, int rank,
            const RankMemory& memory, const OpHeads& heads, double makespan)
      : memory_(memory), stages_(problem.stages_of_rank(rank)) {
    if (!memory.moves() || problem.offload->link_group_of_rank.empty()) return;
    const std::vector<int>& group_of_rank = problem.offload->link_group_of_rank;
    std::vector<double> forwards = memory.forward_heads();
    double shortest_forward = memory.shortest_forward();
    double offload_time = memory.offload_time();
    for (int other = 0; other < problem.ranks; ++other) {
      if (other == rank || group_of_rank[other] != group_of_rank[rank]) continue;
      const std::vector<int> stages = problem.stages_of_rank(other);
      if (std::any_of(stages.begin(), stages.end(),
                      [&](int s) { return problem.recompute_frees_memory(s); })) {
        continue;
      }
      const RankMemory& partner = partners_.emplace_back(problem, paths, other, heads, makespan);
      forwards.insert(forwards.end(), partner.forward_heads().begin(),
                      partner.forward_heads().end());
      shortest_forward = std::min(shortest_forward, partner.shortest_forward());
      if (partner.moves()) offload_time = std::min(offload_time, partner.offload_time());
      moments_.insert(moments_.end(), partner.moments().begin(), partner.moments().end());
    }
    if (partners_.empty()) return;
    std::sort(forwards.begin(), forwards.end());
    offloads_end_ = offload_ends(forwards, shortest_forward, offload_time);
    moments_.insert(moments_.end(), memory.moments().begin(), memory.moments().end());
    moments_.insert(moments_.end(), offloads_end_.begin(), offloads_end_.end());
    std::sort(moments_.begin(), moments_.end());
  }

  // The earliest moment from `head` on at which the k-th F of the rank's c-th stage and what the
  // group's other ranks hold then fit, with no more activations away than the shared channel
  // can have moved.
  double earliest_fit(size_t c, int k, double head) const {
    if (partners_.empty() || fits(c, k, head)) return head;
    const auto first = std::partition_point(moments_.begin(), moments_.end(),
                                            [&](double t) { return t <= head || !fits(c, k, t); });
    return first != moments_.end() ? *first : head;
  }

 private:
  bool fits(size_t c, int k, double time) const {
    int away = memory_.offloads_needed(memory_.at_forward(c, k), time);
    for (const RankMemory& partner : partners_) {
      if (away == RankMemory::kNoneFits) return false;
      const int needed = partner.offloads_needed(partner.before_stage(stages_[c], k), time);
      away = needed == RankMemory::kNoneFits ? needed : away + needed;
    }
    return away <= ended_by(offloads_end_, time);
  }

  const RankMemory& memory_;
  const std::vector<int> stages_;     // the rank's, model order
  std::vector<RankMemory> partners_;  // the other ranks of the group
  std::vector<double> offloads_end_;  // the group's i-th offload to end ends no earlier than [i]
  std::vector<double> moments_;       // when a release or an offload's end can happen
};

// Raises the F heads of `rank` where its memory makes them wait; true when one rose.
bool pace_rank(const Problem& problem, const MicrobatchPaths& paths, int rank, OpHeads& heads,
               double makespan) {
  const std::vector<int> stages = problem.stages_of_rank(rank);
  for (int s : stages) {
    if (problem.recompute_frees_memory(s)) return false;  // R allocates too: not modelled
  }
  const RankMemory memory(problem, paths, rank, heads, makespan);
  const LinkGroup group(problem, paths, rank, memory, heads, makespan);
  std::vector<std::vector<double>> paced;  // applied once the round has read every head
  for (size_t c = 0; c < stages.size(); ++c) {
    paced.push_back(heads.forward[stages[c]]);
    for (int k = 0; k < problem.microbatches; ++k) {
      paced[c][k] = group.earliest_fit(c, k, memory.earliest_fit(c, k, paced[c][k]));
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

#include "compiler/paced_heads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

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

// The first of `moments` (sorted) after `head` at which `fits` holds, if any. Where `fits`, once
// true, stays true (`monotone`), found by bisection; else each moment is tried in turn: in
// schedules of a given makespan, fewer activations can be away later, so a check may fail again
// after it held, and bisection could skip the first moment that fits.
template <typename Fits>
std::optional<double> first_fit_after(const std::vector<double>& moments, double head,
                                      bool monotone, const Fits& fits) {
  auto first = std::upper_bound(moments.begin(), moments.end(), head);
  if (monotone) {
    first = std::partition_point(first, moments.end(), [&](double t) { return !fits(t); });
  } else {
    first = std::find_if(first, moments.end(), fits);
  }
  if (first == moments.end()) return std::nullopt;
  return *first;
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
    const std::optional<double> first = first_fit_after(moments_, head, makespan_ == kInfinity,
                                                        [&](double t) { return fits(c, k, t); });
    if (first) return *first;
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
    const double excess = held(counted, time, 0) - budget_;
    if (excess <= 0) return 0;
    const int most = available_away(time);
    if (!moves() || held(counted, time, most) > budget_) return kNoneFits;
    // Each activation away frees at most the largest O: start there, then step to the fewest.
    int away = std::clamp(static_cast<int>(std::ceil(excess / moved_)), 1, most);
    while (held(counted, time, away) > budget_) ++away;
    while (away > 1 && held(counted, time, away - 1) <= budget_) --away;
    return away;
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

// The ranks that share their copy channels (a link group) as the pacing of their Fs sees them.
// When the k-th F of a stage starts, k + 1 microbatches have passed every earlier stage, so each
// other rank of the group holds k + 1 activations of each of its stages before that one, and
// fits its own budget only with enough of them away: the group's offloads, one at a time on the
// shared channel, serve all its ranks. Ranks that can recompute are left out (R allocates too:
// not modelled), which only weakens the check.
class LinkGroup {
 public:
  LinkGroup(std::vector<int> ranks, const std::vector<std::optional<RankMemory>>& memory,
            double makespan)
      : ranks_(std::move(ranks)), memory_(memory), monotone_(makespan == kInfinity) {
    std::vector<double> forwards;
    double shortest_forward = kInfinity;
    double offload_time = kInfinity;
    for (int r : ranks_) {
      const RankMemory& rank = *memory_[r];
      forwards.insert(forwards.end(), rank.forward_heads().begin(), rank.forward_heads().end());
      shortest_forward = std::min(shortest_forward, rank.shortest_forward());
      if (rank.moves()) offload_time = std::min(offload_time, rank.offload_time());
      moments_.insert(moments_.end(), rank.moments().begin(), rank.moments().end());
    }
    std::sort(forwards.begin(), forwards.end());
    if (offload_time < kInfinity)
      offloads_end_ = offload_ends(forwards, shortest_forward, offload_time);
    moments_.insert(moments_.end(), offloads_end_.begin(), offloads_end_.end());
    std::sort(moments_.begin(), moments_.end());
  }

  // The earliest moment from `head` on at which the k-th F of `stage`, the c-th stage of `rank`
  // (one of the group's), and what the group's other ranks hold then fit, with no more
  // activations away than the shared channel can have moved.
  double earliest_fit(int rank, size_t c, int stage, int k, double head) const {
    const RankMemory& own = *memory_[rank];
    const Counted counted = own.at_forward(c, k);
    std::vector<Counted> others;
    for (int r : ranks_) others.push_back(memory_[r]->before_stage(stage, k));
    auto fits = [&](double time) {
      int away = own.offloads_needed(counted, time);
      // Without an offload of its own, the others need no more than their own channels (which
      // the group's already counts) can have moved: the rank's own pacing decides.
      if (away == 0) return true;
      const int channel = ended_by(offloads_end_, time);
      for (size_t i = 0; i < ranks_.size() && away <= channel; ++i) {
        if (ranks_[i] == rank) continue;
        const int needed = memory_[ranks_[i]]->offloads_needed(others[i], time);
        away = needed == RankMemory::kNoneFits ? needed : away + needed;
      }
      return away <= channel;
    };
    if (fits(head)) return head;
    return first_fit_after(moments_, head, monotone_, fits).value_or(head);
  }

 private:
  const std::vector<int> ranks_;
  const std::vector<std::optional<RankMemory>>& memory_;
  const bool monotone_;               // no makespan: a check that holds keeps holding later
  std::vector<double> offloads_end_;  // the group's i-th offload to end ends no earlier than [i]
  std::vector<double> moments_;       // when a release or an offload's end can happen
};

// One round of the pacing: every rank's memory and link group as the heads at its start give
// them, so that each rank is paced once and each group's channel merged once.
class Round {
 public:
  Round(const Problem& problem, const MicrobatchPaths& paths, const OpHeads& heads, double makespan,
        bool link_groups)
      : problem_(problem), group_of_rank_(problem.ranks, -1) {
    for (int r = 0; r < problem.ranks; ++r) {
      const std::vector<int> stages = problem.stages_of_rank(r);
      if (std::none_of(stages.begin(), stages.end(),
                       [&](int s) { return problem.recompute_frees_memory(s); })) {
        memory_.emplace_back(std::in_place, problem, paths, r, heads, makespan);
      } else {
        memory_.emplace_back();  // R allocates too: not modelled
      }
    }
    if (!link_groups || !problem.offload || problem.offload->link_group_of_rank.empty()) return;
    std::map<int, std::vector<int>> members;
    for (int r = 0; r < problem.ranks; ++r) {
      if (memory_[r] && memory_[r]->moves())
        members[problem.offload->link_group_of_rank[r]].push_back(r);
    }
    for (auto& [group, ranks] : members) {
      if (ranks.size() < 2) continue;
      for (int r : ranks) group_of_rank_[r] = static_cast<int>(groups_.size());
      groups_.emplace_back(std::move(ranks), memory_, makespan);
    }
  }

  // Raises the F heads of `rank` where its memory, or its link group's, makes them wait; true
  // when one rose.
  bool pace(int rank, OpHeads& heads) const {
    if (!memory_[rank]) return false;
    const RankMemory& memory = *memory_[rank];
    const LinkGroup* group = group_of_rank_[rank] >= 0 ? &groups_[group_of_rank_[rank]] : nullptr;
    const std::vector<int> stages = problem_.stages_of_rank(rank);
    bool raised = false;
    for (size_t c = 0; c < stages.size(); ++c) {
      for (int k = 0; k < problem_.microbatches; ++k) {
        double& head = heads.forward[stages[c]][k];
        double paced = memory.earliest_fit(c, k, head);
        if (group) paced = group->earliest_fit(rank, c, stages[c], k, paced);
        raised |= raise(head, paced);
      }
    }
    return raised;
  }

 private:
  const Problem& problem_;
  std::vector<std::optional<RankMemory>> memory_;  // per rank; none where a stage can recompute
  std::vector<LinkGroup> groups_;                  // of two ranks or more that offload
  std::vector<int> group_of_rank_;                 // index in groups_, -1 for none
};

}  // namespace

OpHeads paced_heads(const Problem& problem, OpHeads heads, double makespan) {
  const MicrobatchPaths paths = microbatch_paths(problem);
  // Each rank alone first, then with its link group: the group's check costs several times the
  // rank's, and the ranks alone settle most heads.
  for (const bool link_groups : {false, true}) {
    for (int round = 0; round < kMaxRounds; ++round) {
      raise_along_dependencies(problem, heads);
      const OpHeads at_start = heads;
      const Round pacing(problem, paths, at_start, makespan, link_groups);
      bool raised = false;
      for (int r = 0; r < problem.ranks; ++r) raised |= pacing.pace(r, heads);
      if (!raised) break;
    }
  }
  raise_along_dependencies(problem, heads);
  return heads;
}

}  // namespace optpipe

#include "bounds/paced_memory.h"

#include <algorithm>
#include <cmath>

namespace optpipe::pacing {

namespace {

// How many ops with these heads (non-decreasing) and duration can have ended by `time`.
int ended_by(const std::vector<double>& heads, double duration, double time) {
  return static_cast<int>(
      std::partition_point(heads.begin(), heads.end(),
                           [&](double head) { return head + duration <= time; }) -
      heads.begin());
}

}  // namespace

std::vector<double> offload_ends(const std::vector<double>& forwards, double shortest_forward,
                                 double offload_time) {
  std::vector<double> ends;
  for (size_t i = 0; i < forwards.size(); ++i) {
    const double after_forward = forwards[i] + shortest_forward + offload_time;
    ends.push_back(i == 0 ? after_forward : std::max(after_forward, ends[i - 1] + offload_time));
  }
  return ends;
}

int ended_by(const std::vector<double>& ends, double time) {
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), time) - ends.begin());
}

RankMemory::RankMemory(const Problem& problem, const MicrobatchPaths& paths, int rank,
                       const OpHeads& heads, double makespan, const CheckpointCap& checkpoints)
    : problem_(problem),
      paths_(paths),
      heads_(heads),
      stages_(problem.stages_of_rank(rank)),
      budget_(static_cast<double>(problem.activation_budget(rank))),
      makespan_(makespan),
      checkpoints_(checkpoints) {
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
    if (problem.recompute_frees_memory(s)) {
      checkpointed_ = std::max(checkpointed_, static_cast<double>(cost.recomputed_bytes()));
    }
  }
  std::sort(forwards_.begin(), forwards_.end());
  for (int s : stages_) {
    if (!problem.offload_frees_memory(s)) continue;
    const StageCosts& cost = problem.stages[s];
    stage_offloads_.push_back(
        {offload_ends(heads.forward[s], cost.forward, problem.offload_time(s)),
         static_cast<double>(cost.offloadable_bytes)});
  }
  if (moves()) offloads_end_ = offload_ends(forwards_, shortest_forward_, offload_time_);
  moments_ = offloads_end_;
  for (const StageOffloads& stage : stage_offloads_) {
    moments_.insert(moments_.end(), stage.ends.begin(), stage.ends.end());
  }
  for (int s : stages_) {
    const StageCosts& cost = problem.stages[s];
    for (double head : heads.backward[s]) moments_.push_back(head + cost.backward_input);
    for (double head : heads.weight[s]) moments_.push_back(head + cost.backward_weight);
  }
  std::sort(moments_.begin(), moments_.end());
  moments_.erase(std::unique(moments_.begin(), moments_.end()), moments_.end());
  for (size_t i = 0; i < stages_.size(); ++i) swap_order_.push_back(i);
  std::sort(swap_order_.begin(), swap_order_.end(),
            [&](size_t a, size_t b) { return after_backward(a) < after_backward(b); });
  if (makespan_ < kInfinity || !moves()) count_forwards_before();
}

double RankMemory::earliest_fit(size_t c, int k, double head) const {
  head = std::max(head, after_forwards_first(c, k));
  const Counted counted = at_forward(c, k);
  auto fits = [&](double t) { return this->fits(counted, t); };
  if (fits(head)) return head;
  const std::optional<double> first = first_fit_after(moments_, head, fits_stay(), fits);
  if (first) return *first;
  return moments_.empty() ? head : std::max(head, moments_.back());
}

double RankMemory::after_forwards_first(size_t c, int k) const {
  double after = 0;
  if (forwards_before_.empty()) return after;
  for (size_t i = c + 1; i < stages_.size(); ++i) {
    const int first = forwards_before_[c][i][k];
    if (first == 0) continue;
    const int s = stages_[i];
    after = std::max(after, heads_.forward[s][first - 1] + problem_.stages[s].forward);
  }
  return after;
}

Counted RankMemory::at_forward(size_t c, int k) const {
  Counted counted = through(c, k);
  if (forwards_before_.empty()) return counted;
  for (size_t i = c + 1; i < stages_.size(); ++i) {
    counted.allocated[i] = counted.releasable[i] = counted.backward_at_most[i] =
        forwards_before_[c][i][k];
  }
  return counted;
}

Counted RankMemory::through(size_t c, int k) const {
  Counted counted;
  counted.allocated.assign(stages_.size(), 0);
  for (size_t i = 0; i <= c; ++i) counted.allocated[i] = k + 1;
  counted.releasable = counted.allocated;
  counted.releasable[c] = k;
  counted.backward_at_most = counted.releasable;
  return counted;
}

Counted RankMemory::before_stage(int stage, int k) const {
  Counted counted;
  counted.allocated.assign(stages_.size(), 0);
  for (size_t i = 0; i < stages_.size(); ++i) counted.allocated[i] = stages_[i] < stage ? k + 1 : 0;
  counted.releasable = counted.allocated;
  counted.backward_at_most = counted.releasable;
  return counted;
}

// Were the k-th F of stage c to start before the j-th F of stage i, then at the latter's start the
// first k + 1 Fs of stage c have allocated (and ended, so each can be away), and only the j
// microbatches that passed stage i before it can be past their B there. Where that fits at no
// moment from the j-th F's head to its latest start, it starts before. More Fs of stage c only
// hold more, so each k's count starts from the previous one's.
void RankMemory::count_forwards_before() {
  const int m = problem_.microbatches;
  forwards_before_.assign(stages_.size(), std::vector<std::vector<int>>(stages_.size()));
  for (size_t i = 1; i < stages_.size(); ++i) {
    const std::vector<double>& heads = heads_.forward[stages_[i]];
    for (size_t c = 0; c < i; ++c) {
      std::vector<int>& before = forwards_before_[c][i];
      // At the j-th F of stage i, after the first k + 1 of stage c.
      auto counted_at = [&](int j, int k) {
        Counted counted = through(i, j);
        counted.allocated[c] = counted.releasable[c] = k + 1;
        counted.backward_at_most[c] = j;
        return counted;
      };
      int j = 0;
      for (int k = 0; k < m; ++k) {
        for (; j < k; ++j) {
          const double latest = latest_forward(i, j);
          if (heads[j] <= latest && fits_by(counted_at(j, k), heads[j], latest)) break;
        }
        before.push_back(j);
      }
    }
  }
}

// In a schedule of the makespan, the j-th F of the rank's i-th stage (in start order) is followed
// by its microbatch's path to the end, and on the rank by the later Fs of its stage and of the
// rank's later stages, and by the j-th and later Bs and Ws of every stage of the rank: the j-th
// op of a family starts after the j-th of the one before it along a microbatch's dependencies
// ends (docs/semantics.md), and the rank runs one op at a time.
double RankMemory::latest_forward(size_t i, int j) const {
  const int m = problem_.microbatches;
  double work = (m - j) * problem_.stages[stages_[i]].forward;  // its own and the later ones
  for (size_t s = 0; s < stages_.size(); ++s) {
    const StageCosts& cost = problem_.stages[stages_[s]];
    work += (m - j) * (cost.backward_input + cost.backward_weight + (s > i ? cost.forward : 0.0));
  }
  return makespan_ - std::max(paths_.forward_tail[stages_[i]], work);
}

bool RankMemory::fits_by(const Counted& counted, double from, double to) const {
  // Held falls with time and with more away; the channel has moved the most by `to`, and the
  // reloads' way back allows the most away at `from`: a check that holds for the whole window.
  Holding at_end = holding_at(counted, to);
  at_end.checkpoints = std::max(checkpoints_.at(from), at_end.checkpoints);  // the most in between
  const int moved_by_end = ended_by(offloads_end_, to);
  auto fits_relaxed = [&](double first) {
    return held(at_end, std::min(moved_by_end, away_at_most(first))) <= budget_;
  };
  if (!fits_relaxed(from)) return false;
  if (fits(counted, from)) return true;
  auto moment = std::upper_bound(moments_.begin(), moments_.end(), from);
  for (int tried = 0; tried < kExactMoments && moment != moments_.end() && *moment <= to;
       ++tried, ++moment) {
    if (fits(counted, *moment)) return true;
  }
  return moment != moments_.end() && *moment <= to && fits_relaxed(*moment);
}

int RankMemory::offloads_needed(const Counted& counted, double time) const {
  const Holding holding = holding_at(counted, time);
  const double excess = held(holding, 0) - budget_;
  if (excess <= 0) return 0;
  const int most = available_away(time);
  if (!moves() || held(holding, most) > budget_) return kNoneFits;
  // Each activation away frees at most the largest O: start there, then step to the fewest.
  int away = std::clamp(static_cast<int>(std::ceil(excess / moved_)), 1, most);
  while (held(holding, away) > budget_) ++away;
  while (away > 1 && held(holding, away - 1) <= budget_) --away;
  return away;
}

RankMemory::Released RankMemory::released(const Counted& counted, size_t i, double time) const {
  const StageCosts& cost = problem_.stages[stages_[i]];
  Released r;
  r.counted = counted.releasable[i];
  r.backwards = std::min(counted.backward_at_most[i],
                         ended_by(heads_.backward[stages_[i]], cost.backward_input, time));
  r.weights =
      std::min(r.backwards, ended_by(heads_.weight[stages_[i]], cost.backward_weight, time));
  return r;
}

bool RankMemory::fits(const Counted& counted, double time) const {
  return held(holding_at(counted, time), available_away(time)) <= budget_;
}

int RankMemory::available_away(double time) const {
  return std::min(ended_by(offloads_end_, time), away_at_most(time));
}

// The allocated activations, less what can have been released. An activation whose B has ended
// holds its G until its W ends, then nothing; one whose offload has ended holds A - O until its
// reload, and at most one offload per counted activation not past its B can have ended. A B that
// ended while its W did not may have run on an activation other than these, leaving one of them to
// an offload beyond those: each such swap frees the largest O less A - G, largest first. Each
// activation held as its checkpoint frees at most the largest A - C more (held()).
RankMemory::Holding RankMemory::holding_at(const Counted& counted, double time) const {
  Holding holding{counted, time};
  holding.checkpoints = checkpoints_.at(time);
  holding.moved = moved_by(time);
  for (size_t i = 0; i < stages_.size(); ++i) {
    const StageCosts& cost = problem_.stages[stages_[i]];
    const Released r = released(counted, i, time);
    holding.bytes += counted.allocated[i] * static_cast<double>(cost.activation_bytes) -
                     r.weights * static_cast<double>(cost.activation_bytes) -
                     (r.backwards - r.weights) * after_backward(i);
    holding.movable += r.counted - r.backwards;
    holding.others += r.counted;
  }
  return holding;
}

double RankMemory::held(const Holding& holding, int away) const {
  const int offloaded = std::min(holding.movable, away);
  double freed = offloaded * moved_;
  int spare = away - offloaded;
  for (const size_t i : swap_order_) {
    if (spare == 0 || moved_ <= after_backward(i)) break;
    const Released r = released(holding.counted, i, holding.time);
    const int swapped = std::min(spare, r.backwards - r.weights);
    freed += swapped * (moved_ - after_backward(i));
    spare -= swapped;
  }
  // Each offload frees at most the bytes it moved, and those are at most what each stage's
  // offloads, timed from its own Fs, can have moved by then.
  const double held = holding.bytes - std::min(freed, holding.moved);
  // A checkpoint is held between its F and its R, before its B, and never offloaded: held as A
  // instead, it would leave a way of releasing that the count above takes at least as low.
  return held - std::min(holding.checkpoints, holding.others) * checkpointed_;
}

// Each activation away comes back after `time` by a reload of its own on the rank's channel, one at
// a time, and its B and the backwards down to W(0) follow that reload before the makespan.
int RankMemory::away_at_most(double time) const {
  if (makespan_ == kInfinity) return kUncapped;
  const double room = makespan_ - after_reload_ - time;
  if (room <= 0) return 0;
  return static_cast<int>(std::min(std::floor(room / reload_time_), double{kUncapped}));
}

double RankMemory::moved_by(double time) const {
  double bytes = 0;
  for (const StageOffloads& stage : stage_offloads_) {
    bytes += ended_by(stage.ends, time) * stage.bytes_each;
  }
  return bytes;
}

double RankMemory::after_backward(size_t i) const {
  const StageCosts& cost = problem_.stages[stages_[i]];
  return static_cast<double>(cost.activation_bytes - cost.weight_grad_bytes);
}

}  // namespace optpipe::pacing

#include "heuristics/list_offload.h"

#include <algorithm>
#include <limits>

#include "model/dependencies.h"

namespace optpipe {

namespace {
constexpr double kNotBack = std::numeric_limits<double>::infinity();
}  // namespace

bool backward_is_near(const std::vector<int>& next_backward, size_t local, int microbatch,
                      int places) {
  if (microbatch >= next_backward[local] + places) return false;
  for (size_t later = local + 1; later < next_backward.size(); ++later) {
    if (next_backward[later] <= microbatch) return false;
  }
  return true;
}

OffloadLedger::OffloadLedger(const Problem& problem, const ListOffloadPolicy& policy)
    : problem_(problem),
      policy_(policy),
      channel_free_(num_channels(problem), 0.0),
      offload_end_(problem, 0.0),
      back_(problem, 0.0),
      stages_(problem.ranks),
      away_(problem.ranks),
      release_times_(problem.ranks),
      released_total_(problem.ranks),
      reloaded_early_(problem.ranks) {
  for (int r = 0; r < problem.ranks; ++r) {
    stages_[r] = problem.stages_of_rank(r);
    away_[r].resize(stages_[r].size());
  }
}

std::optional<LedgerTransfer> OffloadLedger::offload_activation(int rank, size_t local,
                                                                const OpRef& forward,
                                                                double issue_time, int awaiting) {
  const int s = forward.stage;
  const int64_t bytes = problem_.stages[s].offloadable_bytes;
  if (!problem_.offload || bytes <= 0 || awaiting < policy_.min_awaiting) return std::nullopt;
  double& channel_free = channel_free_[channel_of(problem_, rank, Op::kOffload)];
  const double start = std::max(issue_time, channel_free);
  if (start - issue_time > policy_.max_channel_wait) return std::nullopt;
  const double end = start + problem_.offload_time(s);
  channel_free = end;
  offload_end_[forward] = end;
  back_[forward] = kNotBack;
  away_[rank][local].push_back(forward.microbatch);  // the scheduler offloads in microbatch order
  release_times_[rank].push_back(end);
  released_total_[rank].push_back(
      (released_total_[rank].empty() ? 0 : released_total_[rank].back()) + bytes);
  return LedgerTransfer{{Op::kOffload, s, forward.microbatch}, end};
}

double OffloadLedger::reload_due_time(int rank, size_t local, const std::vector<int>& next_backward,
                                      const BackwardReady& backward_ready) const {
  const OpRef forward{Op::kForward, stages_[rank][local], away_[rank][local].front()};
  if (backward_is_near(next_backward, local, forward.microbatch, policy_.reload_lookahead)) {
    return -kNotBack;
  }
  const StageCosts& costs = problem_.stages[forward.stage];
  const double reload = problem_.reload_time(forward.stage);
  const double back_by = backward_ready(forward.stage, forward.microbatch) - reload;
  // Late whenever issued: the offload or the channel already hold it past its B's earliest start.
  const double channel_free = channel_free_[channel_of(problem_, rank, Op::kReload)];
  if (std::max(offload_end_[forward], channel_free) >= back_by) return -kNotBack;
  return back_by - policy_.reload_lookahead * std::max(costs.forward, costs.backward_input);
}

std::vector<LedgerTransfer> OffloadLedger::due_reloads(int rank,
                                                       const std::vector<int>& next_backward,
                                                       double issue_time, double decision_time,
                                                       const BackwardReady& backward_ready,
                                                       const MayReload& may_reload) {
  std::vector<LedgerTransfer> issued;
  // Later allocations start after `issue_time`, when these offloads count as complete anyway.
  std::erase_if(reloaded_early_[rank],
                [&](const auto& offload) { return offload.first <= issue_time; });
  const std::vector<int>& stages = stages_[rank];
  double& channel_free = channel_free_[channel_of(problem_, rank, Op::kReload)];
  for (size_t local = 0; local < stages.size(); ++local) {
    std::deque<int>& away = away_[rank][local];
    while (!away.empty() &&
           reload_due_time(rank, local, next_backward, backward_ready) <= decision_time) {
      const OpRef forward{Op::kForward, stages[local], away.front()};
      if (!may_reload(forward)) break;
      const StageCosts& stage = problem_.stages[forward.stage];
      const double reload = problem_.reload_time(forward.stage);
      away.pop_front();
      const double start = std::max({issue_time, offload_end_[forward], channel_free});
      const double end = start + reload;
      channel_free = end;
      back_[forward] = end;
      if (offload_end_[forward] > issue_time) {
        reloaded_early_[rank].emplace_back(offload_end_[forward], stage.offloadable_bytes);
      }
      issued.push_back({{Op::kReload, forward.stage, forward.microbatch}, end});
    }
  }
  return issued;
}

double OffloadLedger::next_reload_due(int rank, const std::vector<int>& next_backward,
                                      const BackwardReady& backward_ready) const {
  double due = kNotBack;
  for (size_t local = 0; local < stages_[rank].size(); ++local) {
    if (!away_[rank][local].empty()) {
      due = std::min(due, reload_due_time(rank, local, next_backward, backward_ready));
    }
  }
  return due;
}

double OffloadLedger::next_release_after(int rank, double time) const {
  const std::vector<double>& times = release_times_[rank];
  const auto next = std::upper_bound(times.begin(), times.end(), time);
  return next == times.end() ? kNotBack : *next;
}

int64_t OffloadLedger::released_by(int rank, double time) const {
  const std::vector<double>& times = release_times_[rank];
  const auto done = std::upper_bound(times.begin(), times.end(), time) - times.begin();
  int64_t bytes = done == 0 ? 0 : released_total_[rank][done - 1];
  for (const auto& [end, offloaded] : reloaded_early_[rank]) {
    if (end > time) bytes += offloaded;
  }
  return bytes;
}

double OffloadLedger::when_released(int rank, double time, int64_t bytes) const {
  if (released_by(rank, time) >= bytes) return time;
  const std::vector<double>& times = release_times_[rank];
  for (auto next = std::upper_bound(times.begin(), times.end(), time); next != times.end();
       ++next) {
    if (released_by(rank, *next) >= bytes) return *next;
  }
  return kNotBack;
}

int64_t OffloadLedger::reserve(int rank, const std::vector<int>& next_backward,
                               int microbatch) const {
  const std::vector<int>& stages = stages_[rank];
  int64_t bytes = 0;
  for (size_t local = 0; local < stages.size(); ++local) {
    const std::deque<int>& away = away_[rank][local];
    if (away.empty() || away.front() >= microbatch) continue;
    // Before the first reload to come is issued, the backwards of its stage up to its lookahead
    // have run (by then it is due whatever the time), and so have the Bs of its microbatch and the
    // older ones on the rank's later stages (its B there readies the one here); each releases
    // A - G.
    const StageCosts& own = problem_.stages[stages[local]];
    int64_t released =
        std::max(0, away.front() - policy_.reload_lookahead - next_backward[local] + 1) *
        (own.activation_bytes - own.weight_grad_bytes);
    for (size_t later = local + 1; later < stages.size(); ++later) {
      const StageCosts& costs = problem_.stages[stages[later]];
      released += std::max(0, away.front() + 1 - next_backward[later]) *
                  (costs.activation_bytes - costs.weight_grad_bytes);
    }
    bytes += std::max<int64_t>(0, own.offloadable_bytes - released);
  }
  return bytes;
}

}  // namespace optpipe

#include "heuristics/list_offload.h"

#include <algorithm>
#include <limits>

#include "compiler/dependencies.h"

namespace optpipe {

namespace {
constexpr double kNotBack = std::numeric_limits<double>::infinity();
}  // namespace

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

std::optional<LedgerTransfer> OffloadLedger::offload_after_forward(int rank, size_t local,
                                                                   const OpRef& forward,
                                                                   double forward_end,
                                                                   int awaiting) {
  const int s = forward.stage;
  const int64_t bytes = problem_.stages[s].offloadable_bytes;
  if (!problem_.offload || bytes <= 0 || awaiting < policy_.min_awaiting) return std::nullopt;
  double& channel_free = channel_free_[channel_of(problem_, rank, Op::kOffload)];
  const double start = std::max(forward_end, channel_free);
  if (start - forward_end > policy_.max_channel_wait) return std::nullopt;
  const double end = start + problem_.offload_time(s);
  channel_free = end;
  offload_end_[forward] = end;
  back_[forward] = kNotBack;
  away_[rank][local].push_back(forward.microbatch);
  release_times_[rank].push_back(end);
  released_total_[rank].push_back(
      (released_total_[rank].empty() ? 0 : released_total_[rank].back()) + bytes);
  return LedgerTransfer{{Op::kOffload, s, forward.microbatch}, end};
}

std::vector<LedgerTransfer> OffloadLedger::due_reloads(int rank,
                                                       const std::vector<int>& next_backward,
                                                       double issue_time) {
  std::vector<LedgerTransfer> issued;
  // Later allocations start after `issue_time`, when these offloads count as complete anyway.
  std::erase_if(reloaded_early_[rank],
                [&](const auto& offload) { return offload.first <= issue_time; });
  const std::vector<int>& stages = stages_[rank];
  for (size_t local = 0; local < stages.size(); ++local) {
    std::deque<int>& away = away_[rank][local];
    while (!away.empty() && away.front() < next_backward[local] + policy_.reload_lookahead) {
      const OpRef forward{Op::kForward, stages[local], away.front()};
      away.pop_front();
      double& channel_free = channel_free_[channel_of(problem_, rank, Op::kReload)];
      const double start = std::max({issue_time, offload_end_[forward], channel_free});
      const double end = start + problem_.reload_time(forward.stage);
      channel_free = end;
      back_[forward] = end;
      if (offload_end_[forward] > issue_time) {
        reloaded_early_[rank].emplace_back(offload_end_[forward],
                                           problem_.stages[forward.stage].offloadable_bytes);
      }
      issued.push_back({{Op::kReload, forward.stage, forward.microbatch}, end});
    }
  }
  return issued;
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

int64_t OffloadLedger::reserve(int rank, const std::vector<int>& next_backward,
                               int microbatch) const {
  const std::vector<int>& stages = stages_[rank];
  int64_t bytes = 0;
  for (size_t local = 0; local < stages.size(); ++local) {
    const std::deque<int>& away = away_[rank][local];
    if (away.empty() || away.front() >= microbatch) continue;
    // The first reload to come is issued after the backwards up to its lookahead have run, and
    // each of those releases A - G.
    const StageCosts& stage = problem_.stages[stages[local]];
    const int64_t backwards_before =
        std::max(0, away.front() - policy_.reload_lookahead - next_backward[local] + 1);
    bytes += std::max<int64_t>(
        0, stage.offloadable_bytes -
               backwards_before * (stage.activation_bytes - stage.weight_grad_bytes));
  }
  return bytes;
}

}  // namespace optpipe

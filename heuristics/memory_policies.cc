#include "heuristics/memory_policies.h"

#include <algorithm>
#include <limits>

#include "compiler/errors.h"

namespace optpipe {

ListPolicy memory_limited_policy(const Problem& problem, double factor, bool later_chunk_first) {
  ListPolicy policy;
  policy.memory_limit_bytes.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    policy.memory_limit_bytes[r] =
        static_cast<int64_t>(factor * static_cast<double>(problem.activation_budget(r)));
  }
  policy.later_chunk_first = later_chunk_first;
  return policy;
}

ListPolicy offloading_list_policy(const Problem& problem, const ListOffloadPolicy& offload,
                                  bool later_chunk_first, double factor) {
  ListPolicy policy = memory_limited_policy(problem, factor, later_chunk_first);
  policy.offload = offload;
  return policy;
}

std::vector<ListPolicy> offloading_policy_neighbourhood(const Problem& problem) {
  std::vector<ListPolicy> policies;
  if (!problem.offload) return policies;
  std::vector<bool> later_first_options = {true, false};
  if (problem.chunks_per_rank == 1) later_first_options = {false};
  // Channel waits in units of the first stage's forward time.
  const double forward = problem.stages.front().forward;
  for (double factor : {1.0, 0.9}) {
    for (double wait : {0.0, 1.0, 2.0, 0.5}) {
      for (int lookahead : {1, 2, 3, 4}) {
        for (int min_awaiting : {1, 2, 3, 4, 0, 5, 6}) {
          for (bool later_first : later_first_options) {
            for (bool backward_first : {true, false}) {
              for (WeightTiming weights : {WeightTiming::kGapAware, WeightTiming::kFillGaps}) {
                ListPolicy policy = offloading_list_policy(
                    problem, {min_awaiting, lookahead, wait * forward}, later_first, factor);
                policy.backward_first = backward_first;
                policy.weights = weights;
                policies.push_back(std::move(policy));
              }
            }
          }
        }
      }
    }
  }
  return policies;
}

std::vector<ListPolicy> rank_limit_neighbours(const Problem& problem, const ListPolicy& policy) {
  constexpr int kMaxInFlightCap = 3;
  std::vector<ListPolicy> neighbours;
  for (int r = 0; r < static_cast<int>(policy.memory_limit_bytes.size()); ++r) {
    auto add = [&](auto change) {
      ListPolicy neighbour = policy;
      change(neighbour);
      neighbours.push_back(std::move(neighbour));
    };
    const int64_t limit = policy.memory_limit_bytes[r];
    for (double factor : {0.95, 0.9, 0.8, 0.7}) {
      add([&](ListPolicy& p) {
        p.memory_limit_bytes[r] = static_cast<int64_t>(factor * static_cast<double>(limit));
      });
    }
    if (limit < problem.activation_budget(r)) {
      add([&](ListPolicy& p) { p.memory_limit_bytes[r] = problem.activation_budget(r); });
    }
    const int in_flight =
        policy.max_in_flight.empty() ? kMaxInFlightCap + 1 : policy.max_in_flight[r];
    for (int cap = 1; cap <= std::min(kMaxInFlightCap, in_flight - 1); ++cap) {
      add([&](ListPolicy& p) {
        if (p.max_in_flight.empty()) {
          p.max_in_flight.assign(problem.ranks, std::numeric_limits<int>::max());
        }
        p.max_in_flight[r] = cap;
      });
    }
  }
  return neighbours;
}

std::optional<OffloadedSchedule> list_candidate(const Problem& problem, const ListPolicy& policy,
                                                const std::string& method) {
  try {
    ListOutcome outcome = list_schedule_with_outcome(problem, policy);
    if (outcome.abandoned) return std::nullopt;
    OffloadedSchedule candidate = time_with_simulator(problem, std::move(outcome.order), method);
    if (!candidate.fits() && problem.any_stage_can_recompute()) {
      candidate = fit_recompute(problem, std::move(candidate), method);
    }
    return candidate;
  } catch (const Error&) {
    return std::nullopt;  // a starved rank under this policy
  }
}

}  // namespace optpipe

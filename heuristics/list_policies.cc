#include "heuristics/list_policies.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

#include "bounds/microbatch_paths.h"
#include "model/errors.h"

namespace optpipe {

namespace {

// Stages from which a pipeline counts as long for the offloading lists' knobs.
constexpr int kLongPipelineStages = 16;

}  // namespace

bool is_long_pipeline(const Problem& problem) {
  return problem.num_stages() >= kLongPipelineStages;
}

double channel_wait_unit(const Problem& problem) {
  const double forward = problem.stages.front().forward;
  if (!is_long_pipeline(problem)) return forward;
  return std::max(forward, microbatch_paths(problem).round_trip.front() / 16);
}

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
  if (!problem.offload) return {};
  // Each knob's values, the ones that won most often on the benchmark suite first.
  const std::vector<double> factors = {1.0, 0.9};
  const std::vector<double> waits = {0.0, 1.0, 2.0, 0.5};
  const std::vector<int> lookaheads = {1, 2, 3, 4};
  const std::vector<int> min_awaitings = {1, 2, 3, 4, 0, 5, 6};
  const std::vector<bool> later_firsts =
      problem.chunks_per_rank == 1 ? std::vector<bool>{false} : std::vector<bool>{true, false};
  const std::vector<bool> backward_firsts = {true, false};
  const std::vector<WeightTiming> weight_timings = {WeightTiming::kGapAware,
                                                    WeightTiming::kFillGaps};
  const std::vector<bool> eagers =
      is_long_pipeline(problem) ? std::vector<bool>{false, true} : std::vector<bool>{false};
  const double unit = channel_wait_unit(problem);

  // Every combination, as one index per knob, those whose values come first on every knob
  // first: a search that has time for a few dozen runs (R = 32, m = 256) still varies every
  // knob.
  constexpr size_t kKnobs = 8;
  const std::array<size_t, kKnobs> sizes = {
      factors.size(),      waits.size(),           lookaheads.size(),     min_awaitings.size(),
      later_firsts.size(), backward_firsts.size(), weight_timings.size(), eagers.size()};
  std::vector<std::array<size_t, kKnobs>> combinations;
  for (std::array<size_t, kKnobs> digits{};;) {
    combinations.push_back(digits);
    size_t k = 0;
    while (k < kKnobs && ++digits[k] == sizes[k]) digits[k++] = 0;
    if (k == kKnobs) break;
  }
  auto rank = [](const std::array<size_t, kKnobs>& digits) {
    return std::accumulate(digits.begin(), digits.end(), size_t{0});
  };
  std::stable_sort(combinations.begin(), combinations.end(),
                   [&](const auto& a, const auto& b) { return rank(a) < rank(b); });

  std::vector<ListPolicy> policies;
  for (const auto& [factor, wait, lookahead, min_awaiting, later_first, backward_first, weights,
                    eager] : combinations) {
    ListPolicy policy = offloading_list_policy(
        problem,
        {min_awaitings[min_awaiting], lookaheads[lookahead], waits[wait] * unit, eagers[eager]},
        later_firsts[later_first], factors[factor]);
    policy.backward_first = backward_firsts[backward_first];
    policy.weights = weight_timings[weights];
    policies.push_back(std::move(policy));
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
  ListOutcome outcome = list_schedule_with_outcome(problem, policy);
  if (outcome.abandoned || !outcome.deadlock.empty()) return std::nullopt;  // a starved rank
  std::optional<OffloadedSchedule> candidate =
      try_time_with_simulator(problem, std::move(outcome.order), method);
  if (candidate && !candidate->fits() && problem.any_stage_can_recompute()) {
    candidate = fit_recompute(problem, std::move(*candidate), method);
  }
  return candidate;
}

}  // namespace optpipe

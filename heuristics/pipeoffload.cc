// PipeOffload-style schedules (Wan et al., "PipeOffload: Improving Scalability of Pipeline
// Parallelism with Memory Optimization", 2025): interleaved 1F1B over groups of g microbatches,
// ceil(R/2) <= g <= R, offloading the activations of the first K chunks, whose lifespans are the
// longest; g and K are chosen for the budget, the smallest K that fits for each g and then the
// fastest g. With one chunk per rank: 1F1B plus offload of the longest-lived activations.
#include "heuristics/pipeoffload.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "heuristics/offload_orders.h"
#include "heuristics/one_f_one_b.h"
#include "model/errors.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {

namespace {

constexpr const char* kMethod = "pipeoffload";

OffloadSet first_chunks(const Problem& problem, int chunks_offloaded) {
  OffloadSet set(problem);
  for (int s = 0; s < problem.num_stages(); ++s) {
    if (s / problem.ranks >= chunks_offloaded) continue;  // loop placement: chunk = s / R
    for (int j = 0; j < problem.microbatches; ++j) set.add(s, j);
  }
  return set;
}

void keep_better(std::optional<OffloadedSchedule>& best, OffloadedSchedule candidate) {
  if (!best || better_offloaded(candidate, *best)) best = std::move(candidate);
}

}  // namespace

std::string pipeoffload_unsupported(const Problem& problem) {
  if (problem.chunks_per_rank >= 2 && problem.placement != PlacementKind::kLoop) {
    return "needs pipeline.placement = \"loop\" or chunks_per_rank = 1 (V-shape placements with "
           "2 chunks are not supported)";
  }
  return {};
}

std::optional<OffloadedSchedule> pipeoffload_schedule_faster_than(const Problem& problem,
                                                                  double makespan, FitGoal goal) {
  if (problem.chunks_per_rank == 1) {
    const Order base = one_f_one_b_order(problem);
    const Schedule timing = simulate(problem, base, kMethod);
    if (makespan_of(timing) >= makespan) return std::nullopt;
    return fit_offloads(problem, base, timing, kMethod, OffloadChoice::kLongestLived,
                        OffloadSet(problem), goal);
  }
  std::optional<OffloadedSchedule> best;
  const int ranks = problem.ranks;
  // Every group size on up to 8 ranks; about five of them, evenly spread, beyond (speed).
  const int step = std::max(1, (ranks - (ranks + 1) / 2 + 3) / 4);
  for (int group = ranks; group >= (ranks + 1) / 2; group -= step) {
    const Order base =
        grouped_interleaved_order(problem, group, interleaved_warmup(problem, group, 2), false);
    SimulationOutcome timed = try_simulate(problem, base, kMethod);
    // A partial last group can starve the warm-up rule: another group size.
    if (!timed.schedule) continue;
    const Schedule& timing = *timed.schedule;
    if (makespan_of(timing) >= makespan) continue;  // offload never shortens it
    for (int k = 0; k <= problem.chunks_per_rank; ++k) {
      OffloadedSchedule candidate = fit_offloads(
          problem, base, timing, kMethod, OffloadChoice::kFixed, first_chunks(problem, k), goal);
      const bool fits = candidate.fits();
      keep_better(best, std::move(candidate));
      if (fits || !problem.offload) break;
    }
  }
  return best;
}

OffloadedSchedule pipeoffload_schedule(const Problem& problem) {
  if (auto best = pipeoffload_schedule_faster_than(problem, std::numeric_limits<double>::infinity(),
                                                   FitGoal::kLeastExcess)) {
    return std::move(*best);
  }
  const Order base = microbatch_serial_order(problem, false);
  return fit_offloads(problem, base, simulate(problem, base, kMethod), kMethod,
                      OffloadChoice::kLongestLived, OffloadSet(problem));
}

Order pipeoffload_order(const Problem& problem) {
  return pipeoffload_schedule(problem).order;
}

}  // namespace optpipe

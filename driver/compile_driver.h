// The compile pipeline behind `optpipe-compile` (docs/design.md §1): run the chosen generators,
// time each order with the simulator, keep what the validator accepts within the budget, pick the
// best.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"
#include "model/solver_stats.h"
#include "solver/optimizer.h"
#include "timing/metrics.h"

namespace optpipe {

struct Candidate {
  std::string method;
  Schedule schedule;
  Metrics metrics;
  std::string rejection;  // why it is not usable (over budget); empty when it is
};

// What a compile came to.
enum class CompileStatus {
  kScheduled,   // `best` holds the schedule
  kOverBudget,  // no method's schedule fits the memory budget; `best` is empty
};

struct CompileResult {
  CompileStatus status = CompileStatus::kScheduled;
  // When over budget: the candidate that comes closest, the ranks it leaves short and the smallest
  // budget at which some method would fit.
  std::string over_budget_message;
  Candidate best;
  std::vector<Candidate> ranking;     // every method tried: usable ones by makespan, then the rest
  std::optional<SolverStats> solver;  // when the optimiser ran
  std::vector<std::string> warnings;  // what went wrong without spoiling the result (the cache)
  // Generators not run because the time limit had passed or an interrupt came.
  int generators_skipped = 0;
  // Whether the time limit or an interrupt cut the bound, the generators or the optimiser short:
  // the result then depends on the machine (SolverStats::reproducible() says it of the optimiser).
  bool cut_short = false;
};

struct CompileOptions {
  // "auto": every generator that supports the problem, then the optimiser on the best of them;
  // "milp": the same, reported as the optimiser's; a generator's name: that generator alone.
  std::string method = "auto";
  OptimizerOptions optimizer;
  // Each schedule better than the last, as soon as it is known: the best generator's first, then
  // the optimiser's improvements (docs/cli.md: online incumbents).
  ImprovementCallback on_improvement;
  // `--cache DIR`: start from the schedule stored for this problem (returned as it is when it was
  // stored as optimal for this very profile and meets the lower bound) and store the result. A
  // cache that cannot be read or written is a warning. Empty: no cache.
  std::string cache_dir;
};

// Throws InputError for an unknown or unsupported method. When nothing fits, the result is
// CompileStatus::kOverBudget, naming the smallest budget that would.
CompileResult compile(const Problem& problem, const CompileOptions& options);
// A generator alone (or "auto" without the optimiser).
CompileResult compile(const Problem& problem, const std::string& method);

// What smallest_feasible_budget found.
struct FeasibleBudget {
  // A budget, the same on every rank, at which some generator fits; none when none fits even with
  // every activation live at once.
  std::optional<int64_t> bytes;
  // `stop` ended the search: `bytes` fits but a smaller budget may too.
  bool cut_short = false;
};

// The smallest budget, the same on every rank, at which some generator of `method` ("auto": any)
// fits, to within 0.1% of it. `guess`, when given, is probed first (the peak of the schedule that
// came closest, say): where it fits, the search starts below it. `stop` (the time limit, an
// interrupt), asked between probes, ends the search with the smallest budget found to fit so far.
FeasibleBudget smallest_feasible_budget(const Problem& problem, const std::string& method,
                                        const std::function<bool()>& stop = nullptr,
                                        std::optional<int64_t> guess = std::nullopt);

struct FrontierPoint {
  int64_t budget_bytes;
  std::string method;  // the fastest generator that fits at this budget
  double makespan;
  bool feasible;
};

// The memory/makespan trade-off: `points` budgets from the smallest feasible one to the peak of
// 1F1B (interleaved 1F1B or ZB-V with several chunks), each with the fastest generator that fits.
std::vector<FrontierPoint> memory_frontier(const Problem& problem, int points);

// Sets every rank's budget to `size` (e.g. "60GiB"); InputError when it is below a rank's static
// bytes.
void override_budget(Problem& problem, const std::string& size);

}  // namespace optpipe

// The compile pipeline behind `optpipe-compile` (DESIGN.md §1): run the chosen generators, time
// each order with the simulator, keep what the validator accepts within the budget, pick the best.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/metrics.h"
#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct Candidate {
  std::string method;
  Schedule schedule;
  Metrics metrics;
  std::string rejection;  // why it is not usable (over budget); empty when it is
};

struct CompileResult {
  Candidate best;
  std::vector<Candidate> ranking;  // every method tried: usable ones by makespan, then the rest
};

// `method` is "auto" (every generator that supports the problem) or a generator's name. Throws
// InputError for an unknown or unsupported method and Error(kExitOverBudget) when nothing fits,
// naming the smallest budget that would.
CompileResult compile(const Problem& problem, const std::string& method);

// Sets every rank's budget to `size` (e.g. "60GiB"); InputError when it is below a rank's static
// bytes.
void override_budget(Problem& problem, const std::string& size);

}  // namespace optpipe

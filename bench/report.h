// What the harness prints and writes: markdown tables (stdout, docs/benchmarks.md) and JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/measure.h"

namespace optpipe::bench {

// Ratios of the case summary; negative when undefined (nothing to compare with, or 0 idle).
double optimizer_idle_over_baseline(const CaseResult& c);
double optimizer_makespan_over_seed(const CaseResult& c);
// The optimiser's idle floor (its layout's lower bound less the work) over the best baseline's idle
// time: the least idle ratio any schedule on that layout can reach.
double idle_floor_over_baseline(const CaseResult& c);

// One row per case: best published baseline, AdaOffload, seed, optimiser, bound, gap, ratios.
std::string summary_table(const std::vector<CaseResult>& cases);
// One row per method label over the suite: how often it fits, how far from each case's best.
std::string method_table(const std::vector<CaseResult>& cases);
// One row per case and method: makespan, idle %, peak vs budget, feasible, compile s, LB, gap.
std::string detail_table(const std::vector<CaseResult>& cases);
// Compile seconds of every generator on the largest pipeline of the run (R = 32, m = 256 in the
// full suite); empty when the run has no such case.
std::string large_case_compile_table(const std::vector<CaseResult>& cases, int ranks,
                                     int microbatches);

nlohmann::json to_json(const MethodResult& r);
nlohmann::json to_json(const CaseResult& c);

}  // namespace optpipe::bench

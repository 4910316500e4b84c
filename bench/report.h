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

// Issue 4's targets over a run, for the optimiser at one effort (docs/benchmarks.md).
struct TargetTally {
  int met = 0;
  int cases = 0;  // where the target applies
};
struct TargetTallies {
  double effort = 0;
  TargetTally never_worse_than_seed;  // every case with a seed
  TargetTally gap_at_four_ranks;      // gap to the lower bound at most 3%, R = 4
  // Idle time at most half the best published baseline's, at budgets of at most half of 1F1B's
  // peak where a baseline fits and idles.
  TargetTally half_the_idle_when_tight;
  // The same over the cases where it can be met: the least idle time any schedule can have on
  // some layout (R · LB less the work, where that holds) is at most half the baseline's.
  TargetTally half_the_idle_where_possible;
};
// One tally per effort of the run, smallest first.
std::vector<TargetTallies> tally_targets(const std::vector<CaseResult>& cases);
// The tallies as a table: a row per target, a column per effort.
std::string targets_table(const std::vector<TargetTallies>& tallies);

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
nlohmann::json to_json(const TargetTallies& t);

}  // namespace optpipe::bench

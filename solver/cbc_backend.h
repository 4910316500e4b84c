// Solving a LinearModel with COIN-OR CBC (docs/design.md §10): OsiClpSolverInterface + CbcModel
// driven by CbcMain1, with a MIP start, an incumbent callback and transitivity cuts at the root.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "solver/linear_model.h"

namespace optpipe {

struct CbcOptions {
  double time_limit_seconds = 60;
  int threads = 0;  // 0: serial (CBC's -threads 1 is one worker thread, not serial)
  bool verbose = false;
  // Asked after each node and incumbent (from CBC's threads): true stops the solve there, with
  // the best incumbent so far.
  std::function<bool()> stop_requested = nullptr;
  // Simplex iterations over the whole solve, root included, checked between nodes: with a serial
  // solve and no time limit reached, the result is the same on any machine (docs/design.md §10).
  int64_t max_iterations = INT32_MAX;
};

enum class SolveStatus { kOptimal, kFeasible, kInfeasible, kNoSolution };
const char* to_string(SolveStatus status);

struct SolveResult {
  SolveStatus status = SolveStatus::kNoSolution;
  std::vector<double> solution;  // empty without one
  double objective = 0;
  double bound = 0;  // CBC's best possible objective
  double seconds = 0;
  int nodes = 0;
  int64_t iterations = 0;  // simplex iterations, root included
  bool time_limit_reached = false;  // CBC stopped on time_limit_seconds
};

// Called with each better incumbent CBC finds (from CBC's threads, one call at a time).
using IncumbentCallback =
    std::function<void(const std::vector<double>& solution, double objective)>;

// Runs CBC on `model` starting from `start` (a feasible solution: CBC drops one that is not, which
// `verbose` reports on stderr). Preprocessing is off so that
// incumbents are in the model's own columns. One CBC run at a time per process (CbcMain1 is not
// re-entrant); calls are serialised.
SolveResult solve_with_cbc(const LinearModel& model, const std::vector<double>& start,
                           const CbcOptions& options, const IncumbentCallback& on_incumbent);

}  // namespace optpipe

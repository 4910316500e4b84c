#include "solver/cbc_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "CbcEventHandler.hpp"
#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "solver/transitivity_cut_generator.h"

namespace optpipe {

namespace {

std::mutex& cbc_mutex() {
  static std::mutex mutex;
  return mutex;
}

// CbcModel::specialOptions() bits. After reduced-cost fixing CBC may restart the search in a
// child model going for a complete search (log: "Reduced cost fixing - restarting search"); the
// parent then ends with its own older bound, not the child's. The heuristics' small searches
// inside that child inherit its bit, but are marked as small.
constexpr int kSmallBranchAndBound = 2048;
constexpr int kCompleteSearchChild = 67108864;
// CbcModel::addCutGenerator's frequency: in the root's rounds of cuts only. At every node as
// well, transitivity cuts slowed more proofs than they sped up (docs/solver.md).
constexpr int kAtRootOnly = -99;

// Keeps the best integer solution CBC reports, starting from the MIP start. CBC's own
// bestSolution() after CbcMain1 is not reliable (it can hold an LP solution), so the result is
// taken from here, and each vector is checked for integrality before it counts. Also keeps the
// bound a restarted search ends with. Stops the solve at any event once the caller asks it to.
class IncumbentTracker : public CbcEventHandler {
 public:
  IncumbentTracker(const LinearModel& model, std::vector<double> start,
                   const IncumbentCallback* callback, const std::function<bool()>* stop_requested)
      : state_(std::make_shared<State>()),
        model_data_(&model),
        callback_(callback),
        stop_requested_(stop_requested) {
    state_->best_objective = objective_of(start);
    state_->best = std::move(start);
  }

  CbcAction event(CbcEvent which) override {
    const CbcAction action = track(which);
    return action == noAction && *stop_requested_ && (*stop_requested_)() ? stop : action;
  }
  CbcEventHandler* clone() const override { return new IncumbentTracker(*this); }

  const std::vector<double>& best() const { return state_->best; }
  double best_objective() const { return state_->best_objective; }
  // The highest bound a restarted search ended with (-inf without one). It holds for solutions
  // better than that search's cutoff, the parent's incumbent, so it counts below the cutoff only.
  double restart_bound() const { return state_->restart_bound; }

 private:
  struct State {
    std::mutex mutex;
    std::vector<double> best;
    double best_objective = 0;
    double restart_bound = -std::numeric_limits<double>::infinity();
  };

  CbcAction track(CbcEvent which) {
    const int options = model_->specialOptions();
    if (which == endSearch && (options & kCompleteSearchChild) != 0 &&
        (options & kSmallBranchAndBound) == 0) {
      const double bound = std::min(model_->getBestPossibleObjValue(), model_->getCutoff());
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->restart_bound = std::max(state_->restart_bound, bound);
      return noAction;
    }
    if (which != solution && which != heuristicSolution) return noAction;
    // CBC's heuristics run sub-models (smallBranchAndBound) with this handler and columns of
    // their own; their solutions reach the main model, and this handler, afterwards.
    if (model_->getNumCols() != static_cast<int>(model_data_->columns.size())) return noAction;
    const double* x = model_->bestSolution();
    if (!x) return noAction;  // the MIP start's spurious first call
    std::vector<double> candidate(x, x + model_data_->columns.size());
    if (!integral(candidate)) return noAction;
    const double objective = objective_of(candidate);
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (objective >= state_->best_objective - 1e-9) return noAction;
    state_->best = candidate;
    state_->best_objective = objective;
    if (*callback_) (*callback_)(candidate, objective);
    return noAction;
  }

  double objective_of(const std::vector<double>& x) const {
    double value = 0;
    for (size_t j = 0; j < x.size(); ++j) value += model_data_->columns[j].objective * x[j];
    return value;
  }
  bool integral(std::vector<double>& x) const {
    for (size_t j = 0; j < x.size(); ++j) {
      if (!model_data_->columns[j].integer) continue;
      if (std::abs(x[j] - std::round(x[j])) > 1e-6) return false;
      x[j] = std::round(x[j]);
    }
    return true;
  }

  std::shared_ptr<State> state_;  // shared with the clones CBC makes for its threads
  const LinearModel* model_data_;
  const IncumbentCallback* callback_;
  const std::function<bool()>* stop_requested_;
};

// Rows with larger coefficients are divided by their largest: memory rows, which count bytes
// (about 1e9 per activation) beside start times of about 1e2. Unscaled, CBC 2.10 on two threads
// proved different optima of one whole-order model from run to run, all but one wrong (R = 4,
// m = 4, loop2, 50% of 1F1B's peak: 591.2, 592.1, 594.7, 598.2 against 589.2), and took 2-3x the
// nodes. Stating those rows in units of the budget instead left the search at 600-612.
constexpr double kLargestCoefficient = 1e6;

void load(const LinearModel& model, OsiClpSolverInterface& solver) {
  CoinPackedMatrix matrix(false, 0, 0);  // row ordered
  matrix.setDimensions(0, static_cast<int>(model.columns.size()));
  std::vector<double> row_lower, row_upper;
  for (const Row& row : model.rows) {
    std::vector<int> indices;
    std::vector<double> values;
    double largest = 0;
    for (const auto& [column, value] : row.terms) largest = std::max(largest, std::abs(value));
    const double scale = largest > kLargestCoefficient ? 1 / largest : 1;
    for (const auto& [column, value] : row.terms) {
      indices.push_back(column);
      values.push_back(value * scale);
    }
    matrix.appendRow(static_cast<int>(indices.size()), indices.data(), values.data());
    row_lower.push_back(std::isinf(row.lower) ? -COIN_DBL_MAX : row.lower * scale);
    row_upper.push_back(std::isinf(row.upper) ? COIN_DBL_MAX : row.upper * scale);
  }
  std::vector<double> col_lower, col_upper, objective;
  for (const Column& c : model.columns) {
    col_lower.push_back(c.lower);
    col_upper.push_back(std::isinf(c.upper) ? COIN_DBL_MAX : c.upper);
    objective.push_back(c.objective);
  }
  solver.loadProblem(matrix, col_lower.data(), col_upper.data(), objective.data(), row_lower.data(),
                     row_upper.data());
  for (size_t j = 0; j < model.columns.size(); ++j) {
    if (model.columns[j].integer) solver.setInteger(static_cast<int>(j));
    // Names on both columns and rows, or neither: CbcMain1 crashes with only column names.
    solver.setColName(static_cast<int>(j), model.columns[j].name);
  }
  for (size_t i = 0; i < model.rows.size(); ++i) {
    solver.setRowName(static_cast<int>(i),
                      model.rows[i].name.empty() ? fmt::format("r{}", i) : model.rows[i].name);
  }
}

}  // namespace

const char* to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::kOptimal:
      return "optimal";
    case SolveStatus::kFeasible:
      return "feasible";
    case SolveStatus::kInfeasible:
      return "infeasible";
    case SolveStatus::kNoSolution:
      return "no_solution";
  }
  return "?";
}

SolveResult solve_with_cbc(const LinearModel& model, const std::vector<double>& start,
                           const CbcOptions& options, const IncumbentCallback& on_incumbent) {
  const auto started = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> one_at_a_time(cbc_mutex());
  OsiClpSolverInterface solver;
  load(model, solver);
  if (!options.verbose) solver.messageHandler()->setLogLevel(0);
  // The root LP by dual simplex: CBC's -sec does not interrupt it, and Clp's primal stalled
  // there for minutes on the order model with activation choices (R = 4, m = 4, two chunks).
  solver.setHintParam(OsiDoDualInInitial, true, OsiHintDo);
  CbcModel cbc(solver);
  CbcMain0(cbc);
  if (!options.verbose) {
    cbc.setLogLevel(0);
    cbc.solver()->messageHandler()->setLogLevel(0);
  }
  if (options.verbose) {
    if (const auto violation = first_violation(model, start)) {
      fmt::print(stderr, "MIP start is not a solution of the model ({}): CBC starts without it\n",
                 *violation);
    }
  }
  std::vector<std::pair<std::string, double>> mip_start;
  for (size_t j = 0; j < model.columns.size(); ++j) {
    mip_start.emplace_back(model.columns[j].name, start[j]);
  }
  cbc.setMIPStart(mip_start);
  IncumbentTracker tracker(model, start, &on_incumbent, &options.stop_requested);
  cbc.passInEventHandler(&tracker);
  TransitivityCutGenerator transitivity(model);
  if (!model.orders.empty()) cbc.addCutGenerator(&transitivity, kAtRootOnly, "Transitivity");

  const std::string seconds = fmt::format("{:.3f}", std::max(0.05, options.time_limit_seconds));
  const std::string threads = std::to_string(options.threads);
  const std::string log = options.verbose ? "1" : "0";
  const char* argv[] = {"optpipe",     "-preprocess", "off",           "-presolve", "off",
                        "-timeMode",   "elapsed",     "-sec",          seconds.c_str(),
                        "-threads",    threads.c_str(),
                        "-log",        log.c_str(),   "-solve",        "-quit"};
  cbc.setMaximumNumberIterations(
      static_cast<int>(std::clamp<int64_t>(options.max_iterations, 0, INT32_MAX)));
  CbcMain1(static_cast<int>(std::size(argv)), argv, cbc);

  SolveResult result;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.nodes = cbc.getNodeCount();
  result.iterations = cbc.getIterationCount();
  result.time_limit_reached = cbc.isSecondsLimitReached();
  // The tracker saw every incumbent; pass on its best (clones share its state).
  const auto* tracked = dynamic_cast<const IncumbentTracker*>(cbc.getEventHandler());
  const IncumbentTracker& best = tracked ? *tracked : tracker;
  result.solution = best.best();
  result.objective = best.best_objective();
  result.bound =
      std::min(std::max(cbc.getBestPossibleObjValue(), best.restart_bound()), result.objective);
  if (cbc.isProvenOptimal()) {
    // The optimum's value bounds every solution; whether we hold it is the tracker's to say.
    result.bound = std::min(result.objective, cbc.getObjValue());
    result.status =
        result.objective <= result.bound + 1e-9 ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  } else if (cbc.isProvenInfeasible()) {
    result.status = SolveStatus::kInfeasible;  // only when the start was not feasible after all
    result.solution.clear();
  } else {
    result.status = SolveStatus::kFeasible;
  }
  return result;
}

}  // namespace optpipe

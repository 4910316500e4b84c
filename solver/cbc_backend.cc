#include "solver/cbc_backend.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <mutex>

#include "CbcEventHandler.hpp"
#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"

namespace optpipe {

namespace {

std::mutex& cbc_mutex() {
  static std::mutex mutex;
  return mutex;
}

class IncumbentHandler : public CbcEventHandler {
 public:
  IncumbentHandler(const IncumbentCallback* callback, int num_columns)
      : callback_(callback), num_columns_(num_columns) {}
  IncumbentHandler(const IncumbentHandler& other) = default;

  CbcAction event(CbcEvent which) override {
    if (which != solution && which != heuristicSolution) return noAction;
    const double* x = model_->bestSolution();
    // With a MIP start CBC makes one call before it has a solution (objective 1.8e308).
    if (!x || !*callback_ || model_->getObjValue() >= 1e300) return noAction;
    std::lock_guard<std::mutex> lock(mutex_);
    (*callback_)(std::vector<double>(x, x + num_columns_), model_->getObjValue());
    return noAction;
  }
  CbcEventHandler* clone() const override { return new IncumbentHandler(*this); }

 private:
  const IncumbentCallback* callback_;
  int num_columns_;
  static inline std::mutex mutex_;
};

void load(const LinearModel& model, OsiClpSolverInterface& solver) {
  CoinPackedMatrix matrix(false, 0, 0);  // row ordered
  matrix.setDimensions(0, static_cast<int>(model.columns.size()));
  std::vector<double> row_lower, row_upper;
  for (const Row& row : model.rows) {
    std::vector<int> indices;
    std::vector<double> values;
    for (const auto& [column, value] : row.terms) {
      indices.push_back(column);
      values.push_back(value);
    }
    matrix.appendRow(static_cast<int>(indices.size()), indices.data(), values.data());
    row_lower.push_back(std::isinf(row.lower) ? -COIN_DBL_MAX : row.lower);
    row_upper.push_back(std::isinf(row.upper) ? COIN_DBL_MAX : row.upper);
  }
  std::vector<double> col_lower, col_upper, objective;
  for (const Column& c : model.columns) {
    col_lower.push_back(c.lower);
    col_upper.push_back(std::isinf(c.upper) ? COIN_DBL_MAX : c.upper);
    objective.push_back(c.objective);
  }
  solver.loadProblem(matrix, col_lower.data(), col_upper.data(), objective.data(),
                     row_lower.data(), row_upper.data());
  for (size_t j = 0; j < model.columns.size(); ++j) {
    if (model.columns[j].integer) solver.setInteger(static_cast<int>(j));
    // Names on both columns and rows, or neither: CbcMain1 crashes with only column names.
    solver.setColName(static_cast<int>(j), model.columns[j].name);
  }
  for (size_t i = 0; i < model.rows.size(); ++i) {
    solver.setRowName(static_cast<int>(i), model.rows[i].name.empty() ? fmt::format("r{}", i)
                                                                       : model.rows[i].name);
  }
}

}  // namespace

const char* to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::kOptimal: return "optimal";
    case SolveStatus::kFeasible: return "feasible";
    case SolveStatus::kInfeasible: return "infeasible";
    case SolveStatus::kNoSolution: return "no_solution";
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
  CbcModel cbc(solver);
  CbcMain0(cbc);
  if (!options.verbose) {
    cbc.setLogLevel(0);
    cbc.solver()->messageHandler()->setLogLevel(0);
  }
  std::vector<std::pair<std::string, double>> mip_start;
  for (size_t j = 0; j < model.columns.size(); ++j) {
    mip_start.emplace_back(model.columns[j].name, start[j]);
  }
  cbc.setMIPStart(mip_start);
  IncumbentHandler handler(&on_incumbent, static_cast<int>(model.columns.size()));
  cbc.passInEventHandler(&handler);

  const std::string seconds = fmt::format("{:.3f}", std::max(0.05, options.time_limit_seconds));
  const std::string threads = std::to_string(options.threads);
  const std::string log = options.verbose ? "1" : "0";
  const char* argv[] = {"optpipe", "-preprocess", "off", "-timeMode", "elapsed", "-sec",
                        seconds.c_str(), "-threads", threads.c_str(), "-log", log.c_str(),
                        "-solve", "-quit"};
  CbcMain1(static_cast<int>(std::size(argv)), argv, cbc);

  SolveResult result;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.nodes = cbc.getNodeCount();
  result.bound = cbc.getBestPossibleObjValue();
  if (const double* x = cbc.bestSolution()) {
    result.solution.assign(x, x + model.columns.size());
    result.objective = cbc.getObjValue();
    result.status = cbc.isProvenOptimal() ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  } else if (cbc.isProvenInfeasible()) {
    result.status = SolveStatus::kInfeasible;
  }
  return result;
}

}  // namespace optpipe

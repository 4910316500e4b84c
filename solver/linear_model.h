// A mixed-integer linear model as plain data: what the model builders write and the CBC backend
// loads. Keeping it solver-neutral lets tests inspect a model without running a solver.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace optpipe {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Column {
  double lower = 0;
  double upper = kInf;
  double objective = 0;
  bool integer = false;
  std::string name;
};

struct Row {
  std::vector<std::pair<int, double>> terms;  // (column, coefficient)
  double lower = -kInf;
  double upper = kInf;
  std::string name;
};

// Makes a `>=` row hold only when `binary` is 1 (0 when `negated`): otherwise it is relaxed by
// `slack`, which must cover its largest violation.
inline void relax_unless(Row& row, int binary, bool negated, double slack) {
  row.terms.push_back({binary, negated ? slack : -slack});
  if (!negated) row.lower -= slack;
}

// Whether the binary `column` is 1 in `values`; false for -1 (no column).
inline bool is_one(const std::vector<double>& values, int column) {
  return column >= 0 && values[column] > 0.5;
}

// Whether one item runs before another: a binary column (its complement when `negated`) or, where
// the order is settled (column -1), the constant `value`.
struct OrderLiteral {
  int column = -1;
  bool negated = false;
  bool value = false;

  bool settled() const { return column < 0; }
  double at(const double* values) const {
    if (settled()) return value ? 1 : 0;
    return negated ? 1 - values[column] : values[column];
  }
};

// Adds `coefficient` * `literal` to `row`: its constant part (a settled order, or the 1 of a
// complement) to `constant`.
void add_literal(Row& row, double& constant, double coefficient, const OrderLiteral& literal);

// Items that run one at a time, with a literal per ordered pair: before[a * size + b] says that a
// runs before b (a != b). The model's rows make every integer solution order them transitively; its
// LP relaxation does not, which transitivity cuts tighten (solver/transitivity_cuts.h).
struct PairwiseOrder {
  int size = 0;
  std::vector<OrderLiteral> before;

  const OrderLiteral& literal(int a, int b) const { return before[a * size + b]; }
};

struct LinearModel {
  std::vector<Column> columns;
  std::vector<Row> rows;
  std::vector<PairwiseOrder> orders;  // e.g. one per rank: the compute ops it sequences

  int add_column(Column column) {
    columns.push_back(std::move(column));
    return static_cast<int>(columns.size()) - 1;
  }
  void add_row(Row row) { rows.push_back(std::move(row)); }
  int num_binaries() const {
    int n = 0;
    for (const Column& c : columns) n += c.integer;
    return n;
  }
};

// The first bound, integrality or row that `values` breaks beyond a relative tolerance of 1e-7,
// described in a few words; nullopt when `values` is a solution. CBC drops a MIP start that is not
// one ("mipstart values could not be used") and searches without an incumbent.
std::optional<std::string> first_violation(const LinearModel& model,
                                           const std::vector<double>& values);

}  // namespace optpipe

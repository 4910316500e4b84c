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

struct LinearModel {
  std::vector<Column> columns;
  std::vector<Row> rows;

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

// A mixed-integer linear model as plain data: what the model builders write and the CBC backend
// loads. Keeping it solver-neutral lets tests inspect a model without running a solver.
#pragma once

#include <limits>
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

}  // namespace optpipe

#include "solver/linear_model.h"

#include <fmt/format.h>

#include <cmath>

namespace optpipe {

void add_literal(Row& row, double& constant, double coefficient, const OrderLiteral& literal) {
  if (literal.settled()) {
    constant += literal.value ? coefficient : 0;
  } else if (literal.negated) {
    constant += coefficient;
    row.terms.push_back({literal.column, -coefficient});
  } else {
    row.terms.push_back({literal.column, coefficient});
  }
}

std::optional<std::string> first_violation(const LinearModel& model,
                                           const std::vector<double>& values) {
  auto slack = [](double bound) { return 1e-7 * (1 + std::abs(bound)); };
  for (size_t j = 0; j < model.columns.size(); ++j) {
    const Column& c = model.columns[j];
    const double x = values[j];
    if (x < c.lower - slack(c.lower) || x > c.upper + slack(c.upper) ||
        (c.integer && std::abs(x - std::round(x)) > 1e-9)) {
      return fmt::format("column {} = {} outside [{}, {}]", c.name, x, c.lower, c.upper);
    }
  }
  for (const Row& row : model.rows) {
    double value = 0;
    for (const auto& [column, coefficient] : row.terms) value += coefficient * values[column];
    if (value < row.lower - slack(row.lower) || value > row.upper + slack(row.upper)) {
      return fmt::format("row {} = {} outside [{}, {}]", row.name, value, row.lower, row.upper);
    }
  }
  return std::nullopt;
}

}  // namespace optpipe

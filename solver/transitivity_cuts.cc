#include "solver/transitivity_cuts.h"

#include <algorithm>

namespace optpipe {

std::vector<Row> violated_transitivity(const std::vector<PairwiseOrder>& orders,
                                       const double* values, double tolerance, size_t limit) {
  std::vector<std::pair<double, Row>> found;  // (violation, row)
  for (const PairwiseOrder& order : orders) {
    const int n = order.size;
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        const OrderLiteral& ab = order.literal(a, b);
        const double ab_value = ab.at(values);
        for (int c = b + 1; c < n; ++c) {
          const OrderLiteral& bc = order.literal(b, c);
          const OrderLiteral& ac = order.literal(a, c);
          if (ab.settled() && bc.settled() && ac.settled()) continue;
          const double sum = ab_value + bc.at(values) - ac.at(values);
          const double above = sum - 1;
          const double below = -sum;
          if (std::max(above, below) <= tolerance) continue;
          Row row;
          double constant = 0;
          add_literal(row, constant, 1, ab);
          add_literal(row, constant, 1, bc);
          add_literal(row, constant, -1, ac);
          if (above > tolerance) row.upper = 1 - constant;
          if (below > tolerance) row.lower = -constant;
          found.emplace_back(std::max(above, below), std::move(row));
        }
      }
    }
  }
  const size_t kept = std::min(limit, found.size());
  std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(kept), found.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<Row> rows;
  for (size_t i = 0; i < kept; ++i) rows.push_back(std::move(found[i].second));
  return rows;
}

}  // namespace optpipe

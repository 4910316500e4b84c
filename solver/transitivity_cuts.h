// Transitivity (triangle) cuts for the pairwise orders of a model (docs/design.md §6): of three
// items that run one at a time, a before b and b before c imply a before c. The order model's big-M
// rows enforce that at integer solutions only; its LP relaxation may order three ops in a cycle,
// which also lets its memory rows count an allocation as both before and after a release. The CBC
// backend asks for the violated ones instead of carrying every triple as a row (docs/design.md §10:
// all of them up front gave no gain and 4-8x the rows).
#pragma once

#include <vector>

#include "solver/linear_model.h"

namespace optpipe {

// For each triple a < b < c of an order: 0 <= [a before b] + [b before c] - [a before c] <= 1, the
// side that `values` breaks by more than `tolerance`, as a row over the columns (constants moved
// into its bounds); the most violated first, at most `limit` of them.
std::vector<Row> violated_transitivity(const std::vector<PairwiseOrder>& orders,
                                       const double* values, double tolerance, size_t limit);

}  // namespace optpipe

// Transitivity cuts: each one holds for every transitive order (it cuts off no schedule), and every
// order with a cycle of three breaks one (it tightens the LP where the big-M rows do not). CBC gets
// them from its cut generator, which stays silent on sub-models with columns of their own.
#include "solver/transitivity_cuts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "OsiClpSolverInterface.hpp"
#include "OsiCuts.hpp"
#include "solver/transitivity_cut_generator.h"

namespace optpipe {
namespace {

// A pairwise order of `n` items whose pairs a < b are open binaries (columns in pair order) or,
// where `settled` holds the pair, constants; literal(b, a) is the complement of literal(a, b).
PairwiseOrder order_of_pairs(int n, const std::vector<std::pair<int, int>>& settled = {},
                             const std::vector<int>& rank = {}) {
  PairwiseOrder order{n, std::vector<OrderLiteral>(static_cast<size_t>(n) * n)};
  int column = 0;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const bool fixed =
          std::find(settled.begin(), settled.end(), std::pair{a, b}) != settled.end();
      if (fixed) {
        const bool a_first = rank[a] < rank[b];
        order.before[a * n + b] = {-1, false, a_first};
        order.before[b * n + a] = {-1, false, !a_first};
      } else {
        order.before[a * n + b] = {column, false};
        order.before[b * n + a] = {column, true};
        ++column;
      }
    }
  }
  return order;
}

int columns_of(const PairwiseOrder& order) {
  int columns = 0;
  for (const OrderLiteral& l : order.before) columns = std::max(columns, l.column + 1);
  return columns;
}

// The column values of the order in which item i comes at position rank[i].
std::vector<double> values_of(const PairwiseOrder& order, const std::vector<int>& rank) {
  std::vector<double> values(columns_of(order));
  for (int a = 0; a < order.size; ++a) {
    for (int b = a + 1; b < order.size; ++b) {
      const OrderLiteral& l = order.literal(a, b);
      if (!l.settled()) values[l.column] = rank[a] < rank[b] ? 1 : 0;
    }
  }
  return values;
}

double activity(const Row& row, const std::vector<double>& values) {
  double sum = 0;
  for (const auto& [column, coefficient] : row.terms) sum += coefficient * values[column];
  return sum;
}

bool holds(const Row& row, const std::vector<double>& values) {
  const double a = activity(row, values);
  return a >= row.lower - 1e-9 && a <= row.upper + 1e-9;
}

TEST(TransitivityCuts, CutOffACycleOfThree) {
  const PairwiseOrder order = order_of_pairs(3);  // columns: (0,1), (0,2), (1,2)
  // 0 before 1, 1 before 2, 2 before 0.
  const std::vector<double> cycle = {1, 0, 1};
  const std::vector<Row> cuts = violated_transitivity({order}, cycle.data(), 1e-6, 10);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_FALSE(holds(cuts[0], cycle));
  // The other way round: 0 before 2, 2 before 1, 1 before 0.
  const std::vector<double> reverse = {0, 1, 0};
  const std::vector<Row> reverse_cuts = violated_transitivity({order}, reverse.data(), 1e-6, 10);
  ASSERT_EQ(reverse_cuts.size(), 1u);
  EXPECT_FALSE(holds(reverse_cuts[0], reverse));
  // A fractional point that orders no three items in a cycle beyond the tolerance has none.
  const std::vector<double> half = {0.5, 0.5, 0.5};
  EXPECT_TRUE(violated_transitivity({order}, half.data(), 1e-6, 10).empty());
}

// On random orders of 5 items, some pairs settled by a hidden order: every cut found at a random
// fractional point holds at every transitive order that agrees with the settled pairs, and every
// integer point with a cycle of three (and a transitive one never) gets a cut.
TEST(TransitivityCuts, HoldForEveryOrderAndCutEveryCycle) {
  std::mt19937 rng(11);
  const int n = 5;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> hidden(n);
    std::iota(hidden.begin(), hidden.end(), 0);
    std::shuffle(hidden.begin(), hidden.end(), rng);
    std::vector<std::pair<int, int>> settled;
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if (rng() % 3 == 0) settled.push_back({a, b});
      }
    }
    const PairwiseOrder order = order_of_pairs(n, settled, hidden);
    const int columns = columns_of(order);
    std::uniform_real_distribution<double> unit(0, 1);
    std::vector<double> point(columns);
    for (double& v : point) v = unit(rng);
    const std::vector<Row> cuts = violated_transitivity({order}, point.data(), 1e-6, 1000);
    for (const Row& cut : cuts) EXPECT_FALSE(holds(cut, point));

    std::vector<int> rank(n);
    std::iota(rank.begin(), rank.end(), 0);
    do {
      bool agrees = true;
      for (const auto& [a, b] : settled) agrees &= (rank[a] < rank[b]) == (hidden[a] < hidden[b]);
      if (!agrees) continue;
      const std::vector<double> values = values_of(order, rank);
      for (const Row& cut : cuts) EXPECT_TRUE(holds(cut, values));
      EXPECT_TRUE(violated_transitivity({order}, values.data(), 1e-6, 1000).empty());
    } while (std::next_permutation(rank.begin(), rank.end()));

    // Every integer point: a cut exactly where the literals form a cycle of three.
    for (int bits = 0; bits < (1 << columns); ++bits) {
      std::vector<double> values(columns);
      for (int c = 0; c < columns; ++c) values[c] = (bits >> c) & 1;
      bool cyclic = false;
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
          for (int c = 0; c < n; ++c) {
            if (a == b || b == c || a == c) continue;
            cyclic |= order.literal(a, b).at(values.data()) > 0.5 &&
                      order.literal(b, c).at(values.data()) > 0.5 &&
                      order.literal(c, a).at(values.data()) > 0.5;
          }
        }
      }
      EXPECT_EQ(!violated_transitivity({order}, values.data(), 1e-6, 1000).empty(), cyclic);
    }
  }
}

TEST(TransitivityCuts, KeepTheMostViolatedUpToTheLimit) {
  const PairwiseOrder order = order_of_pairs(4);
  // Columns (0,1) (0,2) (0,3) (1,2) (1,3) (2,3): a cycle 0 -> 1 -> 2 -> 0 at full strength,
  // 1 -> 2 -> 3 -> 1 at 0.3 beyond the bound.
  const std::vector<double> point = {1, 0, 0.5, 1, 0.1, 0.4};
  const std::vector<Row> all = violated_transitivity({order}, point.data(), 1e-6, 100);
  ASSERT_GE(all.size(), 2u);
  const std::vector<Row> one = violated_transitivity({order}, point.data(), 1e-6, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NEAR(activity(one[0], point), 2, 1e-9);  // 0->1 + 1->2 - 0->2 = 2 > 1
  EXPECT_EQ(one[0].upper, 1);
}

// An LP over `columns` columns in [0, 1] whose solution is `values` padded with zeros.
OsiClpSolverInterface lp_at(int columns, const std::vector<double>& values) {
  OsiClpSolverInterface solver;
  const std::vector<double> lower(columns, 0), upper(columns, 1), objective(columns, 0);
  CoinPackedMatrix matrix(false, 0, 0);
  matrix.setDimensions(0, columns);
  solver.loadProblem(matrix, lower.data(), upper.data(), objective.data(), nullptr, nullptr);
  std::vector<double> padded = values;
  padded.resize(columns, 0);
  solver.setColSolution(padded.data());
  return solver;
}

TEST(TransitivityCutGenerator, GivesCbcTheCycleCutOnlyOnTheModelsOwnColumns) {
  LinearModel model;
  for (int c = 0; c < 3; ++c) model.add_column({0, 1, 0, true, "y"});
  model.orders.push_back(order_of_pairs(3));  // columns: (0,1), (0,2), (1,2)
  TransitivityCutGenerator generator(model);
  const std::vector<double> cycle = {1, 0, 1};  // 0 -> 1 -> 2 -> 0

  OsiClpSolverInterface solver = lp_at(3, cycle);
  OsiCuts cuts;
  generator.generateCuts(solver, cuts, CglTreeInfo());
  ASSERT_EQ(cuts.sizeRowCuts(), 1);
  const OsiRowCut& cut = cuts.rowCut(0);
  EXPECT_GT(cut.violated(cycle.data()), 0.5);  // by 1: 1 + 1 - 0 > 1
  EXPECT_EQ(cut.ub(), 1);
  const std::vector<double> transitive = {1, 1, 1};  // 0 -> 1 -> 2, 0 -> 2
  EXPECT_EQ(cut.violated(transitive.data()), 0);

  // A sub-model of CBC's heuristics: four columns that are not the model's.
  OsiClpSolverInterface other = lp_at(4, cycle);
  OsiCuts none;
  generator.generateCuts(other, none, CglTreeInfo());
  EXPECT_EQ(none.sizeRowCuts(), 0);
}

}  // namespace
}  // namespace optpipe

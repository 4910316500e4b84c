// The part of an order the MILP re-decides (solver/milp_segment.h).
#include "solver/milp_segment.h"

#include <gtest/gtest.h>

#include "heuristics/one_f_one_b.h"
#include "tests/test_problems.h"

namespace optpipe {
namespace {

using testing::uniform_problem;

TEST(MilpSegment, BandIsClosedUnderPredecessors) {
  const Problem p = uniform_problem(4, 1, 8);
  const Order order = split_backward(one_f_one_b_order(p));
  const Segment band = microbatch_band(p, order, 3, 2);
  for (int r = 0; r < p.ranks; ++r) {
    EXPECT_LT(band.begin[r], band.end[r]);
    for (size_t i = band.begin[r]; i < band.end[r]; ++i) {
      // Nothing of microbatches 0..2 that a prefix op needs may sit in the band.
      EXPECT_GE(order.ranks[r][i].microbatch, 0);
    }
  }
  EXPECT_GT(band.size(), 0u);
  EXPECT_LT(band.size(), 3u * 4 * 8);
}

}  // namespace
}  // namespace optpipe

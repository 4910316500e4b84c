// The heads paced by memory (compiler/paced_heads.h), hand-computed where a rank's later stage
// holds memory that its earlier stage's Fs must wait behind.
#include "compiler/paced_heads.h"

#include <gtest/gtest.h>

#include "compiler/sequencing_bound.h"
#include "compiler/validator.h"
#include "tests/test_problems.h"

namespace optpipe {
namespace {

OpHeads zero_heads(const Problem& problem) {
  OpHeads heads;
  for (int s = 0; s < problem.num_stages(); ++s) {
    heads.forward.emplace_back(problem.microbatches, 0.0);
    heads.backward.emplace_back(problem.microbatches, 0.0);
    heads.weight.emplace_back(problem.microbatches, 0.0);
  }
  return heads;
}

// R = 2, v = 2 (rank 0 holds stages 0 and 2), m = 4, every op 1, A = 1000, G = 0, no link, room
// for two activations a rank. Were the k-th F(0) to start before the j-th F(2) (j < k), that F(2)
// would find k + 1 - j activations of stage 0 beside its own, which no release makes fit: so the
// first k F(2)s come first, and the k-th F(0) waits until 2k of the 3k activations then held are
// released by their Bs. These end at 6 (B(2) of microbatch 0), 8 (its B(0)), 12 and 14 (microbatch
// 1, six later), and so on: the k-th F(0) starts at 6k. Counting stage 0 alone, it would wait for
// the (k - 1)-th B(0) only: 8 for k = 2.
TEST(PacedHeads, ForwardsOfAnEarlierStageWaitForTheLaterStageTheyLetIn) {
  Problem p = testing::uniform_problem(2, 2, 4);
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 2000;
  const OpHeads heads = paced_heads(p, zero_heads(p));
  for (int k = 0; k < p.microbatches; ++k) {
    EXPECT_NEAR(heads.forward[0][k], 6 * k, 1e-9) << "k=" << k;
  }
  // Microbatch by microbatch through rank 0's two stages: the sequencing bound is the last F(0)
  // at 18 and its 9 to the end of its W(0), 27, which zb-auto's schedule meets within the budget.
  EXPECT_NEAR(sequencing_bound(p).value, 27, 1e-9);
  const testing::TimedSchedule zb = testing::run_generator("zb-auto", p);
  EXPECT_FALSE(validate(p, zb.schedule));
  EXPECT_NEAR(zb.metrics.makespan, 27, 1e-9);
}

}  // namespace
}  // namespace optpipe

// The heads paced by memory (bounds/paced_heads.h), hand-computed: where a rank's later stage
// holds memory that its earlier stage's Fs must wait behind, and where, in schedules of a given
// makespan, a forward fits at one moment, not at a later one, and again after that, on its rank
// and in its link group; where a link group's ranks must bring their activations back one at a
// time; and where an offload of a stage with little to move frees little.
#include "bounds/paced_heads.h"

#include <gtest/gtest.h>

#include <limits>

#include "bounds/sequencing_bound.h"
#include "tests/test_problems.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// The head of the k-th F of `stage`, paced from zero heads for schedules that end by `makespan`.
double paced_forward(const Problem& problem, int stage, int k,
                     double makespan = std::numeric_limits<double>::infinity()) {
  return paced_heads(problem, testing::zero_heads(problem), makespan).forward[stage][k];
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
  const OpHeads heads = paced_heads(p, testing::zero_heads(p));
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

// R = 2, v = 2 on the V-shape (rank 0 holds stages 0 and 3), m = 3, every op 1, A = O = 1000,
// G = 0, room for two activations on rank 0, a link that moves one in 10 each way. Were F(0, 1)
// to start before F(3, 0), rank 0 would hold three activations at F(3, 0), none past its B, so
// one away: F(0, 0)'s offload ends at 11 at the earliest. After F(3, 0) the rank still runs the
// three Fs of stage 3 and every B and W of both stages, 15 in all, so it starts by C - 15; its
// path to the end alone (F(3), the Bs down to stage 0, W(0)) leaves it until C - 6. At C = 25,
// then, F(3, 0) comes first, and F(0, 1) waits for B(3, 0) to free its activation, at 5. From
// C = 26 on F(0, 1) may come first (at C = 25 counting the path alone, it could too: at 11 one
// activation can be away, its reload and B(0), W(0) ending by 25).
TEST(PacedHeads, AForwardWaitsWhereTheRanksWorkAfterALaterStageLeavesItNoChoice) {
  Problem p = testing::uniform_problem(2, 2, 3, {}, PlacementKind::kVShape);
  p.budget_bytes[0] = p.static_bytes[0] + 2000;
  p.offload = OffloadLink{100, 100, ChannelMode::kDuplex, {0, 1}};
  EXPECT_NEAR(paced_forward(p, 0, 1), 1, 1e-9) << "any makespan";
  EXPECT_NEAR(paced_forward(p, 0, 1, 26), 1, 1e-9);
  EXPECT_NEAR(paced_forward(p, 0, 1, 25), 5, 1e-9);
}

// R = 2, v = 2 on the V-shape (rank 0 holds stages 0 and 3), m = 2, every op 1, G = 0, a link that
// moves 100 a unit each way. Stage 0: A = 1000, O = 200 (2 to move); stage 3: A = O = 600 (6 to
// move); rank 0 has room for 1500. F(3, 0) fits once F(0, 0)'s offload ends, at 3, where its
// F(2, 0) ends too. F(0, 1) needs 500 of F(0, 0)'s activation gone: an offload of stage 0 moves
// only 200, so it waits for B(0, 0), which ends at 8 (F(3, 0), then the Bs down to stage 0).
// Counted as freeing the rank's largest O, 600, the offload ended at 3 would let it start there.
TEST(PacedHeads, AnOffloadFreesNoMoreThanItsStageMoves) {
  Problem p = testing::uniform_problem(2, 2, 2, {}, PlacementKind::kVShape);
  p.stages[0].offloadable_bytes = 200;
  p.stages[3].activation_bytes = p.stages[3].offloadable_bytes = 600;
  p.budget_bytes[0] = p.static_bytes[0] + 1500;
  p.offload = OffloadLink{100, 100, ChannelMode::kDuplex, {0, 1}};
  EXPECT_NEAR(paced_forward(p, 3, 0), 3, 1e-9);
  EXPECT_NEAR(paced_forward(p, 0, 1), 8, 1e-9);
}

// R = 2, v = 1, m = 2. Stage 0 (rank 0): every op 1, A = O = 1000, G = 0, room for 1.5
// activations, a link that moves one in 2 each way. Stage 1 (rank 1): F = B = 10, W = 1. F(0, 1)
// needs one activation gone: F(0, 0)'s offload, ended at 3 at the earliest (a second offload
// ends at 5), or B(0, 0), which ends at 22. In schedules of makespan C an activation away at t
// comes back by a reload (2) and its B and W (2) follow, so at most floor((C - 4 - t) / 2) are
// away. At C = 8 (shorter than any schedule, as are many makespans the bound's bisection tries)
// one can be at 3 and none at 5, so the check fits at 3, fails at 5 and fits again from 22: the
// head is the first moment that fits, 3, where a bisection over the moments, taking the check to
// hold once it has held, lands on 22.
TEST(PacedHeads, WithAMakespanAForwardStartsAtTheFirstMomentItFits) {
  Problem p = testing::uniform_problem(2, 1, 2);
  p.stages[1] = {
      .forward = 10, .backward_input = 10, .backward_weight = 1, .activation_bytes = 100};
  p.stages[0].offloadable_bytes = p.stages[0].activation_bytes;
  p.budget_bytes[0] = p.static_bytes[0] + 1500;
  p.offload = OffloadLink{500, 500, ChannelMode::kDuplex, {0, 1}};
  EXPECT_NEAR(paced_forward(p, 0, 1), 3, 1e-9) << "any makespan";
  EXPECT_NEAR(paced_forward(p, 0, 1, 8), 3, 1e-9);
  // At C = 6 nothing can be away at 3 either: F(0, 1) waits for B(0, 0).
  EXPECT_NEAR(paced_forward(p, 0, 1, 6), 22, 1e-9);
}

// The same on two ranks that share one link: every op 1 but B(1) = 10, A = O = 1000, G = 0, room
// for 1.5 activations a rank, 2 to move one each way. When F(1, 1) starts, rank 1 holds two
// activations and rank 0 two of stage 0 (their microbatches passed it first), so each needs one
// away until B(1, 0) ends at 12: the shared channel's second offload ends at 5 at the earliest. At
// most floor((C - 12 - t) / 2) of rank 1's can be away at t (the reload, B(1), B(0) and W(0)
// follow), so at C = 19 rank 1 can have one away at 5 and none from 6 to 12: the group's check
// fits at 5, fails until 12 and fits from there. At C = 18 it fails at 5 too.
TEST(PacedHeads, WithAMakespanAForwardStartsAtTheFirstMomentItsLinkGroupFits) {
  Problem p = testing::uniform_problem(2, 1, 2);
  p.stages[1].backward_input = 10;
  for (int r = 0; r < p.ranks; ++r) {
    p.stages[r].offloadable_bytes = p.stages[r].activation_bytes;
    p.budget_bytes[r] = p.static_bytes[r] + 1500;
  }
  p.offload = OffloadLink{500, 500, ChannelMode::kDuplex, {0, 0}};
  EXPECT_NEAR(paced_forward(p, 1, 1), 5, 1e-9) << "any makespan";
  EXPECT_NEAR(paced_forward(p, 1, 1, 19), 5, 1e-9);
  EXPECT_NEAR(paced_forward(p, 1, 1, 18), 12, 1e-9);
}

// R = 3, v = 1, m = 2: every op 1 but B(2) = 10, A = O = 1000, G = 0. Ranks 0 and 1 have room for
// 1.5 activations and share one link (4 to move one each way); rank 2 has room for all. When
// F(1, 1) starts, rank 1 holds two activations and rank 0 two of stage 0, so each needs one away
// until B(1, 0) ends at 14. The shared channel's second offload ends at 9 at the earliest (F(0, 1)
// itself waits for the first, at 5). Both activations come back by reloads on the shared channel
// after F(1, 1) starts, 4 each: rank 1's by C - 3 (its B(1), B(0) and W(0) follow), rank 0's by
// C - 2. At 9 that takes C >= 19, though each rank alone could bring its own back by C = 16.
TEST(PacedHeads, ALinkGroupBringsItsActivationsBackOneAtATime) {
  Problem p = testing::uniform_problem(3, 1, 2);
  p.stages[2].backward_input = 10;
  for (int r = 0; r < 2; ++r) p.budget_bytes[r] = p.static_bytes[r] + 1500;
  p.offload = OffloadLink{250, 250, ChannelMode::kDuplex, {0, 0, 1}};
  EXPECT_NEAR(paced_forward(p, 1, 1), 9, 1e-9) << "any makespan";
  EXPECT_NEAR(paced_forward(p, 1, 1, 19), 9, 1e-9);
  EXPECT_NEAR(paced_forward(p, 1, 1, 18), 14, 1e-9);
  EXPECT_NEAR(paced_forward(p, 1, 1, 17), 14, 1e-9);
}

}  // namespace
}  // namespace optpipe

// The Zero Bubble authors' greedies as optpipe builds them (heuristics/zero_bubble_greedy.h,
// zero_bubble_v_greedy.h): the structure that makes ZB-H1 and ZB-V good, pinned as behaviour.
// ZB-H1 keeps 1F1B's peak (R activations on every rank, the Gs of waiting Ws counted) and its Ws
// fill the bubble down to (R - 1)(F + B - W); ZB-V's warm-up runs 2(R - r) - 1 first-chunk Fs on
// rank r and keeps 2R chunk activations; the V-Half and V-Min second pass keeps the block's peak;
// below 1F1B's memory the authors' search over building blocks beats V-Min.
#include <gtest/gtest.h>

#include <algorithm>

#include "heuristics/vshape_auto.h"
#include "heuristics/vshape_patterns.h"
#include "heuristics/vshape_reorder.h"
#include "heuristics/zero_bubble_greedy.h"
#include "heuristics/zero_bubble_v_greedy.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::uniform_problem;
using testing::UniformCosts;

// Activation bytes a rank holds at its worst, from its order alone.
int64_t peak_live(const Problem& p, const std::vector<OpRef>& ops) {
  int64_t live = 0;
  int64_t peak = 0;
  for (const OpRef& ref : ops) {
    const StageCosts& s = p.stages[ref.stage];
    if (ref.op == Op::kForward) live += s.activation_bytes;
    if (ref.op == Op::kBackwardInput) live -= s.activation_bytes - s.weight_grad_bytes;
    if (ref.op == Op::kBackwardWeight) live -= s.weight_grad_bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

void set_activation_budget(Problem& p, int64_t bytes) {
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + bytes;
}

struct Shape {
  int ranks;
  UniformCosts costs;
};

class ZbH1Shapes : public ::testing::TestWithParam<Shape> {};

// With the link free, ZB-H1's Ws close the bubble to (R - 1)(F + B - W), at 1F1B's memory.
TEST_P(ZbH1Shapes, FillsTheBubbleWithWsAtOneFOneBMemory) {
  const Shape& c = GetParam();
  const int m = 3 * c.ranks;
  Problem p = uniform_problem(c.ranks, 1, m, c.costs);
  const int64_t one_f_one_b = c.ranks * c.costs.activation_bytes;
  set_activation_budget(p, one_f_one_b);
  const testing::TimedSchedule h1 = testing::run_generator("zb-h1", p);
  const auto violation = validate(p, h1.schedule);
  ASSERT_FALSE(violation) << violation->message;
  const UniformCosts& t = c.costs;
  EXPECT_NEAR(h1.metrics.makespan,
              m * (t.forward + t.backward_input + t.backward_weight) +
                  (c.ranks - 1) * (t.forward + t.backward_input - t.backward_weight),
              1e-9);
  std::vector<int64_t> limits(p.ranks, one_f_one_b);
  const std::optional<Order> order = best_zero_bubble_greedy_order(p, limits);
  ASSERT_TRUE(order);
  for (int r = 0; r < p.ranks; ++r) EXPECT_LE(peak_live(p, order->ranks[r]), one_f_one_b);
}

UniformCosts costs(double f, double b, double w, int64_t g) {
  UniformCosts c;
  c.forward = f;
  c.backward_input = b;
  c.backward_weight = w;
  c.weight_grad_bytes = g;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Uniform, ZbH1Shapes,
                         ::testing::Values(Shape{4, costs(1, 1, 1, 0)}, Shape{8, costs(1, 1, 1, 400)},
                                           Shape{4, costs(5, 6, 4, 366)},
                                           Shape{8, costs(5, 6, 4, 366)}));

// A limit below one microbatch's activation cannot be held: no order rather than a wrong one.
TEST(ZeroBubbleGreedy, RefusesALimitItCannotHold) {
  Problem p = uniform_problem(4, 1, 8);
  EXPECT_FALSE(best_zero_bubble_greedy_order(p, std::vector<int64_t>(4, 999)));
}

class ZbVShapes : public ::testing::TestWithParam<Shape> {};

// Rank r's warm-up runs 2(R - r) - 1 Fs of its first chunk before its second chunk's first F, and
// every rank holds at most 2R chunk activations (1F1B's peak).
TEST_P(ZbVShapes, WarmUpDepthAndPeak) {
  const Shape& c = GetParam();
  Problem p = uniform_problem(c.ranks, 2, 3 * c.ranks, c.costs, PlacementKind::kVShape, 0.3);
  const int64_t limit = 2 * c.ranks * c.costs.activation_bytes;
  const std::optional<Order> order =
      best_zero_bubble_v_greedy_order(p, std::vector<int64_t>(p.ranks, limit));
  ASSERT_TRUE(order);
  for (int r = 0; r < p.ranks; ++r) {
    int first_chunk = 0;
    for (const OpRef& ref : order->ranks[r]) {
      if (ref.op != Op::kForward) continue;
      if (ref.stage != r) break;
      ++first_chunk;
    }
    EXPECT_EQ(first_chunk, 2 * (p.ranks - r) - 1) << "rank " << r;
    EXPECT_LE(peak_live(p, order->ranks[r]), limit) << "rank " << r;
  }
  const Schedule timed = simulate(p, *order, "zb-v");
  const auto violation = validate(p, timed);
  EXPECT_FALSE(violation) << violation->message;
}

INSTANTIATE_TEST_SUITE_P(Uniform, ZbVShapes,
                         ::testing::Values(Shape{4, costs(1, 1, 1, 0)},
                                           Shape{6, costs(5, 6, 4, 366)},
                                           Shape{8, costs(5, 5, 2.5, 366)}));

// The zb-v generator keeps the authors' order where it is the faster candidate: with equal F, B
// and W and no latency, every rank is busy from its first F to its last W but for the warm-up
// and the cool-down, a bubble well under one F per rank.
TEST(ZeroBubbleVGreedy, GeneratorIsNearlyBubbleFree) {
  Problem p = uniform_problem(8, 2, 24, costs(1, 1, 1, 0), PlacementKind::kVShape);
  set_activation_budget(p, 16 * 1000);
  const testing::TimedSchedule zb_v = testing::run_generator("zb-v", p);
  ASSERT_FALSE(validate(p, zb_v.schedule));
  const double work = 24 * 2 * 3;
  EXPECT_LE(zb_v.metrics.makespan, work + 8 * 1.0 + 1e-9);
}

// V-Half and V-Min as the authors' runtime builds them: the repeated block, then a reordering
// pass over warm-up and cool-down with the Ws, and a second over the cool-down without them. Held
// to the block's peak (an activation held until its W: G = A), the passes only remove idle time:
// never slower than the block squeezed once, never above its peak.
TEST(VShapeReorder, SecondPassKeepsThePeakAndRemovesIdleTime) {
  for (int ranks : {3, 4, 6, 8}) {
    for (VShapePattern pattern : {VShapePattern::kHalf, VShapePattern::kMin}) {
      const Problem p = uniform_problem(ranks, 2, 3 * ranks, costs(1, 1, 1, 1000),
                                        PlacementKind::kVShape, 0.25);
      const std::optional<Order> authors = vshape_reordered_pattern_order(p, pattern);
      ASSERT_TRUE(authors);
      const Order block = vshape_pattern_order(p, pattern, false);
      const Order once = vshape_pattern_order(p, pattern, true);
      int64_t block_peak = 0;
      int64_t authors_peak = 0;
      for (int r = 0; r < ranks; ++r) {
        block_peak = std::max(block_peak, peak_live(p, block.ranks[r]));
        authors_peak = std::max(authors_peak, peak_live(p, authors->ranks[r]));
      }
      EXPECT_LE(authors_peak, block_peak) << "R=" << ranks;
      const Schedule timed = simulate(p, *authors, "authors");
      EXPECT_FALSE(validate(p, timed));
      EXPECT_LE(makespan_of(timed), makespan_of(simulate(p, once, "once")) + 1e-9)
          << "R=" << ranks << (pattern == VShapePattern::kHalf ? " half" : " min");
    }
  }
}

// Below 1F1B's memory the ZB-V greedy cannot start; the authors' search over building blocks
// finds a schedule within the limit (chunk activations held until their W, G = A here), no slower
// than V-Min's fixed block (faster at R = 8), and zb-auto keeps it.
TEST(VShapeAuto, HalfOfOneFOneBMemoryBeatsVMin) {
  for (int ranks : {4, 8}) {
    Problem p = uniform_problem(ranks, 2, 4 * ranks, costs(1, 1, 1, 1000), PlacementKind::kVShape);
    set_activation_budget(p, ranks * 1000);  // R chunk activations: half of 1F1B's 2R
    EXPECT_EQ(chunk_activations_within_budget(p), ranks);
    EXPECT_FALSE(best_zero_bubble_v_greedy_order(p, std::vector<int64_t>(ranks, ranks * 1000)));
    const std::optional<Order> blocks = vshape_auto_order(p, ranks);
    ASSERT_TRUE(blocks);
    for (int r = 0; r < ranks; ++r) EXPECT_LE(peak_live(p, blocks->ranks[r]), ranks * 1000);
    const Schedule timed = simulate(p, *blocks, "v-auto");
    const auto violation = validate(p, timed);
    ASSERT_FALSE(violation) << violation->message;
    const testing::TimedSchedule v_min = testing::run_generator("v-min", p);
    EXPECT_LE(makespan_of(timed), v_min.metrics.makespan) << "R=" << ranks;
    if (ranks == 8) {
      EXPECT_LT(makespan_of(timed), v_min.metrics.makespan);
    }
    const testing::TimedSchedule zb_auto = testing::run_generator("zb-auto", p);
    EXPECT_LE(zb_auto.metrics.makespan, makespan_of(timed) + 1e-9) << "R=" << ranks;
  }
}

// A limit under the smallest block's peak leaves no candidate: no order rather than one over it.
TEST(VShapeAuto, NoBlockUnderTheSmallestPeak) {
  const Problem p = uniform_problem(4, 2, 16, costs(1, 1, 1, 1000), PlacementKind::kVShape);
  EXPECT_FALSE(vshape_auto_order(p, 1));
}

}  // namespace
}  // namespace optpipe

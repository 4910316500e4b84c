// The heads raised by their rank's load (bounds/rank_load_heads.h): hand-computed on one rank,
// where the dependencies alone leave them early, and never later than a schedule starts the op.
#include "bounds/rank_load_heads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "heuristics/registry.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"

namespace optpipe {
namespace {

// One rank, one stage, m = 3, T_F = 1, T_B = 2, T_W = 1. Before the k-th B the rank has run k + 1
// Fs and k Bs: 3k + 1; before the k-th W, k + 1 Fs and Bs and k Ws: 4k + 3. The k-th F follows k
// Fs: k.
TEST(RankLoadHeads, ARankRunsWhatComesBeforeAnOpOneAtATime) {
  Problem p = testing::uniform_problem(1, 1, 3, {1, 2, 1});
  OpHeads heads = testing::zero_heads(p);
  EXPECT_TRUE(raise_by_rank_load(p, heads));
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(::testing::Message() << "k=" << k);
    EXPECT_DOUBLE_EQ(heads.forward[0][k], k);
    EXPECT_DOUBLE_EQ(heads.backward[0][k], 3 * k + 1);
    EXPECT_DOUBLE_EQ(heads.weight[0][k], 4 * k + 3);
  }
  EXPECT_FALSE(raise_by_rank_load(p, heads));  // settled
}

// Releases count: a rank whose Fs cannot start before 10 runs them from there, and its first B
// (after both Fs of its two stages) starts no earlier than 12.
TEST(RankLoadHeads, OpsWaitForTheirPredecessorsHeads) {
  Problem p = testing::uniform_problem(1, 2, 1);  // one rank, stages 0 and 1, every op 1
  OpHeads heads = testing::zero_heads(p);
  heads.forward[0][0] = 10;
  heads.forward[1][0] = 10;
  raise_by_rank_load(p, heads);
  EXPECT_DOUBLE_EQ(heads.forward[1][0], 11);  // after F(0)
  EXPECT_DOUBLE_EQ(heads.backward[1][0], 12);
  EXPECT_DOUBLE_EQ(heads.backward[0][0], 13);  // after both Fs and B(1)
  EXPECT_DOUBLE_EQ(heads.weight[0][0], 14);
}

// When a schedule starts the k-th F, B and W of each stage: the split W of a fused BW starts T_B
// after it.
OpHeads schedule_starts(const Problem& problem, const Schedule& schedule) {
  OpHeads starts;
  starts.forward.resize(problem.num_stages());
  starts.backward.resize(problem.num_stages());
  starts.weight.resize(problem.num_stages());
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      const int s = a.ref.stage;
      if (a.ref.op == Op::kForward) starts.forward[s].push_back(a.start);
      if (is_input_backward(a.ref.op)) starts.backward[s].push_back(a.start);
      if (a.ref.op == Op::kBackwardWeight) starts.weight[s].push_back(a.start);
      if (a.ref.op == Op::kBackward) {
        starts.weight[s].push_back(a.start + problem.stages[s].backward_input);
      }
    }
  }
  for (auto* family : {&starts.forward, &starts.backward, &starts.weight}) {
    for (std::vector<double>& stage : *family) std::sort(stage.begin(), stage.end());
  }
  return starts;
}

// On random problems, the k-th op of each family in a generator's schedule starts no earlier than
// the heads raised from the schedule's own first start.
TEST(RankLoadHeads, NoScheduleStartsAnOpBeforeItsLoadHead) {
  std::mt19937 rng(29);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Problem p = testing::random_problem(rng);
    OpHeads heads = testing::zero_heads(p);
    raise_by_rank_load(p, heads);
    for (const Generator& generator : generators()) {
      if (!generator.unsupported_reason(p).empty()) continue;
      const Schedule schedule = simulate(p, generator.build(p), std::string(generator.name));
      const OpHeads starts = schedule_starts(p, schedule);
      for (int s = 0; s < p.num_stages(); ++s) {
        for (auto [start, head] : {std::pair{&starts.forward[s], &heads.forward[s]},
                                   std::pair{&starts.backward[s], &heads.backward[s]},
                                   std::pair{&starts.weight[s], &heads.weight[s]}}) {
          ASSERT_EQ(start->size(), head->size());
          for (size_t k = 0; k < start->size(); ++k) {
            EXPECT_GE((*start)[k] + 1e-9, (*head)[k]) << generator.name << " stage " << s;
          }
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace optpipe

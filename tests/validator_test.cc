// The validator finds each kind of violation, and names it.
#include "timing/validator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "heuristics/one_f_one_b.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {
namespace {

using testing::uniform_problem;

Action& find(Schedule& s, OpRef ref) {
  for (auto& actions : s.ranks) {
    for (Action& a : actions) {
      if (a.ref == ref) return a;
    }
  }
  throw std::runtime_error("missing " + describe(ref));
}

// After retiming actions: each rank's list in the order they now run (by start, compute before
// transfers at equal starts), as a writer would list them.
void relist(Schedule& s) {
  for (auto& actions : s.ranks) {
    std::stable_sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
      return a.start < b.start ||
             (a.start == b.start && is_compute(a.ref.op) && is_transfer(b.ref.op));
    });
  }
}

std::string violation_of(const Problem& p, const Schedule& s) {
  const auto v = validate(p, s);
  return v ? v->message : "OK";
}

class ValidatorTest : public ::testing::Test {
 protected:
  Problem problem_ = uniform_problem(3, 1, 4);
  Schedule schedule_ = simulate(problem_, one_f_one_b_order(problem_), "1f1b");
};

TEST_F(ValidatorTest, AcceptsASimulatedSchedule) {
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
}

TEST_F(ValidatorTest, FindsAMissingOp) {
  schedule_.ranks[1].pop_back();
  EXPECT_NE(violation_of(problem_, schedule_).find("needs B and W once each, or BW once"),
            std::string::npos);
}

TEST_F(ValidatorTest, FindsADuplicatedForward) {
  schedule_.ranks[0].push_back(schedule_.ranks[0].front());
  EXPECT_NE(violation_of(problem_, schedule_).find("F appears 2 times"), std::string::npos);
}

TEST_F(ValidatorTest, FindsABrokenDependency) {
  Action& f = find(schedule_, {Op::kForward, 2, 3});
  f.start -= 0.5;
  f.end -= 0.5;
  EXPECT_NE(violation_of(problem_, schedule_).find("F(s2, mb3) starts at"), std::string::npos);
}

TEST_F(ValidatorTest, FindsMissingP2pLatency) {
  problem_.p2p_latency = 0.25;  // the schedule was timed without it
  EXPECT_NE(violation_of(problem_, schedule_).find("plus p2p latency 0.25"), std::string::npos);
}

TEST_F(ValidatorTest, FindsOverlappingComputeOnARank) {
  // Rank 0's last op pulled back onto its previous one: dependencies still hold.
  Action& last = schedule_.ranks[0].back();
  const Action& before = schedule_.ranks[0][schedule_.ranks[0].size() - 2];
  const double shift = last.start - before.start - 0.1;
  last.start -= shift;
  last.end -= shift;
  const std::string message = violation_of(problem_, schedule_);
  EXPECT_TRUE(message.find("rank 0 compute") != std::string::npos ||
              message.find("starts at") != std::string::npos)
      << message;
}

// An op of no duration that starts with the next op on its rank runs before it: no overlap.
TEST(ValidatorEdges, AcceptsOpsOfNoDurationBesideTheNext) {
  const Problem p = uniform_problem(1, 1, 2, {0, 1, 1});
  EXPECT_EQ(violation_of(p, simulate(p, one_f_one_b_order(p), "1f1b")), "OK");
}

// The listed order is what runtimes run: a reversed list would run W and B before any F.
TEST_F(ValidatorTest, FindsARankListedOutOfOrder) {
  std::reverse(schedule_.ranks[1].begin(), schedule_.ranks[1].end());
  EXPECT_NE(violation_of(problem_, schedule_).find("is listed after"), std::string::npos)
      << violation_of(problem_, schedule_);
}

// An op of no duration shares its start with the op that needs it: the list says which runs
// first, and it must be the one that is needed.
TEST(ValidatorEdges, FindsAnOpListedBeforeAnOpOfNoDurationItNeeds) {
  const Problem p = uniform_problem(1, 1, 2, {0, 1, 1});
  Schedule schedule = simulate(p, one_f_one_b_order(p), "1f1b");
  auto& actions = schedule.ranks[0];
  ASSERT_EQ(actions[0].ref, (OpRef{Op::kForward, 0, 0}));
  ASSERT_EQ(actions[1].ref, (OpRef{Op::kBackward, 0, 0}));
  ASSERT_EQ(actions[1].start, actions[0].start);  // F took no time
  std::swap(actions[0], actions[1]);
  EXPECT_EQ(violation_of(p, schedule),
            "rank 0: BW(s0, mb0) is listed before F(s0, mb0), which "
            "it depends on");
}

// With every op time 0 an activation lives for no time at all, and still counts.
TEST(ValidatorEdges, ActivationsOfOpsOfNoDurationCount) {
  Problem p = uniform_problem(1, 1, 2, {0, 0, 0});
  const Schedule schedule = simulate(p, one_f_one_b_order(p), "1f1b");
  p.budget_bytes[0] = p.static_bytes[0] + p.stages[0].activation_bytes / 2;
  EXPECT_NE(violation_of(p, schedule).find("rank 0: memory"), std::string::npos)
      << violation_of(p, schedule);
  EXPECT_GE(compute_metrics(p, schedule).ranks[0].peak_bytes,
            p.static_bytes[0] + p.stages[0].activation_bytes);
}

// Times far beyond any profile's: a tolerance relative to them would swallow a whole op.
TEST_F(ValidatorTest, FindsTimesBeyondTheLargestAProfileAllows) {
  Action& w = schedule_.ranks[0].back();
  w.start = w.end = 1e308;
  EXPECT_NE(violation_of(problem_, schedule_).find("bad times"), std::string::npos);
  w.start = w.end = 1e11;  // within range, but it lasts 0, not its duration
  EXPECT_NE(violation_of(problem_, schedule_).find("lasts 0"), std::string::npos)
      << violation_of(problem_, schedule_);
}

// At 3·10^10 a time carries a rounding of 4·10^-6: a short op's two times miss its duration by
// more than a tolerance taken at the duration's own magnitude.
TEST(ValidatorEdges, ToleratesTheRoundingOfLateTimes) {
  const Problem p = uniform_problem(1, 1, 1, {3e10, 0.0286, 1});
  EXPECT_EQ(violation_of(p, simulate(p, one_f_one_b_order(p), "1f1b")), "OK");
}

TEST_F(ValidatorTest, FindsAWrongDuration) {
  find(schedule_, {Op::kBackward, 1, 2}).end += 1;
  EXPECT_NE(violation_of(problem_, schedule_).find("the profile says 2"), std::string::npos);
}

TEST_F(ValidatorTest, FindsAnOpOnTheWrongRank) {
  schedule_.ranks[1].push_back(schedule_.ranks[0].back());
  schedule_.ranks[0].pop_back();
  EXPECT_NE(violation_of(problem_, schedule_).find("runs on rank 0"), std::string::npos);
}

TEST_F(ValidatorTest, FindsMemoryOverBudget) {
  // 1F1B holds 3 activations on rank 0; allow only 2.
  problem_.budget_bytes[0] = problem_.static_bytes[0] + 2 * problem_.stages[0].activation_bytes;
  EXPECT_NE(violation_of(problem_, schedule_).find("rank 0: memory"), std::string::npos);
  problem_.budget_bytes[0] += problem_.stages[0].activation_bytes;
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
}

class TransferValidatorTest : public ::testing::Test {
 protected:
  TransferValidatorTest() {
    OffloadLink link;
    link.d2h_bytes_per_time = 1000;
    link.h2d_bytes_per_time = 1000;
    link.channels = ChannelMode::kShared;
    link.link_group_of_rank = {0};
    problem_.offload = link;
    Order order{{{{Op::kForward, 0, 0},
                  {Op::kOffload, 0, 0},
                  {Op::kForward, 0, 1},
                  {Op::kOffload, 0, 1},
                  {Op::kForward, 0, 2},
                  {Op::kReload, 0, 0},
                  {Op::kBackward, 0, 0},
                  {Op::kReload, 0, 1},
                  {Op::kBackward, 0, 1},
                  {Op::kBackward, 0, 2}}}};
    schedule_ = simulate(problem_, order, "offload");
  }
  Problem problem_ = uniform_problem(1, 1, 3);
  Schedule schedule_;
};

TEST_F(TransferValidatorTest, AcceptsTheSimulatedOffloads) {
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
}

TEST_F(TransferValidatorTest, OffloadFreesMemoryUntilItsReload) {
  // Without offload 3 activations would be live; with it at most 2 are at any time.
  problem_.budget_bytes[0] = problem_.static_bytes[0] + 2 * problem_.stages[0].activation_bytes;
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
  problem_.budget_bytes[0] -= 1;
  EXPECT_NE(violation_of(problem_, schedule_).find("exceeds the budget"), std::string::npos);
}

TEST_F(TransferValidatorTest, FindsOverlappingTransfersOnASharedChannel) {
  Action& second = find(schedule_, {Op::kOffload, 0, 1});
  const Action& first = find(schedule_, {Op::kOffload, 0, 0});
  const double shift = second.start - first.start - 0.5;
  second.start -= shift;
  second.end -= shift;
  relist(schedule_);
  const std::string message = violation_of(problem_, schedule_);
  EXPECT_TRUE(message.find("copy channel 0") != std::string::npos ||
              message.find("starts at") != std::string::npos)
      << message;
}

TEST_F(TransferValidatorTest, FindsAReloadThatEndsAfterItsBackwardStarts) {
  Action& reload = find(schedule_, {Op::kReload, 0, 1});
  const Action& backward = find(schedule_, {Op::kBackward, 0, 1});
  const double shift = backward.start - reload.end + 0.5;
  reload.start += shift;
  reload.end += shift;
  EXPECT_NE(violation_of(problem_, schedule_).find("BW(s0, mb1) starts at"), std::string::npos);
}

TEST_F(TransferValidatorTest, FindsAnOffloadWithoutReload) {
  auto& actions = schedule_.ranks[0];
  std::erase_if(actions, [](const Action& a) { return a.ref == OpRef{Op::kReload, 0, 0}; });
  EXPECT_NE(violation_of(problem_, schedule_).find("needs one RELOAD per OFFLOAD"),
            std::string::npos);
}

// 1F1B on 4 ranks recomputing every activation: F keeps 100 of its 1000 bytes, R brings 900 back.
class RecomputeValidatorTest : public ::testing::Test {
 protected:
  static constexpr int64_t kCheckpoint = 100;
  Problem problem_ = uniform_problem(4, 1, 8);
  Schedule schedule_ = testing::recomputing_1f1b(problem_, kCheckpoint);

  void set_activation_budget(int64_t bytes) {
    for (int r = 0; r < problem_.ranks; ++r) {
      problem_.budget_bytes[r] = problem_.static_bytes[r] + bytes;
    }
  }
};

TEST_F(RecomputeValidatorTest, AcceptsTheSimulatedRecomputes) {
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
}

TEST_F(RecomputeValidatorTest, OnlyRecomputeFitsABudgetPlain1F1BExceeds) {
  // Rank 0 keeps 3 checkpoints while an F (or 4 while an R) holds a whole activation: 1300 bytes.
  // Plain 1F1B holds 4 whole activations there: 4000.
  const int64_t A = problem_.stages[0].activation_bytes;
  set_activation_budget(3 * kCheckpoint + A);
  EXPECT_EQ(violation_of(problem_, schedule_), "OK");
  EXPECT_EQ(compute_metrics(problem_, schedule_).ranks[0].peak_bytes, problem_.budget_bytes[0]);
  const Schedule plain = simulate(problem_, one_f_one_b_order(problem_), "1f1b");
  EXPECT_NE(violation_of(problem_, plain).find("rank 0: memory"), std::string::npos);
  set_activation_budget(3 * kCheckpoint + A - 1);
  EXPECT_NE(violation_of(problem_, schedule_).find("exceeds the budget"), std::string::npos);
}

TEST_F(RecomputeValidatorTest, FindsABackwardThatStartsBeforeItsRecomputeEnds) {
  Action& recompute = find(schedule_, {Op::kRecompute, 3, 2});
  const Action& backward = find(schedule_, {Op::kBackward, 3, 2});
  const double shift = backward.start - recompute.end + 0.5;
  recompute.start += shift;
  recompute.end += shift;
  EXPECT_NE(violation_of(problem_, schedule_).find("BW(s3, mb2) starts at"), std::string::npos)
      << violation_of(problem_, schedule_);
}

TEST_F(RecomputeValidatorTest, FindsARecomputeBeforeItsForwardEnds) {
  Action& recompute = find(schedule_, {Op::kRecompute, 1, 5});
  const Action& forward = find(schedule_, {Op::kForward, 1, 5});
  const double shift = recompute.start - forward.start;
  recompute.start -= shift;
  recompute.end -= shift;
  relist(schedule_);
  EXPECT_NE(violation_of(problem_, schedule_).find("R(s1, mb5) starts at"), std::string::npos)
      << violation_of(problem_, schedule_);
}

TEST_F(RecomputeValidatorTest, FindsARecomputeOnAStageWithoutCheckpointBytes) {
  problem_.stages[2].checkpoint_bytes.reset();
  EXPECT_NE(violation_of(problem_, schedule_)
                .find("stage 2 cannot recompute: the profile gives it no checkpoint_bytes; set "
                      "checkpoint_bytes for it"),
            std::string::npos)
      << violation_of(problem_, schedule_);
}

TEST_F(RecomputeValidatorTest, FindsARecomputeTwice) {
  schedule_.ranks[0].push_back(find(schedule_, {Op::kRecompute, 0, 4}));
  EXPECT_NE(violation_of(problem_, schedule_)
                .find("stage 0 microbatch 4: R appears 2 times, expected at most once"),
            std::string::npos);
}

TEST_F(RecomputeValidatorTest, FindsAnActivationBothOffloadedAndRecomputed) {
  problem_.offload = OffloadLink{1000, 1000, ChannelMode::kDuplex, {0, 1, 2, 3}};
  const Action forward = find(schedule_, {Op::kForward, 0, 0});  // a copy: push_back reallocates
  const int64_t bytes = problem_.stages[0].offloadable_bytes;
  schedule_.ranks[0].push_back({{Op::kOffload, 0, 0}, forward.end, forward.end + 1, bytes});
  schedule_.ranks[0].push_back({{Op::kReload, 0, 0}, forward.end + 1, forward.end + 2, bytes});
  EXPECT_NE(
      violation_of(problem_, schedule_).find("stage 0 microbatch 0: both offloaded and recomputed"),
      std::string::npos)
      << violation_of(problem_, schedule_);
}

TEST(RecomputeMemory, RecomputeAllocatesAtItsStart) {
  // One rank: F0 F1 keep 100 bytes each; R0 and R1 bring 900 each back before either backward.
  testing::UniformCosts costs;
  costs.checkpoint_bytes = 100;
  Problem problem = uniform_problem(1, 1, 2, costs);
  Order order{{{{Op::kForward, 0, 0},
                {Op::kForward, 0, 1},
                {Op::kRecompute, 0, 0},
                {Op::kRecompute, 0, 1},
                {Op::kBackward, 0, 0},
                {Op::kBackward, 0, 1}}}};
  const Schedule schedule = simulate(problem, order, "recompute-early");
  problem.budget_bytes[0] = problem.static_bytes[0] + 2000;
  EXPECT_EQ(violation_of(problem, schedule), "OK");
  problem.budget_bytes[0] -= 1;
  EXPECT_NE(violation_of(problem, schedule).find("(R(s0, mb1)) exceeds the budget"),
            std::string::npos)
      << violation_of(problem, schedule);
}

}  // namespace
}  // namespace optpipe

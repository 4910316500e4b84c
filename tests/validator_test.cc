// The validator finds each kind of violation, and names it.
#include "compiler/validator.h"

#include <gtest/gtest.h>

#include "compiler/simulator.h"
#include "heuristics/classic.h"
#include "tests/test_problems.h"

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

}  // namespace
}  // namespace optpipe

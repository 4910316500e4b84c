// Offload decided while list scheduling (heuristics/list_offload.h): the ledger's transfer timing
// and memory rules, and what the offloading list scheduler and AdaOffload make of them.
#include "heuristics/list_offload.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "formats/profile.h"
#include "heuristics/adaoffload.h"
#include "heuristics/list_policies.h"
#include "heuristics/list_scheduler.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::offloading_uniform;
using testing::uniform_problem;
using testing::UniformCosts;
using testing::with_weight_grads;

// Two ranks in one link group, duplex channels; A = 1000 bytes of which O = 800 move, G = 200
// stays for W. Offload and reload of 800 bytes take 2 time units each.
Problem linked_pair() {
  UniformCosts costs;
  costs.weight_grad_bytes = 200;
  Problem problem = uniform_problem(2, 1, 8, costs);
  for (StageCosts& stage : problem.stages) stage.offloadable_bytes = 800;
  OffloadLink link;
  link.d2h_bytes_per_time = 400;
  link.h2d_bytes_per_time = 400;
  link.channels = ChannelMode::kDuplex;
  link.link_group_of_rank = {0, 0};
  problem.offload = link;
  return problem;
}

TEST(OffloadLedger, OffloadsOnlyLongLivedActivationsOnAChannelThatIsFreeInTime) {
  const Problem problem = linked_pair();
  OffloadLedger ledger(problem, ListOffloadPolicy{2, 1, 0.5});
  // One older microbatch awaiting B is too few.
  EXPECT_FALSE(ledger.offload_activation(0, 0, {Op::kForward, 0, 1}, 2.0, 1));
  const auto first = ledger.offload_activation(0, 0, {Op::kForward, 0, 2}, 3.0, 2);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->ref, (OpRef{Op::kOffload, 0, 2}));
  EXPECT_DOUBLE_EQ(first->end, 5.0);
  // Rank 1 shares the D2H channel: its F ending at 4 would wait 1 > 0.5 for it, so it stays.
  EXPECT_FALSE(ledger.offload_activation(1, 0, {Op::kForward, 1, 0}, 4.0, 3));
  // Ending at 4.5 it waits 0.5 and queues behind rank 0's offload.
  const auto second = ledger.offload_activation(1, 0, {Op::kForward, 1, 1}, 4.5, 3);
  ASSERT_TRUE(second);
  EXPECT_DOUBLE_EQ(second->end, 7.0);

  EXPECT_EQ(ledger.released_by(0, 4.9), 0);
  EXPECT_EQ(ledger.released_by(0, 5.0), 800);
  EXPECT_EQ(ledger.released_by(1, 6.0), 0);
  EXPECT_EQ(ledger.released_by(1, 7.0), 800);
  EXPECT_EQ(ledger.back_on_device(0, 2), std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(ledger.back_on_device(0, 1), 0.0);  // never left
}

TEST(OffloadLedger, ReloadsOnceWaitingForTheNextDecisionWouldDelayItsBackward) {
  const Problem problem = linked_pair();
  OffloadLedger ledger(problem, ListOffloadPolicy{2, 1, 0.0});
  ASSERT_TRUE(ledger.offload_activation(0, 0, {Op::kForward, 0, 2}, 3.0, 2));  // ends at 5
  // Its B can start at 10 at the earliest; the reload takes 2 and deferring it to the next
  // decision, one op (1) later, would be late from 7 on.
  const OffloadLedger::BackwardReady ready_at_10 = [](int, int) { return 10.0; };
  const OffloadLedger::MayReload always = [](const OpRef&) { return true; };
  EXPECT_TRUE(ledger.due_reloads(0, {0}, 4.0, 6.0, ready_at_10, always).empty());
  EXPECT_DOUBLE_EQ(ledger.next_reload_due(0, {0}, ready_at_10), 7.0);
  // Due, it still waits while the scheduler has no room for it.
  EXPECT_TRUE(ledger.due_reloads(0, {0}, 6.0, 7.0, ready_at_10, [](const OpRef&) { return false; })
                  .empty());
  // Listed after the op ending at 6, it starts then on the H2D channel.
  const auto due = ledger.due_reloads(0, {0}, 6.0, 7.0, ready_at_10, always);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].ref, (OpRef{Op::kReload, 0, 2}));
  EXPECT_DOUBLE_EQ(due[0].end, 8.0);
  EXPECT_DOUBLE_EQ(ledger.back_on_device(0, 2), 8.0);
  EXPECT_TRUE(ledger.due_reloads(0, {0}, 8.0, 8.0, ready_at_10, always).empty());  // issued once
  EXPECT_EQ(ledger.next_reload_due(0, {0}, ready_at_10), std::numeric_limits<double>::infinity());

  // A B that could start before the offload has even ended wants its reload at once, which then
  // waits for the offload.
  OffloadLedger late(problem, ListOffloadPolicy{2, 1, 0.0});
  ASSERT_TRUE(late.offload_activation(0, 0, {Op::kForward, 0, 2}, 3.0, 2));
  const auto at_once = late.due_reloads(
      0, {0}, 3.0, 3.0, [](int, int) { return 6.0; }, always);
  ASSERT_EQ(at_once.size(), 1u);
  EXPECT_DOUBLE_EQ(at_once[0].end, 7.0);
}

TEST(OffloadLedger, ReservesTheReloadBeyondWhatTheBackwardsBeforeItFree) {
  // Next B is microbatch 0: two backwards (0 and 1) release A - G = 800 each before microbatch 2
  // is within the lookahead of its stage's next B, more than its 800 bytes: nothing to reserve.
  const Problem pair = linked_pair();
  OffloadLedger one_chunk(pair, ListOffloadPolicy{2, 1, 0.0});
  ASSERT_TRUE(one_chunk.offload_activation(0, 0, {Op::kForward, 0, 2}, 3.0, 2));
  EXPECT_EQ(one_chunk.reserve(0, {0}, 3), 0);
  EXPECT_EQ(one_chunk.reserve(0, {1}, 3), 0);  // one backward left, which frees exactly that
  // Due by count once it is next, whatever the time.
  EXPECT_EQ(one_chunk.next_reload_due(0, {2}, [](int, int) { return 100.0; }),
            -std::numeric_limits<double>::infinity());

  // With G = A nothing is freed by B, so the next reload is reserved in full.
  Problem heavy = linked_pair();
  for (StageCosts& stage : heavy.stages) stage.weight_grad_bytes = stage.activation_bytes;
  OffloadLedger strict(heavy, ListOffloadPolicy{2, 1, 0.0});
  ASSERT_TRUE(strict.offload_activation(0, 0, {Op::kForward, 0, 2}, 3.0, 2));
  EXPECT_EQ(strict.reserve(0, {0}, 3), 800);
  EXPECT_EQ(strict.reserve(0, {0}, 1), 0);  // F of an older microbatch: not held back

  // Two chunks per rank (loop: rank 0 holds stages 0 and 2): the B of microbatch 0 on stage 2
  // runs before its reload on stage 0 is due and releases A - G = 800.
  UniformCosts costs;
  costs.weight_grad_bytes = 200;
  Problem looped = uniform_problem(2, 2, 8, costs);
  for (StageCosts& stage : looped.stages) stage.offloadable_bytes = 800;
  looped.offload = pair.offload;
  OffloadLedger two_chunks(looped, ListOffloadPolicy{0, 1, 0.0});
  ASSERT_TRUE(two_chunks.offload_activation(0, 0, {Op::kForward, 0, 0}, 1.0, 0));
  EXPECT_EQ(two_chunks.reserve(0, {0, 0}, 1), 0);
  EXPECT_EQ(two_chunks.reserve(0, {0, 1}, 1), 800);  // that B has run: its release is counted
}

// The offloading list order of AdaOffload's candidates: it lists a reload before every
// backward whose activation it offloaded, and timed by the simulator it validates.
TEST(OffloadingListScheduler, ListsAReloadBeforeEachOffloadedBackwardAndValidates) {
  for (bool eager : {false, true}) {
    SCOPED_TRACE(eager ? "eager" : "where memory needs it");
    std::mt19937 rng(7);
    int offloaded_problems = 0;
    for (int trial = 0; trial < 100; ++trial) {
      Problem problem = testing::random_problem(rng);
      if (!problem.offload) continue;
      for (int r = 0; r < problem.ranks; ++r) {  // a third of the ample budget's activations
        problem.budget_bytes[r] =
            problem.static_bytes[r] + (problem.budget_bytes[r] - problem.static_bytes[r]) / 3;
      }
      ListPolicy policy;
      for (int r = 0; r < problem.ranks; ++r) {
        policy.memory_limit_bytes.push_back(problem.activation_budget(r));
      }
      policy.offload = ListOffloadPolicy{1, 1, 0.0, eager};
      const Order order = list_schedule(problem, policy);
      int offloads = 0;
      for (const auto& refs : order.ranks) {
        std::vector<OpRef> seen;
        for (const OpRef& ref : refs) {
          if (ref.op == Op::kOffload) ++offloads;
          if (ref.op == Op::kBackwardInput) {
            const bool was_offloaded = std::count(seen.begin(), seen.end(),
                                                  OpRef{Op::kOffload, ref.stage, ref.microbatch});
            const bool reloaded =
                std::count(seen.begin(), seen.end(), OpRef{Op::kReload, ref.stage, ref.microbatch});
            EXPECT_EQ(was_offloaded, reloaded) << describe(ref);
          }
          seen.push_back(ref);
        }
      }
      offloaded_problems += offloads > 0;
      Problem roomy = problem;  // memory is the search's to check; everything else must hold
      for (auto& b : roomy.budget_bytes) b = int64_t{1} << 60;
      const auto violation = validate(roomy, simulate(problem, order, "list-offload"));
      EXPECT_FALSE(violation) << violation->message;
    }
    EXPECT_GT(offloaded_problems, 10);
  }
}

// Two chunks per rank (loop) with room for 2.6 activations and a fast link: the earlier chunk's
// activation waits for the microbatch's whole trip through the later stages, so that is what goes
// to host, and it comes back only near its B. The order then keeps more microbatches in flight
// than memory alone allows and ends sooner.
TEST(OffloadingListScheduler, OffloadsTheEarlierChunksActivationsWhichLiveLongest) {
  // An offload or reload takes 0.09.
  const Problem problem =
      offloading_uniform(uniform_problem(4, 2, 8, with_weight_grads()), 10000, 2600);

  ListPolicy policy = offloading_list_policy(problem, {0, 1, 0.0}, true);
  const std::optional<OffloadedSchedule> offloading = list_candidate(problem, policy, "test");
  ASSERT_TRUE(offloading && offloading->fits());
  int earlier = 0, later = 0;
  for (const auto& refs : offloading->order.ranks) {
    for (const OpRef& ref : refs) {
      if (ref.op == Op::kOffload) ++(ref.stage < problem.ranks ? earlier : later);
    }
  }
  EXPECT_GT(earlier, 2 * later);
  policy.offload.reset();
  const std::optional<OffloadedSchedule> kept = list_candidate(problem, policy, "test");
  ASSERT_TRUE(kept && kept->fits());
  EXPECT_LT(offloading->makespan, 0.9 * kept->makespan);
}

// A 16-stage V-shape with room for 4 activations per rank: stage 0's activations are away for a
// round trip of about 32 forwards, so a rank keeps its pipeline busy only by admitting many
// microbatches, which it can only where their offloads have freed memory. Offloading only what
// the next forward needs leaves the memory full of activations that the rank's later forwards
// then wait behind; offloading eagerly keeps it free.
TEST(OffloadingListScheduler, EagerOffloadKeepsALongPipelineBusierAtATightBudget) {
  // An offload or reload takes 0.45.
  const Problem problem = offloading_uniform(
      uniform_problem(8, 2, 32, with_weight_grads(), PlacementKind::kVShape), 2000, 4000);

  ListOffloadPolicy rules{0, 2, 0.0};
  const std::optional<OffloadedSchedule> lazy =
      list_candidate(problem, offloading_list_policy(problem, rules, true), "test");
  rules.eager = true;
  const std::optional<OffloadedSchedule> eager =
      list_candidate(problem, offloading_list_policy(problem, rules, true), "test");
  ASSERT_TRUE(lazy && lazy->fits());
  ASSERT_TRUE(eager && eager->fits());
  EXPECT_FALSE(validate(problem, eager->schedule));
  EXPECT_GT(eager->offloads, lazy->offloads);
  EXPECT_LT(eager->makespan, 0.92 * lazy->makespan);
}

// A search with time for a few dozen policies (R = 32, m = 256) still varies every knob: the
// first policies differ from the first one in one knob each. Eager offload and channel waits in
// round-trip units are for long pipelines only.
TEST(OffloadingPolicyNeighbourhood, VariesEveryKnobWithinItsFirstPolicies) {
  auto with_link = [](const Problem& problem) { return offloading_uniform(problem, 2000, 4000); };
  const Problem long_pipeline = with_link(uniform_problem(8, 2, 32, {}, PlacementKind::kVShape));
  const std::vector<ListPolicy> policies = offloading_policy_neighbourhood(long_pipeline);
  ASSERT_GE(policies.size(), 16u);
  const ListPolicy& first = policies.front();
  std::set<std::string> varied;
  for (size_t i = 1; i < 16; ++i) {
    const ListPolicy& p = policies[i];
    if (p.memory_limit_bytes != first.memory_limit_bytes) varied.insert("limit");
    if (p.offload->max_channel_wait != first.offload->max_channel_wait) varied.insert("wait");
    if (p.offload->reload_lookahead != first.offload->reload_lookahead) varied.insert("lookahead");
    if (p.offload->min_awaiting != first.offload->min_awaiting) varied.insert("awaiting");
    if (p.offload->eager != first.offload->eager) varied.insert("eager");
    if (p.later_chunk_first != first.later_chunk_first) varied.insert("chunk");
    if (p.backward_first != first.backward_first) varied.insert("backward");
    if (p.weights != first.weights) varied.insert("weights");
  }
  EXPECT_EQ(varied.size(), 8u);
  // 16 stages of 1 + 1: a round trip of 32, so channel waits come in units of 2 forwards.
  double longest_wait = 0;
  for (const ListPolicy& p : policies) {
    longest_wait = std::max(longest_wait, p.offload->max_channel_wait);
  }
  EXPECT_DOUBLE_EQ(longest_wait, 4.0);

  const Problem shorter = with_link(uniform_problem(4, 2, 16, {}, PlacementKind::kVShape));
  for (const ListPolicy& p : offloading_policy_neighbourhood(shorter)) {
    EXPECT_FALSE(p.offload->eager);
    EXPECT_LE(p.offload->max_channel_wait, 2.0);
  }
}

// The example's 25 GB/s link is shared by pairs of ranks and cannot carry every in-flight
// activation: AdaOffload offloads part of them and beats every schedule that does not offload.
TEST(OffloadingListScheduler, AdaOffloadGainsWhereTheLinkLimitsOffload) {
  const char* dir = std::getenv("OPTPIPE_SOURCE_DIR");
  ASSERT_NE(dir, nullptr);
  Problem problem = load_profile(std::string(dir) + "/examples/gpt-8rank.json");
  for (int r = 0; r < problem.ranks; ++r) {  // 75% of 1F1B's activation peak
    const int64_t one_f_one_b_peak = problem.num_stages() * problem.stages[0].activation_bytes;
    problem.budget_bytes[r] = problem.static_bytes[r] + one_f_one_b_peak * 3 / 4;
  }
  const OffloadedSchedule ada = adaoffload_schedule(problem);
  ASSERT_TRUE(ada.fits());
  EXPECT_GT(ada.offloads, 0);
  Problem without_link = problem;
  without_link.offload.reset();
  const testing::TimedSchedule zero_bubble = testing::run_generator("zb-auto", without_link);
  ASSERT_TRUE(zero_bubble.metrics.within_budget);
  EXPECT_LT(ada.makespan, zero_bubble.metrics.makespan);
}

}  // namespace
}  // namespace optpipe

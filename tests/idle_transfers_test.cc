// Offload pairs that free no memory: an offload whose reload starts as soon as it ends is dropped,
// the schedule staying valid and no slower; an activation that is away for a while keeps its pair.
#include "solver/idle_transfers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "compiler/simulator.h"
#include "compiler/validator.h"
#include "heuristics/classic.h"
#include "heuristics/offload_placement.h"
#include "tests/test_problems.h"

namespace optpipe {
namespace {

// R = 4, m = 4, a duplex link per rank, with 1F1B's order on rank 0 offloading every activation
// after its F: microbatch 0's RELOAD listed right after its OFFLOAD (back as soon as it is gone),
// the others' right before their backward.
struct OffloadingOrder {
  Problem problem;
  Order order;
};
OffloadingOrder offloading_order() {
  OffloadingOrder result{testing::uniform_problem(4, 1, 4), {}};
  Problem& p = result.problem;
  std::vector<int> own_group(p.ranks);
  std::iota(own_group.begin(), own_group.end(), 0);
  p.offload = OffloadLink{1000, 1000, ChannelMode::kDuplex, own_group};
  result.order = one_f_one_b_order(p);
  std::vector<OpRef> with_transfers;
  for (const OpRef& ref : result.order.ranks[0]) {
    const OpRef reload{Op::kReload, ref.stage, ref.microbatch};
    if (is_input_backward(ref.op) && ref.microbatch > 0) with_transfers.push_back(reload);
    with_transfers.push_back(ref);
    if (ref.op == Op::kForward) {
      with_transfers.push_back({Op::kOffload, ref.stage, ref.microbatch});
      if (ref.microbatch == 0) with_transfers.push_back(reload);
    }
  }
  result.order.ranks[0] = with_transfers;
  return result;
}

int count(const Schedule& schedule, const OpRef& ref) {
  int n = 0;
  for (const auto& actions : schedule.ranks) {
    n += std::count_if(actions.begin(), actions.end(),
                       [&](const Action& a) { return a.ref == ref; });
  }
  return n;
}

TEST(IdleTransfers, DropsTheOffloadWhoseReloadStartsAsItEnds) {
  const auto [p, order] = offloading_order();
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  ASSERT_FALSE(validate(p, schedule));
  const std::optional<PrunedOrder> pruned = without_idle_transfers(p, order, schedule);
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->dropped, 1);
  EXPECT_EQ(count(pruned->schedule, {Op::kOffload, 0, 0}), 0);
  EXPECT_EQ(count(pruned->schedule, {Op::kReload, 0, 0}), 0);
  for (int j = 1; j < p.microbatches; ++j) {
    EXPECT_EQ(count(pruned->schedule, {Op::kOffload, 0, j}), 1) << "microbatch " << j;
    EXPECT_EQ(count(pruned->schedule, {Op::kReload, 0, j}), 1) << "microbatch " << j;
  }
  EXPECT_FALSE(validate(p, pruned->schedule));
  EXPECT_LE(makespan_of(pruned->schedule), makespan_of(schedule) + 1e-9);
}

TEST(IdleTransfers, KeepsOffloadsThatAreAwayForAWhile) {
  auto [p, order] = offloading_order();
  // Microbatch 0's reload too right before its backward.
  auto& refs = order.ranks[0];
  const OpRef reload{Op::kReload, 0, 0};
  refs.erase(std::find(refs.begin(), refs.end(), reload));
  const auto backward = std::find_if(refs.begin(), refs.end(), [](const OpRef& r) {
    return is_input_backward(r.op) && r.microbatch == 0;
  });
  refs.insert(backward, reload);
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  ASSERT_FALSE(validate(p, schedule));
  EXPECT_FALSE(without_idle_transfers(p, order, schedule));
}

}  // namespace
}  // namespace optpipe

// The compile driver: with `auto`, a seed the optimiser keeps, but without offloads or recomputes
// it did not need, is written as the optimiser's schedule, as fast and valid; a budget that nothing
// fits comes back as a status, not an exception.
#include "driver/compile_driver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "driver/schedule_cache.h"
#include "heuristics/offload_placement.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

namespace fs = std::filesystem;

using testing::count_ops;

// `order` with rank 0 offloading each of its activations right after its F and reloading it at
// once: copies that free no memory.
Order with_needless_offloads(const Order& order) {
  Order offloading = order;
  std::vector<OpRef>& refs = offloading.ranks[0];
  refs.clear();
  for (const OpRef& ref : order.ranks[0]) {
    refs.push_back(ref);
    if (ref.op != Op::kForward) continue;
    refs.push_back({Op::kOffload, ref.stage, ref.microbatch});
    refs.push_back({Op::kReload, ref.stage, ref.microbatch});
  }
  return offloading;
}

// The cache hands the driver a seed as fast as the best generator's (the copies take no time) that
// comes first among equals; the optimiser keeps it, without the copies.
TEST(Compile, AutoWritesAKeptSeedWithoutTheOffloadsItDidNotNeed) {
  Problem p = testing::uniform_problem(3, 1, 4);
  std::vector<int> own_group(p.ranks);
  std::iota(own_group.begin(), own_group.end(), 0);
  p.offload = OffloadLink{1e12, 1e12, ChannelMode::kDuplex, own_group};
  const CompileResult generators = compile(p, "auto");
  const Schedule seed = simulate_within_budget(
      p, with_needless_offloads(order_of(generators.best.schedule)), "offloading");
  ASSERT_FALSE(validate(p, seed));
  ASSERT_NEAR(makespan_of(seed), generators.best.metrics.makespan, 1e-6);

  const fs::path dir = fs::temp_directory_path() / "optpipe_compile_driver_kept_seed";
  fs::remove_all(dir);
  ScheduleCache(dir.string()).store(p, "auto", seed, compute_metrics(p, seed), nullptr);
  CompileOptions options;
  options.cache_dir = dir.string();
  options.optimizer.time_limit_seconds = 30;
  const CompileResult result = compile(p, options);
  fs::remove_all(dir);

  ASSERT_TRUE(result.solver);
  EXPECT_EQ(result.ranking.at(1).method, "cache");  // the seed, after the optimiser's
  EXPECT_EQ(result.solver->offloads_dropped, p.microbatches);
  EXPECT_EQ(result.best.method, "milp");
  EXPECT_EQ(count_ops(result.best.schedule, Op::kOffload), 0);
  EXPECT_LE(result.best.metrics.makespan, makespan_of(seed) + 1e-9);
  EXPECT_FALSE(validate(p, result.best.schedule));
}

// No method fits a budget that holds only the static bytes: the result says so, with the smallest
// budget at which one would.
TEST(Compile, SaysWhenNothingFitsTheBudget) {
  Problem p = testing::uniform_problem(3, 1, 4);
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 1;
  const CompileResult result = compile(p, "auto");
  EXPECT_EQ(result.status, CompileStatus::kOverBudget);
  EXPECT_NE(result.over_budget_message.find("fits from --memory-budget"), std::string::npos)
      << result.over_budget_message;
}

// The smallest budget is found to 0.1% of itself, not of every activation live at once, which at
// m = 1,024 is a whole activation and more; and where nothing fits, the search takes the time
// limit as the rest of the compile does.
Problem with_budget(Problem p, int64_t budget) {
  p.budget_bytes.assign(p.ranks, budget);
  return p;
}

// 1 GiB activations over 64 GiB static, m = 1,024: every activation live at once is 1,024 of them.
Problem long_pipeline() {
  testing::UniformCosts costs;
  costs.activation_bytes = int64_t{1} << 30;
  Problem p = testing::uniform_problem(2, 1, 1024, costs);
  p.static_bytes.assign(p.ranks, int64_t{64} << 30);
  return p;
}

TEST(SmallestFeasibleBudget, IsWithinATenthOfAPercentOfItself) {
  const Problem p = long_pipeline();
  const FeasibleBudget smallest = smallest_feasible_budget(p, "auto");
  ASSERT_TRUE(smallest.bytes);
  EXPECT_FALSE(smallest.cut_short);
  const int64_t b = *smallest.bytes;
  EXPECT_EQ(compile(with_budget(p, b), "auto").status, CompileStatus::kScheduled) << b;
  EXPECT_EQ(compile(with_budget(p, b - b / 500), "auto").status, CompileStatus::kOverBudget) << b;
}

TEST(SmallestFeasibleBudget, StopsAtTheFirstBudgetThatFitsWhenAskedTo) {
  const Problem p = long_pipeline();
  const int64_t closest = (int64_t{64} << 30) + (int64_t{3} << 30);
  const FeasibleBudget found = smallest_feasible_budget(p, "auto", [] { return true; }, closest);
  EXPECT_TRUE(found.cut_short);
  ASSERT_TRUE(found.bytes);
  EXPECT_EQ(*found.bytes, closest);  // the guess fits, and no probe followed it
  EXPECT_EQ(compile(with_budget(p, closest), "auto").status, CompileStatus::kScheduled);
}

}  // namespace
}  // namespace optpipe

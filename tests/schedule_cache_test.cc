// --cache: keys by the problem at the stated precision; a hit seeds or settles the compile.
#include "driver/schedule_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "driver/compile_driver.h"
#include "formats/profile.h"
#include "tests/test_problems.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

namespace fs = std::filesystem;

TEST(CacheKey, IgnoresDifferencesBelowThePrecisionOnly) {
  const Problem p = testing::uniform_problem(4, 1, 8, {1.0, 1.2, 0.8, 1 << 24, 1 << 22});
  Problem near = p;
  near.stages[2].forward = 1.0004;          // below 3 significant digits
  near.stages[1].activation_bytes += 1000;  // below 1 MiB
  EXPECT_EQ(cache_key(p, "auto"), cache_key(near, "auto"));
  EXPECT_NE(cache_key(p, "auto"), cache_key(p, "milp"));
  Problem slower = p;
  slower.stages[2].forward = 1.01;
  EXPECT_NE(cache_key(p, "auto"), cache_key(slower, "auto"));
  Problem tighter = p;
  tighter.budget_bytes[0] -= 1;
  EXPECT_NE(cache_key(p, "auto"), cache_key(tighter, "auto"));
  Problem recomputing = p;
  recomputing.stages[3].checkpoint_bytes = 1 << 22;
  EXPECT_NE(cache_key(p, "auto"), cache_key(recomputing, "auto"));
  Problem cheaper_checkpoint = recomputing;
  cheaper_checkpoint.stages[3].checkpoint_bytes = 1 << 21;
  EXPECT_NE(cache_key(recomputing, "auto"), cache_key(cheaper_checkpoint, "auto"));
}

class CacheCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs the tests of this file in parallel.
    dir_ = fs::temp_directory_path() /
           (std::string("optpipe_cache_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CompileOptions options(double seconds) const {
    CompileOptions o;
    o.optimizer.time_limit_seconds = seconds;
    o.cache_dir = dir_.string();
    return o;
  }
  fs::path dir_;
};

TEST_F(CacheCompile, AProvenOptimumIsReturnedWithoutSolvingAgain) {
  const Problem p = testing::uniform_problem(2, 1, 3, {1, 1.5, 0.5, 1000, 200});
  const CompileResult first = compile(p, options(30));
  ASSERT_TRUE(first.solver);
  ASSERT_EQ(first.solver->status, SearchStatus::kOptimal);
  const CompileResult second = compile(p, options(30));
  EXPECT_FALSE(second.solver);  // settled by the cache
  EXPECT_EQ(second.best.method, "cache");
  EXPECT_NEAR(second.best.metrics.makespan, first.best.metrics.makespan, 1e-9);
  EXPECT_FALSE(validate(p, second.best.schedule));
}

TEST_F(CacheCompile, AHitOnANearlyEqualProfileIsReTimedAndValidated) {
  const Problem p = testing::uniform_problem(3, 1, 4, {1, 1.5, 0.5, 1000, 200});
  const CompileResult first = compile(p, options(0));
  Problem near = p;
  near.stages[1].backward_input = 1.5004;
  const CompileResult second = compile(near, options(0));
  EXPECT_FALSE(validate(near, second.best.schedule));
  EXPECT_LE(second.best.metrics.makespan, first.best.metrics.makespan + 0.01);
}

// An offloading schedule comes back as stored: its order re-times into the same schedule (each
// offload starts as the next F does, and is issued before it), so it keeps its makespan within
// the budget it fits tightly.
TEST_F(CacheCompile, AnOffloadingScheduleComesBackAsStored) {
  Problem p = testing::uniform_problem(3, 1, 6, {1, 1, 1, 1000, 0});
  const Schedule stored = testing::offloading_1f1b(p);
  p = testing::at_own_peaks(p, stored);
  ASSERT_FALSE(validate(p, stored));
  const ScheduleCache cache(dir_.string());
  cache.store(p, "auto", stored, compute_metrics(p, stored), nullptr);
  const std::optional<CachedSchedule> found = cache.find(p, "auto");
  ASSERT_TRUE(found);
  EXPECT_EQ(time_extent(found->schedule).end, time_extent(stored).end);
  EXPECT_FALSE(validate(p, found->schedule));
}

// Final only where the entry says it is optimal for this very profile (the compile then checks
// that claim against the lower bound). An entry without a "solver" key once had it read from a
// const JSON object that lacked it (found by fuzzing the cache): an assertion in debug builds,
// undefined behaviour otherwise.
TEST_F(CacheCompile, OnlyAnEntryClaimedOptimalForItsProfileIsFinal) {
  Problem p = testing::uniform_problem(2, 1, 2);
  p.profile_sha256 = std::string(64, 'a');
  compile(p, options(0));
  auto rewrite_entries = [&](const auto& edit) {
    for (const auto& entry : fs::directory_iterator(dir_)) {
      nlohmann::json document = nlohmann::json::parse(std::ifstream(entry.path()));
      edit(document);
      std::ofstream(entry.path()) << document.dump();
    }
  };
  const ScheduleCache cache(dir_.string());
  rewrite_entries([](nlohmann::json& d) { d["solver"] = {{"status", "optimal"}}; });
  ASSERT_TRUE(cache.find(p, "auto"));
  EXPECT_TRUE(cache.find(p, "auto")->final);
  Problem edited = p;
  edited.profile_sha256 = std::string(64, 'b');
  ASSERT_TRUE(cache.find(edited, "auto"));
  EXPECT_FALSE(cache.find(edited, "auto")->final);
  rewrite_entries([](nlohmann::json& d) { d.erase("solver"); });
  const std::optional<CachedSchedule> unsolved = cache.find(p, "auto");
  ASSERT_TRUE(unsolved);  // a valid schedule all the same
  EXPECT_FALSE(unsolved->final);
  EXPECT_FALSE(validate(p, unsolved->schedule));
}

// An entry that claims "optimal" for a schedule above the lower bound does not end the compile:
// the optimiser runs on it as it would on any seed.
TEST_F(CacheCompile, AClaimOfOptimalityAboveTheBoundIsNotTakenOnTrust) {
  Problem p = load_profile(std::string(OPTPIPE_SOURCE_DIR) + "/examples/gpt-8rank.json");
  override_budget(p, "55GiB");
  const CompileResult stored = compile(p, options(0));  // the generators alone
  ASSERT_GT(stored.best.metrics.gap, 1e-6);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    nlohmann::json document = nlohmann::json::parse(std::ifstream(entry.path()));
    document["solver"] = {{"status", "optimal"}};
    std::ofstream(entry.path()) << document.dump();
  }
  EXPECT_TRUE(compile(p, options(2)).solver);
}

TEST_F(CacheCompile, ADamagedEntryIsAMiss) {
  const Problem p = testing::uniform_problem(2, 1, 2);
  compile(p, options(0));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    std::ofstream(entry.path()) << "{ not json";
  }
  const CompileResult again = compile(p, options(0));
  EXPECT_NE(again.best.method, "cache");
  EXPECT_FALSE(validate(p, again.best.schedule));
}

// The cache writes its own entries only: an entry replaced by a symlink (to the profile, say) is
// a miss and is replaced itself, its target untouched; a FIFO there neither blocks the compile
// nor is written into.
TEST_F(CacheCompile, AnEntryThatIsNotARegularFileIsReplacedNotFollowed) {
  const Problem p = testing::uniform_problem(2, 1, 2);
  compile(p, options(0));
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir_)) entries.push_back(entry.path());
  ASSERT_EQ(entries.size(), 1u);
  const fs::path victim = dir_.string() + "-victim.json";
  std::ofstream(victim) << "{\"keep\": true}\n";
  fs::remove(entries[0]);
  fs::create_symlink(victim, entries[0]);
  const CompileResult again = compile(p, options(0));
  EXPECT_NE(again.best.method, "cache");
  std::ifstream kept(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "{\"keep\": true}\n");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(entries[0])));
  fs::remove(victim);

  fs::remove(entries[0]);
  ASSERT_EQ(::mkfifo(entries[0].c_str(), 0600), 0);
  const CompileResult third = compile(p, options(0));  // would block in open() on the FIFO
  EXPECT_NE(third.best.method, "cache");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(entries[0])));
  EXPECT_EQ(compile(p, options(0)).best.method, "cache");  // the replaced entry is a hit
}

}  // namespace
}  // namespace optpipe

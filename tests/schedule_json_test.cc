// optpipe.schedule/v1: what is written reads back to the same schedule; bad files are refused.
#include "formats/schedule_json.h"

#include <gtest/gtest.h>

#include "heuristics/gpipe.h"
#include "model/errors.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

TEST(ScheduleJson, RoundTripKeepsEveryActionAndTheProfileIdentity) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    Problem problem = testing::random_problem(rng);
    problem.profile_sha256 = "ab12";
    const Schedule schedule = simulate(problem, gpipe_order(problem), "gpipe");
    const auto text =
        schedule_to_json(problem, schedule, compute_metrics(problem, schedule)).dump();
    const ScheduleFile back = parse_schedule_json(text, "s.json");
    EXPECT_EQ(back.profile_sha256, "ab12");
    EXPECT_EQ(back.schedule.method, "gpipe");
    EXPECT_EQ(back.budget_bytes, problem.budget_bytes);
    ASSERT_EQ(back.schedule.ranks.size(), schedule.ranks.size());
    for (size_t r = 0; r < schedule.ranks.size(); ++r) {
      ASSERT_EQ(back.schedule.ranks[r].size(), schedule.ranks[r].size());
      for (size_t i = 0; i < schedule.ranks[r].size(); ++i) {
        const Action& a = schedule.ranks[r][i];
        const Action& b = back.schedule.ranks[r][i];
        EXPECT_EQ(a.ref, b.ref);
        EXPECT_EQ(a.start, b.start);  // doubles are written round-trip exact
        EXPECT_EQ(a.end, b.end);
        EXPECT_EQ(a.bytes, b.bytes);
      }
    }
    EXPECT_FALSE(validate(problem, back.schedule));
  }
}

TEST(ScheduleJson, RoundTripKeepsRecomputes) {
  Problem problem = testing::uniform_problem(3, 1, 4);
  const Schedule schedule = testing::recomputing_1f1b(problem, 100);
  const nlohmann::json json =
      schedule_to_json(problem, schedule, compute_metrics(problem, schedule));
  const nlohmann::json& first_recompute = json["ranks"][2]["actions"][1];
  EXPECT_EQ(first_recompute["op"], "R");
  EXPECT_FALSE(first_recompute.contains("bytes"));  // compute: no bytes moved
  const ScheduleFile back = parse_schedule_json(json.dump(), "s.json");
  ASSERT_EQ(back.schedule.ranks.size(), schedule.ranks.size());
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    ASSERT_EQ(back.schedule.ranks[r].size(), schedule.ranks[r].size());
    for (size_t i = 0; i < schedule.ranks[r].size(); ++i) {
      EXPECT_EQ(back.schedule.ranks[r][i].ref, schedule.ranks[r][i].ref);
      EXPECT_EQ(back.schedule.ranks[r][i].start, schedule.ranks[r][i].start);
      EXPECT_EQ(back.schedule.ranks[r][i].end, schedule.ranks[r][i].end);
    }
  }
  EXPECT_FALSE(validate(problem, back.schedule));
}

std::string error_of(const std::string& text) {
  try {
    parse_schedule_json(text, "s.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ScheduleJson, RefusesBadFilesNamingTheField) {
  const Problem problem = testing::uniform_problem(2, 1, 2);
  const Schedule schedule = simulate(problem, gpipe_order(problem), "gpipe");
  const auto good = schedule_to_json(problem, schedule, compute_metrics(problem, schedule));
  auto bad = good;
  bad["format"] = "optpipe.schedule/v0";
  EXPECT_NE(error_of(bad.dump()).find("s.json: format: must be \"optpipe.schedule/v1\""),
            std::string::npos);
  bad = good;
  bad["ranks"][1]["actions"][0]["op"] = "X";
  EXPECT_NE(error_of(bad.dump()).find("ranks[1].actions[0].op: must be one of F, B, W, BW, R,"),
            std::string::npos)
      << error_of(bad.dump());
  bad = good;
  bad["ranks"][0]["actions"][2]["start"] = -1;
  EXPECT_NE(error_of(bad.dump()).find("ranks[0].actions[2].start"), std::string::npos);
  bad = good;
  bad["ranks"][1]["rank"] = 0;
  EXPECT_NE(error_of(bad.dump()).find("ranks[1].rank"), std::string::npos);
  bad = good;
  bad["ranks"][0]["actions"][0]["extra"] = 1;
  EXPECT_NE(error_of(bad.dump()).find("unknown key"), std::string::npos);
  EXPECT_NE(error_of(good.dump().substr(0, 40)).find("malformed JSON"), std::string::npos);
}

}  // namespace
}  // namespace optpipe

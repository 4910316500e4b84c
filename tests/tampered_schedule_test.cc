// Schedule files changed after the compile: `optpipe validate` refuses each with exit 4 and one
// line naming what is wrong, where the file's actions still pass on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/command_line_test.h"

namespace optpipe {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::lines;

struct Tampering {
  const char* name;
  std::function<void(json&)> change;
  const char* message;  // part of the one-line error
};

void PrintTo(const Tampering& t, std::ostream* out) {
  *out << t.name;
}

class TamperedScheduleTest : public testing::CommandLineTest,
                             public ::testing::WithParamInterface<Tampering> {};

TEST_P(TamperedScheduleTest, IsRefusedWithExitFour) {
  const std::string profile = example("gpt-4rank.json");
  ASSERT_EQ(run("optpipe-compile", profile + " --method 1f1b -q -o " + path("s.json")).exit_code,
            0);
  ASSERT_EQ(run("optpipe", "validate " + profile + " " + path("s.json")).exit_code, 0);
  json schedule = json::parse(slurp(path("s.json")));
  GetParam().change(schedule);
  write("t.json", schedule.dump(1));
  const CommandResult r = run("optpipe", "validate " + profile + " " + path("t.json"));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  // convert applies the same checks.
  EXPECT_EQ(run("optpipe", "convert " + profile + " " + path("t.json") + " " + path("t.opsched"))
                .exit_code,
            4);
}

json& actions(json& s, int rank) {
  return s["ranks"][rank]["actions"];
}

INSTANTIATE_TEST_SUITE_P(
    Headers, TamperedScheduleTest,
    ::testing::Values(
        Tampering{"Reversed",
                  [](json& s) { std::reverse(actions(s, 1).begin(), actions(s, 1).end()); },
                  "is listed after"},
        Tampering{"TimeUnit", [](json& s) { s["time_unit"] = "us"; }, "time_unit says us"},
        // Header fields of the wrong JSON type: refused like any other claim, not a crash.
        Tampering{"TimeUnitNumber", [](json& s) { s["time_unit"] = 5; }, "time_unit says 5"},
        Tampering{"MetricsNumber", [](json& s) { s["metrics"] = 3; }, "metrics.makespan says null"},
        Tampering{"BoundSourceNumber", [](json& s) { s["metrics"]["lower_bound_source"] = 1; },
                  "metrics.lower_bound"},
        Tampering{"Microbatches", [](json& s) { s["pipeline"]["microbatches"] = 8; },
                  "pipeline.microbatches says 8"},
        Tampering{"RankOfStage",
                  [](json& s) {
                    std::swap(s["pipeline"]["rank_of_stage"][0], s["pipeline"]["rank_of_stage"][1]);
                  },
                  "pipeline.rank_of_stage"},
        Tampering{"Makespan", [](json& s) { s["metrics"]["makespan"] = 1000.0; },
                  "metrics.makespan says 1000"},
        Tampering{"Feasible", [](json& s) { s["metrics"]["feasible"] = false; },
                  "metrics.feasible"},
        Tampering{"OptimalClaim",
                  [](json& s) {
                    s["metrics"]["lower_bound"] = s["metrics"]["makespan"];
                    s["metrics"]["gap"] = 0.0;
                  },
                  "metrics.lower_bound"},
        Tampering{"Gap", [](json& s) { s["metrics"]["gap"] = 0.0; }, "metrics.gap says 0"},
        Tampering{"PeakBytes", [](json& s) { s["ranks"][2]["peak_bytes"] = 1; },
                  "ranks[2].peak_bytes says 1"},
        Tampering{"BudgetBytes", [](json& s) { s["ranks"][0]["budget_bytes"] = 1; },
                  "ranks[0].budget_bytes says 1"},
        Tampering{"Busy", [](json& s) { s["ranks"][3]["busy"] = 1.0; }, "ranks[3].busy says 1"},
        Tampering{"FarTimes",
                  [](json& s) {
                    json& w = actions(s, 0).back();
                    w["start"] = 1e308;
                    w["end"] = 1e308;
                  },
                  "bad times"}),
    [](const ::testing::TestParamInfo<Tampering>& info) { return info.param.name; });

}  // namespace
}  // namespace optpipe

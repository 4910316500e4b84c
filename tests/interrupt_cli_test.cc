// Interrupting optpipe-compile (docs/cli.md, Interrupting): SIGINT or SIGTERM stops the optimiser
// where it is, CBC included; the best schedule so far is written, summarised and valid, and the
// exit code is the shell's 128 + the signal's number.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/command_line_test.h"

namespace optpipe {
namespace {

using namespace std::chrono_literals;
using testing::CommandResult;

class InterruptCliTest : public testing::CommandLineTest,
                         public ::testing::WithParamInterface<int> {};
using CommandLineTestWithTimeLimit = testing::CommandLineTest;

// The demo profile at 52 GiB: the optimiser runs for about 45 s before it proves its optimum.
// Without a handler the signal would end the process with the summary unwritten
// (Optimizer.AnInterruptStopsCbcWithTheBestScheduleSoFar covers CBC's part).
TEST_P(InterruptCliTest, LeavesTheBestScheduleSummarisedAndValid) {
  const int signal = GetParam();
  const std::string schedule = path("s.json");
  const std::string profile = example("gpt-8rank.json");
  const pid_t pid =
      start("optpipe-compile", profile + " --memory-budget 52GiB --threads 2 --time-limit 600 -o " +
                                   schedule + " --summary-json " + path("summary.json"));
  ASSERT_GT(pid, 0);
  // The best generator's schedule is written before the optimiser starts.
  for (auto waited = 0ms; !std::filesystem::exists(schedule) && waited < 60s; waited += 50ms) {
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(1s);
  ASSERT_EQ(kill(pid, signal), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + signal) << slurp(path("stderr.txt"));

  const auto summary = nlohmann::json::parse(slurp(path("summary.json")));
  const auto& solver = summary.at("solver");
  EXPECT_TRUE(solver.at("note").get<std::string>().starts_with("interrupted after"));
  EXPECT_EQ(solver.at("stop_reason"), "interrupted");
  EXPECT_EQ(solver.at("reproducible"), false);
  EXPECT_NE(solver.at("status"), "optimal");
  const CommandResult check =
      run("optpipe", "validate " + profile + " " + schedule + " --memory-budget 52GiB");
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(slurp(schedule)).at("metrics").at("makespan").get<double>(),
      summary.at("makespan").get<double>());
}

// A second signal ends the run at once, and says what it leaves behind.
TEST_P(InterruptCliTest, ASecondSignalQuitsAtOnceSayingWhatIsWritten) {
  const int signal = GetParam();
  const std::string schedule = path("s.json");
  const pid_t pid =
      start("optpipe-compile",
            example("gpt-8rank.json") + " --memory-budget 52GiB --time-limit 600 -o " + schedule);
  ASSERT_GT(pid, 0);
  for (auto waited = 0ms; !std::filesystem::exists(schedule) && waited < 60s; waited += 50ms) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(kill(pid, signal), 0);
  std::this_thread::sleep_for(10ms);
  kill(pid, signal);  // the run may already have ended after the first
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + signal);
  const std::string err = slurp(path("stderr.txt"));
  if (err.find("interrupted again") == std::string::npos) {
    EXPECT_NE(err.find("schedule written to"), std::string::npos) << err;  // the first finished
  }
  // Either way the file is a whole, valid schedule.
  EXPECT_EQ(run("optpipe",
                "validate " + example("gpt-8rank.json") + " " + schedule + " --memory-budget 52GiB")
                .exit_code,
            0);
}

// --time-limit bounds the generators too: past it, the methods not yet tried are skipped.
TEST_F(CommandLineTestWithTimeLimit, TheTimeLimitBoundsTheGenerators) {
  write("long.json", R"({"format": "optpipe.profile/v1", "name": "long",
    "pipeline": {"ranks": 4, "microbatches": 8192},
    "stage_defaults": {"forward": 1, "backward_input": 1, "backward_weight": 1,
                       "activation_bytes": "1GiB"},
    "memory": {"budget_bytes": "80GiB"}})");
  const CommandResult r =
      run("optpipe-compile", path("long.json") + " --time-limit 0.2 -o " + path("s.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("methods were not tried: the time limit had passed"), std::string::npos)
      << r.err;
  EXPECT_EQ(run("optpipe", "validate " + path("long.json") + " " + path("s.json")).exit_code, 0);
}

// And the lower bound: its pacing of m = 8,192 with a host link takes seconds, and ends at the time
// limit with a bound that holds, only lower, which the warning says.
TEST_F(CommandLineTestWithTimeLimit, TheTimeLimitBoundsTheLowerBound) {
  write("paced.json", R"({"format": "optpipe.profile/v1", "name": "paced",
    "pipeline": {"ranks": 4, "microbatches": 8192},
    "stage_defaults": {"forward": 22, "backward_input": 25, "backward_weight": 19,
                       "activation_bytes": "2.5GiB", "weight_grad_bytes": "0.6GiB"},
    "memory": {"budget_bytes": "80GiB", "static_bytes": "30GiB"},
    "offload": {"d2h_gb_per_s": 25, "h2d_gb_per_s": 25, "channels": "duplex"}})");
  const CommandResult r = run("optpipe-compile", path("paced.json") + " --time-limit 0.3 -o " +
                                                     path("s.json") + " --summary-json -");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the lower bound was cut short by the time limit"), std::string::npos)
      << r.err;
  // What the compile wrote passed the validator before it left; its bound is no higher than the
  // makespan.
  const auto summary = nlohmann::json::parse(r.out);
  EXPECT_LE(summary.at("lower_bound").get<double>(), summary.at("makespan").get<double>());
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptCliTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "Sigint" : "Sigterm";
                         });

}  // namespace
}  // namespace optpipe

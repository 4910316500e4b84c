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
  EXPECT_LT(solver.at("seconds").get<double>(), 30.0);
  EXPECT_NE(solver.at("status"), "optimal");
  const CommandResult check =
      run("optpipe", "validate " + profile + " " + schedule + " --memory-budget 52GiB");
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(slurp(schedule)).at("metrics").at("makespan").get<double>(),
      summary.at("makespan").get<double>());
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptCliTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "Sigint" : "Sigterm";
                         });

}  // namespace
}  // namespace optpipe

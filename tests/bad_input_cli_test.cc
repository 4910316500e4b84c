// Inputs users trip on get exit 2 and one line that says what is wrong, however odd the input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/command_line_test.h"

namespace optpipe {
namespace {

using testing::CommandResult;
using testing::lines;
using BadInputCliTest = testing::CommandLineTest;

TEST_F(BadInputCliTest, ABinaryScheduleGivenForJsonIsNamed) {
  ASSERT_EQ(run("optpipe-compile", example("gpt-4rank.json") +
                                       " --method 1f1b --format bin -q -o " + path("s.opsched"))
                .exit_code,
            0);
  const CommandResult r =
      run("optpipe", "validate " + example("gpt-4rank.json") + " " + path("s.opsched"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("is a binary .opsched"), std::string::npos) << r.err;
}

TEST_F(BadInputCliTest, ANulByteIsNamedWithItsPlace) {
  write("nul.json", std::string("{\"format\": \"optpipe.profile/v1\",\0 }", 36));
  const CommandResult r = run("optpipe-compile", path("nul.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("nul.json:1:33: malformed JSON: a NUL byte"), std::string::npos) << r.err;
}

// JSON nested 100,000 deep crashed three tools (a recursive copy overflowed the stack): every
// reader refuses it with exit 2 and one line, wherever the depth is.
TEST_F(BadInputCliTest, DeeplyNestedJsonIsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ASSERT_EQ(run("optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -q -o " +
                                       path("s.json"))
                .exit_code,
            0);
  std::string text = slurp(path("s.json"));
  text.insert(text.rfind('}'), ", \"deep\": " + deep);
  write("deep-schedule.json", text);
  write("deep-config.json", "{\"model_type\": \"llama\", \"rope_scaling\": " + deep + "}");
  for (const auto& [tool, args] : std::vector<std::pair<std::string, std::string>>{
           {"optpipe", "validate " + example("gpt-4rank.json") + " " + path("deep-schedule.json")},
           {"optpipe", "render " + example("gpt-4rank.json") + " " + path("deep-schedule.json") +
                           " -o " + path("t.svg")},
           {"optpipe", "convert " + example("gpt-4rank.json") + " " + path("deep-schedule.json") +
                           " " + path("t.opsched")},
           {"optpipe", "estimate " + path("deep-config.json") + " -o " + path("p.json")}}) {
    const CommandResult r = run(tool, args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("nested deeper than 512 levels"), std::string::npos) << r.err;
  }
}

// --effort 1e15 overflowed the work counts into no work at all, reported as done.
TEST_F(BadInputCliTest, AnEffortPastTheLimitIsRefused) {
  const CommandResult r = run("optpipe-compile", example("gpt-4rank.json") + " --effort 1e15");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--effort: must be at most 1000000"), std::string::npos) << r.err;
}

TEST_F(BadInputCliTest, AnEndlessInputEndsInAnError) {
  const CommandResult r = run("optpipe-compile", "/dev/zero");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("larger than 2 GiB"), std::string::npos) << r.err;
}

TEST_F(BadInputCliTest, ControlCharactersInTheNameAreRefusedNotPrinted) {
  nlohmann::json profile = nlohmann::json::parse(slurp(example("gpt-4rank.json")));
  profile["name"] = "evil\x1b[31mred\nsecond line";
  write("evil.json", profile.dump());
  const CommandResult r = run("optpipe-compile", path("evil.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("name: must not contain control characters"), std::string::npos) << r.err;
  // C1 controls, line separators and direction overrides forge a terminal line as well, and a
  // name of pages buries the message: each is refused in one short line that does not print it.
  for (const std::string& name :
       std::vector<std::string>{"csi\xc2\x9b" "31m", "next\xc2\x85line", "rtl\xe2\x80\xae",
                                "sep\xe2\x80\xa8", std::string(200000, 'n')}) {
    profile["name"] = name;
    write("evil.json", profile.dump());
    const CommandResult again = run("optpipe-compile", path("evil.json"));
    EXPECT_EQ(again.exit_code, 2);
    EXPECT_EQ(lines(again.err), 1) << again.err;
    EXPECT_LT(again.err.size(), 300u) << again.err.substr(0, 300);
    EXPECT_EQ(again.err.find(name), std::string::npos);
  }
}

// At many ranks the exit-3 message names the first ranks that do not fit and counts the rest.
TEST_F(BadInputCliTest, TheOverBudgetMessageStaysOneShortLineAtManyRanks) {
  write("wide.json", R"({"format": "optpipe.profile/v1", "name": "wide",
    "pipeline": {"ranks": 64, "microbatches": 64},
    "stage_defaults": {"forward": 1, "backward_input": 1, "backward_weight": 1,
                       "activation_bytes": "1GiB"},
    "memory": {"budget_bytes": "1GiB"}})");
  const CommandResult r = run("optpipe-compile", path("wide.json") + " --method 1f1b");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("more ranks"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 600u) << r.err;
}

TEST_F(BadInputCliTest, SizesInScientificNotationAreBytes) {
  const CommandResult r = run(
      "optpipe-compile", example("gpt-4rank.json") +
                             " --method zb-auto --memory-budget 6.4e10 -q -o " + path("s.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(path("s.json")))["ranks"][0]["budget_bytes"], 64000000000);
}

}  // namespace
}  // namespace optpipe

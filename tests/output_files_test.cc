// What the tools' outputs do to what is already at their paths: regular files are replaced whole,
// symlinks are followed, devices are written through, and no output may overwrite an input or
// another output.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/command_line_test.h"

namespace optpipe {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;
using testing::lines;
using OutputFilesTest = testing::CommandLineTest;

TEST_F(OutputFilesTest, ADeviceIsWrittenThroughNotReplaced) {
  const CommandResult r =
      run("optpipe-compile",
          example("gpt-4rank.json") + " --method 1f1b -q -o /dev/null --summary-json /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(OutputFilesTest, AFifoReceivesTheOutputAndStaysAFifo) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  // A reader in the background; the compile writes the summary into the FIFO.
  const std::string command = "cat " + path("pipe") + " > " + path("from_pipe.json") + " &";
  ASSERT_EQ(std::system(command.c_str()), 0);
  const CommandResult r =
      run("optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -q -o " + path("s.json") +
                                 " --summary-json " + path("pipe"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(path("pipe")));
  for (int i = 0; i < 100 && slurp(path("from_pipe.json")).empty(); ++i) ::usleep(20000);
  EXPECT_EQ(nlohmann::json::parse(slurp(path("from_pipe.json")))["method"], "1f1b");
}

TEST_F(OutputFilesTest, ASymlinkIsFollowedAndKept) {
  write("target.json", "old");
  fs::create_symlink(path("target.json"), path("link.json"));
  const CommandResult r = run(
      "optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -q -o " + path("link.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(path("link.json")));
  EXPECT_EQ(nlohmann::json::parse(slurp(path("target.json")))["method"], "1f1b");
}

TEST_F(OutputFilesTest, AReplacedFileKeepsItsPermissionsAndNoTemporaryIsLeft) {
  write("s.json", "old");
  fs::permissions(path("s.json"), fs::perms::owner_read | fs::perms::owner_write);
  const CommandResult r =
      run("optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -q -o " + path("s.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fs::status(path("s.json")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST_F(OutputFilesTest, AnOutputOverAnInputIsRefusedAndTheInputKept) {
  fs::copy_file(example("gpt-4rank.json"), path("p.json"));
  const std::string profile = slurp(path("p.json"));
  CommandResult r = run("optpipe-compile", path("p.json") + " -o " + path("p.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("same file as profile"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(path("p.json")), profile);
  // Another name for the same file is the same file.
  fs::create_hard_link(path("p.json"), path("alias.json"));
  r = run("optpipe-compile", path("p.json") + " --summary-json " + path("alias.json"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(slurp(path("p.json")), profile);

  ASSERT_EQ(
      run("optpipe-compile", path("p.json") + " --method 1f1b -q -o " + path("s.json")).exit_code,
      0);
  const std::string schedule = slurp(path("s.json"));
  r = run("optpipe", "convert " + path("p.json") + " " + path("s.json") + " " + path("s.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(slurp(path("s.json")), schedule);
  r = run("optpipe", "validate " + path("p.json") + " " + path("s.json") + " --summary-json " +
                         path("s.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(slurp(path("s.json")), schedule);
}

TEST_F(OutputFilesTest, TwoOutputsOnOneFileAreRefused) {
  CommandResult r = run("optpipe-compile", example("gpt-4rank.json") + " -o " + path("f.json") +
                                               " --summary-json " + path("./f.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("same file as -o"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("f.json")));
  r = run("optpipe-compile", example("gpt-4rank.json") + " -o - --trace -");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("at most one output"), std::string::npos) << r.err;
}

TEST_F(OutputFilesTest, DashIsStdoutAndTheTablesMoveToStderr) {
  const CommandResult r = run("optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -o -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["method"], "1f1b");
  EXPECT_NE(r.err.find("makespan"), std::string::npos);
  EXPECT_FALSE(fs::exists("-"));
}

TEST_F(OutputFilesTest, EmptyPathsAndBudgetsAreRefused) {
  for (const char* flags : {"-o ''", "--memory-budget ''", "--summary-json ''", "--trace ''"}) {
    const CommandResult r = run("optpipe-compile", example("gpt-4rank.json") + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_NE(r.err.find("must not be empty"), std::string::npos) << flags << ": " << r.err;
  }
}

TEST_F(OutputFilesTest, VersionIsPrinted) {
  for (const char* tool : {"optpipe", "optpipe-compile"}) {
    const CommandResult r = run(tool, "--version");
    EXPECT_EQ(r.exit_code, 0) << tool;
    EXPECT_NE(r.out.find(tool), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace optpipe

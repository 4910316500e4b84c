// Running the built executables from a test: a scratch directory per test, the exit code and
// both output streams of each run.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace optpipe::testing {

struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};

// OPTPIPE_SOURCE_DIR and OPTPIPE_BIN_DIR come from tests/CMakeLists.txt.
class CommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs tests in parallel.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("optpipe_") + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  // OPTPIPE_KEEP_TEST_DIR=1 keeps the directory, to look at what a failing test wrote.
  void TearDown() override {
    if (!std::getenv("OPTPIPE_KEEP_TEST_DIR")) std::filesystem::remove_all(dir_);
  }

  static std::string example(const std::string& name) {
    return std::string(OPTPIPE_SOURCE_DIR) + "/examples/" + name;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  CommandResult run(const std::string& tool, const std::string& args) const {
    const int status = std::system(command_line(tool, args).c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout.txt")),
            slurp(path("stderr.txt"))};
  }

  // Starts the tool in the background, its output going where run() puts it: the shell execs it,
  // so the pid is the tool's (to signal and wait for).
  pid_t start(const std::string& tool, const std::string& args) const {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string command = "exec " + command_line(tool, args);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  }

  static std::string slurp(const std::string& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
  }

  std::filesystem::path dir_;

 private:
  std::string command_line(const std::string& tool, const std::string& args) const {
    return std::string(OPTPIPE_BIN_DIR) + "/" + tool + " " + args + " >" + path("stdout.txt") +
           " 2>" + path("stderr.txt") + " </dev/null";
  }
};

inline int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace optpipe::testing

// `--export-torch-csv`, `--torch-dialect`, `--trace` and `optpipe render` end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/command_line_test.h"

namespace optpipe {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;
using testing::lines;
using ExportsCliTest = testing::CommandLineTest;

TEST_F(ExportsCliTest, CompileWritesTorchCsvAndTraceBesideTheSchedule) {
  const CommandResult r =
      run("optpipe-compile", example("gpt-4rank.json") + " -o " + path("s.json") +
                                 " --export-torch-csv " + path("s.csv") + " --trace " +
                                 path("s.trace.json") + " --summary-json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NO_THROW(nlohmann::json::parse(r.out));  // the notes go to stderr with --summary-json -
  EXPECT_NE(r.err.find("PyTorch CSV written to"), std::string::npos);
  const std::string csv = slurp(path("s.csv"));
  EXPECT_EQ(lines(csv), 4);  // one row per rank
  EXPECT_EQ(csv.rfind("0F0", 0), 0u);
  const auto trace = nlohmann::json::parse(slurp(path("s.trace.json")));
  EXPECT_FALSE(trace["traceEvents"].empty());
}

TEST_F(ExportsCliTest, Dialect25UsesBAndWOnly) {
  const CommandResult r =
      run("optpipe-compile", example("gpt-4rank.json") + " --method 1f1b -q -o " + path("s.json") +
                                 " --export-torch-csv " + path("s.csv") + " --torch-dialect 2.5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = slurp(path("s.csv"));
  EXPECT_EQ(csv.find('I'), std::string::npos);
  EXPECT_NE(csv.find("0W0"), std::string::npos);
}

TEST_F(ExportsCliTest, UnknownDialectIsBadInputOnOneLine) {
  const CommandResult r =
      run("optpipe-compile", example("gpt-4rank.json") + " -o " + path("s.json") +
                                 " --export-torch-csv " + path("s.csv") + " --torch-dialect 2.4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--torch-dialect"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("s.json")));
}

// Paths written only after the optimiser's run are checked before it, so that a typo costs
// nothing: one line naming the path, exit 2, no schedule written.
TEST_F(ExportsCliTest, UnwritableExportPathsFailBeforeCompiling) {
  for (const std::string flag : {"--trace", "--export-torch-csv", "--summary-json"}) {
    const CommandResult r =
        run("optpipe-compile", example("gpt-4rank.json") + " --time-limit 600 -o " +
                                   path("s.json") + " " + flag + " " + path("missing/out"));
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("cannot write " + path("missing/out") + ": No such file or directory"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(path("s.json"))) << flag;
  }
  const CommandResult r = run("optpipe-compile", example("gpt-4rank.json") + " -o " +
                                                     path("s.json") + " --trace " + path(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("it is a directory"), std::string::npos) << r.err;
}

TEST_F(ExportsCliTest, Dialect25RefusesVShapeBeforeCompiling) {
  const CommandResult r =
      run("optpipe-compile", example("gpt-8rank-vshape.json") + " -o " + path("s.json") +
                                 " --export-torch-csv " + path("s.csv") + " --torch-dialect 2.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--torch-dialect 2.6"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("s.json")));
}

TEST_F(ExportsCliTest, RenderWritesSvgAndHtml) {
  ASSERT_EQ(
      run("optpipe-compile", example("gpt-4rank.json") + " -q -o " + path("s.json")).exit_code, 0);
  const CommandResult svg = run("optpipe", "render " + example("gpt-4rank.json") + " " +
                                               path("s.json") + " -o " + path("t.svg"));
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  EXPECT_EQ(slurp(path("t.svg")).rfind("<?xml", 0), 0u);
  const CommandResult html = run("optpipe", "render " + example("gpt-4rank.json") + " " +
                                                path("s.json") + " -o " + path("t.html"));
  ASSERT_EQ(html.exit_code, 0) << html.err;
  EXPECT_EQ(slurp(path("t.html")).rfind("<!DOCTYPE html>", 0), 0u);
}

TEST_F(ExportsCliTest, RenderRejectsOtherExtensionsAndOtherProfiles) {
  ASSERT_EQ(
      run("optpipe-compile", example("gpt-4rank.json") + " -q -o " + path("s.json")).exit_code, 0);
  const CommandResult png = run("optpipe", "render " + example("gpt-4rank.json") + " " +
                                               path("s.json") + " -o " + path("t.png"));
  EXPECT_EQ(png.exit_code, 2);
  EXPECT_NE(png.err.find(".svg or .html"), std::string::npos);
  const CommandResult other = run("optpipe", "render " + example("gpt-8rank.json") + " " +
                                                 path("s.json") + " -o " + path("t.svg"));
  EXPECT_EQ(other.exit_code, 4);
  EXPECT_NE(other.err.find("another profile"), std::string::npos);
}

}  // namespace
}  // namespace optpipe

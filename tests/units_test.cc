// Sizes as people write them (formats/units.h): what parse_size accepts, and its one-line messages
// for what it does not.
#include "formats/units.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "model/errors.h"

namespace optpipe {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

TEST(ParseSize, AcceptsBytesAndUnits) {
  const std::pair<const char*, int64_t> cases[] = {
      {"0", 0},
      {"123", 123},
      {"123B", 123},
      {"123 B", 123},
      {"100KB", 100'000},
      {"1.5GB", 1'500'000'000},
      {"2TB", 2'000'000'000'000},
      {"1KiB", 1024},
      {"1.5KiB", 1536},
      {"512MiB", 512 * kMiB},
      {"40GiB", 40 * kGiB},
      {"40 GiB", 40 * kGiB},
      {"2TiB", 2048 * kGiB},
      {"1.0B", 1},
      {"0.1KB", 100},
      {"1125899906842624", int64_t{1} << 50},
  };
  for (const auto& [text, bytes] : cases) EXPECT_EQ(parse_size(text, "size"), bytes) << text;
}

// Byte counts as shells and scripts print them.
TEST(ParseSize, AcceptsScientificNotation) {
  EXPECT_EQ(parse_size("1e9", "--memory-budget"), 1000000000);
  EXPECT_EQ(parse_size("6.4E10", "--memory-budget"), 64000000000);
}

TEST(ParseSize, RejectsWithOneLineNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "must be a size like"},
      {"abc", "must be a size like"},
      {"-1GiB", "must be a size like"},
      {"+1GiB", "must be a size like"},
      {" 5", "must be a size like"},
      {"5.", "must be a size like"},
      {".5GiB", "must be a size like"},
      {"1e9.5", "unknown unit \"e9.5\""},
      {"1.5e0", "must be a whole number of bytes"},
      {"2e15", "must be at most 1024TiB"},
      {"1.5", "must be a whole number of bytes"},
      {"1.5B", "must be a whole number of bytes"},
      {"40gib", "did you mean \"GiB\"?"},
      {"40 parsecs", "unknown unit \"parsecs\""},
      {"1125899906842625", "must be at most 1024TiB"},
      {"99999999999999999999999", "must be at most 1024TiB"},
      {"99999999999TiB", "must be at most 1024TiB"},
      {"1025TiB", "must be at most 1024TiB"},
      {"40GiB\nextra", "unknown unit"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    try {
      parse_size(text, "--memory-budget");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("--memory-budget: ", 0), 0u) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace optpipe

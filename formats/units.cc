#include "formats/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "formats/json_fields.h"
#include "model/errors.h"

namespace optpipe {

namespace {

using nlohmann::json;

struct SizeUnit {
  std::string_view name;
  int64_t bytes;
};

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = kKiB << 10;
constexpr int64_t kGiB = kMiB << 10;
constexpr int64_t kTiB = kGiB << 10;
constexpr int64_t kTB = 1'000'000'000'000;
// Binary units first, largest first: format_bytes() picks from them.
constexpr size_t kNumBinaryUnits = 4;
constexpr std::array<SizeUnit, 10> kSizeUnits = {{
    {"TiB", kTiB},
    {"GiB", kGiB},
    {"MiB", kMiB},
    {"KiB", kKiB},
    {"TB", kTB},
    {"GB", 1'000'000'000},
    {"MB", 1'000'000},
    {"KB", 1'000},
    {"B", 1},
    {"", 1},
}};

// A size as written: "<digits>[.<digits>][ ...]<unit>", split but not yet checked.
struct WrittenSize {
  uint64_t whole = 0;
  double fraction = 0;  // the ".<digits>" part
  std::string_view unit;
};

std::optional<WrittenSize> split_size(std::string_view text) {
  WrittenSize size;
  const char* const end = text.data() + text.size();
  auto [cursor, error] = std::from_chars(text.data(), end, size.whole);
  if (error == std::errc::result_out_of_range) {
    size.whole = std::numeric_limits<uint64_t>::max();  // too large, whatever the unit
  } else if (error != std::errc()) {
    return std::nullopt;
  }
  if (cursor != end && *cursor == '.') {
    const char* digits_end = cursor + 1;
    while (digits_end != end && *digits_end >= '0' && *digits_end <= '9') ++digits_end;
    if (digits_end == cursor + 1) return std::nullopt;
    std::from_chars(cursor, digits_end, size.fraction);  // ".25" -> 0.25
    cursor = digits_end;
  }
  while (cursor != end && *cursor == ' ') ++cursor;
  size.unit = std::string_view(cursor, end - cursor);
  return size;
}

}  // namespace

int64_t parse_size(std::string_view text, const std::string& field) {
  auto fail = [&](std::string_view what, std::string_view fix = {}) -> int64_t {
    throw InputError(fmt::format("{}: {}, got {}{}{}", field, what,
                                 preview_json(json(std::string(text))), fix.empty() ? "" : "; ",
                                 fix));
  };
  // A byte count in scientific notation, as shells and scripts print them: "1e9", "6.4e10".
  if (text.find_first_of("eE") != std::string_view::npos) {
    double bytes = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
    if (error == std::errc() && end == text.data() + text.size()) {
      if (!(bytes >= 0) || bytes != std::floor(bytes))
        return fail("must be a whole number of bytes");
      if (bytes > static_cast<double>(kMaxSizeBytes)) return fail("must be at most 1024TiB");
      return static_cast<int64_t>(bytes);
    }
  }
  const std::optional<WrittenSize> written = split_size(text);
  if (!written) return fail(R"(must be a size like 123, "512MiB" or "1.5GB")");
  const auto unit = std::find_if(kSizeUnits.begin(), kSizeUnits.end(),
                                 [&](const SizeUnit& u) { return u.name == written->unit; });
  if (unit == kSizeUnits.end()) {
    std::vector<std::string_view> names;
    for (const SizeUnit& u : kSizeUnits) {
      if (!u.name.empty()) names.push_back(u.name);
    }
    const auto suggestion = nearest_name(written->unit, names);
    return fail(fmt::format("has unknown unit {}", preview_json(json(std::string(written->unit)))),
                suggestion ? fmt::format("did you mean \"{}\"?", *suggestion)
                           : "use B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB");
  }
  if (unit->bytes == 1 && written->fraction != 0) return fail("must be a whole number of bytes");
  const double approximate =
      (static_cast<double>(written->whole) + written->fraction) * static_cast<double>(unit->bytes);
  if (approximate > static_cast<double>(kMaxSizeBytes)) return fail("must be at most 1024TiB");
  // Exact for the whole part; a fraction of a unit rounds to the nearest byte.
  return static_cast<int64_t>(written->whole) * unit->bytes +
         std::llround(written->fraction * static_cast<double>(unit->bytes));
}

std::string format_bytes(int64_t bytes) {
  const auto binary_units = std::span(kSizeUnits).first(kNumBinaryUnits);
  for (const SizeUnit& unit : binary_units) {
    if (bytes != 0 && bytes % unit.bytes == 0) {
      return fmt::format("{}{}", bytes / unit.bytes, unit.name);
    }
  }
  for (const SizeUnit& unit : binary_units) {
    if (bytes >= unit.bytes) {
      return fmt::format("{}B (~{:.2f}{})", bytes,
                         static_cast<double>(bytes) / static_cast<double>(unit.bytes), unit.name);
    }
  }
  return fmt::format("{}B", bytes);
}

std::string format_bytes_short(int64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (unit + 1 < kUnits.size() && (value >= 1024 || value <= -1024)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace optpipe

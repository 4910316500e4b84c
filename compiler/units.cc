#include "compiler/units.h"

#include <fmt/format.h>

#include <array>

namespace optpipe {

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

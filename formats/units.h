// Sizes as people read and write them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace optpipe {

// The largest size a profile or flag may give: far beyond any device, and far from overflow in
// sums of bytes over a whole schedule.
inline constexpr int64_t kMaxSizeBytes = int64_t{1} << 50;  // 1024TiB

// "40GiB", "512MiB", "1.5GB", "123" or "123B" -> bytes. Throws InputError naming `field`.
int64_t parse_size(std::string_view text, const std::string& field);

// "10GiB" when exact, else the byte count with an approximation: messages quote sizes this way.
std::string format_bytes(int64_t bytes);

// "61.25 GiB", "512 MiB", "800 B": for tables.
std::string format_bytes_short(int64_t bytes);

}  // namespace optpipe

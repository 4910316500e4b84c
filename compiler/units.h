// Sizes as people read them.
#pragma once

#include <cstdint>
#include <string>

namespace optpipe {

// "61.25 GiB", "512 MiB", "800 B": for tables.
std::string format_bytes_short(int64_t bytes);

}  // namespace optpipe

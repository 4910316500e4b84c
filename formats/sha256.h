// SHA-256 through OpenSSL: names profiles in schedule files and keys the schedule cache.
#pragma once

#include <string>
#include <string_view>

namespace optpipe {

// Lowercase hex digest of `text`.
std::string sha256_hex(std::string_view text);

}  // namespace optpipe

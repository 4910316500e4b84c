// Whole-file reads and atomic writes (temp file + rename), so a reader never sees half a file.
#pragma once

#include <string>
#include <string_view>

namespace optpipe {

// InputError "cannot read <path>: <reason>" when the file cannot be read.
std::string read_text_file(const std::string& path);

// Writes `content` to `path` via a temporary file in the same directory and a rename; InputError
// naming the path when it cannot.
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace optpipe

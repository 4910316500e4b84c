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

// The same InputError as write_file_atomically would throw where `path` cannot be written: its
// directory is missing or read-only, or it is a directory. For paths written only after a long
// run, checked before it.
void check_writable(const std::string& path);

}  // namespace optpipe

// Whole-file reads and atomic writes (temp file + rename), so a reader never sees half a file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace optpipe {

// The most read_text_file reads: a schedule of R = 64, m = 65,536 with offloads is about 1 GiB.
inline constexpr size_t kMaxInputBytes = size_t{2} << 30;

// InputError "cannot read <path>: <reason>" when the file cannot be read or is larger than
// kMaxInputBytes.
std::string read_text_file(const std::string& path);

// Writes `content` to `path`, "-" meaning stdout. A regular file (or none) is replaced whole: the
// content goes to a temporary file in the same directory, is flushed to disk, and is renamed over
// it, keeping the old file's permissions. A symlink is followed, so its target is what is
// replaced. Anything else (a device such as /dev/null, a FIFO, a terminal) is written through,
// never replaced. InputError naming the path when it cannot.
void write_file_atomically(const std::string& path, std::string_view content);

// A directory's own entry, for files optpipe owns there (the schedule cache): the content of
// `path` when it is a regular file; nullopt when it is missing, or anything else (a symlink is
// not followed, a FIFO or device is not opened for long: open never blocks), or unreadable, or
// larger than kMaxInputBytes.
std::optional<std::string> read_own_file(const std::string& path);

// Replaces the directory entry `path` itself with a regular file of `content` (temporary file,
// flushed, renamed over it): a symlink there is replaced, not followed, and a FIFO or device is
// replaced, not written into. InputError naming the path when it cannot.
void replace_own_file(const std::string& path, std::string_view content);

// InputError (exit 2) when two of these paths name the same existing regular file (same device
// and inode, whatever the names), naming both roles: an output would overwrite an input, or
// another output. Each entry is {role, path}, e.g. {"-o", "s.json"}, {"profile", "p.json"}; empty
// paths and "-" are skipped. Devices, FIFOs and missing files are not compared.
void check_distinct_files(const std::vector<std::pair<std::string, std::string>>& inputs,
                          const std::vector<std::pair<std::string, std::string>>& outputs);

// The same InputError as write_file_atomically would throw where `path` cannot be written: its
// directory is missing or read-only, or it is a directory. For paths written only after a long
// run, checked before it.
void check_writable(const std::string& path);

}  // namespace optpipe

#include "formats/file_io.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/errors.h"

namespace optpipe {

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(fmt::format("cannot read {}: it is a directory", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("cannot read {}: read error", path));
  return text.str();
}

void write_file_atomically(const std::string& path, std::string_view content) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw InputError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    }
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      throw InputError(fmt::format("cannot write {}: write failed (disk full?)", path));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temp.c_str());
    throw InputError(fmt::format("cannot write {}: {}", path, std::strerror(error)));
  }
}

void check_writable(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(fmt::format("cannot write {}: it is a directory", path));
  }
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  const std::string where = directory.empty() ? "." : directory.string();
  if (::access(where.c_str(), W_OK) != 0) {
    throw InputError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
}

}  // namespace optpipe

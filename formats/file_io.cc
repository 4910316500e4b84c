#include "formats/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "model/errors.h"

namespace optpipe {

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(fmt::format("cannot read {}: it is a directory", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  // Read in blocks up to the limit, so /dev/zero or a runaway pipe ends in an error, not the OOM
  // killer.
  std::string text;
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    text.append(block.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInputBytes) {
      throw InputError(fmt::format("cannot read {}: larger than {} GiB, the most optpipe reads",
                                   path, kMaxInputBytes >> 30));
    }
  }
  if (in.bad()) throw InputError(fmt::format("cannot read {}: read error", path));
  return text;
}

namespace {

[[noreturn]] void write_failed(const std::string& path, int error) {
  throw InputError(fmt::format("cannot write {}: {}", path, std::strerror(error)));
}

void write_all(int fd, const std::string& path, std::string_view content) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      write_failed(path, errno);
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
}

// Where writing `path` lands: the end of its chain of symlinks.
std::string resolve_symlinks(const std::string& path) {
  std::filesystem::path target = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(target, ec))) break;
    const std::filesystem::path link = std::filesystem::read_symlink(target, ec);
    if (ec) break;
    target = link.is_absolute() ? link : target.parent_path() / link;
  }
  return target.string();
}

void write_through(const std::string& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) write_failed(path, errno);
  try {
    write_all(fd, path, content);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void replace_regular_file(const std::string& path, const std::string& target,
                          std::string_view content, const struct stat* existing) {
  const std::filesystem::path where = std::filesystem::path(target).parent_path();
  const std::string temp =
      (where /
       fmt::format(".{}.tmp.{}", std::filesystem::path(target).filename().string(), ::getpid()))
          .string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) write_failed(path, errno);
  auto fail = [&](int error) {
    ::close(fd);
    ::unlink(temp.c_str());
    write_failed(path, error);
  };
  try {
    write_all(fd, path, content);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (existing && ::fchmod(fd, existing->st_mode & 07777) != 0) fail(errno);
  // On disk before the rename, so a crash leaves the old file or the new one, never an empty one.
  if (::fsync(fd) != 0) fail(errno);
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    write_failed(path, errno);
  }
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    write_failed(path, error);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view content) {
  if (path == "-") {
    std::cout.write(content.data(), static_cast<std::streamsize>(content.size()));
    std::cout.flush();
    if (!std::cout) throw InputError("cannot write to stdout");
    return;
  }
  if (path.empty()) throw InputError("cannot write an empty path: name a file, or - for stdout");
  const std::string target = resolve_symlinks(path);
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) {
    if (S_ISDIR(existing.st_mode)) {
      throw InputError(fmt::format("cannot write {}: it is a directory", path));
    }
    if (!S_ISREG(existing.st_mode)) return write_through(target, content);
    return replace_regular_file(path, target, content, &existing);
  }
  replace_regular_file(path, target, content, nullptr);
}

std::optional<std::string> read_own_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) <= kMaxInputBytes) {
    text.emplace();
    std::vector<char> block(1 << 20);
    for (;;) {
      const ssize_t n = ::read(fd, block.data(), block.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || text->size() + static_cast<size_t>(n) > kMaxInputBytes) {
        text.reset();
        break;
      }
      if (n == 0) break;
      text->append(block.data(), static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return text;
}

void replace_own_file(const std::string& path, std::string_view content) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw InputError(fmt::format("cannot write {}: it is a directory", path));
  }
  replace_regular_file(path, path, content, nullptr);
}

void check_distinct_files(const std::vector<std::pair<std::string, std::string>>& inputs,
                          const std::vector<std::pair<std::string, std::string>>& outputs) {
  // An existing regular file is known by device and inode; one still to be written by its path.
  struct Seen {
    std::string role, path;
    bool exists;
    dev_t device;
    ino_t inode;
    std::string canonical;
  };
  std::vector<Seen> seen;
  auto visit = [&](const std::pair<std::string, std::string>& entry, bool is_output) {
    const auto& [role, path] = entry;
    if (path.empty() || path == "-") return;
    struct stat st {};
    Seen here{role, path, ::stat(path.c_str(), &st) == 0, st.st_dev, st.st_ino, {}};
    if (here.exists && !S_ISREG(st.st_mode)) return;
    if (!here.exists) {
      std::error_code ec;
      here.canonical =
          std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec).string();
      if (ec) return;
    }
    for (const Seen& other : is_output ? seen : std::vector<Seen>{}) {
      const bool same =
          here.exists ? other.exists && other.device == here.device && other.inode == here.inode
                      : !other.exists && other.canonical == here.canonical;
      if (same) {
        throw InputError(
            fmt::format("{} {}: is the same file as {} {}, which writing it would "
                        "destroy; choose another path",
                        role, path, other.role, other.path));
      }
    }
    seen.push_back(std::move(here));
  };
  for (const auto& entry : inputs) visit(entry, false);
  for (const auto& entry : outputs) visit(entry, true);
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

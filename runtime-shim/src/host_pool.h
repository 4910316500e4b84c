// First-fit allocator over one pinned host buffer: offsets only, the memory belongs to the backend.
// The same allocator sizes the pool (schedule_data.cc replays a rank's order) and serves it at
// run time, so a run in schedule order always fits.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

namespace optpipe::rt {

class HostPool {
 public:
  static constexpr int64_t kAlignment = 256;  // keeps DMA-friendly alignment of every slot

  explicit HostPool(int64_t capacity) : capacity_(capacity) {}

  // Offset of a free block of `bytes`, or nullopt when none is large enough.
  std::optional<int64_t> allocate(int64_t bytes) {
    const int64_t size = round_up(bytes);
    int64_t cursor = 0;
    for (const auto& [offset, length] : used_) {
      if (offset - cursor >= size) break;
      cursor = offset + length;
    }
    if (cursor + size > capacity_) return std::nullopt;
    used_[cursor] = size;
    in_use_ += size;
    high_water_ = std::max(high_water_, cursor + size);
    return cursor;
  }
  void free(int64_t offset) {
    auto it = used_.find(offset);
    if (it == used_.end()) return;
    in_use_ -= it->second;
    used_.erase(it);
  }
  int64_t in_use() const { return in_use_; }
  int64_t capacity() const { return capacity_; }
  int64_t high_water() const { return high_water_; }
  static int64_t round_up(int64_t bytes) {
    return (std::max<int64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  }

 private:
  int64_t capacity_;
  int64_t in_use_ = 0;
  int64_t high_water_ = 0;
  std::map<int64_t, int64_t> used_;  // offset -> rounded size
};

}  // namespace optpipe::rt

// Best-fit allocator over one pinned host buffer: offsets only, the memory belongs to the backend.
// The same allocator sizes the pool (schedule_data.cc replays a rank's order) and serves it at
// run time, so a run in schedule order always fits. Free gaps are kept by size and by offset, so
// an allocation or a free costs O(log n) however many slots a schedule takes (a first-fit scan
// over the slots took 10 s to size a hostile file's 65,536 offloads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace optpipe::rt {

class HostPool {
 public:
  static constexpr int64_t kAlignment = 256;  // keeps DMA-friendly alignment of every slot

  explicit HostPool(int64_t capacity) : capacity_(capacity) {
    if (capacity_ > 0) add_gap(0, capacity_);
  }

  // Offset of the smallest free block of `bytes` (the lowest of equal ones), or nullopt when
  // none is large enough (or `bytes` is negative).
  std::optional<int64_t> allocate(int64_t bytes) {
    if (bytes < 0 || bytes > capacity_) return std::nullopt;  // round_up cannot overflow now
    const int64_t size = round_up(bytes);
    const auto fit = gaps_by_size_.lower_bound({size, 0});
    if (fit == gaps_by_size_.end()) return std::nullopt;
    const auto [gap, offset] = *fit;
    remove_gap(offset, gap);
    if (gap > size) add_gap(offset + size, gap - size);
    used_[offset] = size;
    in_use_ += size;
    high_water_ = std::max(high_water_, offset + size);
    return offset;
  }

  // Frees the slot at `offset` (nothing when none starts there), merged with free neighbours.
  void free(int64_t offset) {
    const auto slot = used_.find(offset);
    if (slot == used_.end()) return;
    int64_t begin = offset;
    int64_t end = offset + slot->second;
    in_use_ -= slot->second;
    used_.erase(slot);
    if (const auto after = gaps_.find(end); after != gaps_.end()) {
      end += after->second;
      remove_gap(after->first, after->second);
    }
    if (const auto after = gaps_.lower_bound(begin); after != gaps_.begin()) {
      const auto before = std::prev(after);
      if (before->first + before->second == begin) {
        begin = before->first;
        remove_gap(before->first, before->second);
      }
    }
    add_gap(begin, end - begin);
  }

  int64_t in_use() const { return in_use_; }
  int64_t capacity() const { return capacity_; }
  int64_t high_water() const { return high_water_; }
  static int64_t round_up(int64_t bytes) {
    return (std::max<int64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  }

 private:
  void add_gap(int64_t offset, int64_t size) {
    gaps_.emplace(offset, size);
    gaps_by_size_.emplace(size, offset);
  }
  void remove_gap(int64_t offset, int64_t size) {
    gaps_.erase(offset);
    gaps_by_size_.erase({size, offset});
  }

  int64_t capacity_;
  int64_t in_use_ = 0;
  int64_t high_water_ = 0;
  std::map<int64_t, int64_t> used_;                     // offset -> rounded size
  std::map<int64_t, int64_t> gaps_;                     // free: offset -> size
  std::set<std::pair<int64_t, int64_t>> gaps_by_size_;  // free: (size, offset)
};

}  // namespace optpipe::rt

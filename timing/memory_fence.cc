#include "timing/memory_fence.h"

#include <algorithm>

namespace optpipe {

void MemoryFence::record(double start, double end, const MemoryEffect& effect, bool offload) {
  // Later queries ask no earlier than `start`: releases by then are for good.
  last_start_ = std::max(last_start_, start);
  std::erase_if(releases_, [&](const Release& r) {
    if (r.end > start) return false;
    live_ -= r.bytes;
    return true;
  });
  live_ += effect.allocated_at_start;
  if (effect.released_at_end > 0) releases_.push_back({end, effect.released_at_end, offload});
}

int64_t MemoryFence::live_at(double t) const {
  int64_t live = live_;
  for (const Release& r : releases_) {
    if (r.end <= t) live -= r.bytes;  // at equal times releases come first
  }
  return live;
}

std::optional<double> MemoryFence::earliest_fit(double t, int64_t bytes) const {
  t = std::max(t, last_start_);
  if (live_at(t) + bytes <= budget_) return t;
  std::vector<double> offload_ends;
  for (const Release& r : releases_) {
    if (r.offload && r.end > t) offload_ends.push_back(r.end);
  }
  std::sort(offload_ends.begin(), offload_ends.end());
  for (double end : offload_ends) {
    if (live_at(end) + bytes <= budget_) return end;
  }
  return std::nullopt;
}

int64_t MemoryFence::shortfall(double t, int64_t bytes) const {
  t = std::max(t, last_start_);
  int64_t pending_offloads = 0;
  for (const Release& r : releases_) {
    if (r.offload && r.end > t) pending_offloads += r.bytes;
  }
  return live_at(t) + bytes - pending_offloads - budget_;
}

}  // namespace optpipe

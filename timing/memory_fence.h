// The runtime shim's memory fence (docs/runtime-shim.md) as the simulator applies it: before an
// allocation (F, R, RELOAD) a rank waits for the offloads that free the bytes it needs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "timing/memory_timeline.h"

namespace optpipe {

// One rank's live activation bytes while the simulator commits actions in start order.
class MemoryFence {
 public:
  explicit MemoryFence(int64_t activation_budget) : budget_(activation_budget) {}

  // A committed action; `start` is no earlier than that of any action recorded before.
  void record(double start, double end, const MemoryEffect& effect, bool offload);

  // The earliest time >= `t` at which `bytes` more fit under the budget, when it is `t` or the end
  // of a recorded offload; nullopt when the recorded offloads do not free enough. Never earlier
  // than the last recorded start: the releases before it are no longer told apart, and an
  // allocation that waited (a RELOAD issued earlier, held for memory) starts no earlier than what
  // took the memory meanwhile.
  std::optional<double> earliest_fit(double t, int64_t bytes) const;

  // What `bytes` more at `t` (no earlier than the last recorded start) would still exceed the
  // budget by once every recorded offload has ended (positive when earliest_fit() is nullopt).
  int64_t shortfall(double t, int64_t bytes) const;

 private:
  struct Release {
    double end;
    int64_t bytes;
    bool offload;
  };
  int64_t live_at(double t) const;

  int64_t budget_;
  double last_start_ = 0;
  int64_t live_ = 0;               // allocations recorded less the releases pruned from releases_
  std::vector<Release> releases_;  // recorded releases that may still lie ahead of a query
};

}  // namespace optpipe

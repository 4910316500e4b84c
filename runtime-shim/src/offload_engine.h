// The offload engine of one rank (docs/design.md §9): moves activations keyed by (stage,
// microbatch) to slots of a pinned host pool and back on the backend's copy channels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backend.h"
#include "host_pool.h"

namespace optpipe::rt {

struct TransferStats {
  int64_t bytes = 0;
  double seconds = 0;
  int count = 0;
};

// One contiguous piece of an activation in device memory (a storage's bytes that its saved
// tensors view); an activation is offloaded as a list of them, packed into one host slot.
struct Segment {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

class OffloadEngine {
 public:
  // Allocates the pool now; throws RtError(E_HOST_POOL) naming the size when it cannot or when it
  // exceeds `pool_limit_bytes` (> 0). `planned_bytes` holds the bytes the schedule's OFFLOAD of
  // each (stage, microbatch) moves: a smaller offload still takes a slot of that size, so the pool
  // serves the same requests, in the same order, as the replay that sized it
  // (host_pool_bytes_for), and never runs out where that replay fits.
  OffloadEngine(Backend& backend, int64_t pool_bytes, int64_t pool_limit_bytes, bool verify,
                std::map<std::pair<int, int>, int64_t> planned_bytes = {});
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  // Copies the segments, in order, into one slot: each starts at a multiple of kSegmentAlignment
  // of the slot, so any dtype can view it once reloaded into one buffer.
  void offload(int stage, int microbatch, const std::vector<Segment>& segments);
  void offload(int stage, int microbatch, const void* device_ptr, size_t bytes) {
    offload(stage, microbatch, std::vector<Segment>{{device_ptr, bytes}});
  }
  // Into one device buffer of offloaded_bytes (the slot's packed layout) ...
  void reload(int stage, int microbatch, void* device_ptr);
  // ... or back into one buffer per offloaded segment, of the same sizes.
  void reload(int stage, int microbatch, const std::vector<void*>& targets);
  void wait(int stage, int microbatch);
  void synchronize(int stage, int microbatch);
  bool done(int stage, int microbatch);
  void release(int stage, int microbatch);
  // Waits for every copy and frees every slot (after a failed run, so the next starts clean).
  void reset();
  bool holds(int stage, int microbatch) const { return slots_.count({stage, microbatch}) > 0; }
  // The packed bytes of (stage, mb)'s slot: its segments with the alignment between them.
  size_t offloaded_bytes(int stage, int microbatch) const;
  // The sizes of (stage, mb)'s offloaded segments, in the offload's order (none: not offloaded).
  std::vector<size_t> segment_bytes(int stage, int microbatch) const;
  static constexpr size_t kSegmentAlignment = 16;

  int64_t used_bytes() const { return pool_.in_use(); }
  int64_t capacity_bytes() const { return pool_.capacity(); }
  // Bytes and copy time of finished transfers since the last call, per direction.
  std::pair<TransferStats, TransferStats> take_transfer_stats();

 private:
  struct Slot {
    int64_t offset = 0;
    size_t bytes = 0;                            // packed
    std::vector<std::pair<size_t, size_t>> at;  // per segment: offset in the slot, bytes
    std::vector<void*> reload_targets;           // per segment
    // A channel runs its copies one at a time, so the last of each list ends them all.
    std::vector<std::shared_ptr<Transfer>> offloads, reloads;
    std::shared_ptr<Transfer> offload, reload;
    bool offload_counted = false, reload_counted = false;
    uint32_t checksum = 0;
  };
  Slot& slot(int stage, int microbatch, const char* what);
  Transfer& latest(Slot& s, int stage, int microbatch, const char* what);
  void count(Slot& s);
  uint32_t checksum(const Slot& s, bool host) const;

  Backend& backend_;
  HostPool pool_;
  uint8_t* host_ = nullptr;
  bool verify_;
  std::map<std::pair<int, int>, int64_t> planned_bytes_;
  std::map<std::pair<int, int>, Slot> slots_;
  TransferStats d2h_, h2d_;
};

}  // namespace optpipe::rt

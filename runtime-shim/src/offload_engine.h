// The offload engine of one rank (docs/design.md §9): moves activations keyed by (stage,
// microbatch) to slots of a pinned host pool and back on the backend's copy channels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "backend.h"
#include "host_pool.h"

namespace optpipe::rt {

struct TransferStats {
  int64_t bytes = 0;
  double seconds = 0;
  int count = 0;
};

class OffloadEngine {
 public:
  // Allocates the pool now; throws RtError(E_HOST_POOL) naming the size when it cannot or when it
  // exceeds `pool_limit_bytes` (> 0).
  OffloadEngine(Backend& backend, int64_t pool_bytes, int64_t pool_limit_bytes, bool verify);
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  void offload(int stage, int microbatch, const void* device_ptr, size_t bytes);
  void reload(int stage, int microbatch, void* device_ptr);
  void wait(int stage, int microbatch);
  void synchronize(int stage, int microbatch);
  bool done(int stage, int microbatch);
  void release(int stage, int microbatch);
  // Waits for every copy and frees every slot (after a failed run, so the next starts clean).
  void reset();
  bool holds(int stage, int microbatch) const { return slots_.count({stage, microbatch}) > 0; }
  size_t offloaded_bytes(int stage, int microbatch) const;

  int64_t used_bytes() const { return pool_.in_use(); }
  int64_t capacity_bytes() const { return pool_.capacity(); }
  // Bytes and copy time of finished transfers since the last call, per direction.
  std::pair<TransferStats, TransferStats> take_transfer_stats();

 private:
  struct Slot {
    int64_t offset = 0;
    size_t bytes = 0;
    void* reload_target = nullptr;
    std::shared_ptr<Transfer> offload, reload;
    bool offload_counted = false, reload_counted = false;
    uint32_t checksum = 0;
  };
  Slot& slot(int stage, int microbatch, const char* what);
  Transfer& latest(Slot& s, int stage, int microbatch, const char* what);
  void count(Slot& s);

  Backend& backend_;
  HostPool pool_;
  uint8_t* host_ = nullptr;
  bool verify_;
  std::map<std::pair<int, int>, Slot> slots_;
  TransferStats d2h_, h2d_;
};

}  // namespace optpipe::rt

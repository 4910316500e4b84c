#include "offload_engine.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optpipe_opsched_format.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {
std::string key_name(int stage, int microbatch) {
  return "(stage " + std::to_string(stage) + ", microbatch " + std::to_string(microbatch) + ")";
}
}  // namespace

OffloadEngine::OffloadEngine(Backend& backend, int64_t pool_bytes, int64_t pool_limit_bytes,
                             bool verify, std::map<std::pair<int, int>, int64_t> planned_bytes)
    : backend_(backend), pool_(pool_bytes), verify_(verify),
      planned_bytes_(std::move(planned_bytes)) {
  if (pool_limit_bytes > 0 && pool_bytes > pool_limit_bytes) {
    throw RtError(OPTPIPE_RT_E_HOST_POOL,
                  "the schedule needs a pinned host pool of " + std::to_string(pool_bytes) +
                      " bytes (its most concurrently offloaded bytes), above the limit of " +
                      std::to_string(pool_limit_bytes));
  }
  if (pool_bytes > 0) host_ = static_cast<uint8_t*>(backend_.allocate_pinned(pool_bytes));
}

OffloadEngine::~OffloadEngine() {
  try {
    backend_.synchronize_all();
    if (host_ != nullptr) backend_.free_pinned(host_);
  } catch (...) {
    // Destructors run from optpipe_rt_rank_close, which reports nothing.
  }
}

OffloadEngine::Slot& OffloadEngine::slot(int stage, int microbatch, const char* what) {
  auto it = slots_.find({stage, microbatch});
  if (it == slots_.end()) {
    throw RtError(OPTPIPE_RT_E_STATE, std::string(what) + " of " + key_name(stage, microbatch) +
                                          ", which is not offloaded");
  }
  return it->second;
}

Transfer& OffloadEngine::latest(Slot& s, int stage, int microbatch, const char* what) {
  if (s.reload) return *s.reload;
  if (s.offload) return *s.offload;
  throw RtError(OPTPIPE_RT_E_STATE,
                std::string(what) + ": no transfer of " + key_name(stage, microbatch));
}

uint32_t OffloadEngine::checksum(const Slot& s, bool host) const {
  uint32_t crc = 0;
  for (size_t i = 0; i < s.at.size(); ++i) {
    const void* from = host ? static_cast<const void*>(host_ + s.offset + s.at[i].first)
                            : s.reload_targets[i];
    crc = opsched_crc32(crc, from, s.at[i].second);
  }
  return crc;
}

void OffloadEngine::offload(int stage, int microbatch, const std::vector<Segment>& segments) {
  size_t packed = 0;
  std::vector<std::pair<size_t, size_t>> at;
  for (const Segment& g : segments) {
    if (g.ptr == nullptr && g.bytes > 0) {
      throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                    "offload of " + key_name(stage, microbatch) + ": null device pointer");
    }
    const size_t begin = (packed + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
    if (begin < packed || begin + g.bytes < begin ||
        begin + g.bytes > static_cast<size_t>(INT64_MAX)) {
      packed = SIZE_MAX;  // no pool holds it: refused below
      break;
    }
    at.emplace_back(begin, g.bytes);
    packed = begin + g.bytes;
  }
  if (slots_.count({stage, microbatch})) {
    throw RtError(OPTPIPE_RT_E_STATE,
                  "offload of " + key_name(stage, microbatch) + ", which is already offloaded");
  }
  const auto plan = planned_bytes_.find({stage, microbatch});
  const int64_t planned = plan == planned_bytes_.end() ? 0 : plan->second;
  const int64_t request = packed > static_cast<size_t>(INT64_MAX)
                              ? -1
                              : std::max(static_cast<int64_t>(packed), planned);
  const auto offset = pool_.allocate(request);
  if (!offset) {
    std::string why = "offload of " + key_name(stage, microbatch) + ": " +
                      std::to_string(packed) + " bytes do not fit the host pool (" +
                      std::to_string(pool_.in_use()) + " of " + std::to_string(pool_.capacity()) +
                      " bytes in use)";
    if (packed <= static_cast<size_t>(INT64_MAX) && static_cast<int64_t>(packed) > planned &&
        planned > 0) {
      why += "; the schedule planned " + std::to_string(planned) +
             " bytes for this offload: the profile understates the stage's activation (measure "
             "it again, docs/runtime-shim.md)";
    } else {
      why += "; release reloaded activations or raise host_pool_bytes";
    }
    throw RtError(OPTPIPE_RT_E_POOL_EXHAUSTED, why);
  }
  Slot& s = slots_[{stage, microbatch}];
  s.offset = *offset;
  s.bytes = packed;
  s.at = std::move(at);
  // The CPU backend's "device" memory is readable now; on CUDA the host copy is summed at reload.
  if (verify_ && backend_.kind() == OPTPIPE_RT_BACKEND_CPU) {
    for (size_t i = 0; i < s.at.size(); ++i)
      s.checksum = opsched_crc32(s.checksum, segments[i].ptr, s.at[i].second);
  }
  // An empty segment copies nothing, from a valid pointer (memcpy's arguments must be).
  std::shared_ptr<Transfer> previous;
  for (size_t i = 0; i < s.at.size(); ++i) {
    uint8_t* to = host_ + s.offset + s.at[i].first;
    previous = backend_.copy(Direction::kDeviceToHost, to, s.at[i].second ? segments[i].ptr : to,
                             s.at[i].second, previous);
    s.offloads.push_back(previous);
  }
  if (!previous) {
    previous = backend_.copy(Direction::kDeviceToHost, host_ + s.offset, host_ + s.offset, 0,
                             nullptr);
  }
  s.offload = previous;
}

void OffloadEngine::reload(int stage, int microbatch, void* device_ptr) {
  Slot& s = slot(stage, microbatch, "reload");
  if (device_ptr == nullptr && s.bytes > 0) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                  "reload of " + key_name(stage, microbatch) + ": null device pointer");
  }
  std::vector<void*> targets;
  for (const auto& segment : s.at)
    targets.push_back(static_cast<uint8_t*>(device_ptr) + segment.first);
  reload(stage, microbatch, targets);
}

void OffloadEngine::reload(int stage, int microbatch, const std::vector<void*>& targets) {
  Slot& s = slot(stage, microbatch, "reload");
  if (s.reload) {
    throw RtError(OPTPIPE_RT_E_STATE, "reload of " + key_name(stage, microbatch) + " issued twice");
  }
  if (targets.size() != s.at.size()) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                  "reload of " + key_name(stage, microbatch) + ": " +
                      std::to_string(targets.size()) + " target buffers for " +
                      std::to_string(s.at.size()) + " offloaded segments");
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == nullptr && s.at[i].second > 0) {
      throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                    "reload of " + key_name(stage, microbatch) + ": null device pointer");
    }
  }
  if (verify_ && backend_.kind() != OPTPIPE_RT_BACKEND_CPU) {
    s.offload->synchronize();
    s.checksum = checksum(s, true);
  }
  s.reload_targets = targets;
  std::shared_ptr<Transfer> previous = s.offload;
  for (size_t i = 0; i < targets.size(); ++i) {
    uint8_t* from = host_ + s.offset + s.at[i].first;
    previous = backend_.copy(Direction::kHostToDevice, s.at[i].second ? targets[i] : from, from,
                             s.at[i].second, previous);
    s.reloads.push_back(previous);
  }
  if (targets.empty()) {
    previous = backend_.copy(Direction::kHostToDevice, host_ + s.offset, host_ + s.offset, 0,
                             previous);
  }
  s.reload = previous;
}

void OffloadEngine::wait(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "wait");
  backend_.compute_wait(latest(s, stage, microbatch, "wait"));
  if (verify_ && s.reload && backend_.kind() == OPTPIPE_RT_BACKEND_CPU &&
      checksum(s, false) != s.checksum) {
    throw RtError(OPTPIPE_RT_E_CORRUPT, "reloaded " + key_name(stage, microbatch) +
                                            " differs from what was offloaded (checksum)");
  }
}

void OffloadEngine::synchronize(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "synchronize");
  latest(s, stage, microbatch, "synchronize").synchronize();
}

bool OffloadEngine::done(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "transfer_done");
  return latest(s, stage, microbatch, "transfer_done").done();
}

size_t OffloadEngine::offloaded_bytes(int stage, int microbatch) const {
  auto it = slots_.find({stage, microbatch});
  return it == slots_.end() ? 0 : it->second.bytes;
}

std::vector<size_t> OffloadEngine::segment_bytes(int stage, int microbatch) const {
  std::vector<size_t> sizes;
  if (auto it = slots_.find({stage, microbatch}); it != slots_.end()) {
    for (const auto& segment : it->second.at) sizes.push_back(segment.second);
  }
  return sizes;
}

void OffloadEngine::count(Slot& s) {
  auto add = [&](TransferStats& stats, const std::vector<std::shared_ptr<Transfer>>& copies) {
    for (size_t i = 0; i < copies.size(); ++i) {
      stats.bytes += static_cast<int64_t>(s.at[i].second);
      stats.seconds += copies[i]->seconds();
    }
    ++stats.count;
  };
  if (s.offload && !s.offload_counted) {
    add(d2h_, s.offloads);
    s.offload_counted = true;
  }
  if (s.reload && !s.reload_counted) {
    add(h2d_, s.reloads);
    s.reload_counted = true;
  }
}

void OffloadEngine::release(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "release");
  // Nothing is reused before its copy has ended: a later offload may land in this slot.
  if (s.offload) s.offload->synchronize();
  if (s.reload) s.reload->synchronize();
  if (verify_ && backend_.kind() != OPTPIPE_RT_BACKEND_CPU &&
      checksum(s, true) != s.checksum) {
    throw RtError(OPTPIPE_RT_E_CORRUPT, "host copy of " + key_name(stage, microbatch) +
                                            " changed while it was offloaded (checksum)");
  }
  count(s);
  pool_.free(s.offset);
  slots_.erase({stage, microbatch});
}

void OffloadEngine::reset() {
  backend_.synchronize_all();
  for (const auto& [key, slot] : slots_) pool_.free(slot.offset);
  slots_.clear();
}

std::pair<TransferStats, TransferStats> OffloadEngine::take_transfer_stats() {
  auto stats = std::make_pair(d2h_, h2d_);
  d2h_ = {};
  h2d_ = {};
  return stats;
}

}  // namespace optpipe::rt

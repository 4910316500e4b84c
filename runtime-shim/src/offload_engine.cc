#include "offload_engine.h"

#include <string>

#include "optpipe_opsched_format.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {
std::string key_name(int stage, int microbatch) {
  return "(stage " + std::to_string(stage) + ", microbatch " + std::to_string(microbatch) + ")";
}
}  // namespace

OffloadEngine::OffloadEngine(Backend& backend, int64_t pool_bytes, int64_t pool_limit_bytes,
                             bool verify)
    : backend_(backend), pool_(pool_bytes), verify_(verify) {
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

void OffloadEngine::offload(int stage, int microbatch, const void* device_ptr, size_t bytes) {
  if (device_ptr == nullptr && bytes > 0) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                  "offload of " + key_name(stage, microbatch) + ": null device pointer");
  }
  if (slots_.count({stage, microbatch})) {
    throw RtError(OPTPIPE_RT_E_STATE,
                  "offload of " + key_name(stage, microbatch) + ", which is already offloaded");
  }
  const auto offset = pool_.allocate(static_cast<int64_t>(bytes));
  if (!offset) {
    throw RtError(OPTPIPE_RT_E_POOL_EXHAUSTED,
                  "offload of " + key_name(stage, microbatch) + ": " + std::to_string(bytes) +
                      " bytes do not fit the host pool (" + std::to_string(pool_.in_use()) +
                      " of " + std::to_string(pool_.capacity()) +
                      " bytes in use); release reloaded activations or raise host_pool_bytes");
  }
  Slot& s = slots_[{stage, microbatch}];
  s.offset = *offset;
  s.bytes = bytes;
  // The CPU backend's "device" memory is readable now; on CUDA the host copy is summed at reload.
  if (verify_ && backend_.kind() == OPTPIPE_RT_BACKEND_CPU) {
    s.checksum = opsched_crc32(0, device_ptr, bytes);
  }
  s.offload = backend_.copy(Direction::kDeviceToHost, host_ + s.offset, device_ptr, bytes, nullptr);
}

void OffloadEngine::reload(int stage, int microbatch, void* device_ptr) {
  Slot& s = slot(stage, microbatch, "reload");
  if (s.reload) {
    throw RtError(OPTPIPE_RT_E_STATE, "reload of " + key_name(stage, microbatch) + " issued twice");
  }
  if (device_ptr == nullptr && s.bytes > 0) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                  "reload of " + key_name(stage, microbatch) + ": null device pointer");
  }
  if (verify_ && backend_.kind() != OPTPIPE_RT_BACKEND_CPU) {
    s.offload->synchronize();
    s.checksum = opsched_crc32(0, host_ + s.offset, s.bytes);
  }
  s.reload_target = device_ptr;
  s.reload =
      backend_.copy(Direction::kHostToDevice, device_ptr, host_ + s.offset, s.bytes, s.offload);
}

void OffloadEngine::wait(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "wait");
  backend_.compute_wait(latest(s, stage, microbatch, "wait"));
  if (verify_ && s.reload && backend_.kind() == OPTPIPE_RT_BACKEND_CPU &&
      opsched_crc32(0, s.reload_target, s.bytes) != s.checksum) {
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

void OffloadEngine::count(Slot& s) {
  if (s.offload && !s.offload_counted) {
    d2h_.bytes += static_cast<int64_t>(s.bytes);
    d2h_.seconds += s.offload->seconds();
    ++d2h_.count;
    s.offload_counted = true;
  }
  if (s.reload && !s.reload_counted) {
    h2d_.bytes += static_cast<int64_t>(s.bytes);
    h2d_.seconds += s.reload->seconds();
    ++h2d_.count;
    s.reload_counted = true;
  }
}

void OffloadEngine::release(int stage, int microbatch) {
  Slot& s = slot(stage, microbatch, "release");
  // Nothing is reused before its copy has ended: a later offload may land in this slot.
  if (s.offload) s.offload->synchronize();
  if (s.reload) s.reload->synchronize();
  if (verify_ && backend_.kind() != OPTPIPE_RT_BACKEND_CPU &&
      opsched_crc32(0, host_ + s.offset, s.bytes) != s.checksum) {
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

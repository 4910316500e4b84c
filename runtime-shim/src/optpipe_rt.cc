// The C ABI (include/optpipe_rt.h): argument checks, and every C++ failure turned into a status
// plus a thread-local message here, once.
#include "optpipe_rt.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "issue_order.h"
#include "rank_runtime.h"
#include "rt_error.h"
#include "schedule_data.h"

struct optpipe_rt_schedule {
  std::shared_ptr<const optpipe::rt::ScheduleData> data;
};

struct optpipe_rt_rank {
  optpipe::rt::RankRuntime runtime;
};

namespace {

using optpipe::rt::RtError;

thread_local std::string last_error;

optpipe_rt_status fail(optpipe_rt_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

// Runs `body`, mapping every exception to a status; nothing escapes into C.
template <typename Body>
optpipe_rt_status guarded(Body&& body) {
  try {
    last_error.clear();
    body();
    return OPTPIPE_RT_OK;
  } catch (const RtError& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(OPTPIPE_RT_E_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(OPTPIPE_RT_E_INTERNAL, e.what());
  } catch (...) {
    return fail(OPTPIPE_RT_E_INTERNAL, "unknown exception");
  }
}

void require(bool ok, const char* message) {
  if (!ok) throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT, message);
}

void require(bool ok, const std::string& message) {
  require(ok, message.c_str());
}

optpipe_rt_status open_bytes(const uint8_t* data, size_t size, optpipe_rt_schedule** out,
                             const std::string& source) {
  auto parsed = std::make_shared<optpipe::rt::ScheduleData>();
  std::string message;
  const optpipe_rt_status status = optpipe::rt::parse_opsched(data, size, parsed.get(), &message);
  if (status != OPTPIPE_RT_OK)
    return fail(status, source.empty() ? message : source + ": " + message);
  *out = new optpipe_rt_schedule{std::move(parsed)};
  return OPTPIPE_RT_OK;
}

}  // namespace

extern "C" {

const char* optpipe_rt_strerror(optpipe_rt_status status) {
  switch (status) {
    case OPTPIPE_RT_OK:
      return "ok";
    case OPTPIPE_RT_E_INVALID_ARGUMENT:
      return "invalid argument";
    case OPTPIPE_RT_E_IO:
      return "cannot read or write the file";
    case OPTPIPE_RT_E_TRUNCATED:
      return "schedule file truncated";
    case OPTPIPE_RT_E_BAD_MAGIC:
      return "not an .opsched schedule file";
    case OPTPIPE_RT_E_WRONG_ENDIAN:
      return "schedule file has the wrong byte order";
    case OPTPIPE_RT_E_VERSION:
      return "unsupported schedule file version";
    case OPTPIPE_RT_E_CHECKSUM:
      return "schedule file checksum mismatch (corrupted)";
    case OPTPIPE_RT_E_CORRUPT:
      return "schedule file or data inconsistent (corrupted)";
    case OPTPIPE_RT_E_HOST_POOL:
      return "cannot allocate the pinned host pool";
    case OPTPIPE_RT_E_POOL_EXHAUSTED:
      return "host pool exhausted";
    case OPTPIPE_RT_E_BACKEND:
      return "backend (CUDA or copy thread) call failed";
    case OPTPIPE_RT_E_UNAVAILABLE:
      return "backend not available in this build";
    case OPTPIPE_RT_E_STATE:
      return "operation not valid in the current state";
    case OPTPIPE_RT_E_CALLBACK:
      return "a trainer callback failed";
    case OPTPIPE_RT_E_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* optpipe_rt_last_error(void) {
  return last_error.c_str();
}

int optpipe_rt_abi_version(void) {
  return OPTPIPE_RT_ABI_VERSION;
}

optpipe_rt_status optpipe_rt_schedule_open(const char* path, optpipe_rt_schedule** out) {
  if (path == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  std::vector<uint8_t> bytes;
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return fail(OPTPIPE_RT_E_IO,
                  std::string("cannot read ") + path + ": " + std::strerror(errno));
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return fail(OPTPIPE_RT_E_IO, std::string("cannot read ") + path);
  } catch (...) {
    return fail(OPTPIPE_RT_E_IO, std::string("cannot read ") + path);
  }
  return open_bytes(bytes.data(), bytes.size(), out, path);
}

optpipe_rt_status optpipe_rt_schedule_open_memory(const void* data, size_t size,
                                                  optpipe_rt_schedule** out) {
  if (out == nullptr || (data == nullptr && size > 0)) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  }
  *out = nullptr;
  optpipe_rt_status status = OPTPIPE_RT_OK;
  const optpipe_rt_status guard =
      guarded([&] { status = open_bytes(static_cast<const uint8_t*>(data), size, out, ""); });
  return guard != OPTPIPE_RT_OK ? guard : status;
}

void optpipe_rt_schedule_close(optpipe_rt_schedule* schedule) {
  delete schedule;
}

optpipe_rt_status optpipe_rt_schedule_get_info(const optpipe_rt_schedule* schedule,
                                               optpipe_rt_schedule_info* out) {
  if (schedule == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  *out = schedule->data->info;
  return OPTPIPE_RT_OK;
}

optpipe_rt_status optpipe_rt_schedule_get_stage(const optpipe_rt_schedule* schedule, int stage,
                                                optpipe_rt_stage_info* out) {
  if (schedule == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  if (stage < 0 || stage >= schedule->data->info.stages) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "stage " + std::to_string(stage) + " out of range");
  }
  *out = schedule->data->stages[stage];
  return OPTPIPE_RT_OK;
}

optpipe_rt_status optpipe_rt_schedule_get_rank(const optpipe_rt_schedule* schedule, int rank,
                                               optpipe_rt_rank_info* out) {
  if (schedule == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  if (rank < 0 || rank >= schedule->data->info.ranks) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "rank " + std::to_string(rank) + " out of range");
  }
  *out = schedule->data->ranks[rank];
  return OPTPIPE_RT_OK;
}

optpipe_rt_status optpipe_rt_schedule_get_action(const optpipe_rt_schedule* schedule, int rank,
                                                 int index, optpipe_rt_action* out) {
  if (schedule == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  if (rank < 0 || rank >= schedule->data->info.ranks) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "rank " + std::to_string(rank) + " out of range");
  }
  const auto& actions = schedule->data->actions[rank];
  if (index < 0 || static_cast<size_t>(index) >= actions.size()) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "action index " + std::to_string(index) +
                                                   " out of range (rank has " +
                                                   std::to_string(actions.size()) + ")");
  }
  *out = actions[index];
  return OPTPIPE_RT_OK;
}

optpipe_rt_status optpipe_rt_schedule_issue_order(const optpipe_rt_schedule* schedule, int rank,
                                                  int32_t* indices, int capacity, int* count) {
  if (schedule == nullptr || count == nullptr || (capacity > 0 && indices == nullptr))
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  if (rank < 0 || rank >= schedule->data->info.ranks) {
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "rank " + std::to_string(rank) + " out of range");
  }
  return guarded([&] {
    const std::vector<size_t> order = optpipe::rt::issue_order(schedule->data->actions[rank]);
    *count = static_cast<int>(order.size());
    require(capacity >= 0 && order.size() <= static_cast<size_t>(capacity),
            "issue order of rank " + std::to_string(rank) + ": " + std::to_string(order.size()) +
                " actions, room for " + std::to_string(capacity));
    for (size_t i = 0; i < order.size(); ++i) indices[i] = static_cast<int32_t>(order[i]);
  });
}

void optpipe_rt_config_init(optpipe_rt_config* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof *config);
  config->struct_size = sizeof *config;
  config->backend = OPTPIPE_RT_BACKEND_AUTO;
  config->channel_mode = OPTPIPE_RT_CHANNELS_OF_SCHEDULE;
}

optpipe_rt_status optpipe_rt_rank_open(const optpipe_rt_schedule* schedule, int rank,
                                       const optpipe_rt_config* config, optpipe_rt_rank** out) {
  if (schedule == nullptr || out == nullptr)
    return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  return guarded([&] {
    // A caller built against an older header passes a shorter struct: its fields, then defaults.
    optpipe_rt_config c;
    optpipe_rt_config_init(&c);
    if (config) {
      require(config->struct_size >= offsetof(optpipe_rt_config, backend) + sizeof c.backend,
              "config->struct_size is " + std::to_string(config->struct_size) +
                  ": call optpipe_rt_config_init, or set it to sizeof(optpipe_rt_config)");
      std::memcpy(&c, config, std::min<size_t>(config->struct_size, sizeof c));
      c.struct_size = sizeof c;
    }
    const auto& data = *schedule->data;
    require(rank >= 0 && rank < data.info.ranks, "rank out of range");
    require(c.channel_mode >= -1 && c.channel_mode <= 1, "channel_mode must be -1, 0 or 1");
    require(c.host_pool_bytes >= 0 && c.host_pool_limit_bytes >= 0, "negative pool size");
    require(c.cpu_emulated_bytes_per_second >= 0, "negative emulated bandwidth");
    optpipe::rt::BackendOptions options;
    options.channel_mode = c.channel_mode >= 0 ? c.channel_mode : data.info.channel_mode;
    options.cuda_device = c.cuda_device;
    options.cuda_compute_stream = c.cuda_compute_stream;
    options.cpu_emulated_bytes_per_second = c.cpu_emulated_bytes_per_second;
    auto handle = std::make_unique<optpipe_rt_rank>();
    optpipe::rt::RankRuntime& rt = handle->runtime;
    rt.schedule = schedule->data;
    rt.rank = rank;
    rt.recomputed = optpipe::rt::recomputed_activations(data, rank);
    switch (c.backend) {
      case OPTPIPE_RT_BACKEND_CPU:
        rt.backend = optpipe::rt::make_cpu_backend(options);
        break;
      case OPTPIPE_RT_BACKEND_CUDA:
        rt.backend = optpipe::rt::make_cuda_backend(options);
        break;
      case OPTPIPE_RT_BACKEND_AUTO:
        rt.backend = optpipe::rt::cuda_backend_usable() ? optpipe::rt::make_cuda_backend(options)
                                                        : optpipe::rt::make_cpu_backend(options);
        break;
      default:
        throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT, "unknown backend");
    }
    const int64_t pool =
        c.host_pool_bytes > 0 ? c.host_pool_bytes : data.ranks[rank].host_pool_bytes;
    try {
      std::map<std::pair<int, int>, int64_t> planned;
      for (const optpipe_rt_action& a : data.actions[rank]) {
        if (a.op == OPTPIPE_RT_OP_OFFLOAD) planned[{a.stage, a.microbatch}] = a.bytes;
      }
      rt.engine = std::make_unique<optpipe::rt::OffloadEngine>(
          *rt.backend, pool, c.host_pool_limit_bytes, c.verify_checksums != 0, std::move(planned));
    } catch (const RtError& e) {
      throw RtError(e.status(), "rank " + std::to_string(rank) + ": " + e.what());
    }
    *out = handle.release();
  });
}

optpipe_rt_status optpipe_rt_open(const char* path, int rank, const optpipe_rt_config* config,
                                  optpipe_rt_rank** out) {
  optpipe_rt_schedule* schedule = nullptr;
  optpipe_rt_status status = optpipe_rt_schedule_open(path, &schedule);
  if (status != OPTPIPE_RT_OK) return status;
  status = optpipe_rt_rank_open(schedule, rank, config, out);
  optpipe_rt_schedule_close(schedule);
  return status;
}

void optpipe_rt_rank_close(optpipe_rt_rank* rank) {
  if (rank == nullptr) return;
  try {
    rank->runtime.engine.reset();  // before its backend
    rank->runtime.backend.reset();
  } catch (...) {
  }
  delete rank;
}

int optpipe_rt_rank_backend(const optpipe_rt_rank* rank) {
  return rank ? rank->runtime.backend->kind() : -1;
}

// Checks the handle, then runs the body guarded (variadic: bodies contain commas).
#define OPTPIPE_RT_RANK_CALL(rank, ...)                                                    \
  do {                                                                                     \
    if ((rank) == nullptr) return fail(OPTPIPE_RT_E_INVALID_ARGUMENT, "null rank handle"); \
    return guarded([&] { __VA_ARGS__; });                                                  \
  } while (0)

namespace {
void check_key(const optpipe_rt_rank* rank, int stage, int microbatch) {
  const auto& data = *rank->runtime.schedule;
  if (stage < 0 || stage >= data.info.stages || microbatch < 0 ||
      microbatch >= data.info.microbatches) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT, "stage " + std::to_string(stage) +
                                                     " / microbatch " + std::to_string(microbatch) +
                                                     " out of range");
  }
}
}  // namespace

optpipe_rt_status optpipe_rt_offload(optpipe_rt_rank* rank, int stage, int microbatch,
                                     const void* device_ptr, size_t bytes) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       rank->runtime.engine->offload(stage, microbatch, device_ptr, bytes));
}

optpipe_rt_status optpipe_rt_offload_segments(optpipe_rt_rank* rank, int stage, int microbatch,
                                              const void* const* device_ptrs, const size_t* bytes,
                                              size_t count) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       require(count == 0 || (device_ptrs && bytes), "null segment arrays");
                       std::vector<optpipe::rt::Segment> segments(count);
                       for (size_t i = 0; i < count; ++i) segments[i] = {device_ptrs[i], bytes[i]};
                       rank->runtime.engine->offload(stage, microbatch, segments));
}

optpipe_rt_status optpipe_rt_reload_segments(optpipe_rt_rank* rank, int stage, int microbatch,
                                             void* const* device_ptrs, size_t count) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       require(count == 0 || device_ptrs, "null segment array");
                       rank->runtime.engine->reload(
                           stage, microbatch,
                           std::vector<void*>(device_ptrs, device_ptrs + count)));
}

optpipe_rt_status optpipe_rt_reload(optpipe_rt_rank* rank, int stage, int microbatch,
                                    void* device_ptr) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       rank->runtime.engine->reload(stage, microbatch, device_ptr));
}

optpipe_rt_status optpipe_rt_wait(optpipe_rt_rank* rank, int stage, int microbatch) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       rank->runtime.engine->wait(stage, microbatch));
}

optpipe_rt_status optpipe_rt_synchronize(optpipe_rt_rank* rank, int stage, int microbatch) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       rank->runtime.engine->synchronize(stage, microbatch));
}

optpipe_rt_status optpipe_rt_transfer_done(optpipe_rt_rank* rank, int stage, int microbatch,
                                           int* done) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch); require(done, "null done");
                       *done = rank->runtime.engine->done(stage, microbatch) ? 1 : 0);
}

optpipe_rt_status optpipe_rt_release(optpipe_rt_rank* rank, int stage, int microbatch) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       rank->runtime.engine->release(stage, microbatch);
                       const auto [d2h, h2d] = rank->runtime.engine->take_transfer_stats();
                       rank->runtime.recorder.add_transfers(d2h, h2d));
}

optpipe_rt_status optpipe_rt_host_pool_usage(const optpipe_rt_rank* rank, int64_t* used_bytes,
                                             int64_t* capacity_bytes) {
  OPTPIPE_RT_RANK_CALL(
      rank, if (used_bytes)* used_bytes = rank->runtime.engine->used_bytes();
      if (capacity_bytes)* capacity_bytes = rank->runtime.engine->capacity_bytes());
}

optpipe_rt_status optpipe_rt_recomputed(const optpipe_rt_rank* rank, int stage, int microbatch,
                                        int* recomputed) {
  OPTPIPE_RT_RANK_CALL(rank, check_key(rank, stage, microbatch);
                       require(recomputed, "null recomputed");
                       *recomputed = rank->runtime.recomputed.count({stage, microbatch}) ? 1 : 0);
}

void optpipe_rt_callbacks_init(optpipe_rt_callbacks* callbacks) {
  if (callbacks == nullptr) return;
  std::memset(callbacks, 0, sizeof *callbacks);
  callbacks->struct_size = sizeof *callbacks;
}

namespace {

// The caller's callbacks as this library knows them: hooks past its struct_size are NULL.
optpipe_rt_callbacks known_callbacks(const optpipe_rt_callbacks& given) {
  optpipe_rt_callbacks known;
  optpipe_rt_callbacks_init(&known);
  require(given.struct_size >= offsetof(optpipe_rt_callbacks, forward),
          "callbacks->struct_size is " + std::to_string(given.struct_size) +
              ": call optpipe_rt_callbacks_init, or set it to "
              "sizeof(optpipe_rt_callbacks)");
  std::memcpy(&known, &given, std::min<size_t>(given.struct_size, sizeof known));
  known.struct_size = sizeof known;
  return known;
}

}  // namespace

optpipe_rt_status optpipe_rt_run(optpipe_rt_rank* rank, const optpipe_rt_callbacks* callbacks,
                                 void* user) {
  OPTPIPE_RT_RANK_CALL(rank, require(callbacks, "null callbacks");
                       optpipe::rt::run_rank(rank->runtime, known_callbacks(*callbacks), user));
}

optpipe_rt_status optpipe_rt_measured(const optpipe_rt_rank* rank, int op, int stage,
                                      double* median, int* samples) {
  OPTPIPE_RT_RANK_CALL(rank, require(median && samples, "null output");
                       require(optpipe::rt::is_compute_op(op), "op must be F, B, W, BW or R");
                       const auto [value, count] = rank->runtime.recorder.median(op, stage);
                       *median = value; *samples = count);
}

optpipe_rt_status optpipe_rt_measured_bandwidth(const optpipe_rt_rank* rank, double* d2h,
                                                int* d2h_copies, double* h2d, int* h2d_copies) {
  OPTPIPE_RT_RANK_CALL(
      rank, const auto& rec = rank->runtime.recorder;
      const double unit = rank->runtime.seconds_to_time_unit();
      auto bw =
          [&](const optpipe::rt::TransferStats& t) {
            return t.seconds > 0 ? t.bytes / (t.seconds * unit) : 0.0;
          };
      if (d2h)* d2h = bw(rec.d2h()); if (h2d)* h2d = bw(rec.h2d());
      if (d2h_copies)* d2h_copies = rec.d2h().count; if (h2d_copies)* h2d_copies = rec.h2d().count);
}

optpipe_rt_status optpipe_rt_last_makespan(const optpipe_rt_rank* rank, double* makespan) {
  OPTPIPE_RT_RANK_CALL(rank, require(makespan, "null output");
                       *makespan = rank->runtime.recorder.last_makespan);
}

optpipe_rt_status optpipe_rt_write_measured_profile(const optpipe_rt_rank* const* ranks, size_t n,
                                                    const char* name, const char* path) {
  return guarded([&] {
    require(ranks != nullptr && n > 0, "no rank handles");
    std::vector<const optpipe::rt::RankRuntime*> runtimes;
    for (size_t i = 0; i < n; ++i) {
      require(ranks[i] != nullptr, "null rank handle");
      runtimes.push_back(&ranks[i]->runtime);
    }
    optpipe::rt::write_measured_profile(runtimes.data(), n, name, path);
  });
}

}  // extern "C"

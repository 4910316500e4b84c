// Pinned D2H/H2D bandwidth through the shim's CUDA offload engine against a plain
// cudaMemcpyAsync loop on the same pinned memory (tools/gpu-check.sh). Also checks that an
// offload/reload round trip returns the same bytes. Exit 1 when the engine reaches less than
// 90% of the plain loop or the bytes differ.
#include <cuda_runtime.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "optpipe_opsched_format.h"
#include "optpipe_rt.h"

namespace {

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(2);
  }
}

void rt_check(optpipe_rt_status status, const char* what) {
  if (status != OPTPIPE_RT_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, optpipe_rt_strerror(status),
                 optpipe_rt_last_error());
    std::exit(2);
  }
}

// The one-rank schedule the copies run under (layout: optpipe_opsched_format.h): a single stage
// whose F allocates `bytes`, all of them offloadable, over a host link of 1e9 bytes per ms each
// way. Written here, with the shim's own layout, so that the shim's tools need nothing of the
// compiler.
std::string one_stage_schedule(size_t bytes) {
  static_assert(std::endian::native == std::endian::little, "the layout is little-endian");
  const size_t stage_table = OPSCHED_HEADER_SIZE;
  const size_t rank_table = stage_table + OPSCHED_STAGE_RECORD_SIZE;
  const size_t action = rank_table + OPSCHED_RANK_RECORD_SIZE;
  const size_t trailer = action + OPSCHED_ACTION_RECORD_SIZE;
  std::string file(trailer + OPSCHED_TRAILER_SIZE, '\0');
  auto put = [&file](size_t at, auto value) {
    std::memcpy(file.data() + at, &value, sizeof value);
  };
  const int64_t size = static_cast<int64_t>(bytes);
  std::memcpy(file.data() + OPSCHED_OFF_MAGIC, OPSCHED_MAGIC, 8);
  put(OPSCHED_OFF_BOM, uint32_t{OPSCHED_BYTE_ORDER_MARK});
  put(OPSCHED_OFF_VERSION, uint32_t{OPSCHED_VERSION});
  put(OPSCHED_OFF_FLAGS, uint32_t{1});  // has an offload link
  put(OPSCHED_OFF_FILE_SIZE, uint64_t{file.size()});
  put(OPSCHED_OFF_RANKS, uint32_t{1});
  put(OPSCHED_OFF_STAGES, uint32_t{1});
  put(OPSCHED_OFF_MICROBATCHES, uint32_t{1});
  put(OPSCHED_OFF_CHUNKS, uint32_t{1});
  put(OPSCHED_OFF_CHANNELS, uint8_t{1});  // duplex
  put(OPSCHED_OFF_STAGE_RECORD_SIZE, uint32_t{OPSCHED_STAGE_RECORD_SIZE});
  put(OPSCHED_OFF_RANK_RECORD_SIZE, uint32_t{OPSCHED_RANK_RECORD_SIZE});
  put(OPSCHED_OFF_ACTION_RECORD_SIZE, uint32_t{OPSCHED_ACTION_RECORD_SIZE});
  put(OPSCHED_OFF_D2H_BW, 1e9);
  put(OPSCHED_OFF_H2D_BW, 1e9);
  put(OPSCHED_OFF_STAGE_TABLE, uint64_t{stage_table});
  put(OPSCHED_OFF_RANK_TABLE, uint64_t{rank_table});
  const char method[] = "bandwidth";
  std::memcpy(file.data() + OPSCHED_OFF_METHOD, method, sizeof method - 1);
  put(stage_table + OPSCHED_STAGE_OFF_FORWARD, 1.0);
  put(stage_table + OPSCHED_STAGE_OFF_BINPUT, 1.0);
  put(stage_table + OPSCHED_STAGE_OFF_BWEIGHT, 1.0);
  put(stage_table + OPSCHED_STAGE_OFF_ACT, size);
  put(stage_table + OPSCHED_STAGE_OFF_OFFL, size);
  put(stage_table + OPSCHED_STAGE_OFF_CHECKPOINT, int64_t{-1});  // cannot recompute
  put(rank_table + OPSCHED_RANK_OFF_BUDGET, 4 * size);
  put(rank_table + OPSCHED_RANK_OFF_COUNT, uint32_t{1});
  put(rank_table + OPSCHED_RANK_OFF_ACTIONS, uint64_t{action});
  put(action + OPSCHED_ACTION_OFF_OP, uint8_t{OPSCHED_OP_F});
  put(action + OPSCHED_ACTION_OFF_END, 1.0);
  put(OPSCHED_OFF_HEADER_CRC, opsched_crc32(0, file.data(), OPSCHED_HEADER_SIZE));
  put(trailer, opsched_crc32(0, file.data(), trailer));
  return file;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;  // MiB
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;

  const std::string file = one_stage_schedule(bytes);

  optpipe_rt_schedule* opened = nullptr;
  rt_check(optpipe_rt_schedule_open_memory(file.data(), file.size(), &opened), "open");
  optpipe_rt_config config;
  optpipe_rt_config_init(&config);
  config.backend = OPTPIPE_RT_BACKEND_CUDA;
  config.host_pool_bytes = int64_t(bytes);
  optpipe_rt_rank* rank = nullptr;
  rt_check(optpipe_rt_rank_open(opened, 0, &config, &rank), "rank open");

  void* device = nullptr;
  void* device_back = nullptr;
  cuda_check(cudaMalloc(&device, bytes), "cudaMalloc");
  cuda_check(cudaMalloc(&device_back, bytes), "cudaMalloc");
  std::vector<unsigned char> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i)
    pattern[i] = static_cast<unsigned char>((i * 2654435761u) >> 24);
  cuda_check(cudaMemcpy(device, pattern.data(), bytes, cudaMemcpyHostToDevice), "fill");

  // Engine: time offload+synchronize and reload+synchronize separately.
  double engine_d2h = 0, engine_h2d = 0;
  for (int it = -1; it < iterations; ++it) {  // iteration -1 warms up
    auto t0 = std::chrono::steady_clock::now();
    rt_check(optpipe_rt_offload(rank, 0, 0, device, bytes), "offload");
    rt_check(optpipe_rt_synchronize(rank, 0, 0), "synchronize");
    const double d2h = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    rt_check(optpipe_rt_reload(rank, 0, 0, device_back), "reload");
    rt_check(optpipe_rt_synchronize(rank, 0, 0), "synchronize");
    const double h2d = seconds_since(t0);
    rt_check(optpipe_rt_release(rank, 0, 0), "release");
    if (it >= 0) engine_d2h += d2h, engine_h2d += h2d;
  }
  std::vector<unsigned char> back(bytes);
  cuda_check(cudaMemcpy(back.data(), device_back, bytes, cudaMemcpyDeviceToHost), "read back");
  const bool identical = back == pattern;

  // Plain loop: the same copies with cudaMemcpyAsync on one stream into pinned memory.
  void* host = nullptr;
  cuda_check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  cudaStream_t stream;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  double plain_d2h = 0, plain_h2d = 0;
  for (int it = -1; it < iterations; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    cuda_check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream), "d2h");
    cuda_check(cudaStreamSynchronize(stream), "sync");
    const double d2h = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    cuda_check(cudaMemcpyAsync(device_back, host, bytes, cudaMemcpyHostToDevice, stream), "h2d");
    cuda_check(cudaStreamSynchronize(stream), "sync");
    const double h2d = seconds_since(t0);
    if (it >= 0) plain_d2h += d2h, plain_h2d += h2d;
  }
  auto gbps = [&](double seconds) { return double(bytes) * iterations / seconds / 1e9; };
  const double r_d2h = gbps(engine_d2h) / gbps(plain_d2h),
               r_h2d = gbps(engine_h2d) / gbps(plain_h2d);
  std::printf("bytes per copy: %zu MiB, iterations: %d\n", bytes >> 20, iterations);
  std::printf("D2H: engine %.2f GB/s, plain cudaMemcpyAsync %.2f GB/s, ratio %.3f\n",
              gbps(engine_d2h), gbps(plain_d2h), r_d2h);
  std::printf("H2D: engine %.2f GB/s, plain cudaMemcpyAsync %.2f GB/s, ratio %.3f\n",
              gbps(engine_h2d), gbps(plain_h2d), r_h2d);
  std::printf("round trip bytes identical: %s\n", identical ? "yes" : "NO");

  optpipe_rt_rank_close(rank);
  optpipe_rt_schedule_close(opened);
  cudaFreeHost(host);
  cudaFree(device);
  cudaFree(device_back);
  cudaStreamDestroy(stream);
  return identical && r_d2h >= 0.9 && r_h2d >= 0.9 ? 0 : 1;
}

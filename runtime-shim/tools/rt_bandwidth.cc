// Pinned D2H/H2D bandwidth through the shim's CUDA offload engine against a plain
// cudaMemcpyAsync loop on the same pinned memory (tools/gpu-check.sh). Also checks that an
// offload/reload round trip returns the same bytes. Exit 1 when the engine reaches less than
// 90% of the plain loop or the bytes differ.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/opsched.h"
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;  // MiB
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;

  // A one-rank schedule whose single stage offloads `bytes`.
  optpipe::Problem problem;
  problem.rank_of_stage = {0};
  problem.stages = {optpipe::StageCosts{1, 1, 1, int64_t(bytes), 0, int64_t(bytes)}};
  problem.budget_bytes = {int64_t(bytes) * 4};
  problem.static_bytes = {0};
  problem.offload = optpipe::OffloadLink{1e9, 1e9, optpipe::ChannelMode::kDuplex, {0}};
  optpipe::Schedule schedule;
  schedule.method = "bandwidth";
  schedule.ranks = {{optpipe::Action{{optpipe::Op::kForward, 0, 0}, 0, 1, 0}}};
  const std::string file = optpipe::encode_opsched(problem, schedule);

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

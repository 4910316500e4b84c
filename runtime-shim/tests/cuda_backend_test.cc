// The CUDA backend on a real device (tools/gpu-check.sh; skipped where no GPU is present): copies
// wait for the work issued on the trainer's compute stream, the compute stream waits for a reload,
// bytes come back identical in both channel modes, and a compiled offloading schedule runs with
// one rank thread per pipeline rank, each on its own stream, every backward reading back exactly
// its forward's activation; the measured profile it writes compiles again.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "formats/opsched.h"
#include "formats/profile.h"
#include "heuristics/registry.h"
#include "optpipe_rt.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace {

constexpr size_t kActivationBytes = size_t{8} << 20;  // large enough that copies take a while

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
#define ASSERT_RT(call) ASSERT_EQ((call), OPTPIPE_RT_OK) << #call << ": " << optpipe_rt_last_error()

bool gpu_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Holds `stream` for `ms` milliseconds (a host function), as a long kernel would.
cudaError_t occupy(cudaStream_t stream, int ms) {
  static constexpr auto sleep = [](void* ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
  };
  return cudaLaunchHostFunc(stream, sleep, reinterpret_cast<void*>(intptr_t{ms}));
}

// Distinct bytes per (stage, microbatch), so a copy of the wrong buffer or a stale one shows.
std::vector<uint8_t> pattern(size_t n, int stage, int microbatch) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<uint8_t>((i * 2654435761u >> 13) + stage * 31 + microbatch * 7);
  }
  return v;
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;  // the test asserts on it
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
};

// Pinned host memory: copies from it are asynchronous, so the compute stream really is busy.
struct PinnedBuffer {
  explicit PinnedBuffer(const std::vector<uint8_t>& bytes) : size(bytes.size()) {
    if (cudaHostAlloc(&ptr, size, cudaHostAllocDefault) != cudaSuccess) {
      ptr = nullptr;  // the test asserts on it
      return;
    }
    std::copy(bytes.begin(), bytes.end(), static_cast<uint8_t*>(ptr));
  }
  ~PinnedBuffer() { cudaFreeHost(ptr); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* ptr = nullptr;
  size_t size = 0;
};

struct Stream {
  Stream() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(stream); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t stream = nullptr;
};

// A one-rank schedule file whose stage offloads two activations at once.
std::string two_offload_schedule() {
  optpipe::testing::UniformCosts costs;
  costs.activation_bytes = static_cast<int64_t>(kActivationBytes);
  optpipe::Problem problem = optpipe::testing::uniform_problem(1, 1, 2, costs);
  problem.offload = optpipe::OffloadLink{1e10, 1e10, optpipe::ChannelMode::kDuplex, {0}};
  auto ref = [](optpipe::Op op, int j) { return optpipe::OpRef{op, 0, j}; };
  optpipe::Order order;
  order.ranks = {{ref(optpipe::Op::kForward, 0), ref(optpipe::Op::kOffload, 0),
                  ref(optpipe::Op::kForward, 1), ref(optpipe::Op::kOffload, 1),
                  ref(optpipe::Op::kReload, 0), ref(optpipe::Op::kReload, 1),
                  ref(optpipe::Op::kBackward, 0), ref(optpipe::Op::kBackward, 1)}};
  return optpipe::encode_opsched(problem, optpipe::simulate(problem, order, "two-offloads"));
}

TEST(CudaEngine, CopiesFollowTheComputeStreamAndReloadsComeBackIdentical) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU";
  const std::string file = two_offload_schedule();
  optpipe_rt_schedule* schedule = nullptr;
  ASSERT_RT(optpipe_rt_schedule_open_memory(file.data(), file.size(), &schedule));
  for (int mode : {0, 1}) {
    SCOPED_TRACE(mode == 0 ? "shared channel" : "duplex channels");
    Stream compute;
    optpipe_rt_config config;
    optpipe_rt_config_init(&config);
    config.backend = OPTPIPE_RT_BACKEND_CUDA;
    config.channel_mode = static_cast<optpipe_rt_channel_mode>(mode);
    config.cuda_compute_stream = compute.stream;
    config.verify_checksums = 1;
    optpipe_rt_rank* rank = nullptr;
    ASSERT_RT(optpipe_rt_rank_open(schedule, 0, &config, &rank));
    ASSERT_EQ(optpipe_rt_rank_backend(rank), OPTPIPE_RT_BACKEND_CUDA);

    DeviceBuffer a(kActivationBytes), b(kActivationBytes);
    const std::vector<uint8_t> a0 = pattern(kActivationBytes, 0, 0),
                               b0 = pattern(kActivationBytes, 0, 1);
    const PinnedBuffer a_source(a0), b_source(b0);
    ASSERT_TRUE(a.ptr && b.ptr && a_source.ptr && b_source.ptr) << "device or pinned allocation";
    // The compute stream is still busy (a 20 ms host function, then the writes) when the
    // offloads are issued: each copy must wait for that work, not read what was there before.
    ASSERT_CUDA(cudaMemsetAsync(a.ptr, 0, kActivationBytes, compute.stream));
    ASSERT_CUDA(cudaMemsetAsync(b.ptr, 0, kActivationBytes, compute.stream));
    ASSERT_CUDA(occupy(compute.stream, 20));
    ASSERT_CUDA(cudaMemcpyAsync(a.ptr, a_source.ptr, kActivationBytes, cudaMemcpyHostToDevice,
                                compute.stream));
    ASSERT_CUDA(cudaMemcpyAsync(b.ptr, b_source.ptr, kActivationBytes, cudaMemcpyHostToDevice,
                                compute.stream));
    ASSERT_RT(optpipe_rt_offload(rank, 0, 0, a.ptr, kActivationBytes));
    ASSERT_RT(optpipe_rt_offload(rank, 0, 1, b.ptr, kActivationBytes));
    ASSERT_RT(optpipe_rt_synchronize(rank, 0, 0));
    ASSERT_RT(optpipe_rt_synchronize(rank, 0, 1));
    int64_t used = 0;
    ASSERT_RT(optpipe_rt_host_pool_usage(rank, &used, nullptr));
    EXPECT_EQ(used, int64_t{2} * static_cast<int64_t>(kActivationBytes));

    // The device copies are free once offloaded: poison them, then reload into them. Reading
    // them back on the compute stream right after wait() sees the reload, not the poison.
    ASSERT_CUDA(cudaMemsetAsync(a.ptr, 0xee, kActivationBytes, compute.stream));
    ASSERT_CUDA(cudaMemsetAsync(b.ptr, 0xdd, kActivationBytes, compute.stream));
    ASSERT_RT(optpipe_rt_reload(rank, 0, 1, b.ptr));
    ASSERT_RT(optpipe_rt_reload(rank, 0, 0, a.ptr));
    ASSERT_RT(optpipe_rt_wait(rank, 0, 0));
    ASSERT_RT(optpipe_rt_wait(rank, 0, 1));
    std::vector<uint8_t> a1(kActivationBytes), b1(kActivationBytes);
    ASSERT_CUDA(cudaMemcpyAsync(a1.data(), a.ptr, kActivationBytes, cudaMemcpyDeviceToHost,
                                compute.stream));
    ASSERT_CUDA(cudaMemcpyAsync(b1.data(), b.ptr, kActivationBytes, cudaMemcpyDeviceToHost,
                                compute.stream));
    ASSERT_CUDA(cudaStreamSynchronize(compute.stream));
    EXPECT_TRUE(a1 == a0);
    EXPECT_TRUE(b1 == b0);
    ASSERT_RT(optpipe_rt_release(rank, 0, 0));  // also compares the host copy's checksum
    ASSERT_RT(optpipe_rt_release(rank, 0, 1));

    double d2h = 0, h2d = 0;
    int d2h_copies = 0, h2d_copies = 0;
    ASSERT_RT(optpipe_rt_measured_bandwidth(rank, &d2h, &d2h_copies, &h2d, &h2d_copies));
    EXPECT_EQ(d2h_copies, 2);
    EXPECT_EQ(h2d_copies, 2);
    // Bytes per ms (the schedule's unit): above 1 GB/s, as pinned copies over PCIe or NVLink-C2C
    // are.
    EXPECT_GT(d2h, 1e6);
    EXPECT_GT(h2d, 1e6);
    std::printf("  channel mode %d: D2H %.1f GB/s, H2D %.1f GB/s (event-timed)\n", mode, d2h / 1e6,
                h2d / 1e6);
    optpipe_rt_rank_close(rank);
  }
  optpipe_rt_schedule_close(schedule);
}

// AdaOffload on 4 ranks x 2 chunks at a budget where it must offload.
optpipe::Problem offloading_problem() {
  optpipe::testing::UniformCosts costs;
  costs.activation_bytes = static_cast<int64_t>(kActivationBytes);
  optpipe::Problem problem = optpipe::testing::uniform_problem(4, 2, 8, costs);
  problem.offload = optpipe::OffloadLink{
      kActivationBytes / 0.5, kActivationBytes / 0.5, optpipe::ChannelMode::kDuplex, {0, 1, 2, 3}};
  for (int r = 0; r < problem.ranks; ++r) {
    problem.budget_bytes[r] = problem.static_bytes[r] + 5 * int64_t{kActivationBytes};
  }
  return problem;
}

// One rank's trainer: F writes its activation on the rank's stream from a host pattern; an
// offloaded activation's device buffer is poisoned once the shim says the copy ended; B reads the
// activation back on the stream (after the shim's wait) and compares it with the pattern.
struct RankTrainer {
  cudaStream_t stream = nullptr;
  std::vector<std::vector<uint8_t>> patterns;              // per (stage slot, microbatch)
  std::vector<std::unique_ptr<DeviceBuffer>> activations;  // per (stage slot, microbatch)
  std::vector<uint8_t> readback;
  int stages = 0, microbatches = 0, checked = 0, mismatches = 0, offloads = 0;
  std::vector<int> stage_slot;  // global stage -> index among this rank's stages, or -1

  size_t index(int s, int j) const { return stage_slot[s] * microbatches + j; }
};

// Stream time of at least the op's duration (ms), which the shim's timing recorder must see.
constexpr int kForwardMs = 2, kBackwardMs = 3;

int trainer_forward(void* user, int s, int j) {
  auto* t = static_cast<RankTrainer*>(user);
  const auto& bytes = t->patterns[t->index(s, j)];
  const bool issued =
      occupy(t->stream, kForwardMs) == cudaSuccess &&
      cudaMemcpyAsync(t->activations[t->index(s, j)]->ptr, bytes.data(), bytes.size(),
                      cudaMemcpyHostToDevice, t->stream) == cudaSuccess;
  return issued ? 0 : 1;
}

int trainer_backward(void* user, int s, int j) {
  auto* t = static_cast<RankTrainer*>(user);
  if (occupy(t->stream, kBackwardMs) != cudaSuccess ||
      cudaMemcpyAsync(t->readback.data(), t->activations[t->index(s, j)]->ptr, t->readback.size(),
                      cudaMemcpyDeviceToHost, t->stream) != cudaSuccess ||
      cudaStreamSynchronize(t->stream) != cudaSuccess) {
    return 1;
  }
  ++t->checked;
  if (t->readback != t->patterns[t->index(s, j)]) ++t->mismatches;
  return 0;
}

optpipe_rt_callbacks trainer_callbacks() {
  optpipe_rt_callbacks cb;
  optpipe_rt_callbacks_init(&cb);
  cb.forward = trainer_forward;
  cb.backward_input = trainer_backward;
  cb.backward_weight = [](void*, int, int) { return 0; };
  cb.offload_source = [](void* user, int s, int j, const void** ptr, size_t* bytes) {
    auto* t = static_cast<RankTrainer*>(user);
    *ptr = t->activations[t->index(s, j)]->ptr;
    *bytes = kActivationBytes;
    ++t->offloads;
    return 0;
  };
  cb.offload_complete = [](void* user, int s, int j) {
    auto* t = static_cast<RankTrainer*>(user);
    return cudaMemsetAsync(t->activations[t->index(s, j)]->ptr, 0, kActivationBytes, t->stream) !=
                   cudaSuccess
               ? 1
               : 0;
  };
  cb.reload_target = [](void* user, int s, int j, size_t bytes, void** ptr) {
    auto* t = static_cast<RankTrainer*>(user);
    *ptr = t->activations[t->index(s, j)]->ptr;
    return bytes == kActivationBytes ? 0 : 1;
  };
  return cb;
}

TEST(CudaRunner, RunsACompiledOffloadingScheduleWithOneThreadPerRank) {
  const optpipe::Problem problem = offloading_problem();
  const optpipe::Generator* adaoffload = optpipe::find_generator("adaoffload");
  ASSERT_NE(adaoffload, nullptr);
  const optpipe::Schedule schedule =
      optpipe::simulate_within_budget(problem, adaoffload->build(problem), "adaoffload");
  const auto violation = optpipe::validate(problem, schedule);
  ASSERT_FALSE(violation) << violation->message;
  int scheduled_offloads = 0;
  for (const auto& rank : schedule.ranks) {
    scheduled_offloads += static_cast<int>(std::count_if(
        rank.begin(), rank.end(), [](const auto& a) { return a.ref.op == optpipe::Op::kOffload; }));
  }
  ASSERT_GT(scheduled_offloads, 0) << "the budget should make AdaOffload offload";
  if (!gpu_present()) GTEST_SKIP() << "no GPU";

  const std::string file = optpipe::encode_opsched(problem, schedule);
  optpipe_rt_schedule* opened = nullptr;
  ASSERT_RT(optpipe_rt_schedule_open_memory(file.data(), file.size(), &opened));
  const int ranks = problem.ranks, microbatches = problem.microbatches;
  std::vector<Stream> streams(ranks);
  std::vector<RankTrainer> trainers(ranks);
  std::vector<optpipe_rt_rank*> handles(ranks, nullptr);
  for (int r = 0; r < ranks; ++r) {
    RankTrainer& t = trainers[r];
    t.stream = streams[r].stream;
    t.microbatches = microbatches;
    t.readback.resize(kActivationBytes);
    t.stage_slot.assign(problem.stages.size(), -1);
    for (size_t s = 0; s < problem.stages.size(); ++s) {
      if (problem.rank_of_stage[s] != r) continue;
      t.stage_slot[s] = t.stages++;
      for (int j = 0; j < microbatches; ++j) {
        t.patterns.push_back(pattern(kActivationBytes, static_cast<int>(s), j));
        t.activations.push_back(std::make_unique<DeviceBuffer>(kActivationBytes));
        ASSERT_NE(t.activations.back()->ptr, nullptr) << "device allocation";
      }
    }
    optpipe_rt_config config;
    optpipe_rt_config_init(&config);
    config.backend = OPTPIPE_RT_BACKEND_CUDA;
    config.cuda_compute_stream = t.stream;
    config.verify_checksums = 1;
    ASSERT_RT(optpipe_rt_rank_open(opened, r, &config, &handles[r]));
  }

  const optpipe_rt_callbacks cb = trainer_callbacks();
  constexpr int kIterations = 3;
  std::vector<optpipe_rt_status> status(ranks, OPTPIPE_RT_OK);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      for (int it = 0; it < kIterations && status[r] == OPTPIPE_RT_OK; ++it) {
        status[r] = optpipe_rt_run(handles[r], &cb, &trainers[r]);
      }
    });
  }
  for (auto& thread : threads) thread.join();

  int offloads = 0;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(status[r], OPTPIPE_RT_OK) << "rank " << r;
    EXPECT_EQ(trainers[r].checked, kIterations * trainers[r].stages * microbatches);
    EXPECT_EQ(trainers[r].mismatches, 0) << "rank " << r;
    offloads += trainers[r].offloads;
  }
  EXPECT_EQ(offloads, kIterations * scheduled_offloads);
  std::printf("  %d ranks x %d iterations on one GPU: %d offloads, every reload identical\n", ranks,
              kIterations, offloads);

  // The timing recorder (events on the compute streams) closes the profile -> compile loop: the
  // measured profile reads back with each op's stream time, and AdaOffload compiles it.
  const std::string path = ::testing::TempDir() + "/cuda-measured-profile.json";
  ASSERT_RT(optpipe_rt_write_measured_profile(handles.data(), handles.size(), "cuda-measured",
                                              path.c_str()));
  const optpipe::Problem measured = optpipe::load_profile(path);
  std::remove(path.c_str());
  ASSERT_EQ(measured.num_stages(), problem.num_stages());
  ASSERT_TRUE(measured.offload.has_value());
  EXPECT_GT(measured.offload->d2h_bytes_per_time, 1e6);  // bytes per ms: above 1 GB/s
  for (const optpipe::StageCosts& stage : measured.stages) {
    EXPECT_GE(stage.forward, kForwardMs);
    EXPECT_GE(stage.backward_input, kBackwardMs);
    EXPECT_LT(stage.backward_weight, stage.forward);  // W issues no work here
  }
  std::printf("  measured: F %.2f ms, B %.2f ms, W %.3f ms, D2H %.1f GB/s (stage 0)\n",
              measured.stages[0].forward, measured.stages[0].backward_input,
              measured.stages[0].backward_weight, measured.offload->d2h_bytes_per_time / 1e6);
  const optpipe::Schedule recompiled =
      optpipe::simulate_within_budget(measured, adaoffload->build(measured), "adaoffload");
  EXPECT_FALSE(optpipe::validate(measured, recompiled));
  for (optpipe_rt_rank* handle : handles) optpipe_rt_rank_close(handle);
  optpipe_rt_schedule_close(opened);
}

}  // namespace

// The offload engine and runner through the C ABI on the CPU backend: data moves bit-identically
// in both channel modes, the pool is sized from the schedule and fails early, misuse is refused
// with a status, and callback failures stop the run cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "formats/opsched.h"
#include "host_pool.h"
#include "optpipe_rt.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"

namespace {

using optpipe::Op;

constexpr int64_t kBytes = 4096;

// 2 ranks, 3 microbatches; rank 0 offloads microbatches 0 and 1 (two slots live at once).
std::string offload_schedule_bytes(optpipe::ChannelMode channels = optpipe::ChannelMode::kDuplex) {
  optpipe::testing::UniformCosts costs;
  costs.activation_bytes = kBytes;
  optpipe::Problem problem = optpipe::testing::uniform_problem(2, 1, 3, costs);
  problem.offload = optpipe::OffloadLink{8192.0, 8192.0, channels, {0, 1}};
  auto ref = [](Op op, int s, int j) { return optpipe::OpRef{op, s, j}; };
  optpipe::Order order;
  order.ranks = {{ref(Op::kForward, 0, 0), ref(Op::kOffload, 0, 0), ref(Op::kForward, 0, 1),
                  ref(Op::kOffload, 0, 1), ref(Op::kForward, 0, 2), ref(Op::kReload, 0, 0),
                  ref(Op::kBackward, 0, 0), ref(Op::kReload, 0, 1), ref(Op::kBackward, 0, 1),
                  ref(Op::kBackward, 0, 2)},
                 {ref(Op::kForward, 1, 0), ref(Op::kForward, 1, 1), ref(Op::kForward, 1, 2),
                  ref(Op::kBackward, 1, 0), ref(Op::kBackward, 1, 1), ref(Op::kBackward, 1, 2)}};
  return optpipe::encode_opsched(problem, optpipe::simulate(problem, order, "hand"));
}

class Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bytes = offload_schedule_bytes();
    ASSERT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &schedule_),
              OPTPIPE_RT_OK);
    optpipe_rt_config_init(&config_);
    config_.backend = OPTPIPE_RT_BACKEND_CPU;
    config_.verify_checksums = 1;
  }
  void TearDown() override {
    optpipe_rt_rank_close(rank_);
    optpipe_rt_schedule_close(schedule_);
  }
  optpipe_rt_status open(int rank = 0) {
    optpipe_rt_rank_close(rank_);
    rank_ = nullptr;
    return optpipe_rt_rank_open(schedule_, rank, &config_, &rank_);
  }
  optpipe_rt_schedule* schedule_ = nullptr;
  optpipe_rt_rank* rank_ = nullptr;
  optpipe_rt_config config_;
};

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + seed * 17) & 0xff);
  return v;
}

TEST_F(Engine, PoolIsSizedFromTheSchedulesConcurrentOffloads) {
  optpipe_rt_rank_info info;
  ASSERT_EQ(optpipe_rt_schedule_get_rank(schedule_, 0, &info), OPTPIPE_RT_OK);
  EXPECT_EQ(info.host_pool_bytes, 2 * kBytes);
  ASSERT_EQ(optpipe_rt_schedule_get_rank(schedule_, 1, &info), OPTPIPE_RT_OK);
  EXPECT_EQ(info.host_pool_bytes, 0);
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  int64_t used = -1, capacity = -1;
  ASSERT_EQ(optpipe_rt_host_pool_usage(rank_, &used, &capacity), OPTPIPE_RT_OK);
  EXPECT_EQ(used, 0);
  EXPECT_EQ(capacity, 2 * kBytes);
}

TEST_F(Engine, FailsEarlyWhenThePoolCannotBeHad) {
  config_.host_pool_limit_bytes = kBytes;
  EXPECT_EQ(open(), OPTPIPE_RT_E_HOST_POOL);
  EXPECT_EQ(rank_, nullptr);
  const std::string message = optpipe_rt_last_error();
  EXPECT_NE(message.find("8192"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
}

TEST_F(Engine, OffloadReloadIsBitIdenticalInBothChannelModes) {
  for (int mode : {0, 1}) {
    config_.channel_mode = static_cast<optpipe_rt_channel_mode>(mode);
    config_.cpu_emulated_bytes_per_second = 4e6;  // 1 ms per copy: copies really are async
    ASSERT_EQ(open(), OPTPIPE_RT_OK) << optpipe_rt_last_error();
    std::vector<uint8_t> a = pattern(kBytes, 1), b = pattern(kBytes, 2);
    const std::vector<uint8_t> a0 = a, b0 = b;
    ASSERT_EQ(optpipe_rt_offload(rank_, 0, 0, a.data(), a.size()), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_offload(rank_, 0, 1, b.data(), b.size()), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_synchronize(rank_, 0, 0), OPTPIPE_RT_OK);
    int done = 0;
    ASSERT_EQ(optpipe_rt_transfer_done(rank_, 0, 0, &done), OPTPIPE_RT_OK);
    EXPECT_EQ(done, 1);
    std::fill(a.begin(), a.end(), 0xee);  // the device buffer is free to reuse once copied
    ASSERT_EQ(optpipe_rt_synchronize(rank_, 0, 1), OPTPIPE_RT_OK);
    std::fill(b.begin(), b.end(), 0xdd);
    int64_t used = 0;
    ASSERT_EQ(optpipe_rt_host_pool_usage(rank_, &used, nullptr), OPTPIPE_RT_OK);
    EXPECT_EQ(used, 2 * kBytes);
    ASSERT_EQ(optpipe_rt_reload(rank_, 0, 1, b.data()), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_reload(rank_, 0, 0, a.data()), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_wait(rank_, 0, 0), OPTPIPE_RT_OK) << optpipe_rt_last_error();
    ASSERT_EQ(optpipe_rt_wait(rank_, 0, 1), OPTPIPE_RT_OK) << optpipe_rt_last_error();
    EXPECT_EQ(a, a0);
    EXPECT_EQ(b, b0);
    ASSERT_EQ(optpipe_rt_release(rank_, 0, 0), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_release(rank_, 0, 1), OPTPIPE_RT_OK);
    ASSERT_EQ(optpipe_rt_host_pool_usage(rank_, &used, nullptr), OPTPIPE_RT_OK);
    EXPECT_EQ(used, 0);
    int copies = 0;
    ASSERT_EQ(optpipe_rt_measured_bandwidth(rank_, nullptr, &copies, nullptr, nullptr),
              OPTPIPE_RT_OK);
    EXPECT_EQ(copies, 2);
  }
}

// An activation in several device buffers goes to one slot without a packed device copy, each
// segment at a 16-byte boundary of it, and comes back into one buffer (that layout) or apart.
TEST_F(Engine, SegmentsShareOneSlotAndComeBackWholeOrApart) {
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  std::vector<std::vector<uint8_t>> parts = {pattern(7, 1), pattern(300, 2), pattern(1, 3)};
  const void* ptrs[3] = {parts[0].data(), parts[1].data(), parts[2].data()};
  const size_t sizes[3] = {7, 300, 1};
  ASSERT_EQ(optpipe_rt_offload_segments(rank_, 0, 0, ptrs, sizes, 3), OPTPIPE_RT_OK);
  ASSERT_EQ(optpipe_rt_offload_segments(rank_, 0, 1, ptrs, sizes, 3), OPTPIPE_RT_OK);
  int64_t used = 0;
  ASSERT_EQ(optpipe_rt_host_pool_usage(rank_, &used, nullptr), OPTPIPE_RT_OK);
  EXPECT_EQ(used, 2 * kBytes);  // 321 bytes each, in the slots the schedule planned
  std::vector<uint8_t> whole(16 + 304 + 1, 0);
  ASSERT_EQ(optpipe_rt_reload(rank_, 0, 0, whole.data()), OPTPIPE_RT_OK);
  ASSERT_EQ(optpipe_rt_wait(rank_, 0, 0), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  EXPECT_TRUE(std::equal(parts[0].begin(), parts[0].end(), whole.begin()));
  EXPECT_TRUE(std::equal(parts[1].begin(), parts[1].end(), whole.begin() + 16));
  EXPECT_EQ(whole[320], parts[2][0]);
  std::vector<std::vector<uint8_t>> back = {std::vector<uint8_t>(7), std::vector<uint8_t>(300),
                                            std::vector<uint8_t>(1)};
  void* targets[3] = {back[0].data(), back[1].data(), back[2].data()};
  EXPECT_EQ(optpipe_rt_reload_segments(rank_, 0, 1, targets, 2), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("3 offloaded segments"), std::string::npos);
  ASSERT_EQ(optpipe_rt_reload_segments(rank_, 0, 1, targets, 3), OPTPIPE_RT_OK);
  ASSERT_EQ(optpipe_rt_wait(rank_, 0, 1), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  EXPECT_EQ(back, parts);
  ASSERT_EQ(optpipe_rt_release(rank_, 0, 0), OPTPIPE_RT_OK);
  ASSERT_EQ(optpipe_rt_release(rank_, 0, 1), OPTPIPE_RT_OK);
}

// The runner's issue order: an offload predicted to start while a compute op runs goes before it.
TEST_F(Engine, IssueOrderIsTheRunnersAndSizesThePool) {
  int count = 0;
  std::vector<int32_t> order(64);
  ASSERT_EQ(optpipe_rt_schedule_issue_order(schedule_, 0, order.data(), 64, &count),
            OPTPIPE_RT_OK);
  optpipe_rt_rank_info info;
  ASSERT_EQ(optpipe_rt_schedule_get_rank(schedule_, 0, &info), OPTPIPE_RT_OK);
  ASSERT_EQ(count, info.action_count);
  std::vector<int32_t> sorted(order.begin(), order.begin() + count);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < count; ++i) EXPECT_EQ(sorted[i], i);  // a permutation of the actions
  EXPECT_EQ(optpipe_rt_schedule_issue_order(schedule_, 0, order.data(), 1, &count),
            OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_EQ(optpipe_rt_schedule_issue_order(schedule_, 5, order.data(), 64, &count),
            OPTPIPE_RT_E_INVALID_ARGUMENT);
}

TEST_F(Engine, ReleaseWaitsForTheCopyInFlight) {
  config_.cpu_emulated_bytes_per_second = kBytes / 0.03;  // 30 ms per copy
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  std::vector<uint8_t> a = pattern(kBytes, 3);
  const auto begin = std::chrono::steady_clock::now();
  ASSERT_EQ(optpipe_rt_offload(rank_, 0, 0, a.data(), a.size()), OPTPIPE_RT_OK);
  int done = 1;
  ASSERT_EQ(optpipe_rt_transfer_done(rank_, 0, 0, &done), OPTPIPE_RT_OK);
  EXPECT_EQ(done, 0);
  ASSERT_EQ(optpipe_rt_release(rank_, 0, 0), OPTPIPE_RT_OK);
  EXPECT_GE(std::chrono::steady_clock::now() - begin, std::chrono::milliseconds(29));
}

TEST_F(Engine, RefusesMisuseWithAStatus) {
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  std::vector<uint8_t> a = pattern(kBytes, 4);
  EXPECT_EQ(optpipe_rt_reload(rank_, 0, 0, a.data()), OPTPIPE_RT_E_STATE);
  EXPECT_EQ(optpipe_rt_wait(rank_, 0, 0), OPTPIPE_RT_E_STATE);
  EXPECT_EQ(optpipe_rt_release(rank_, 0, 0), OPTPIPE_RT_E_STATE);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("not offloaded"), std::string::npos);
  EXPECT_EQ(optpipe_rt_offload(rank_, 0, 0, nullptr, 16), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_EQ(optpipe_rt_offload(rank_, 5, 0, a.data(), 16), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_EQ(optpipe_rt_offload(rank_, 0, 3, a.data(), 16), OPTPIPE_RT_E_INVALID_ARGUMENT);
  ASSERT_EQ(optpipe_rt_offload(rank_, 0, 0, a.data(), a.size()), OPTPIPE_RT_OK);
  EXPECT_EQ(optpipe_rt_offload(rank_, 0, 0, a.data(), a.size()), OPTPIPE_RT_E_STATE);
  ASSERT_EQ(optpipe_rt_reload(rank_, 0, 0, a.data()), OPTPIPE_RT_OK);
  EXPECT_EQ(optpipe_rt_reload(rank_, 0, 0, a.data()), OPTPIPE_RT_E_STATE);
  EXPECT_EQ(optpipe_rt_offload(nullptr, 0, 0, a.data(), 1), OPTPIPE_RT_E_INVALID_ARGUMENT);
  optpipe_rt_rank* other = nullptr;
  EXPECT_EQ(optpipe_rt_rank_open(schedule_, 2, &config_, &other), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_EQ(other, nullptr);
  ASSERT_EQ(optpipe_rt_synchronize(rank_, 0, 0), OPTPIPE_RT_OK);  // `a` must outlive its copies
}

TEST_F(Engine, PoolExhaustionIsReportedNotOverrun) {
  config_.host_pool_bytes = kBytes;  // one slot where the schedule needs two
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  std::vector<uint8_t> a = pattern(kBytes, 5), b = pattern(kBytes, 6);
  ASSERT_EQ(optpipe_rt_offload(rank_, 0, 0, a.data(), a.size()), OPTPIPE_RT_OK);
  EXPECT_EQ(optpipe_rt_offload(rank_, 0, 1, b.data(), b.size()), OPTPIPE_RT_E_POOL_EXHAUSTED);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("host pool"), std::string::npos);
  // A size past INT64_MAX once became a negative request, a 256-byte slot and a copy of SIZE_MAX.
  EXPECT_EQ(optpipe_rt_offload(rank_, 0, 1, b.data(), SIZE_MAX), OPTPIPE_RT_E_POOL_EXHAUSTED);
  ASSERT_EQ(optpipe_rt_synchronize(rank_, 0, 0), OPTPIPE_RT_OK);
}

TEST_F(Engine, CudaIsRefusedCleanlyWithoutAGpuAndAutoFallsBackToCpu) {
  config_.backend = OPTPIPE_RT_BACKEND_CUDA;
  const optpipe_rt_status status = open();
  if (status == OPTPIPE_RT_OK) GTEST_SKIP() << "a GPU is present";
  EXPECT_TRUE(status == OPTPIPE_RT_E_UNAVAILABLE || status == OPTPIPE_RT_E_BACKEND) << status;
  EXPECT_STRNE(optpipe_rt_last_error(), "");
  config_.backend = OPTPIPE_RT_BACKEND_AUTO;
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  EXPECT_EQ(optpipe_rt_rank_backend(rank_), OPTPIPE_RT_BACKEND_CPU);
}

// Runner: rank 0's schedule with trivial callbacks.
struct Calls {
  std::vector<std::string> log;
  std::vector<uint8_t> buffers[3];
  int fail_forward_at = -1;
};

optpipe_rt_callbacks logging_callbacks() {
  optpipe_rt_callbacks cb;
  optpipe_rt_callbacks_init(&cb);
  cb.forward = [](void* u, int s, int j) {
    auto* c = static_cast<Calls*>(u);
    if (j == c->fail_forward_at) return 7;
    c->buffers[j] = pattern(kBytes, j);
    c->log.push_back("F" + std::to_string(s) + "." + std::to_string(j));
    return 0;
  };
  cb.backward = [](void* u, int s, int j) {
    auto* c = static_cast<Calls*>(u);
    if (c->buffers[j] != pattern(kBytes, j)) return 1;
    c->log.push_back("BW" + std::to_string(s) + "." + std::to_string(j));
    return 0;
  };
  cb.send_forward = [](void* u, int s, int j) {
    static_cast<Calls*>(u)->log.push_back("send_f" + std::to_string(s) + "." + std::to_string(j));
    return 0;
  };
  cb.recv_backward = [](void* u, int s, int j) {
    static_cast<Calls*>(u)->log.push_back("recv_b" + std::to_string(s) + "." + std::to_string(j));
    return 0;
  };
  cb.offload_source = [](void* u, int, int j, const void** ptr, size_t* bytes) {
    auto* c = static_cast<Calls*>(u);
    *ptr = c->buffers[j].data();
    *bytes = c->buffers[j].size();
    c->log.push_back("OFF" + std::to_string(j));
    return 0;
  };
  cb.offload_complete = [](void* u, int, int j) {
    auto* c = static_cast<Calls*>(u);
    std::fill(c->buffers[j].begin(), c->buffers[j].end(), 0);  // "freed"
    c->log.push_back("done" + std::to_string(j));
    return 0;
  };
  cb.reload_target = [](void* u, int, int j, size_t bytes, void** ptr) {
    auto* c = static_cast<Calls*>(u);
    if (bytes != static_cast<size_t>(kBytes)) return 1;
    *ptr = c->buffers[j].data();
    c->log.push_back("RE" + std::to_string(j));
    return 0;
  };
  return cb;
}

// ABI 3: a caller built against an older header passes shorter structs. The fields it has are
// read; those appended after them take their defaults and are never read from the caller.
TEST_F(Engine, ACallersShorterStructsStillWork) {
  config_.backend = OPTPIPE_RT_BACKEND_CPU;
  config_.cpu_emulated_bytes_per_second = -1;  // past the caller's struct: refused if read
  config_.struct_size = offsetof(optpipe_rt_config, cpu_emulated_bytes_per_second);
  ASSERT_EQ(open(), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  EXPECT_EQ(optpipe_rt_rank_backend(rank_), OPTPIPE_RT_BACKEND_CPU);  // a field it has is read

  Calls calls;
  optpipe_rt_callbacks cb = logging_callbacks();
  cb.recompute = [](void*, int, int) { return 1; };  // past the caller's struct: never called
  cb.struct_size = offsetof(optpipe_rt_callbacks, recompute);
  ASSERT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  EXPECT_EQ(calls.log.back(), "BW0.2");

  cb.struct_size = 0;  // a caller that never set it
  EXPECT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("struct_size is 0"), std::string::npos);
  config_.struct_size = 0;
  EXPECT_EQ(open(), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("optpipe_rt_config_init"), std::string::npos);
}

TEST_F(Engine, RunnerCallsHooksAndOffloadsWhereTheScheduleSays) {
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  Calls calls;
  const optpipe_rt_callbacks cb = logging_callbacks();
  for (int iteration = 0; iteration < 3; ++iteration) {
    calls.log.clear();
    ASSERT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_OK) << optpipe_rt_last_error();
    // OFFLOAD(0, 0) starts when F(0, 1) does: it is issued first (the generator's order).
    const std::vector<std::string> prefix = {"F0.0", "send_f0.0", "OFF0"};
    ASSERT_GE(calls.log.size(), 3u);
    EXPECT_EQ(std::vector<std::string>(calls.log.begin(), calls.log.begin() + 3), prefix);
    EXPECT_EQ(std::count(calls.log.begin(), calls.log.end(), "done0"), 1);
    EXPECT_EQ(std::count(calls.log.begin(), calls.log.end(), "RE1"), 1);
    EXPECT_EQ(calls.log.back(), "BW0.2");
  }
  double median = 0;
  int samples = 0;
  ASSERT_EQ(optpipe_rt_measured(rank_, OPTPIPE_RT_OP_BW, 0, &median, &samples), OPTPIPE_RT_OK);
  EXPECT_EQ(samples, 9);  // 3 microbatches x 3 iterations
  EXPECT_EQ(optpipe_rt_measured(rank_, OPTPIPE_RT_OP_RELOAD, 0, &median, &samples),
            OPTPIPE_RT_E_INVALID_ARGUMENT);
}

TEST_F(Engine, RunnerStopsOnAFailingCallbackAndOnMissingOnes) {
  ASSERT_EQ(open(), OPTPIPE_RT_OK);
  Calls calls;
  calls.fail_forward_at = 1;
  optpipe_rt_callbacks cb = logging_callbacks();
  EXPECT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_E_CALLBACK);
  EXPECT_NE(
      std::string(optpipe_rt_last_error()).find("forward callback failed at stage 0, microbatch 1"),
      std::string::npos)
      << optpipe_rt_last_error();
  // The failed run waited for its offload in flight and freed the pool: the next one runs clean.
  int64_t used = -1;
  ASSERT_EQ(optpipe_rt_host_pool_usage(rank_, &used, nullptr), OPTPIPE_RT_OK);
  EXPECT_EQ(used, 0);
  calls.fail_forward_at = -1;
  EXPECT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  cb.reload_target = nullptr;
  EXPECT_EQ(optpipe_rt_run(rank_, &cb, &calls), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("reload_target"), std::string::npos);
  EXPECT_EQ(optpipe_rt_run(rank_, nullptr, &calls), OPTPIPE_RT_E_INVALID_ARGUMENT);
}

// One rank, one stage, two microbatches, both recomputed: F0 F1 R0 BW0 R1 BW1, or with BW0 moved
// before R0 (a faulty writer: the shim does not validate).
std::string recompute_schedule_bytes(bool backward_before_recompute) {
  optpipe::testing::UniformCosts costs;
  costs.checkpoint_bytes = 16;
  optpipe::Problem problem = optpipe::testing::uniform_problem(1, 1, 2, costs);
  optpipe::Schedule schedule = optpipe::simulate(problem,
                                                 optpipe::Order{{{{Op::kForward, 0, 0},
                                                                  {Op::kForward, 0, 1},
                                                                  {Op::kRecompute, 0, 0},
                                                                  {Op::kBackward, 0, 0},
                                                                  {Op::kRecompute, 0, 1},
                                                                  {Op::kBackward, 0, 1}}}},
                                                 "recompute");
  if (backward_before_recompute) std::swap(schedule.ranks[0][2], schedule.ranks[0][3]);
  return optpipe::encode_opsched(problem, schedule);
}

struct RecomputeCalls {
  std::vector<std::string> log;
};

optpipe_rt_callbacks recompute_callbacks() {
  optpipe_rt_callbacks cb;
  optpipe_rt_callbacks_init(&cb);
  cb.forward = [](void* u, int, int j) {
    static_cast<RecomputeCalls*>(u)->log.push_back("F" + std::to_string(j));
    return 0;
  };
  cb.recompute = [](void* u, int, int j) {
    static_cast<RecomputeCalls*>(u)->log.push_back("R" + std::to_string(j));
    return 0;
  };
  cb.backward = [](void* u, int, int j) {
    static_cast<RecomputeCalls*>(u)->log.push_back("BW" + std::to_string(j));
    return 0;
  };
  return cb;
}

TEST(Runner, RecomputesWhereTheScheduleSays) {
  const std::string bytes = recompute_schedule_bytes(false);
  optpipe_rt_schedule* schedule = nullptr;
  ASSERT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &schedule), OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  optpipe_rt_config config;
  optpipe_rt_config_init(&config);
  config.backend = OPTPIPE_RT_BACKEND_CPU;
  optpipe_rt_rank* rank = nullptr;
  ASSERT_EQ(optpipe_rt_rank_open(schedule, 0, &config, &rank), OPTPIPE_RT_OK);
  optpipe_rt_schedule_close(schedule);
  int recomputed = 0;
  ASSERT_EQ(optpipe_rt_recomputed(rank, 0, 1, &recomputed), OPTPIPE_RT_OK);
  EXPECT_EQ(recomputed, 1);
  EXPECT_EQ(optpipe_rt_recomputed(rank, 0, 2, &recomputed), OPTPIPE_RT_E_INVALID_ARGUMENT);

  RecomputeCalls calls;
  optpipe_rt_callbacks cb = recompute_callbacks();
  ASSERT_EQ(optpipe_rt_run(rank, &cb, &calls), OPTPIPE_RT_OK) << optpipe_rt_last_error();
  EXPECT_EQ(calls.log, (std::vector<std::string>{"F0", "F1", "R0", "BW0", "R1", "BW1"}));
  double median = 0;
  int samples = 0;
  ASSERT_EQ(optpipe_rt_measured(rank, OPTPIPE_RT_OP_R, 0, &median, &samples), OPTPIPE_RT_OK);
  EXPECT_EQ(samples, 2);

  cb.recompute = nullptr;
  EXPECT_EQ(optpipe_rt_run(rank, &cb, &calls), OPTPIPE_RT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("needs the recompute callback"),
            std::string::npos)
      << optpipe_rt_last_error();
  optpipe_rt_rank_close(rank);
}

// The reader refuses it before anything runs; the runner's own check stays as a second line.
TEST(Runner, ABackwardBeforeItsRecomputeIsRefusedAtOpen) {
  const std::string bytes = recompute_schedule_bytes(true);
  optpipe_rt_schedule* schedule = nullptr;
  EXPECT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &schedule),
            OPTPIPE_RT_E_CORRUPT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("corrupt: rank 0"), std::string::npos)
      << optpipe_rt_last_error();
  EXPECT_EQ(schedule, nullptr);
}

TEST(HostPool, ReusesFreedSlots) {
  optpipe::rt::HostPool pool(1024);
  const auto a = pool.allocate(256), b = pool.allocate(300), c = pool.allocate(200);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*b, 256);
  EXPECT_EQ(*c, 768);
  EXPECT_FALSE(pool.allocate(1));
  pool.free(*a);
  EXPECT_EQ(pool.allocate(100), std::optional<int64_t>(0));
  EXPECT_EQ(pool.high_water(), 1024);
}

TEST(HostPool, TakesTheSmallestGapThatFitsAndMergesFreedNeighbours) {
  optpipe::rt::HostPool pool(4096);
  const auto a = pool.allocate(512), b = pool.allocate(256), c = pool.allocate(256),
             d = pool.allocate(256);
  ASSERT_TRUE(a && b && c && d);
  pool.free(*a);                     // a gap of 512 at 0
  pool.free(*c);                     // a gap of 256 at 768
  EXPECT_EQ(pool.allocate(200), c);  // the smaller gap, not the first
  pool.free(*c);
  pool.free(*b);  // 0 to 1024 free again, in one piece with its neighbours
  EXPECT_EQ(pool.allocate(1024), std::optional<int64_t>(0));
  EXPECT_EQ(pool.in_use(), 1024 + 256);
  EXPECT_EQ(pool.high_water(), 1280);
}

TEST(HostPool, RefusesNegativeAndOversizedRequestsWithoutOverflow) {
  optpipe::rt::HostPool pool(int64_t{1} << 62);
  EXPECT_FALSE(pool.allocate(-1));  // a size_t above INT64_MAX, as the C ABI casts it
  EXPECT_FALSE(pool.allocate(INT64_MAX));
  ASSERT_TRUE(pool.allocate(1));
  EXPECT_FALSE(pool.allocate((int64_t{1} << 62) - 1));  // fits alone, not beside the first
  EXPECT_EQ(pool.in_use(), 256);
}

}  // namespace

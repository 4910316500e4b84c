// The host pool never runs out at its planned size (docs/runtime-shim.md, "Offload engine"): the
// example profiles, compiled at their budgets and at tighter ones, and the Qwen2 profile of a
// validated schedule that once exhausted it (an offload issued the instant a B starts), each run
// by the shim's own runner on the CPU backend at the pool the schedule plans. Byte sizes are
// divided by kScale first (the same schedule, activations of kilobytes), so every rank's run
// really allocates its pool and copies.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "driver/compile_driver.h"
#include "formats/opsched.h"
#include "formats/profile.h"
#include "optpipe_rt.h"

namespace {

using optpipe::Problem;
using optpipe::Schedule;

constexpr int64_t kScale = 1 << 14;

int64_t scaled(int64_t bytes) {
  return bytes / kScale;
}

// The problem and schedule with every byte count divided by kScale, consistently.
std::pair<Problem, Schedule> scale_down(Problem problem, Schedule schedule) {
  for (auto& stage : problem.stages) {
    stage.activation_bytes = scaled(stage.activation_bytes);
    stage.weight_grad_bytes = scaled(stage.weight_grad_bytes);
    stage.offloadable_bytes = scaled(stage.offloadable_bytes);
    if (stage.checkpoint_bytes) stage.checkpoint_bytes = scaled(*stage.checkpoint_bytes);
  }
  for (auto& bytes : problem.budget_bytes) bytes = scaled(bytes);
  for (auto& bytes : problem.static_bytes) bytes = scaled(bytes);
  for (auto& rank : schedule.ranks) {
    for (auto& action : rank) action.bytes = scaled(action.bytes);
  }
  return {problem, schedule};
}

// A trainer whose activations are byte buffers of the planned sizes; compute does nothing.
struct Buffers {
  std::map<std::pair<int, int>, int64_t> planned;
  std::map<std::pair<int, int>, std::vector<uint8_t>> device;
  int offloads = 0;
};

optpipe_rt_callbacks callbacks() {
  optpipe_rt_callbacks cb;
  optpipe_rt_callbacks_init(&cb);
  auto nothing = [](void*, int, int) { return 0; };
  cb.forward = cb.backward_input = cb.backward_weight = cb.backward = cb.recompute = nothing;
  cb.offload_complete = nothing;
  cb.offload_source = [](void* user, int s, int j, const void** ptr, size_t* bytes) {
    auto& b = *static_cast<Buffers*>(user);
    auto& buffer = b.device[{s, j}];
    buffer.assign(static_cast<size_t>(b.planned.at({s, j})) + 1, uint8_t(s + j));
    *ptr = buffer.data();
    *bytes = buffer.size() - 1;
    ++b.offloads;
    return 0;
  };
  cb.reload_target = [](void* user, int s, int j, size_t bytes, void** ptr) {
    auto& buffer = static_cast<Buffers*>(user)->device[{s, j}];
    buffer.assign(bytes + 1, 0);
    *ptr = buffer.data();
    return 0;
  };
  return cb;
}

// Runs every rank of `schedule` (compiled for `problem`) through optpipe_rt_run at its planned
// pool; returns the offloads done.
int run_every_rank(const Problem& problem, const Schedule& schedule, const std::string& what) {
  const auto [small, timed] = scale_down(problem, schedule);
  const std::string bytes = optpipe::encode_opsched(small, timed);
  optpipe_rt_schedule* opened = nullptr;
  EXPECT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &opened), OPTPIPE_RT_OK)
      << what << ": " << optpipe_rt_last_error();
  if (opened == nullptr) return 0;
  int offloads = 0;
  const optpipe_rt_callbacks cb = callbacks();
  for (int r = 0; r < small.ranks; ++r) {
    Buffers buffers;
    for (const auto& action : timed.ranks[r]) {
      if (action.ref.op == optpipe::Op::kOffload)
        buffers.planned[{action.ref.stage, action.ref.microbatch}] = action.bytes;
    }
    optpipe_rt_config config;
    optpipe_rt_config_init(&config);
    config.backend = OPTPIPE_RT_BACKEND_CPU;
    optpipe_rt_rank* rank = nullptr;
    EXPECT_EQ(optpipe_rt_rank_open(opened, r, &config, &rank), OPTPIPE_RT_OK)
        << what << " rank " << r << ": " << optpipe_rt_last_error();
    if (rank == nullptr) continue;
    EXPECT_EQ(optpipe_rt_run(rank, &cb, &buffers), OPTPIPE_RT_OK)
        << what << " rank " << r << ": " << optpipe_rt_last_error();
    int64_t used = -1;
    EXPECT_EQ(optpipe_rt_host_pool_usage(rank, &used, nullptr), OPTPIPE_RT_OK);
    EXPECT_EQ(used, 0) << what << " rank " << r;
    optpipe_rt_rank_close(rank);
    offloads += buffers.offloads;
  }
  optpipe_rt_schedule_close(opened);
  return offloads;
}

Schedule compiled(const Problem& problem, const std::string& method) {
  optpipe::CompileOptions options;
  options.method = method;
  options.optimizer.effort = 0.05;
  options.optimizer.time_limit_seconds = 60;
  const optpipe::CompileResult result = optpipe::compile(problem, options);
  return result.status == optpipe::CompileStatus::kScheduled ? result.best.schedule : Schedule{};
}

TEST(HostPool, NeverRunsOutAtThePlannedSizeOnTheExamples) {
  int offloads = 0, schedules = 0;
  for (const char* name :
       {"gpt-4rank", "gpt-8rank", "gpt-8rank-vshape", "gpt-16rank", "mlp-1rank", "mlp-4rank"}) {
    Problem problem =
        optpipe::load_profile(std::string(OPTPIPE_SOURCE_DIR) + "/examples/" + name + ".json");
    const std::vector<int64_t> budgets = problem.budget_bytes;
    for (const double fraction : {1.0, 0.85, 0.7}) {
      for (size_t r = 0; r < budgets.size(); ++r) {
        problem.budget_bytes[r] =
            problem.static_bytes[r] +
            static_cast<int64_t>((budgets[r] - problem.static_bytes[r]) * fraction);
      }
      for (const char* method : {"adaoffload", "auto"}) {
        const Schedule schedule = compiled(problem, method);
        if (schedule.ranks.empty()) continue;  // nothing fits this budget
        ++schedules;
        offloads +=
            run_every_rank(problem, schedule,
                           std::string(name) + " at " + std::to_string(fraction) + ", " + method);
      }
    }
  }
  EXPECT_GE(schedules, 20);
  EXPECT_GT(offloads, 300);  // the cases offload: the pool is exercised
}

// The profile measured from a tiny Qwen2, at the budget where a validated schedule's offload came
// the instant a B started and found the pool full (3 of 3 slots held).
TEST(HostPool, NeverRunsOutWhereAnOffloadMeetsABackward) {
  const Problem problem = optpipe::parse_profile(R"({
    "format": "optpipe.profile/v1", "name": "hf-qwen2", "time_unit": "ms",
    "pipeline": {"ranks": 4, "chunks_per_rank": 1, "placement": "loop", "microbatches": 8},
    "stages": [
     {"index": 0, "forward": 6.137102, "backward_input": 0.579947, "backward_weight": 0.069033,
      "activation_bytes": 4496384, "weight_grad_bytes": 1836032, "checkpoint_bytes": 1024},
     {"index": 1, "forward": 10.250246, "backward_input": 10.591655, "backward_weight": 8.639356,
      "activation_bytes": 4495360, "weight_grad_bytes": 1835008, "checkpoint_bytes": 131072},
     {"index": 2, "forward": 9.477662, "backward_input": 9.146308, "backward_weight": 5.313048,
      "activation_bytes": 4495360, "weight_grad_bytes": 1835008, "checkpoint_bytes": 131072},
     {"index": 3, "forward": 10.4217, "backward_input": 10.216728, "backward_weight": 6.855604,
      "activation_bytes": 5409284, "weight_grad_bytes": 2097152, "checkpoint_bytes": 131072}],
    "p2p_latency": 0.05,
    "memory": {"budget_bytes": 31636332, "per_rank": [{"rank": 0, "static_bytes": 23003392},
      {"rank": 1, "static_bytes": 18907392}, {"rank": 2, "static_bytes": 18907392},
      {"rank": 3, "static_bytes": 23007488}]},
    "offload": {"d2h_gb_per_s": 5.0, "h2d_gb_per_s": 5.0}})",
                                                 "hf-qwen2");
  int offloads = 0;
  for (const char* method : {"adaoffload", "pipeoffload", "auto"}) {
    const Schedule schedule = compiled(problem, method);
    ASSERT_FALSE(schedule.ranks.empty()) << method;
    offloads += run_every_rank(problem, schedule, method);
  }
  EXPECT_GT(offloads, 10);
}

}  // namespace

// End to end on the CPU backend (docs/runtime-shim.md, "Testing"): compile a schedule in-process,
// write it as .opsched, and run it with one thread per rank through optpipe_rt_run. p2p goes
// through in-process mailboxes, every op does a small real computation whose backward reads the
// forward's activation (so a wrong or late reload or recompute changes the result), offloads and
// reloads move real bytes through the CPU backend's copy threads, and op durations are emulated
// with sleeps.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "formats/opsched.h"
#include "formats/profile.h"
#include "heuristics/registry.h"
#include "optpipe_rt.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace {

using Clock = std::chrono::steady_clock;
using optpipe::Op;
using optpipe::Problem;
using optpipe::Schedule;
using Key = std::pair<int, int>;  // (stage, microbatch)

constexpr int kDim = 64;                            // floats per stage input/output
constexpr int64_t kActivationBytes = 2 * kDim * 4;  // F keeps [x | y]
constexpr int64_t kWeightGradBytes = kDim * 4;      // W still needs x (g overwrites y)
constexpr int64_t kCheckpointBytes = kDim * 4;      // a recomputed activation keeps x
constexpr double kSecondsPerUnit = 0.008;           // one schedule time unit (ms) lasts 8 ms here
// Measured makespan must lie in [0.97 * predicted, 1.5 * predicted + 30 ms]: sleeps only
// overshoot (by up to a scheduler slice on a loaded machine), and each op's overshoot is absorbed
// by the next op's sleep_until; the best of kAttempts iterations is taken.
constexpr double kMakespanLow = 0.97, kMakespanHigh = 1.5, kMakespanSlackSeconds = 0.030;
// Measured medians: at least the emulated duration, at most 60% above it (a loaded machine).
constexpr double kMedianHigh = 1.6;
constexpr int kAttempts = 3;
constexpr auto kRecvTimeout = std::chrono::seconds(3);  // a blocked recv means a deadlock
constexpr auto kWatchdog = std::chrono::seconds(15);

bool is_compute_event(int op) {
  return op <= OPTPIPE_RT_OP_BW || op == OPTPIPE_RT_OP_R;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The model: stage s maps x to y = tanh(w_s * x) elementwise; loss = sum(y_last^2) / 2.
struct Model {
  int stages;
  std::vector<std::vector<float>> weights;  // per stage
  std::vector<std::vector<float>> inputs;   // per microbatch
  Model(int stages, int microbatches) : stages(stages) {
    for (int s = 0; s < stages; ++s) {
      auto& w = weights.emplace_back(kDim);
      for (int i = 0; i < kDim; ++i)
        w[i] = 0.5f + 0.01f * static_cast<float>((s * 31 + i * 7) % 50);
    }
    for (int j = 0; j < microbatches; ++j) {
      auto& x = inputs.emplace_back(kDim);
      for (int i = 0; i < kDim; ++i) x[i] = std::sin(0.1f * static_cast<float>(i + 13 * j));
    }
  }
  // [x | y]
  std::vector<float> forward(int s, const std::vector<float>& x) const {
    std::vector<float> act(2 * kDim);
    for (int i = 0; i < kDim; ++i) {
      act[i] = x[i];
      act[kDim + i] = std::tanh(weights[s][i] * x[i]);
    }
    return act;
  }
  // Overwrites y with g = dy * (1 - y^2) and returns dx = g * w.
  std::vector<float> backward_input(int s, float* act, const std::vector<float>& dy) const {
    std::vector<float> dx(kDim);
    for (int i = 0; i < kDim; ++i) {
      const float y = act[kDim + i];
      const float g = dy[i] * (1 - y * y);
      act[kDim + i] = g;
      dx[i] = g * weights[s][i];
    }
    return dx;
  }
  static std::vector<float> backward_weight(const float* act) {
    std::vector<float> dw(kDim);
    for (int i = 0; i < kDim; ++i) dw[i] = act[kDim + i] * act[i];
    return dw;
  }
  // Gradients summed over microbatches in order, from a plain sequential run.
  std::vector<std::vector<float>> reference_gradients() const {
    std::vector<std::vector<float>> grad(stages, std::vector<float>(kDim, 0));
    for (size_t j = 0; j < inputs.size(); ++j) {
      std::vector<std::vector<float>> acts;
      std::vector<float> x = inputs[j];
      for (int s = 0; s < stages; ++s) {
        acts.push_back(forward(s, x));
        x.assign(acts.back().begin() + kDim, acts.back().end());
      }
      std::vector<float> dy = x;
      for (int s = stages - 1; s >= 0; --s) {
        dy = backward_input(s, acts[s].data(), dy);
        const auto dw = backward_weight(acts[s].data());
        for (int i = 0; i < kDim; ++i) grad[s][i] += dw[i];
      }
    }
    return grad;
  }
};

// In-process p2p: a message per (direction, destination stage, microbatch), delivered after the
// p2p latency.
class Mailbox {
 public:
  void send(int dir, int stage, int mb, std::vector<float> data, double latency_s) {
    {
      std::lock_guard lock(mutex_);
      box_[{dir, stage, mb}] = {std::move(data),
                                Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(latency_s))};
    }
    cv_.notify_all();
  }
  std::optional<std::vector<float>> recv(int dir, int stage, int mb) {
    std::unique_lock lock(mutex_);
    const auto key = std::make_tuple(dir, stage, mb);
    if (!cv_.wait_for(lock, kRecvTimeout, [&] { return box_.count(key) > 0; })) return std::nullopt;
    auto [data, ready] = std::move(box_[key]);
    box_.erase(key);
    lock.unlock();
    std::this_thread::sleep_until(ready);
    return std::move(data);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::pair<std::vector<float>, Clock::time_point>> box_;
};

struct Event {
  int op, stage, microbatch;
  double start = 0, end = 0;  // seconds since the run's start; transfers: issue time
};

struct World;

// What a trainer keeps on one rank; the shim calls it back through the C ABI.
struct RankTrainer {
  World* world = nullptr;
  int rank = 0;
  std::map<Key, std::vector<float>> device;  // live activations ("device" memory)
  std::map<Key, std::vector<float>> inbox_fwd, inbox_bwd, outbox_fwd, outbox_bwd;
  std::map<Key, std::vector<float>> at_offload;  // what was offloaded, to check reloads
  std::map<Key, std::vector<float>> weight_grads;
  std::vector<Event> events;
  int64_t live_bytes = 0, peak_bytes = 0;
  int reloads_checked = 0;
  int recomputes = 0;
  std::string error;
  optpipe_rt_rank* handle = nullptr;  // to ask which activations the schedule recomputes

  void allocate(int64_t bytes) {
    live_bytes += bytes;
    peak_bytes = std::max(peak_bytes, live_bytes);
  }
};

struct World {
  const Problem& problem;
  Model model;
  Mailbox mailbox;
  Clock::time_point t0;
  std::vector<RankTrainer> trainers;
  World(const Problem& p) : problem(p), model(p.num_stages(), p.microbatches), trainers(p.ranks) {
    for (int r = 0; r < p.ranks; ++r) {
      trainers[r].world = this;
      trainers[r].rank = r;
    }
  }
  bool remote(int from, int to) const {
    return problem.rank_of_stage[from] != problem.rank_of_stage[to];
  }
  double latency_s() const { return problem.p2p_latency * kSecondsPerUnit; }
  double duration_s(int op, int s) const {
    const auto& c = problem.stages[s];
    switch (op) {
      case OPTPIPE_RT_OP_F:
        return c.forward * kSecondsPerUnit;
      case OPTPIPE_RT_OP_B:
        return c.backward_input * kSecondsPerUnit;
      case OPTPIPE_RT_OP_W:
        return c.backward_weight * kSecondsPerUnit;
      case OPTPIPE_RT_OP_R:
        return c.recompute_forward * kSecondsPerUnit;
      default:
        return (c.backward_input + c.backward_weight) * kSecondsPerUnit;
    }
  }
};

// Runs `body` as a callback: exceptions become a non-zero return and a message.
template <typename Body>
int callback(void* user, Body&& body) {
  auto* t = static_cast<RankTrainer*>(user);
  try {
    body(*t);
    return 0;
  } catch (const std::exception& e) {
    if (t->error.empty()) t->error = e.what();
    return 1;
  }
}

// An emulated compute op: real work, then sleep to its predicted duration.
template <typename Work>
void compute(RankTrainer& t, int op, int s, int j, Work&& work) {
  const Clock::time_point begin = Clock::now();
  const double start = seconds_since(t.world->t0);
  work();
  std::this_thread::sleep_until(begin +
                                std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(t.world->duration_s(op, s))));
  t.events.push_back({op, s, j, start, seconds_since(t.world->t0)});
}

std::vector<float> take(std::map<Key, std::vector<float>>& box, Key key, const char* what) {
  auto it = box.find(key);
  if (it == box.end()) throw std::runtime_error(std::string("missing ") + what);
  std::vector<float> v = std::move(it->second);
  box.erase(it);
  return v;
}

void do_backward_input(RankTrainer& t, int s, int j) {
  World& w = *t.world;
  const int S = w.problem.num_stages();
  const Key key{s, j};
  auto it = t.device.find(key);
  if (it == t.device.end()) throw std::runtime_error("B without its activation on the device");
  std::vector<float>& act = it->second;
  if (auto ref = t.at_offload.find(key); ref != t.at_offload.end()) {
    if (std::memcmp(ref->second.data(), act.data(), act.size() * sizeof(float)) != 0) {
      throw std::runtime_error("reloaded activation differs from the offloaded one");
    }
    ++t.reloads_checked;
    t.at_offload.erase(ref);
  }
  std::vector<float> dy;
  if (s == S - 1) {
    dy.assign(act.begin() + kDim, act.end());  // d(sum y^2 / 2)/dy = y
  } else if (w.remote(s + 1, s)) {
    dy = take(t.inbox_bwd, key, "received gradient");
  } else {
    dy = take(t.outbox_bwd, {s + 1, j}, "local gradient");
  }
  std::vector<float> dx = w.model.backward_input(s, act.data(), dy);
  if (s > 0) t.outbox_bwd[key] = std::move(dx);
}

void do_backward_weight(RankTrainer& t, int s, int j) {
  auto it = t.device.find({s, j});
  if (it == t.device.end()) throw std::runtime_error("W without its activation on the device");
  t.weight_grads[{s, j}] = Model::backward_weight(it->second.data());
  t.device.erase(it);
}

const optpipe_rt_callbacks kCallbacks = [] {
  optpipe_rt_callbacks cb;
  optpipe_rt_callbacks_init(&cb);
  cb.forward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      World& w = *t.world;
      const Key key{s, j};
      std::vector<float> x;
      if (s == 0) {
        x = w.model.inputs[j];
      } else if (w.remote(s - 1, s)) {
        x = take(t.inbox_fwd, key, "received activation");
      } else {
        x = take(t.outbox_fwd, {s - 1, j}, "local activation");
      }
      int recomputed = 0;
      if (optpipe_rt_recomputed(t.handle, s, j, &recomputed) != OPTPIPE_RT_OK) {
        throw std::runtime_error(optpipe_rt_last_error());
      }
      compute(t, OPTPIPE_RT_OP_F, s, j, [&] {
        t.allocate(w.problem.stages[s].activation_bytes);
        t.device[key] = w.model.forward(s, x);
      });
      auto& act = t.device[key];
      if (s + 1 < w.problem.num_stages()) t.outbox_fwd[key].assign(act.begin() + kDim, act.end());
      if (recomputed) {
        // Keep the checkpoint x only: a backward that ran without R would read NaNs.
        std::fill(act.begin() + kDim, act.end(), std::numeric_limits<float>::quiet_NaN());
        t.live_bytes -= w.problem.stages[s].recomputed_bytes();
      }
    });
  };
  cb.backward_input = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      compute(t, OPTPIPE_RT_OP_B, s, j, [&] { do_backward_input(t, s, j); });
      const auto& c = t.world->problem.stages[s];
      t.live_bytes -= c.activation_bytes - c.weight_grad_bytes;
    });
  };
  cb.backward_weight = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      compute(t, OPTPIPE_RT_OP_W, s, j, [&] { do_backward_weight(t, s, j); });
      t.live_bytes -= t.world->problem.stages[s].weight_grad_bytes;
    });
  };
  cb.backward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      compute(t, OPTPIPE_RT_OP_BW, s, j, [&] {
        do_backward_input(t, s, j);
        do_backward_weight(t, s, j);
      });
      t.live_bytes -= t.world->problem.stages[s].activation_bytes;
    });
  };
  cb.recompute = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      compute(t, OPTPIPE_RT_OP_R, s, j, [&] {
        t.allocate(t.world->problem.stages[s].recomputed_bytes());
        std::vector<float>& act = t.device.at({s, j});
        const std::vector<float> x(act.begin(), act.begin() + kDim);
        act = t.world->model.forward(s, x);
      });
      ++t.recomputes;
    });
  };
  cb.recv_forward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      auto data = t.world->mailbox.recv(0, s, j);
      if (!data) throw std::runtime_error("recv_forward timed out (deadlock?)");
      t.inbox_fwd[{s, j}] = std::move(*data);
    });
  };
  cb.send_forward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      t.world->mailbox.send(0, s + 1, j, take(t.outbox_fwd, {s, j}, "activation to send"),
                            t.world->latency_s());
    });
  };
  cb.recv_backward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      auto data = t.world->mailbox.recv(1, s, j);
      if (!data) throw std::runtime_error("recv_backward timed out (deadlock?)");
      t.inbox_bwd[{s, j}] = std::move(*data);
    });
  };
  cb.send_backward = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      t.world->mailbox.send(1, s - 1, j, take(t.outbox_bwd, {s, j}, "gradient to send"),
                            t.world->latency_s());
    });
  };
  cb.offload_source = [](void* user, int s, int j, const void** ptr, size_t* bytes) {
    return callback(user, [&](RankTrainer& t) {
      const auto& act = t.device.at({s, j});
      t.at_offload[{s, j}] = act;
      *ptr = act.data();
      *bytes = act.size() * sizeof(float);
      const double now = seconds_since(t.world->t0);
      t.events.push_back({OPTPIPE_RT_OP_OFFLOAD, s, j, now, now});
    });
  };
  cb.offload_complete = [](void* user, int s, int j) {
    return callback(user, [&](RankTrainer& t) {
      t.device.erase({s, j});  // the copy has ended: free the device buffer
      t.live_bytes -= t.world->problem.stages[s].offloadable_bytes;
    });
  };
  cb.reload_target = [](void* user, int s, int j, size_t bytes, void** ptr) {
    return callback(user, [&](RankTrainer& t) {
      t.allocate(t.world->problem.stages[s].offloadable_bytes);
      // Garbage until the copy lands: a B that ran early would read NaNs.
      auto& buffer = t.device[{s, j}];
      buffer.assign(bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
      *ptr = buffer.data();
      const double now = seconds_since(t.world->t0);
      t.events.push_back({OPTPIPE_RT_OP_RELOAD, s, j, now, now});
    });
  };
  return cb;
}();

Schedule compile(const Problem& problem, std::string_view method) {
  const optpipe::Generator* generator = optpipe::find_generator(method);
  if (generator == nullptr) throw std::runtime_error("no generator " + std::string(method));
  return optpipe::simulate(problem, generator->build(problem), std::string(method));
}

Problem small_problem(int ranks, int chunks, int microbatches,
                      optpipe::PlacementKind placement = optpipe::PlacementKind::kLoop,
                      double latency = 0) {
  optpipe::testing::UniformCosts costs;
  costs.forward = 1;
  costs.backward_input = 1.2;
  costs.backward_weight = 0.8;
  costs.activation_bytes = kActivationBytes;
  costs.weight_grad_bytes = kWeightGradBytes;
  return optpipe::testing::uniform_problem(ranks, chunks, microbatches, costs, placement, latency);
}

// Runs `schedule` through the shim with one thread per rank and checks everything the shim
// promises. Returns the rank handles (for the measured profile), closed by the caller.
class EndToEnd : public ::testing::Test {
 protected:
  void TearDown() override {
    for (optpipe_rt_rank* h : handles_) optpipe_rt_rank_close(h);
  }

  void run_and_check(const Problem& problem, const Schedule& schedule, int channel_mode = -1) {
    if (const auto violation = optpipe::validate(problem, schedule)) {
      FAIL() << "invalid schedule: " << violation->message;
    }
    const std::string bytes = optpipe::encode_opsched(problem, schedule);
    optpipe_rt_schedule* opened = nullptr;
    ASSERT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &opened), OPTPIPE_RT_OK)
        << optpipe_rt_last_error();
    optpipe_rt_schedule_info info;
    ASSERT_EQ(optpipe_rt_schedule_get_info(opened, &info), OPTPIPE_RT_OK);

    optpipe_rt_config config;
    optpipe_rt_config_init(&config);
    config.backend = OPTPIPE_RT_BACKEND_CPU;
    config.channel_mode = static_cast<optpipe_rt_channel_mode>(channel_mode);
    config.verify_checksums = 1;
    if (problem.offload) {
      config.cpu_emulated_bytes_per_second = problem.offload->d2h_bytes_per_time / kSecondsPerUnit;
    }
    for (int r = 0; r < problem.ranks; ++r) {
      optpipe_rt_rank* h = nullptr;
      ASSERT_EQ(optpipe_rt_rank_open(opened, r, &config, &h), OPTPIPE_RT_OK)
          << optpipe_rt_last_error();
      ASSERT_EQ(optpipe_rt_rank_backend(h), OPTPIPE_RT_BACKEND_CPU);
      handles_.push_back(h);
    }
    optpipe_rt_schedule_close(opened);  // rank handles keep the data

    // Timing noise (a loaded CI machine) only ever adds time, so the makespan check takes the
    // best of up to kAttempts iterations; every other check holds on every iteration.
    for (int attempt = 1;; ++attempt) {
      run_iteration(problem);
      if (::testing::Test::HasFatalFailure()) return;
      check_order(problem, schedule, *world_);
      check_dependencies(problem, *world_);
      check_memory(problem, *world_);
      check_gradients(problem, *world_);
      if (check_makespan(schedule, *world_, attempt == kAttempts)) break;
    }
  }

  void run_iteration(const Problem& problem) {
    world_ = std::make_unique<World>(problem);
    World& world = *world_;
    world.t0 = Clock::now() + std::chrono::milliseconds(20);
    std::vector<std::future<std::pair<optpipe_rt_status, std::string>>> done;
    for (int r = 0; r < problem.ranks; ++r) world.trainers[r].handle = handles_[r];
    for (int r = 0; r < problem.ranks; ++r) {
      done.push_back(std::async(std::launch::async, [&, r] {
        std::this_thread::sleep_until(world.t0);
        const optpipe_rt_status status =
            optpipe_rt_run(handles_[r], &kCallbacks, &world.trainers[r]);
        return std::make_pair(status, std::string(optpipe_rt_last_error()));
      }));
    }
    // Watchdog: a rank that never returns is a deadlock the recv timeouts did not catch.
    const auto deadline = Clock::now() + kWatchdog;
    for (int r = 0; r < problem.ranks; ++r) {
      if (done[r].wait_until(deadline) != std::future_status::ready) {
        std::fprintf(stderr, "watchdog: rank %d did not finish in %llds; deadlock\n", r,
                     static_cast<long long>(kWatchdog.count()));
        std::_Exit(1);  // blocked threads cannot be joined
      }
    }
    for (int r = 0; r < problem.ranks; ++r) {
      const auto [status, message] = done[r].get();
      ASSERT_EQ(status, OPTPIPE_RT_OK)
          << "rank " << r << ": " << message << " / trainer: " << world.trainers[r].error;
    }
  }

  // Every action ran exactly once, in the order the compiler's simulator issued them
  // (optpipe::order_of: by predicted start, each transfer right after the last compute op that
  // ends by its start).
  static void check_order(const Problem& problem, const Schedule& schedule, const World& world) {
    const optpipe::Order issued = optpipe::order_of(schedule);
    for (int r = 0; r < problem.ranks; ++r) {
      std::vector<std::tuple<int, int, int>> ran;
      for (const Event& e : world.trainers[r].events) ran.emplace_back(e.op, e.stage, e.microbatch);
      std::vector<std::tuple<int, int, int>> expected;
      for (const optpipe::OpRef& ref : issued.ranks[r]) {
        expected.emplace_back(static_cast<int>(ref.op), ref.stage, ref.microbatch);
      }
      EXPECT_EQ(ran, expected) << "rank " << r;
    }
  }

  static void check_dependencies(const Problem& problem, const World& world) {
    std::map<std::tuple<int, int, int>, Event> by_ref;  // compute ops only
    for (const auto& t : world.trainers) {
      for (const Event& e : t.events) {
        if (is_compute_event(e.op)) {
          EXPECT_TRUE(by_ref.emplace(std::make_tuple(e.op, e.stage, e.microbatch), e).second)
              << "op ran twice";
        }
      }
    }
    auto find = [&](int op, int s, int j) -> const Event* {
      auto it = by_ref.find({op, s, j});
      return it == by_ref.end() ? nullptr : &it->second;
    };
    auto backward = [&](int s, int j) {
      const Event* b = find(OPTPIPE_RT_OP_B, s, j);
      return b ? b : find(OPTPIPE_RT_OP_BW, s, j);
    };
    const int S = problem.num_stages();
    for (int j = 0; j < problem.microbatches; ++j) {
      for (int s = 0; s < S; ++s) {
        const Event* f = find(OPTPIPE_RT_OP_F, s, j);
        const Event* b = backward(s, j);
        ASSERT_TRUE(f && b) << "stage " << s << " mb " << j << " missing";
        if (s > 0) {
          EXPECT_GE(f->start, find(OPTPIPE_RT_OP_F, s - 1, j)->end);
        }
        EXPECT_GE(b->start, s + 1 < S ? backward(s + 1, j)->end : f->end);
        if (const Event* w = find(OPTPIPE_RT_OP_W, s, j)) {
          EXPECT_GE(w->start, b->end);
        }
        if (const Event* r = find(OPTPIPE_RT_OP_R, s, j)) {
          EXPECT_GE(r->start, f->end);
          EXPECT_GE(b->start, r->end);
        }
      }
    }
  }

  static void check_memory(const Problem& problem, const World& world) {
    for (int r = 0; r < problem.ranks; ++r) {
      const RankTrainer& t = world.trainers[r];
      EXPECT_LE(t.peak_bytes, problem.activation_budget(r)) << "rank " << r;
      EXPECT_EQ(t.live_bytes, 0) << "rank " << r;
      EXPECT_TRUE(t.device.empty()) << "rank " << r;
      EXPECT_TRUE(t.at_offload.empty())
          << "rank " << r << ": an offloaded activation never came back";
    }
  }

  static void check_gradients(const Problem& problem, const World& world) {
    const auto reference = world.model.reference_gradients();
    for (int s = 0; s < problem.num_stages(); ++s) {
      const RankTrainer& t = world.trainers[problem.rank_of_stage[s]];
      std::vector<float> grad(kDim, 0);
      for (int j = 0; j < problem.microbatches; ++j) {
        const auto& dw = t.weight_grads.at({s, j});
        for (int i = 0; i < kDim; ++i) grad[i] += dw[i];
      }
      EXPECT_EQ(std::memcmp(grad.data(), reference[s].data(), kDim * sizeof(float)), 0)
          << "stage " << s << " gradient differs from the non-pipelined run";
    }
  }

  static bool check_makespan(const Schedule& schedule, const World& world, bool last_attempt) {
    double predicted_first = std::numeric_limits<double>::infinity(), predicted_last = 0;
    for (const auto& actions : schedule.ranks) {
      for (const optpipe::Action& a : actions) {
        if (!optpipe::is_compute(a.ref.op)) continue;
        predicted_first = std::min(predicted_first, a.start);
        predicted_last = std::max(predicted_last, a.end);
      }
    }
    double first = std::numeric_limits<double>::infinity(), last = 0;
    for (const auto& t : world.trainers) {
      for (const Event& e : t.events) {
        if (!is_compute_event(e.op)) continue;
        first = std::min(first, e.start);
        last = std::max(last, e.end);
      }
    }
    const double predicted = (predicted_last - predicted_first) * kSecondsPerUnit;
    const double measured = last - first;
    EXPECT_GE(measured, kMakespanLow * predicted) << "measured " << measured << " s";
    const bool within = measured <= kMakespanHigh * predicted + kMakespanSlackSeconds;
    if (!within && !last_attempt) {
      std::printf("makespan %.4f s over %.4f s predicted; retrying\n", measured, predicted);
      return false;
    }
    EXPECT_TRUE(within) << "measured " << measured << " s, predicted " << predicted << " s";
    return true;
  }

  std::vector<optpipe_rt_rank*> handles_;
  std::unique_ptr<World> world_;
};

TEST_F(EndToEnd, OneFOneB) {
  const Problem problem = small_problem(4, 1, 8);
  run_and_check(problem, compile(problem, "1f1b"));
}

TEST_F(EndToEnd, ZeroBubbleH1WithP2pLatency) {
  const Problem problem = small_problem(4, 1, 8, optpipe::PlacementKind::kLoop, 0.25);
  run_and_check(problem, compile(problem, "zb-h1"));
}

TEST_F(EndToEnd, InterleavedTwoChunks) {
  const Problem problem = small_problem(2, 2, 4);
  run_and_check(problem, compile(problem, "interleaved-1f1b"));
}

TEST_F(EndToEnd, VShapeHandsOffOnTheSameRank) {
  const Problem problem = small_problem(2, 2, 4, optpipe::PlacementKind::kVShape);
  const optpipe::Generator* zbv = optpipe::find_generator("zb-v");
  ASSERT_NE(zbv, nullptr);
  ASSERT_EQ(zbv->unsupported_reason(problem), "");
  run_and_check(problem, compile(problem, "zb-v"));
}

// Rank 0 runs all forwards first and offloads microbatches 0 and 1 to fit a budget of three
// activations; the reloads land before their backwards. An offload or reload of one activation
// takes `copy_time` time units (an F takes one).
Problem offload_problem(optpipe::ChannelMode channels, double copy_time = 0.5) {
  Problem problem = small_problem(2, 1, 4);
  for (auto& s : problem.stages) s.offloadable_bytes = kActivationBytes;
  const double bandwidth = kActivationBytes / copy_time;
  problem.offload = optpipe::OffloadLink{bandwidth, bandwidth, channels, {0, 1}};
  return problem;
}

Schedule hand_made_offload_schedule(Problem& problem) {
  auto F = [](int s, int j) { return optpipe::OpRef{Op::kForward, s, j}; };
  auto B = [](int s, int j) { return optpipe::OpRef{Op::kBackwardInput, s, j}; };
  auto W = [](int s, int j) { return optpipe::OpRef{Op::kBackwardWeight, s, j}; };
  auto OFF = [](int s, int j) { return optpipe::OpRef{Op::kOffload, s, j}; };
  auto RE = [](int s, int j) { return optpipe::OpRef{Op::kReload, s, j}; };
  optpipe::Order order;
  order.ranks = {{F(0, 0), OFF(0, 0), F(0, 1), OFF(0, 1), F(0, 2), F(0, 3), RE(0, 0), B(0, 0),
                  W(0, 0), RE(0, 1), B(0, 1), W(0, 1), B(0, 2), W(0, 2), B(0, 3), W(0, 3)},
                 {F(1, 0), F(1, 1), F(1, 2), F(1, 3), B(1, 0), W(1, 0), B(1, 1), W(1, 1), B(1, 2),
                  W(1, 2), B(1, 3), W(1, 3)}};
  Schedule schedule = optpipe::simulate(problem, order, "hand-offload");
  // The tightest budget the schedule meets; without the offloads rank 0 would hold 4 activations.
  const optpipe::Metrics metrics = optpipe::compute_metrics(problem, schedule);
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = metrics.ranks[r].peak_bytes;
  EXPECT_LT(problem.activation_budget(0), 4 * kActivationBytes);
  return schedule;
}

TEST_F(EndToEnd, HandMadeOffloadDuplexChannels) {
  Problem problem = offload_problem(optpipe::ChannelMode::kDuplex);
  const Schedule schedule = hand_made_offload_schedule(problem);
  run_and_check(problem, schedule);
  EXPECT_EQ(world_->trainers[0].reloads_checked, 2);
  int d2h_copies = 0, h2d_copies = 0;
  double d2h = 0, h2d = 0;
  ASSERT_EQ(optpipe_rt_measured_bandwidth(handles_[0], &d2h, &d2h_copies, &h2d, &h2d_copies),
            OPTPIPE_RT_OK);
  EXPECT_TRUE(d2h_copies > 0 && d2h_copies % 2 == 0) << d2h_copies;  // 2 per iteration
  EXPECT_EQ(h2d_copies, d2h_copies);
  // Emulated at the profile's bandwidth (per emulated unit = kSecondsPerUnit; the shim measures per
  // wall ms); the copy threads may only be slower.
  const double emulated = problem.offload->d2h_bytes_per_time / (kSecondsPerUnit * 1e3);
  EXPECT_LE(d2h, emulated * 1.05);
  EXPECT_GT(d2h, 0);
  EXPECT_LE(h2d, emulated * 1.05);
  EXPECT_GT(h2d, 0);
}

TEST_F(EndToEnd, HandMadeOffloadSharedChannel) {
  Problem problem = offload_problem(optpipe::ChannelMode::kShared);
  const Schedule schedule = hand_made_offload_schedule(problem);
  run_and_check(problem, schedule);
  EXPECT_EQ(world_->trainers[0].reloads_checked, 2);
}

// Copies slower than an F: the second offload waits for the first and starts while F(0, 2)
// runs. The runner issues it before that F, where the simulator did (check_order), not once the F
// has ended, which would start it later than the schedule says.
TEST_F(EndToEnd, HandMadeOffloadWaitsForItsChannelWhileAForwardRuns) {
  Problem problem = offload_problem(optpipe::ChannelMode::kDuplex, 1.5);
  const Schedule schedule = hand_made_offload_schedule(problem);
  auto start_of = [&](Op op, int microbatch) {
    for (const optpipe::Action& a : schedule.ranks[0]) {
      if (a.ref == optpipe::OpRef{op, 0, microbatch}) return a.start;
    }
    return std::numeric_limits<double>::quiet_NaN();
  };
  ASSERT_GT(start_of(Op::kOffload, 1), start_of(Op::kForward, 2));
  run_and_check(problem, schedule);
}

// 1F1B recomputing every activation: each F keeps only x (its checkpoint), each R rebuilds y before
// the backward reads it. The tightest budget it meets is below plain 1F1B's 4 activations on rank
// 0, and gradients stay bit-identical.
TEST_F(EndToEnd, RecomputeEveryActivationFitsWherePlain1F1BDoesNot) {
  Problem problem = small_problem(4, 1, 8);
  for (auto& s : problem.stages) s.recompute_forward = 0.8;
  const Schedule schedule = optpipe::testing::recomputing_1f1b(problem, kCheckpointBytes);
  const optpipe::Metrics metrics = optpipe::compute_metrics(problem, schedule);
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = metrics.ranks[r].peak_bytes;
  EXPECT_LT(problem.activation_budget(0), 4 * kActivationBytes);
  run_and_check(problem, schedule);
  for (int r = 0; r < problem.ranks; ++r) {
    EXPECT_EQ(world_->trainers[r].recomputes, problem.microbatches) << "rank " << r;
  }

  // The measured profile keeps recompute enabled, with the measured R time.
  const std::string path = ::testing::TempDir() + "/measured-recompute.json";
  ASSERT_EQ(
      optpipe_rt_write_measured_profile(handles_.data(), handles_.size(), "measured", path.c_str()),
      OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  const Problem measured = optpipe::load_profile(path);
  for (int s = 0; s < problem.num_stages(); ++s) {
    EXPECT_EQ(measured.stages[s].checkpoint_bytes, kCheckpointBytes);
    const double got = measured.stages[s].recompute_forward / (kSecondsPerUnit * 1e3);
    EXPECT_GE(got, 0.8 * 0.99) << "stage " << s;
    EXPECT_LE(got, 0.8 * kMedianHigh) << "stage " << s;
  }
  std::remove(path.c_str());
}

// Offload generators from heuristics/, when this build has them and they offload here.
TEST_F(EndToEnd, OffloadGeneratorsWhenPresent) {
  int ran = 0;
  for (const char* name : {"adaoffload", "pipeoffload"}) {
    const optpipe::Generator* generator = optpipe::find_generator(name);
    if (generator == nullptr) continue;
    Problem problem = offload_problem(optpipe::ChannelMode::kDuplex);
    problem.microbatches = 6;
    problem.budget_bytes.assign(2, problem.static_bytes[0] + 3 * kActivationBytes);
    if (!generator->unsupported_reason(problem).empty()) continue;
    Schedule schedule;
    try {
      schedule = optpipe::simulate(problem, generator->build(problem), name);
    } catch (const std::exception&) {
      continue;  // e.g. no schedule fits: the generator's business, not the shim's
    }
    if (optpipe::validate(problem, schedule)) continue;
    for (auto* h : handles_) optpipe_rt_rank_close(h);
    handles_.clear();
    run_and_check(problem, schedule);
    ++ran;
  }
  std::printf("offload generators run end to end: %d\n", ran);
  if (ran == 0) GTEST_SKIP() << "no offload generator produced a valid schedule here";
}

// The measured profile closes the loop: the compiler reads it back, with the emulated durations.
TEST_F(EndToEnd, MeasuredProfileReadsBackWithEmulatedTimes) {
  Problem problem = offload_problem(optpipe::ChannelMode::kDuplex);
  const Schedule schedule = hand_made_offload_schedule(problem);
  run_and_check(problem, schedule);
  const std::string path = ::testing::TempDir() + "/measured-profile.json";
  ASSERT_EQ(
      optpipe_rt_write_measured_profile(handles_.data(), handles_.size(), "measured", path.c_str()),
      OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  const Problem measured = optpipe::load_profile(path);
  ASSERT_EQ(measured.num_stages(), problem.num_stages());
  EXPECT_EQ(measured.rank_of_stage, problem.rank_of_stage);
  EXPECT_EQ(measured.budget_bytes, problem.budget_bytes);
  EXPECT_EQ(measured.static_bytes, problem.static_bytes);
  ASSERT_TRUE(measured.offload.has_value());
  for (int s = 0; s < problem.num_stages(); ++s) {
    // Time unit ms; the emulation stretches one unit to kSecondsPerUnit of wall time.
    const double scale = kSecondsPerUnit * 1e3;
    const std::pair<double, double> pairs[] = {
        {measured.stages[s].forward, problem.stages[s].forward},
        {measured.stages[s].backward_input, problem.stages[s].backward_input},
        {measured.stages[s].backward_weight, problem.stages[s].backward_weight}};
    for (const auto& [got, emulated] : pairs) {
      EXPECT_GE(got / scale, emulated * 0.99) << "stage " << s;
      EXPECT_LE(got / scale, emulated * kMedianHigh) << "stage " << s;
    }
    EXPECT_EQ(measured.stages[s].activation_bytes, problem.stages[s].activation_bytes);
    double median = 0;
    int samples = 0;
    ASSERT_EQ(optpipe_rt_measured(handles_[problem.rank_of_stage[s]], OPTPIPE_RT_OP_F, s, &median,
                                  &samples),
              OPTPIPE_RT_OK);
    EXPECT_GT(samples, 0);
    EXPECT_EQ(samples % problem.microbatches, 0);  // one per microbatch per iteration
  }
  double makespan = 0;
  ASSERT_EQ(optpipe_rt_last_makespan(handles_[0], &makespan), OPTPIPE_RT_OK);
  EXPECT_GT(makespan, 0);
  std::remove(path.c_str());
}

}  // namespace

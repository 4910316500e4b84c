// optpipe_rt_run: walks one rank's actions in schedule order (docs/runtime-shim.md, "Runner").
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "issue_order.h"
#include "rank_runtime.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {

std::string where(int stage, int microbatch) {
  return "stage " + std::to_string(stage) + ", microbatch " + std::to_string(microbatch);
}

void require_callbacks(const ScheduleData& data, int rank, const optpipe_rt_callbacks& cb) {
  for (const optpipe_rt_action& a : data.actions[rank]) {
    const char* missing = nullptr;
    switch (a.op) {
      case OPTPIPE_RT_OP_F:
        missing = cb.forward ? nullptr : "forward";
        break;
      case OPTPIPE_RT_OP_B:
        missing = cb.backward_input ? nullptr : "backward_input";
        break;
      case OPTPIPE_RT_OP_W:
        missing = cb.backward_weight ? nullptr : "backward_weight";
        break;
      case OPTPIPE_RT_OP_BW:
        missing = cb.backward || (cb.backward_input && cb.backward_weight)
                      ? nullptr
                      : "backward (or backward_input and backward_weight)";
        break;
      case OPTPIPE_RT_OP_OFFLOAD:
        missing = cb.offload_source || cb.offload_segments
                      ? nullptr
                      : "offload_source (or offload_segments)";
        break;
      case OPTPIPE_RT_OP_RELOAD:
        missing = cb.reload_target || cb.reload_segments
                      ? nullptr
                      : "reload_target (or reload_segments)";
        break;
      case OPTPIPE_RT_OP_R:
        missing = cb.recompute ? nullptr : "recompute";
        break;
    }
    if (missing) {
      throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT, std::string("the schedule of rank ") +
                                                       std::to_string(rank) + " needs the " +
                                                       missing + " callback");
    }
  }
}

}  // namespace

namespace {
void run_rank_once(RankRuntime& rt, const optpipe_rt_callbacks& cb, void* user);
}  // namespace

void run_rank(RankRuntime& rt, const optpipe_rt_callbacks& cb, void* user) {
  try {
    run_rank_once(rt, cb, user);
  } catch (...) {
    // No copy may outlive a failed run: the trainer will free the buffers it reads or writes.
    try {
      rt.engine->reset();
      rt.backend->clear_marks();
    } catch (...) {
    }
    throw;
  }
}

namespace {

void run_rank_once(RankRuntime& rt, const optpipe_rt_callbacks& cb, void* user) {
  const ScheduleData& data = *rt.schedule;
  std::vector<optpipe_rt_action> actions;
  for (const size_t i : issue_order(data.actions[rt.rank])) {
    actions.push_back(data.actions[rt.rank][i]);
  }
  require_callbacks(data, rt.rank, cb);
  Backend& backend = *rt.backend;
  OffloadEngine& engine = *rt.engine;
  const int last_stage = data.info.stages - 1;
  auto remote = [&](int stage) { return data.stages[stage].rank != rt.rank; };

  auto call = [&](int (*fn)(void*, int, int), const char* name, int stage, int microbatch) {
    if (fn == nullptr) return;
    if (fn(user, stage, microbatch) != 0) {
      throw RtError(OPTPIPE_RT_E_CALLBACK,
                    std::string(name) + " callback failed at " + where(stage, microbatch));
    }
  };

  // Offloads whose end the trainer has not been told yet, with their predicted end.
  struct Pending {
    int stage, microbatch;
    double end;
  };
  std::vector<Pending> pending;
  auto report = [&](const Pending& p) {
    call(cb.offload_complete, "offload_complete", p.stage, p.microbatch);
  };
  // Before an allocation point the offloads the schedule has ended by then must have ended, so
  // device memory never exceeds the prediction whatever the real copy speed.
  auto fence = [&](double before) {
    for (size_t i = 0; i < pending.size();) {
      if (pending[i].end <= before + 1e-9 * (1 + std::fabs(before))) {
        engine.synchronize(pending[i].stage, pending[i].microbatch);
        const Pending p = pending[i];
        pending.erase(pending.begin() + static_cast<long>(i));
        report(p);
      } else {
        ++i;
      }
    }
  };
  auto poll = [&] {
    for (size_t i = 0; i < pending.size();) {
      if (engine.done(pending[i].stage, pending[i].microbatch)) {
        const Pending p = pending[i];
        pending.erase(pending.begin() + static_cast<long>(i));
        report(p);
      } else {
        ++i;
      }
    }
  };

  struct Timed {
    int op, stage;
    size_t begin, end;
  };
  std::vector<Timed> timed;
  std::set<std::pair<int, int>> offloaded, reloaded, recomputed;
  backend.clear_marks();
  const size_t first_mark = backend.mark();
  auto compute = [&](int op, int (*fn)(void*, int, int), const char* name, int s, int j) {
    const size_t begin = backend.mark();
    call(fn, name, s, j);
    timed.push_back({op, s, begin, backend.mark()});
  };

  for (const optpipe_rt_action& a : actions) {
    const int s = a.stage, j = a.microbatch;
    const auto key = std::make_pair(s, j);
    const bool allocates =
        a.op == OPTPIPE_RT_OP_F || a.op == OPTPIPE_RT_OP_RELOAD || a.op == OPTPIPE_RT_OP_R;
    if (allocates) fence(a.start);
    poll();
    switch (a.op) {
      case OPTPIPE_RT_OP_F:
        if (s > 0 && remote(s - 1)) call(cb.recv_forward, "recv_forward", s, j);
        compute(a.op, cb.forward, "forward", s, j);
        if (s < last_stage && remote(s + 1)) call(cb.send_forward, "send_forward", s, j);
        break;
      case OPTPIPE_RT_OP_B:
      case OPTPIPE_RT_OP_BW: {
        if (s < last_stage && remote(s + 1)) call(cb.recv_backward, "recv_backward", s, j);
        const bool was_offloaded = offloaded.count(key) > 0;
        if (was_offloaded) {
          if (!reloaded.count(key)) {
            throw RtError(OPTPIPE_RT_E_STATE, "the schedule runs B of " + where(s, j) +
                                                  " before reloading its offloaded activation");
          }
          engine.wait(s, j);
        }
        if (rt.recomputed.count(key) && !recomputed.erase(key)) {
          throw RtError(OPTPIPE_RT_E_STATE, "the schedule runs B of " + where(s, j) +
                                                " before recomputing its activation");
        }
        if (a.op == OPTPIPE_RT_OP_B) {
          compute(a.op, cb.backward_input, "backward_input", s, j);
        } else if (cb.backward) {
          compute(a.op, cb.backward, "backward", s, j);
        } else {
          const size_t begin = backend.mark();
          call(cb.backward_input, "backward_input", s, j);
          call(cb.backward_weight, "backward_weight", s, j);
          timed.push_back({a.op, s, begin, backend.mark()});
        }
        if (was_offloaded) {
          engine.release(s, j);
          offloaded.erase(key);
          reloaded.erase(key);
        }
        if (s > 0 && remote(s - 1)) call(cb.send_backward, "send_backward", s, j);
        break;
      }
      case OPTPIPE_RT_OP_W:
        compute(a.op, cb.backward_weight, "backward_weight", s, j);
        break;
      case OPTPIPE_RT_OP_R:
        compute(a.op, cb.recompute, "recompute", s, j);
        recomputed.insert(key);
        break;
      case OPTPIPE_RT_OP_OFFLOAD: {
        if (cb.offload_segments) {
          const void* const* ptrs = nullptr;
          const size_t* sizes = nullptr;
          size_t count = 0;
          if (cb.offload_segments(user, s, j, &ptrs, &sizes, &count) != 0 ||
              (count > 0 && (ptrs == nullptr || sizes == nullptr))) {
            throw RtError(OPTPIPE_RT_E_CALLBACK,
                          "offload_segments callback failed at " + where(s, j));
          }
          std::vector<Segment> segments(count);
          for (size_t i = 0; i < count; ++i) segments[i] = {ptrs[i], sizes[i]};
          engine.offload(s, j, segments);
        } else {
          const void* ptr = nullptr;
          size_t bytes = 0;
          if (cb.offload_source(user, s, j, &ptr, &bytes) != 0) {
            throw RtError(OPTPIPE_RT_E_CALLBACK,
                          "offload_source callback failed at " + where(s, j));
          }
          engine.offload(s, j, ptr, bytes);
        }
        offloaded.insert(key);
        pending.push_back({s, j, a.end});
        break;
      }
      case OPTPIPE_RT_OP_RELOAD: {
        if (!offloaded.count(key)) {
          throw RtError(OPTPIPE_RT_E_STATE,
                        "the schedule reloads " + where(s, j) + " before offloading it");
        }
        if (cb.reload_segments) {
          const std::vector<size_t> sizes = engine.segment_bytes(s, j);
          std::vector<void*> targets(sizes.size(), nullptr);
          if (cb.reload_segments(user, s, j, sizes.size(), sizes.data(), targets.data()) != 0) {
            throw RtError(OPTPIPE_RT_E_CALLBACK,
                          "reload_segments callback failed at " + where(s, j));
          }
          engine.reload(s, j, targets);
          reloaded.insert(key);
          break;
        }
        void* ptr = nullptr;
        if (cb.reload_target(user, s, j, engine.offloaded_bytes(s, j), &ptr) != 0) {
          throw RtError(OPTPIPE_RT_E_CALLBACK, "reload_target callback failed at " + where(s, j));
        }
        engine.reload(s, j, ptr);
        reloaded.insert(key);
        break;
      }
    }
  }
  fence(std::numeric_limits<double>::infinity());
  const size_t last_mark = backend.mark();

  const double unit = rt.seconds_to_time_unit();
  for (const Timed& t : timed) {
    rt.recorder.add(t.op, t.stage, backend.seconds_between(t.begin, t.end) * unit);
  }
  rt.recorder.last_makespan = backend.seconds_between(first_mark, last_mark) * unit;
  backend.synchronize_all();
  const auto [d2h, h2d] = engine.take_transfer_stats();
  rt.recorder.add_transfers(d2h, h2d);
  backend.clear_marks();
}

}  // namespace

}  // namespace optpipe::rt

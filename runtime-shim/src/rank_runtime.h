// What an optpipe_rt_rank handle holds: the schedule, the rank's backend and offload engine, and
// its timing recorder.
#pragma once

#include <memory>
#include <set>
#include <utility>

#include "backend.h"
#include "offload_engine.h"
#include "optpipe_rt.h"
#include "schedule_data.h"
#include "timing_recorder.h"

namespace optpipe::rt {

struct RankRuntime {
  std::shared_ptr<const ScheduleData> schedule;
  int rank = 0;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<OffloadEngine> engine;
  TimingRecorder recorder;
  std::set<std::pair<int, int>> recomputed;  // (stage, microbatch) with an R in the rank's schedule

  double seconds_to_time_unit() const { return schedule->info.time_unit == 1 ? 1e6 : 1e3; }
};

// optpipe_rt_run's body; throws RtError.
void run_rank(RankRuntime& rt, const optpipe_rt_callbacks& callbacks, void* user);

// optpipe_rt_write_measured_profile's body; throws RtError.
void write_measured_profile(const RankRuntime* const* ranks, size_t n, const char* name,
                            const char* path);

}  // namespace optpipe::rt

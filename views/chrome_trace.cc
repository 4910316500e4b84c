#include "views/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "timing/memory_timeline.h"

namespace optpipe {

namespace {

using nlohmann::json;

double to_microseconds(const Problem& problem, double time) {
  return problem.time_unit == TimeUnit::kMilliseconds ? time * 1000.0 : time;
}

int track_of(Op op) {
  if (op == Op::kOffload) return kOffloadTrack;
  if (op == Op::kReload) return kReloadTrack;
  return kComputeTrack;
}

json metadata(const char* name, int pid, json args, int tid = -1) {
  json event = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) event["tid"] = tid;
  return event;
}

json counter(const char* name, int pid, double ts, const char* key, int64_t value) {
  return {{"ph", "C"}, {"name", name}, {"pid", pid}, {"ts", ts}, {"args", {{key, value}}}};
}

void add_rank_tracks(int rank, json& events) {
  events.push_back(metadata("process_name", rank, {{"name", fmt::format("rank {}", rank)}}));
  events.push_back(metadata("process_sort_index", rank, {{"sort_index", rank}}));
  const std::pair<int, const char*> tracks[] = {
      {kComputeTrack, "compute"}, {kOffloadTrack, "D2H (offload)"}, {kReloadTrack, "H2D (reload)"}};
  for (const auto& [tid, name] : tracks) {
    events.push_back(metadata("thread_name", rank, {{"name", name}}, tid));
    events.push_back(metadata("thread_sort_index", rank, {{"sort_index", tid}}, tid));
  }
}

json action_event(const Problem& problem, int rank, const Action& a) {
  const std::string_view op = to_string(a.ref.op);
  json args = {{"op", op}, {"stage", a.ref.stage}, {"microbatch", a.ref.microbatch}};
  if (is_transfer(a.ref.op)) args["bytes"] = a.bytes;
  return {{"name", fmt::format("{} s{} mb{}", op, a.ref.stage, a.ref.microbatch)},
          {"cat", op},
          {"ph", "X"},
          {"pid", rank},
          {"tid", track_of(a.ref.op)},
          {"ts", to_microseconds(problem, a.start)},
          {"dur", to_microseconds(problem, a.end - a.start)},
          {"args", std::move(args)}};
}

// One counter value per distinct time: the value after every change at that time. At one time
// releases come first, so the last value is the highest that time reaches above the one before.
void add_memory_counters(const Problem& problem, int rank, const std::vector<Action>& actions,
                         double begin, double end, json& events) {
  const int64_t static_bytes = problem.static_bytes[rank];
  events.push_back(
      counter("live memory", rank, to_microseconds(problem, begin), "bytes", static_bytes));
  const std::vector<MemoryStep> timeline = memory_timeline(problem, actions);
  for (size_t i = 0; i < timeline.size(); ++i) {
    if (i + 1 < timeline.size() && timeline[i + 1].time == timeline[i].time) continue;
    events.push_back(counter("live memory", rank, to_microseconds(problem, timeline[i].time),
                             "bytes", static_bytes + timeline[i].live_bytes));
  }
  for (double t : {begin, end}) {
    events.push_back(counter("memory budget", rank, to_microseconds(problem, t), "bytes",
                             problem.budget_bytes[rank]));
  }
}

}  // namespace

std::string chrome_trace_json(const Problem& problem, const Schedule& schedule,
                              const Metrics& metrics) {
  const auto [begin, end] = time_extent(schedule);

  json events = json::array();
  for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
    add_rank_tracks(r, events);
    for (const Action& a : schedule.ranks[r]) events.push_back(action_event(problem, r, a));
    add_memory_counters(problem, r, schedule.ranks[r], begin, end, events);
  }
  json trace = {{"traceEvents", std::move(events)},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"generator", "optpipe"},
                  {"profile", problem.name},
                  {"method", schedule.method},
                  {"time_unit_of_profile", to_string(problem.time_unit)},
                  {"makespan", metrics.makespan},
                  {"idle_fraction", metrics.idle_fraction},
                  {"bubble_rate", metrics.bubble_rate}}}};
  return trace.dump() + "\n";
}

}  // namespace optpipe

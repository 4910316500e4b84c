// The Chrome trace is well-formed trace-event JSON with every action on its track and memory
// counters whose peaks are the metrics' peaks.
#include "views/chrome_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "heuristics/one_f_one_b.h"
#include "heuristics/registry.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using nlohmann::json;
using testing::uniform_problem;

void expect_complete_trace(const Problem& p, const Schedule& s) {
  const Metrics metrics = compute_metrics(p, s);
  const json trace = json::parse(chrome_trace_json(p, s, metrics));  // throws if malformed
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());

  std::multiset<std::tuple<int, int, std::string>> events;  // pid, tid, name
  std::map<int, int64_t> live_peak;
  std::map<int, std::set<int64_t>> budgets;
  std::set<int> named_processes;
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const std::string ph = e["ph"];
    const int pid = e["pid"];
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e.contains("tid")) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_TRUE(e["args"].contains("stage") && e["args"].contains("microbatch")) << e.dump();
      events.insert({pid, e["tid"].get<int>(), e["name"].get<std::string>()});
    } else if (ph == "C") {
      const int64_t bytes = e["args"]["bytes"];
      if (e["name"] == "live memory") {
        live_peak[pid] = std::max(live_peak[pid], bytes);
      } else {
        EXPECT_EQ(e["name"], "memory budget");
        budgets[pid].insert(bytes);
      }
    } else if (ph == "M" && e["name"] == "process_name") {
      named_processes.insert(pid);
    }
  }
  size_t actions = 0;
  for (int r = 0; r < p.ranks; ++r) {
    EXPECT_TRUE(named_processes.count(r)) << r;
    for (const Action& a : s.ranks[r]) {
      const int tid = a.ref.op == Op::kOffload  ? kOffloadTrack
                      : a.ref.op == Op::kReload ? kReloadTrack
                                                : kComputeTrack;
      const std::string name = std::string(to_string(a.ref.op)) + " s" +
                               std::to_string(a.ref.stage) + " mb" +
                               std::to_string(a.ref.microbatch);
      EXPECT_EQ(events.count({r, tid, name}), 1u) << name << " on rank " << r;
      ++actions;
    }
    EXPECT_EQ(live_peak[r], metrics.ranks[r].peak_bytes) << "rank " << r;
    EXPECT_EQ(budgets[r], std::set<int64_t>{p.budget_bytes[r]});
  }
  EXPECT_EQ(events.size(), actions);
}

TEST(ChromeTrace, OneFOneBIsCompleteWithMemoryPeaks) {
  const Problem p = uniform_problem(4, 1, 8);
  expect_complete_trace(p, simulate(p, one_f_one_b_order(p), "1f1b"));
}

TEST(ChromeTrace, TransfersGoOnTheirOwnTracks) {
  Problem p = uniform_problem(2, 1, 3);
  const Schedule s = testing::offloading_1f1b(p);
  ASSERT_FALSE(validate(p, s));
  expect_complete_trace(p, s);
  const json trace = json::parse(chrome_trace_json(p, s, compute_metrics(p, s)));
  int transfers = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] == kComputeTrack) continue;
    EXPECT_EQ(e["tid"],
              e["name"].get<std::string>().starts_with("OFFLOAD") ? kOffloadTrack : kReloadTrack);
    EXPECT_GT(e["args"]["bytes"].get<int64_t>(), 0);
    ++transfers;
  }
  EXPECT_EQ(transfers, 6);
}

TEST(ChromeTrace, RecomputeGoesOnTheComputeTrackAndLowersTheMemoryCounter) {
  Problem p = uniform_problem(3, 1, 4);
  const Schedule s = testing::recomputing_1f1b(p, 100);
  ASSERT_FALSE(validate(p, s));
  expect_complete_trace(p, s);  // R on the compute track; counter peaks = metrics' peaks
  EXPECT_EQ(compute_metrics(p, s).ranks[0].peak_bytes, p.static_bytes[0] + 2 * 100 + 1000);
}

TEST(ChromeTrace, TimesAreMicroseconds) {
  const Problem p = uniform_problem(1, 1, 1);  // F at [0, 1] ms
  const Schedule s = simulate(p, one_f_one_b_order(p), "1f1b");
  const json trace = json::parse(chrome_trace_json(p, s, compute_metrics(p, s)));
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "F s0 mb0") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1000.0);
    }
  }
}

TEST(ChromeTrace, EveryGeneratorOnRandomProblems) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const Problem p = testing::random_problem(rng);
    for (const Generator& g : generators()) {
      if (!g.unsupported_reason(p).empty()) continue;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " " << g.name);
      expect_complete_trace(p, simulate(p, g.build(p), std::string(g.name)));
    }
  }
}

}  // namespace
}  // namespace optpipe

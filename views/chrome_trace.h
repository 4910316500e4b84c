// Chrome trace event JSON of a timed schedule (docs/design.md §7, docs/exports.md), for Perfetto
// (ui.perfetto.dev) and chrome://tracing: one process per rank with a thread each for compute,
// D2H (offload) and H2D (reload), and counters of live memory and of the budget.
#pragma once

#include <string>

#include "model/problem.h"
#include "model/schedule.h"
#include "timing/metrics.h"

namespace optpipe {

// Track ids (tid) inside each rank's process.
inline constexpr int kComputeTrack = 0;
inline constexpr int kOffloadTrack = 1;
inline constexpr int kReloadTrack = 2;

// Times become microseconds (the format's unit). Events are named like "F s3 mb7" with args
// {op, stage, microbatch} (+ bytes for transfers); the "live memory" counter holds static + live
// activation bytes after every change, so its peak per rank is the metrics' peak_bytes.
std::string chrome_trace_json(const Problem& problem, const Schedule& schedule,
                              const Metrics& metrics);

}  // namespace optpipe

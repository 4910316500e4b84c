// Per-op durations over iterations, kept per (op, stage) in the schedule's time unit; medians
// feed the measured profile (measured_profile.cc).
#pragma once

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "offload_engine.h"

namespace optpipe::rt {

class TimingRecorder {
 public:
  void add(int op, int stage, double duration) { samples_[{op, stage}].push_back(duration); }
  // Median and sample count; {0, 0} when never measured.
  std::pair<double, int> median(int op, int stage) const {
    auto it = samples_.find({op, stage});
    if (it == samples_.end() || it->second.empty()) return {0.0, 0};
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, static_cast<int>(n)};
  }
  void add_transfers(const TransferStats& d2h, const TransferStats& h2d) {
    accumulate(d2h_, d2h);
    accumulate(h2d_, h2d);
  }
  const TransferStats& d2h() const { return d2h_; }
  const TransferStats& h2d() const { return h2d_; }
  double last_makespan = 0;  // time unit

 private:
  static void accumulate(TransferStats& into, const TransferStats& from) {
    into.bytes += from.bytes;
    into.seconds += from.seconds;
    into.count += from.count;
  }
  std::map<std::pair<int, int>, std::vector<double>> samples_;
  TransferStats d2h_, h2d_;
};

}  // namespace optpipe::rt

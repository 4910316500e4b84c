#include "timing/previous_timing.h"

#include <cmath>
#include <limits>

namespace optpipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

PreviousTiming::PreviousTiming(const Problem& problem, const Order& order, const Schedule& previous,
                               const OrderRevision& revision)
    : previous_(previous),
      longest_lag_(problem.p2p_latency),  // dependencies lag by a hand-off at most
      previous_start_(problem, std::numeric_limits<double>::quiet_NaN()),
      reached_(previous.ranks.size(), 0),
      checked_(-kInfinity),
      latest_difference_(-kInfinity),
      last_start_(-kInfinity) {
  for (const auto& actions : previous.ranks) {
    for (const Action& a : actions) previous_start_[a.ref] = a.start;
  }
  const auto& refs = order.ranks[revision.rank];
  revised_.assign(refs.begin() + static_cast<std::ptrdiff_t>(revision.first),
                  refs.begin() + static_cast<std::ptrdiff_t>(revision.last));
}

bool PreviousTiming::caught_up(double start, const OpTable<double>& end) {
  // Ties: once an action at `start` is committed, the committed set is no longer the set of
  // actions that start before it, so only the first commit at each start is checked.
  if (start <= last_start_ || latest_difference_ + longest_lag_ >= start) return false;
  for (const OpRef& ref : revised_) {
    if (std::isnan(end[ref])) return false;  // the lists still differ ahead
  }
  for (size_t r = 0; r < reached_.size(); ++r) {
    const auto& actions = previous_.ranks[r];
    for (; reached_[r] < actions.size() && actions[reached_[r]].start < start; ++reached_[r]) {
      ++previous_before_;
      if (!std::isnan(end[actions[reached_[r]].ref])) ++committed_before_checked_;
    }
  }
  checked_ = start;
  return committed_before_checked_ == committed_ && previous_before_ == committed_;
}

void PreviousTiming::append_rest(Schedule& schedule) const {
  for (size_t r = 0; r < reached_.size(); ++r) {
    const auto& actions = previous_.ranks[r];
    schedule.ranks[r].insert(schedule.ranks[r].end(),
                             actions.begin() + static_cast<std::ptrdiff_t>(reached_[r]),
                             actions.end());
  }
}

}  // namespace optpipe

// What the simulator re-uses of a previous timing when the order changed only a little (the local
// search's moves: solver/local_search.h). The simulation is deterministic and commits starts in
// non-decreasing order, so every action it has not committed by some moment T starts at T or
// later. Once it has committed exactly the actions the previous timing starts before T, and those
// whose times differ ended, in both timings, more than the longest dependency lag before T, the two
// are in states that differ only in times no later action can see: every later action starts as
// it did before.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/op_table.h"
#include "model/problem.h"
#include "model/schedule.h"
#include "timing/order_revision.h"

namespace optpipe {

class PreviousTiming {
 public:
  // `revision.rank` >= 0: the new order lists the same actions as the previous one, changed only in
  // the positions the revision names.
  PreviousTiming(const Problem& problem, const Order& order, const Schedule& previous,
                 const OrderRevision& revision);

  // An action the new timing commits (replayed ones included).
  void record(const OpRef& ref, double start, double end) {
    ++committed_;
    const double previous_start = previous_start_[ref];
    if (previous_start < checked_) ++committed_before_checked_;
    if (previous_start != start) {
      latest_difference_ = std::max({latest_difference_, end, previous_start + (end - start)});
    }
    last_start_ = std::max(last_start_, start);
  }

  // Whether the new timing, about to commit an action at `start` (so every action that starts
  // earlier is committed), has caught up with the previous one. `end` holds the new timing's ends
  // (NaN: not committed).
  bool caught_up(double start, const OpTable<double>& end);

  // The previous timing's actions from the moment caught_up() found on, appended per rank.
  void append_rest(Schedule& schedule) const;

 private:
  const Schedule& previous_;
  double longest_lag_;
  OpTable<double> previous_start_;  // NaN: not in the previous timing
  std::vector<OpRef> revised_;      // the actions in the changed positions
  std::vector<size_t> reached_;     // per rank: its previous actions that start before `checked_`
  size_t previous_before_ = 0;      // their number
  double checked_;
  size_t committed_ = 0;
  // Of them, those the previous timing starts before `checked_`.
  size_t committed_before_checked_ = 0;
  double latest_difference_;  // latest end, in either timing, of an action whose times differ
  double last_start_;
};

}  // namespace optpipe

// Keeping the fastest of several candidate orders, by the simulator's makespan: the generators
// that try every variant of an authors' heuristic pick with it.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

class FastestOrder {
 public:
  // `method` names the candidates in the simulator's messages.
  FastestOrder(const Problem& problem, std::string method)
      : problem_(problem), method_(std::move(method)) {}

  // Times `order`; keeps it when it is strictly faster than every order offered before (the
  // first wins ties). An order whose ranks deadlock is dropped.
  void offer(Order order);

  // The fastest order offered; nullopt when none was, or all deadlocked.
  std::optional<Order> take() { return std::move(best_); }

 private:
  const Problem& problem_;
  std::string method_;
  std::optional<Order> best_;
  double best_makespan_ = std::numeric_limits<double>::infinity();
};

}  // namespace optpipe

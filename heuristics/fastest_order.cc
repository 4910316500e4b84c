#include "heuristics/fastest_order.h"

#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {

void FastestOrder::offer(Order order) {
  const SimulationOutcome timed = try_simulate(problem_, order, method_);
  if (!timed.schedule) return;
  if (const double makespan = makespan_of(*timed.schedule); makespan < best_makespan_) {
    best_makespan_ = makespan;
    best_ = std::move(order);
  }
}

}  // namespace optpipe

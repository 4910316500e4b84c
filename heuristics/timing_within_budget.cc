#include "heuristics/timing_within_budget.h"

#include "model/errors.h"
#include "timing/validator.h"

namespace optpipe {

std::optional<Schedule> timing_within_budget(const Problem& problem, const Order& order,
                                             const Schedule* previous,
                                             const OrderRevision& revision, double limit) {
  // nullopt, too, where the ranks would wait on each other.
  std::optional<Schedule> schedule =
      previous ? simulate_within_budget(problem, order, "milp", *previous, revision, limit)
               : try_simulate_within_budget(problem, order, "milp").schedule;
  if (!schedule || validate_memory(problem, *schedule)) return std::nullopt;
  return schedule;
}

}  // namespace optpipe

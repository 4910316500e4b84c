#include "heuristics/timing_within_budget.h"

#include "model/errors.h"
#include "timing/validator.h"

namespace optpipe {

std::optional<Schedule> timing_within_budget(const Problem& problem, const Order& order,
                                             const Schedule* previous,
                                             const OrderRevision& revision, double limit) {
  try {
    std::optional<Schedule> schedule =
        previous ? simulate_within_budget(problem, order, "milp", *previous, revision, limit)
                 : simulate_within_budget(problem, order, "milp");
    if (!schedule || validate_memory(problem, *schedule)) return std::nullopt;
    return schedule;
  } catch (const Error&) {
    return std::nullopt;  // ranks that would wait on each other
  }
}

}  // namespace optpipe

#include "tests/kicked_schedules.h"

#include <optional>

#include "solver/local_search.h"
#include "timing/simulator.h"

namespace optpipe::testing {

std::vector<Schedule> schedule_and_a_kick(const Problem& problem, const Problem& roomy,
                                          const Order& order, const std::string& method,
                                          uint64_t seed) {
  std::vector<Schedule> schedules = {simulate(problem, order, method)};
  if (std::optional<LocalSearch> search = LocalSearch::from(roomy, order, seed)) {
    search->perturb(roomy.ranks * roomy.chunks_per_rank * roomy.microbatches);
    schedules.push_back(search->schedule());
  }
  return schedules;
}

}  // namespace optpipe::testing

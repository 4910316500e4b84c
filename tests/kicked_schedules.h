// Schedules the local search can reach (solver/local_search.h) for tests of bounds that every
// schedule must respect; apart from test_problems so that only the tests that use it link the
// solver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe::testing {

// `order` timed on `problem`, and, where the local search can start from it on `roomy` (the same
// problem with room for anything), a random kick of it there: a schedule that may offload,
// recompute or reorder wherever a move allows.
std::vector<Schedule> schedule_and_a_kick(const Problem& problem, const Problem& roomy,
                                          const Order& order, const std::string& method,
                                          uint64_t seed);

}  // namespace optpipe::testing

// Greedy list scheduling with split backward (Zero Bubble style): each rank, whenever it is free,
// runs the first ready op by priority B > F > W, where F is allowed only while the rank holds
// fewer than its in-flight limit of activations awaiting their B (the Zero Bubble paper's
// count; what W still holds, G bytes per microbatch, is the generators' concern). W fills the time a rank would
// otherwise wait, and the remaining Ws drain at the end.
#pragma once

#include <vector>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct ListPolicy {
  std::vector<int> max_in_flight;  // per rank: forwards started minus input backwards started
};

Order list_schedule(const Problem& problem, const ListPolicy& policy);

}  // namespace optpipe

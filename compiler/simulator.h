// The simulator (DESIGN.md §1): times an Order as soon as possible under the cost model of §3.
#pragma once

#include <string>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

// Every action starts at the earliest time its dependencies, its rank's compute stream (compute
// ops, in order) or its copy channel (transfers, in issue order per rank) allow. Throws
// DeadlockError naming what each blocked rank waits for when the ranks wait on each other in a
// cycle, and Error when the order names an op twice or on the wrong rank. Memory is not checked
// here: validate() does that.
Schedule simulate(const Problem& problem, const Order& order, const std::string& method);

}  // namespace optpipe

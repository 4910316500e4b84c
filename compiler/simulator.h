// The simulator (DESIGN.md §1): times an Order as soon as possible under the cost model of §3.
#pragma once

#include <string>

#include "compiler/op_table.h"
#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

// Every action starts at the earliest time its dependencies, its rank's compute stream (compute
// ops, in order) or its copy channel (transfers, in issue order per rank) allow. Throws
// DeadlockError naming what each blocked rank waits for when the ranks wait on each other in a
// cycle, and Error when the order names an op twice or on the wrong rank. Memory is not checked
// here: validate() does that.
Schedule simulate(const Problem& problem, const Order& order, const std::string& method);

// As above, with no action starting before its `not_before` time: how a solver's timing, where an
// op may wait for an offload to free memory, becomes a schedule with the simulator's exact ends.
Schedule simulate(const Problem& problem, const Order& order, const std::string& method,
                  const OpTable<double>& not_before);

}  // namespace optpipe

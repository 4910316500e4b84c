// The simulator (docs/design.md §1): times an Order as soon as possible under the cost model of §3.
#pragma once

#include <optional>
#include <string>

#include "model/op_table.h"
#include "model/problem.h"
#include "model/schedule.h"
#include "timing/order_revision.h"

namespace optpipe {

// The timing of an order that may not run: its schedule, or, where the ranks wait on each other in
// a cycle, what each blocked rank waits for. Callers that try orders which may deadlock (a warm-up
// too deep for its wrap-around, a starved rank) read it as a value and move on.
struct SimulationOutcome {
  std::optional<Schedule> schedule;  // nullopt: the ranks deadlock
  std::string deadlock;              // when they do: "deadlock: rank 0 waits for ..."
};

// Every action starts at the earliest time its dependencies, its rank's compute stream (compute
// ops, in order) or its copy channel (transfers, in issue order per rank) allow. Throws Error when
// the order names an op twice or on the wrong rank (a bug in its maker). Memory is not checked
// here: validate() does that.
SimulationOutcome try_simulate(const Problem& problem, const Order& order, const std::string& method);

// As try_simulate(), for orders that cannot deadlock by construction: a deadlock is a bug in the
// order's maker, thrown as DeadlockError.
Schedule simulate(const Problem& problem, const Order& order, const std::string& method);

// As above, with no action starting before its `not_before` time: how a solver's timing, where an
// op may wait for an offload to free memory, becomes a schedule with the simulator's exact ends.
SimulationOutcome try_simulate(const Problem& problem, const Order& order,
                               const std::string& method, const OpTable<double>& not_before);
Schedule simulate(const Problem& problem, const Order& order, const std::string& method,
                  const OpTable<double>& not_before);

// As simulate(), with the runtime shim's memory fence: an allocation (F, R or RELOAD) that would
// take its rank over the budget waits for the end of the rank's first offload after which it
// fits, where one will (offloads still queued on the rank's channels count, but for a RELOAD not
// those behind it in its own queue). What no offload can make fit starts as simulate() would
// start it, and validate() rejects it. So a rank may wait for an offload instead of listing other
// work in between. An order that simulate() times within the budget is timed the same.
SimulationOutcome try_simulate_within_budget(const Problem& problem, const Order& order,
                                  const std::string& method);

// As try_simulate_within_budget(), a deadlock thrown as DeadlockError.
Schedule simulate_within_budget(const Problem& problem, const Order& order,
                                const std::string& method);

// Where a change to `rank`'s list of `order` from `position` on leaves `timing` (this function's
// timing of `order`) as it was: before the start of the rank's last compute op listed ahead of
// `position` (0 when there is none). Compute ops run in list order, and the transfers listed after
// that op join the rank's queues when it starts, so what starts earlier does not see the change.
double unchanged_before(const Order& order, const Schedule& timing, int rank, size_t position);

// The same, re-using `previous`: this function's timing of the order `revision` describes the
// change from. Throws Error when `previous` lists an early action that `order` does not reach by
// then.
Schedule simulate_within_budget(const Problem& problem, const Order& order,
                                const std::string& method, const Schedule& previous,
                                const OrderRevision& revision);

// As above, abandoned (nullopt) as soon as some rank is sure to end after `abandon_above`: its
// compute stream is busy until t and the compute ops it has not run yet take longer than
// abandon_above - t (with a margin for rounding), and nullopt as well where the ranks deadlock.
// What is abandoned ends later in any timing; the local search's moves that it would reject
// anyway stop there.
std::optional<Schedule> simulate_within_budget(const Problem& problem, const Order& order,
                                               const std::string& method, const Schedule& previous,
                                               const OrderRevision& revision, double abandon_above);

}  // namespace optpipe

// Offload passes shared by the offload generators (pipeoffload, adaoffload; docs/design.md §3, §5):
// take a compute-only Order, choose activations to move to host, place their transfers on the
// copy channels and time the result with the simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/op_table.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Activations (stage, microbatch) chosen for offload; indexed through Op::kForward.
class OffloadSet {
 public:
  explicit OffloadSet(const Problem& problem) : chosen_(problem, 0) {}
  bool contains(int stage, int mb) const { return chosen_[{Op::kForward, stage, mb}] != 0; }
  void add(int stage, int mb) { chosen_[{Op::kForward, stage, mb}] = 1; }
  void remove(int stage, int mb) { chosen_[{Op::kForward, stage, mb}] = 0; }

 private:
  OpTable<uint8_t> chosen_;
};

// `order` with R(s, j) listed right before the backward of every activation in `recomputed`
// (indexed through Op::kForward) that has none yet.
Order with_recompute(const Order& order, const OpTable<uint8_t>& recomputed);

// Bytes by which a timed schedule exceeds the activation budget, summed over ranks (0: fits).
int64_t budget_excess(const Problem& problem, const Schedule& schedule);

// Inserts OFFLOAD/RELOAD actions for `offloaded` into `compute_order` (compute ops only), using
// the compute times of `timing` (a simulation of an order with the same compute sequence). Each
// offload goes in the earliest free slot of its channel after its F, each reload in the latest
// free slot that ends before its B; the reload is listed after the last compute op that ends by
// then. Activations whose round trip does not fit between F and B are removed from `offloaded`.
Order insert_transfers(const Problem& problem, const Order& compute_order, const Schedule& timing,
                       OffloadSet& offloaded);

struct OffloadedSchedule {
  Order order;
  Schedule schedule;
  int64_t excess_bytes = 0;  // budget_excess of schedule
  double makespan = 0;
  int offloads = 0;
  bool fits() const { return excess_bytes == 0; }
};

// How fit_offloads chooses what to offload.
enum class OffloadChoice {
  kFixed,         // exactly the given set (less whatever does not fit its lifespan)
  kLongestLived,  // grow the given set where memory exceeds the budget: longest lifespans first
};

// What the caller of fit_offloads needs: the best schedule there is, the least over budget where
// none fits (the fallback it reports), or only one that fits (it has a fallback already), which
// spares the rounds that could only lower the excess.
enum class FitGoal { kLeastExcess, kFitOnly };

// Offloads activations of `compute_order` (timed without transfers as `compute_timing`) until
// the schedule fits the budget or nothing more can be offloaded, re-placing transfers with the
// simulator's times for a few rounds. Returns the best schedule seen, the compute-only one
// included: the fastest that fits, else the one with the least excess.
OffloadedSchedule fit_offloads(const Problem& problem, const Order& compute_order,
                               const Schedule& compute_timing, const std::string& method,
                               OffloadChoice choice, OffloadSet initial,
                               FitGoal goal = FitGoal::kLeastExcess);

// Where `fitted` (an order with or without transfers, timed) still exceeds the budget,
// recomputes the longest-lived activations that stay on the device and whose stage can
// recompute: R(s, j) is listed right before B(s, j), so the activation holds only its checkpoint
// bytes from its F's end until R starts, at the cost of T_R on the rank (docs/semantics.md).
// Rounds with the simulator's times while the excess falls; returns the best schedule seen,
// `fitted` included.
OffloadedSchedule fit_recompute(const Problem& problem, OffloadedSchedule fitted,
                                const std::string& method);

// `order` with `schedule`, its timing by the simulator, and what the budget and the search need to
// know of them.
OffloadedSchedule summarize(const Problem& problem, Order order, Schedule schedule);

// `order` (compute ops only) with an OFFLOAD right after each offloaded F and its RELOAD after
// the compute op `lead` - delay[RELOAD] places before its B; an activation whose reload would come
// before its F's place stays on the device. The memory fence (simulate_within_budget) then holds
// each allocation until the offloads before it have made room.
Order with_listed_transfers(const Problem& problem, const Order& order, const OffloadSet& offloaded,
                            int lead, const OpTable<int>& delay);

// Times `order` with the memory fence (simulate_within_budget), as every generator's order is.
// Throws DeadlockError where the order deadlocks (a bug in its maker).
OffloadedSchedule time_with_simulator(const Problem& problem, Order order,
                                      const std::string& method);

// The same for an order that may deadlock (a policy that starves a rank): nullopt where it does.
std::optional<OffloadedSchedule> try_time_with_simulator(const Problem& problem, Order order,
                                                         const std::string& method);

// Preference between candidates: fitting first, then the shorter makespan (fewer offloads on a
// tie); among those over budget, the smaller excess.
bool better_offloaded(const OffloadedSchedule& a, const OffloadedSchedule& b);

}  // namespace optpipe

// What one rank's activations need of its memory in any schedule within the budget
// (docs/semantics.md, The memory bound): their least area (bytes x time) under the activation
// budget and their least whole time under the activations the budget holds whole, and what
// offloads save per copied byte and recomputes per unit of R's compute. The memory bound
// (bounds/memory_bound.h) and the sequencing bound's R time (bounds/sequencing_bound.h) are
// built on it.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "bounds/microbatch_paths.h"
#include "model/problem.h"

namespace optpipe {

// Ways to save a resource, each at a price in another (copy bytes, R's compute time). Greedy by
// saving per unit of price: exact for one budget (a fractional knapsack).
class Savings {
 public:
  // Adds `count` items that save `saving` each at `price` each; false when they save nothing.
  bool add(double saving, double price, double count);
  bool empty() const { return options_.empty(); }
  // The least price that saves `saving`; infinite when all of them save less.
  double price_of(double saving) const;
  // The most that `price` saves.
  double saving_within(double price) const;
  // What all of them cost.
  double total_price() const;

 private:
  struct Option {
    double saving_per_unit = 0;  // infinite for items that cost nothing
    double total_price = 0;
    double total_saving = 0;
  };
  std::vector<Option> options_;  // best saving per unit first
};

// A resource a rank's activations use up over time, which it has `per_time` of from `head`
// after the first op's start until `tail` before the end: bytes x time under the activation
// budget (the area), or activation-time under the activations its budget holds whole (the slots).
struct Allowance {
  double per_time = 0;
  double head = 0;
  double tail = 0;
  double need = 0;   // least use, recomputed where that saves
  Savings offloads;  // per offloaded byte, beyond recomputing
  // For R's compute: the least use with every activation kept, and what recomputes save per
  // unit of R's time and offloads per byte against that.
  double kept_need = 0;
  Savings recomputes;
  Savings offloads_of_kept;

  // A makespan by which the need fits without offload.
  double fitting_makespan() const { return head + tail + need / per_time; }
  // Least bytes to offload for the need to fit by `makespan`; infinite when offload cannot save
  // enough.
  double offload_bytes(double makespan) const;
  // Least R time for the use with every activation kept to fit by `makespan` with at most
  // `copy_bytes` offloaded; infinite when recomputing everything saves too little.
  double recompute_time(double makespan, double copy_bytes) const;
};

// What one rank must fit under its activation budget.
struct RankMemoryNeed {
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  Allowance area;
  // Slot time: an activation holds all of its A from F's start until its offload ends (or F
  // ends, when recomputed) and again from its reload's (or R's) start until B ends; at any moment
  // at most floor(M_r / least A) activations of the rank do. Absent without activations.
  std::optional<Allowance> slots;
  // Its offloads' transfers start at least `transfer_head` after the first op's start (after
  // their F) and end at least `transfer_tail` before the last op's end (before their B, which
  // the backwards down to stage 0 and W(0) follow).
  double transfer_head = kInfinity;
  double transfer_tail = kInfinity;
  // On duplex channels each of those offloads is followed by its reload and each reload preceded
  // by its offload, so the slower channel loses at least the faster direction's least transfer
  // of them: this long (0 on a shared channel, which carries both directions).
  double transfer_turnaround = kInfinity;
  // What the rank's copy channels move per time unit at most, alone on them (0 without a link).
  double copy_bytes_per_time = 0;

  // Least bytes to offload for both resources to fit by `makespan`: each alone needs at least
  // its own least, so the larger is a relaxation of the pair.
  double offload_bytes(double makespan) const;
  bool offloads() const { return !area.offloads.empty() || (slots && !slots->offloads.empty()); }
  bool recomputes() const {
    return !area.recomputes.empty() || (slots && !slots->recomputes.empty());
  }
  // Least R time for both resources to fit by `makespan`, with at most what the channels can
  // move by then: each alone needs at least its own least. Infinite where nothing fits.
  double recompute_time(double makespan) const;
  // A makespan by which both fit with recompute wherever it saves, without offload.
  double fitting_makespan() const;
  // What recomputing every activation that saves would cost in R time.
  double total_recompute_time() const;
};

// The rank's activations (none: area.head infinite).
RankMemoryNeed rank_memory_need(const Problem& problem, const MicrobatchPaths& paths, int rank);

// Offloaded bytes per time unit a link group's channels move down and back: one channel carries
// both directions (shared), or two run side by side and the slower limits (duplex).
double copy_bytes_per_time(const Problem& problem, int rank);

}  // namespace optpipe

#include "bounds/rank_memory_need.h"

#include <algorithm>
#include <cmath>

#include "model/dependencies.h"

namespace optpipe {
namespace {

constexpr double kInfinity = RankMemoryNeed::kInfinity;

// Least bytes x time of one activation kept on device: A from F start to B end (at least the
// round trip L), then G until W ends. A fused BW holds all of A for L + T_W, which is more.
double kept_area(const StageCosts& c, double round_trip) {
  return static_cast<double>(c.activation_bytes) * round_trip +
         static_cast<double>(c.weight_grad_bytes) * c.backward_weight;
}

// Least time a recomputed activation holds A - C: during F, and from R's start through B.
double held_when_recomputed(const StageCosts& c) {
  return c.forward + c.recompute_forward + c.backward_input;
}

// Area an offload saves. An offloaded activation holds its offloadable bytes O during F and its
// offload and from its reload's start through B: at least its least lifespan, away in between.
double offload_saving(const Problem& problem, int stage, double round_trip) {
  const StageCosts& c = problem.stages[stage];
  if (!problem.offload_frees_memory(stage)) return 0;
  return std::max(0.0, static_cast<double>(c.offloadable_bytes) *
                           (round_trip - problem.offloaded_lifespan(stage)));
}

// Area a recompute saves; the sequencing bound counts its R's compute
// (RankMemoryNeed::recompute_time).
double recompute_saving(const StageCosts& c, double round_trip) {
  if (!c.can_recompute()) return 0;
  return std::max(
      0.0, static_cast<double>(c.recomputed_bytes()) * (round_trip - held_when_recomputed(c)));
}

// What `use` leaves over the allowance by `makespan`.
double deficit(const Allowance& allowance, double use, double makespan) {
  return use - allowance.per_time * std::max(0.0, makespan - allowance.head - allowance.tail);
}

// Whether the rank's offloads and reloads share one copy channel.
bool one_copy_channel(const Problem& problem, int rank) {
  return channel_of(problem, rank, Op::kOffload) == channel_of(problem, rank, Op::kReload);
}

}  // namespace

bool Savings::add(double saving, double price, double count) {
  if (saving <= 0) return false;
  const Option option{saving / price, count * price, count * saving};
  options_.insert(std::upper_bound(options_.begin(), options_.end(), option,
                                   [](const Option& a, const Option& b) {
                                     return a.saving_per_unit > b.saving_per_unit;
                                   }),
                  option);
  return true;
}

double Savings::price_of(double saving) const {
  if (saving <= 0) return 0;
  double price = 0;
  for (const Option& option : options_) {
    if (option.total_saving >= saving) return price + saving / option.saving_per_unit;
    price += option.total_price;
    saving -= option.total_saving;
  }
  return kInfinity;
}

double Savings::saving_within(double price) const {
  double saving = 0;
  for (const Option& option : options_) {
    if (option.total_price > price) return saving + price * option.saving_per_unit;
    saving += option.total_saving;
    price -= option.total_price;
  }
  return saving;
}

double Savings::total_price() const {
  double price = 0;
  for (const Option& option : options_) price += option.total_price;
  return price;
}

double Allowance::offload_bytes(double makespan) const {
  return offloads.price_of(deficit(*this, need, makespan));
}

double Allowance::recompute_time(double makespan, double copy_bytes) const {
  return recomputes.price_of(deficit(*this, kept_need, makespan) -
                             offloads_of_kept.saving_within(copy_bytes));
}

double RankMemoryNeed::offload_bytes(double makespan) const {
  return std::max(area.offload_bytes(makespan), slots ? slots->offload_bytes(makespan) : 0.0);
}

double RankMemoryNeed::recompute_time(double makespan) const {
  const double copy_bytes = copy_bytes_per_time * makespan;
  return std::max(area.recompute_time(makespan, copy_bytes),
                  slots ? slots->recompute_time(makespan, copy_bytes) : 0.0);
}

double RankMemoryNeed::fitting_makespan() const {
  return std::max(area.fitting_makespan(), slots ? slots->fitting_makespan() : 0.0);
}

double RankMemoryNeed::total_recompute_time() const {
  return std::max(area.recomputes.total_price(), slots ? slots->recomputes.total_price() : 0.0);
}

double copy_bytes_per_time(const Problem& problem, int rank) {
  const double down = 1 / problem.offload->d2h_bytes_per_time;
  const double up = 1 / problem.offload->h2d_bytes_per_time;
  return 1 / (one_copy_channel(problem, rank) ? down + up : std::max(down, up));
}

RankMemoryNeed rank_memory_need(const Problem& problem, const MicrobatchPaths& paths, int rank) {
  const double microbatches = problem.microbatches;
  RankMemoryNeed need;
  need.area.per_time = static_cast<double>(problem.activation_budget(rank));
  need.area.head = kInfinity;
  // Time per byte of the faster direction's transfer, which a duplex link's slower channel loses.
  double turnaround_per_byte = 0;
  if (problem.offload) {
    need.copy_bytes_per_time = copy_bytes_per_time(problem, rank);
    if (!one_copy_channel(problem, rank)) {
      turnaround_per_byte =
          1 / std::max(problem.offload->d2h_bytes_per_time, problem.offload->h2d_bytes_per_time);
    }
  }
  int64_t least_activation = std::numeric_limits<int64_t>::max();
  Allowance slots;
  slots.head = kInfinity;
  slots.tail = kInfinity;
  for (const int s : problem.stages_of_rank(rank)) {
    const StageCosts& c = problem.stages[s];
    const double round_trip = paths.round_trip[s];
    const double recompute = recompute_saving(c, round_trip);
    const double offload = offload_saving(problem, s, round_trip);
    const double kept = kept_area(c, round_trip);
    need.area.head = std::min(need.area.head, paths.forward_offset[s]);
    need.area.need += microbatches * (kept - recompute);
    need.area.kept_need += microbatches * kept;
    need.area.recomputes.add(recompute, c.recompute_forward, microbatches);
    const auto bytes = static_cast<double>(c.offloadable_bytes);
    need.area.offloads_of_kept.add(offload, bytes, microbatches);
    bool offloads = need.area.offloads.add(offload - recompute, bytes, microbatches);
    if (c.activation_bytes > 0) {
      least_activation = std::min(least_activation, c.activation_bytes);
      // Whole from F's start to B's end when kept; in the two spans above otherwise.
      double held = round_trip;
      if (problem.recompute_frees_memory(s)) {
        held = std::min(held, held_when_recomputed(c));
        slots.recomputes.add(round_trip - held, c.recompute_forward, microbatches);
      }
      slots.need += microbatches * held;
      slots.kept_need += microbatches * round_trip;
      slots.head = std::min(slots.head, paths.forward_offset[s]);
      // After B(s) ends come the backwards down to stage 0 and W(0); a fused BW on stage 0
      // holds its activation until the end.
      slots.tail = std::min(slots.tail, s == 0 ? 0.0 : paths.backward_tail[s] - c.backward_input);
      if (problem.offload_frees_memory(s)) {
        const double offloaded = problem.offloaded_lifespan(s);
        slots.offloads_of_kept.add(round_trip - offloaded, bytes, microbatches);
        offloads |= slots.offloads.add(held - offloaded, bytes, microbatches);
      }
    }
    if (offloads) {
      need.transfer_head = std::min(need.transfer_head, paths.forward_offset[s] + c.forward);
      need.transfer_tail = std::min(need.transfer_tail, paths.backward_tail[s]);
      need.transfer_turnaround = std::min(need.transfer_turnaround, bytes * turnaround_per_byte);
    }
  }
  if (least_activation != std::numeric_limits<int64_t>::max()) {
    // Below one whole activation no schedule fits at all; counting one keeps the bound
    // monotone in the budget.
    slots.per_time =
        std::max(1.0, std::floor(need.area.per_time / static_cast<double>(least_activation)));
    need.slots = std::move(slots);
  }
  return need;
}

}  // namespace optpipe

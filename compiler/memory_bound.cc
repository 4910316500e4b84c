#include "compiler/memory_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "compiler/dependencies.h"
#include "compiler/microbatch_paths.h"

namespace optpipe {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Least bytes x time of one activation kept on device: A from F start to B end (at least the
// round trip L), then G until W ends. A fused BW holds all of A for L + T_W, which is more.
double kept_area(const StageCosts& c, double round_trip) {
  return static_cast<double>(c.activation_bytes) * round_trip +
         static_cast<double>(c.weight_grad_bytes) * c.backward_weight;
}

// Least time an offloaded activation holds its offloadable bytes O: during F and its offload,
// and from its reload's start through B. Away in between.
double held_when_offloaded(const Problem& problem, int stage) {
  const StageCosts& c = problem.stages[stage];
  return c.forward + problem.offload_time(stage) + problem.reload_time(stage) + c.backward_input;
}

// Least time a recomputed activation holds A - C: during F, and from R's start through B.
double held_when_recomputed(const StageCosts& c) {
  return c.forward + c.recompute_forward + c.backward_input;
}

// Area an offload saves.
double offload_saving(const Problem& problem, int stage, double round_trip) {
  const StageCosts& c = problem.stages[stage];
  if (!problem.offload_frees_memory(stage)) return 0;
  return std::max(0.0, static_cast<double>(c.offloadable_bytes) *
                           (round_trip - held_when_offloaded(problem, stage)));
}

// Area a recompute saves. R's compute is left out, which only weakens the bound.
double recompute_saving(const StageCosts& c, double round_trip) {
  if (!c.can_recompute()) return 0;
  return std::max(
      0.0, static_cast<double>(c.recomputed_bytes()) * (round_trip - held_when_recomputed(c)));
}

// Offloaded bytes per time unit a link group's channels move down and back: one channel carries
// both directions (shared), or two run side by side and the slower limits (duplex).
double copy_bytes_per_time(const Problem& problem, int rank) {
  const double down = 1 / problem.offload->d2h_bytes_per_time;
  const double up = 1 / problem.offload->h2d_bytes_per_time;
  const bool shared =
      channel_of(problem, rank, Op::kOffload) == channel_of(problem, rank, Op::kReload);
  return 1 / (shared ? down + up : std::max(down, up));
}

// Offloading a stage's activations rather than keeping or recomputing them: up to `bytes` in
// all (m x O), each byte saving `saving_per_byte` of a resource more.
struct OffloadOption {
  double saving_per_byte = 0;
  double bytes = 0;
};

// A resource a rank's activations use up over time, which it has `per_time` of from `head`
// after the first op's start until `tail` before the end: bytes x time under the activation
// budget (the area), or activation-time under the activations its budget holds whole (the slots).
struct Allowance {
  double per_time = 0;
  double head = 0;
  double tail = 0;
  double need = 0;                      // least use, recomputed where that saves
  std::vector<OffloadOption> offloads;  // best saving per byte first

  // Whether the option saves anything (it is then added).
  bool add_offload(double saving, double bytes, double microbatches) {
    if (saving <= 0) return false;
    offloads.push_back({saving / bytes, microbatches * bytes});
    return true;
  }
  // A makespan by which the need fits without offload.
  double fitting_makespan() const { return head + tail + need / per_time; }
  // Least bytes to offload for the need to fit by `makespan`; infinite when offload cannot save
  // enough. Greedy by saving per byte: exact for one resource (a fractional knapsack).
  double offload_bytes(double makespan) const {
    double saving = need - per_time * std::max(0.0, makespan - head - tail);
    if (saving <= 0) return 0;
    double bytes = 0;
    for (const OffloadOption& option : offloads) {
      const double needed = saving / option.saving_per_byte;
      if (needed <= option.bytes) return bytes + needed;
      bytes += option.bytes;
      saving -= option.bytes * option.saving_per_byte;
    }
    return kInfinity;
  }
  void sort_offloads() {
    std::sort(offloads.begin(), offloads.end(), [](const OffloadOption& a, const OffloadOption& b) {
      return a.saving_per_byte > b.saving_per_byte;
    });
  }
};

// What one rank must fit under its activation budget.
struct RankNeed {
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
  int link = -1;  // its copy channels in MemoryRelaxation::links

  // Least bytes to offload for both resources to fit by `makespan`: each alone needs at least
  // its own least, so the larger is a relaxation of the pair.
  double offload_bytes(double makespan) const {
    return std::max(area.offload_bytes(makespan), slots ? slots->offload_bytes(makespan) : 0.0);
  }
  bool offloads() const { return !area.offloads.empty() || (slots && !slots->offloads.empty()); }
};

RankNeed rank_need(const Problem& problem, const MicrobatchPaths& paths, int rank) {
  const double microbatches = problem.microbatches;
  RankNeed need;
  need.area.per_time = static_cast<double>(problem.activation_budget(rank));
  need.area.head = kInfinity;
  int64_t least_activation = std::numeric_limits<int64_t>::max();
  Allowance slots;
  slots.head = kInfinity;
  slots.tail = kInfinity;
  for (const int s : problem.stages_of_rank(rank)) {
    const StageCosts& c = problem.stages[s];
    const double round_trip = paths.round_trip[s];
    const double recompute = recompute_saving(c, round_trip);
    need.area.head = std::min(need.area.head, paths.forward_offset[s]);
    need.area.need += microbatches * (kept_area(c, round_trip) - recompute);
    const auto bytes = static_cast<double>(c.offloadable_bytes);
    bool offloads = need.area.add_offload(offload_saving(problem, s, round_trip) - recompute, bytes,
                                          microbatches);
    if (c.activation_bytes > 0) {
      least_activation = std::min(least_activation, c.activation_bytes);
      // Whole from F's start to B's end when kept; in the two spans above otherwise.
      double held = round_trip;
      if (problem.recompute_frees_memory(s)) {
        held = std::min(held, held_when_recomputed(c));
      }
      slots.need += microbatches * held;
      slots.head = std::min(slots.head, paths.forward_offset[s]);
      // After B(s) ends come the backwards down to stage 0 and W(0); a fused BW on stage 0
      // holds its activation until the end.
      slots.tail = std::min(slots.tail, s == 0 ? 0.0 : paths.backward_tail[s] - c.backward_input);
      if (problem.offload_frees_memory(s)) {
        offloads |= slots.add_offload(held - held_when_offloaded(problem, s), bytes, microbatches);
      }
    }
    if (offloads) {
      need.transfer_head = std::min(need.transfer_head, paths.forward_offset[s] + c.forward);
      need.transfer_tail = std::min(need.transfer_tail, paths.backward_tail[s]);
    }
  }
  need.area.sort_offloads();
  if (least_activation != std::numeric_limits<int64_t>::max()) {
    // Below one whole activation no schedule fits at all; counting one keeps the bound
    // monotone in the budget.
    slots.per_time =
        std::max(1.0, std::floor(need.area.per_time / static_cast<double>(least_activation)));
    slots.sort_offloads();
    need.slots = std::move(slots);
  }
  return need;
}

// The copy channels of one link group: its ranks' transfers run within [head, makespan - tail]
// after the first op's start.
struct CopyLink {
  double bytes_per_time = 0;
  double head = kInfinity;
  double tail = kInfinity;

  double capacity(double makespan) const {
    return bytes_per_time * std::max(0.0, makespan - head - tail);
  }
};

// The relaxation of docs/semantics.md: fractional offloads per (rank, stage), recompute wherever
// it saves more.
struct MemoryRelaxation {
  std::vector<RankNeed> ranks;  // those with activations and a positive budget
  std::vector<CopyLink> links;

  explicit MemoryRelaxation(const Problem& problem) {
    const MicrobatchPaths paths = microbatch_paths(problem);
    std::map<int, int> link_of_channel;
    for (int r = 0; r < problem.ranks; ++r) {
      RankNeed need = rank_need(problem, paths, r);
      // A rank without room has no schedule at all; leaving it out keeps the bound finite.
      if (need.area.head == kInfinity || need.area.per_time <= 0) continue;
      if (need.offloads()) {
        const auto [it, added] =
            link_of_channel.try_emplace(channel_of(problem, r, Op::kOffload), links.size());
        if (added) links.push_back({copy_bytes_per_time(problem, r)});
        need.link = it->second;
        CopyLink& link = links[need.link];
        link.head = std::min(link.head, need.transfer_head);
        link.tail = std::min(link.tail, need.transfer_tail);
      }
      ranks.push_back(std::move(need));
    }
  }

  // A makespan at which every rank fits without offload.
  double fitting_makespan() const {
    double makespan = 0;
    for (const RankNeed& need : ranks) {
      makespan = std::max(makespan, need.area.fitting_makespan());
      if (need.slots) makespan = std::max(makespan, need.slots->fitting_makespan());
    }
    return makespan;
  }

  // Whether every rank fits by `makespan` with offloads its link's channels can carry. Ranks of
  // a link group interact only through the sum of their bytes, so the least per rank is exact.
  bool fits(double makespan, std::vector<double>& link_bytes) const {
    link_bytes.assign(links.size(), 0.0);
    for (const RankNeed& need : ranks) {
      const double bytes = need.offload_bytes(makespan);
      if (bytes == 0) continue;
      if (bytes == kInfinity) return false;
      link_bytes[need.link] += bytes;
    }
    for (size_t l = 0; l < links.size(); ++l) {
      if (link_bytes[l] > links[l].capacity(makespan)) return false;
    }
    return true;
  }
};

}  // namespace

double memory_bound(const Problem& problem) {
  const MemoryRelaxation relaxation(problem);
  std::vector<double> link_bytes;
  double failing = 0;
  double fitting = relaxation.fitting_makespan();
  if (relaxation.fits(failing, link_bytes)) return 0;
  // Fitting is monotone in the makespan (the area allowance and the channels' capacity grow with
  // it); bisect, and report the failing end so that the bound stays proven.
  while (fitting - failing > 1e-12 * fitting) {
    const double mid = (failing + fitting) / 2;
    if (relaxation.fits(mid, link_bytes)) {
      fitting = mid;
    } else {
      failing = mid;
    }
  }
  return failing;
}

}  // namespace optpipe

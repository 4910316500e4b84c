#include "compiler/memory_bound.h"

#include <algorithm>
#include <limits>
#include <map>
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

// Area an offload saves: O is held during F, its offload, its reload and B, and away in between.
double offload_saving(const Problem& problem, int stage, double round_trip) {
  const StageCosts& c = problem.stages[stage];
  if (!problem.offload || c.offloadable_bytes == 0) return 0;
  const double held =
      c.forward + problem.offload_time(stage) + problem.reload_time(stage) + c.backward_input;
  return std::max(0.0, static_cast<double>(c.offloadable_bytes) * (round_trip - held));
}

// Area a recompute saves: A - C is held during F and from R's start to B's end. R's compute is
// left out, which only weakens the bound.
double recompute_saving(const StageCosts& c, double round_trip) {
  if (!c.can_recompute()) return 0;
  const double held = c.forward + c.recompute_forward + c.backward_input;
  return std::max(0.0, static_cast<double>(c.recomputed_bytes()) * (round_trip - held));
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
// all (m x O), each byte saving `saving_per_byte` of area more.
struct OffloadOption {
  double saving_per_byte = 0;
  double bytes = 0;
};

// What one rank must fit under its activation budget.
struct RankNeed {
  double budget = 0;                    // M_r
  double first_start = 0;               // earliest start of its first F: it holds nothing before
  double area = 0;                      // its activations' least area, recomputed where that saves
  std::vector<OffloadOption> offloads;  // best saving per byte first
  // Its offloads' transfers start at least `transfer_head` after the first op's start (after
  // their F) and end at least `transfer_tail` before the last op's end (before their B, which
  // the backwards down to stage 0 and W(0) follow).
  double transfer_head = kInfinity;
  double transfer_tail = kInfinity;
  int link = -1;  // its copy channels in MemoryRelaxation::links

  // Least bytes to offload for the area to fit by `makespan`; infinite when offload cannot save
  // enough. Greedy by saving per byte: exact for one budget (a fractional knapsack).
  double offload_bytes(double makespan) const {
    double saving = area - budget * (makespan - first_start);
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
};

RankNeed rank_need(const Problem& problem, const MicrobatchPaths& paths, int rank) {
  const double microbatches = problem.microbatches;
  RankNeed need;
  need.budget = static_cast<double>(problem.activation_budget(rank));
  need.first_start = kInfinity;
  for (const int s : problem.stages_of_rank(rank)) {
    const StageCosts& c = problem.stages[s];
    const double round_trip = paths.round_trip[s];
    const double recompute = recompute_saving(c, round_trip);
    need.first_start = std::min(need.first_start, paths.forward_offset[s]);
    need.area += microbatches * (kept_area(c, round_trip) - recompute);
    const double beyond_recompute = offload_saving(problem, s, round_trip) - recompute;
    if (beyond_recompute <= 0) continue;
    const auto bytes = static_cast<double>(c.offloadable_bytes);
    need.offloads.push_back({beyond_recompute / bytes, microbatches * bytes});
    need.transfer_head = std::min(need.transfer_head, paths.forward_offset[s] + c.forward);
    need.transfer_tail = std::min(need.transfer_tail, paths.backward_tail[s]);
  }
  std::sort(need.offloads.begin(), need.offloads.end(),
            [](const OffloadOption& a, const OffloadOption& b) {
              return a.saving_per_byte > b.saving_per_byte;
            });
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
      if (need.first_start == kInfinity || need.budget <= 0) continue;
      if (!need.offloads.empty()) {
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
      makespan = std::max(makespan, need.first_start + need.area / need.budget);
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

double memory_area_bound(const Problem& problem) {
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

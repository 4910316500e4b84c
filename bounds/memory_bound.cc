#include "bounds/memory_bound.h"

#include <algorithm>
#include <map>
#include <vector>

#include "bounds/microbatch_paths.h"
#include "bounds/rank_memory_need.h"
#include "model/dependencies.h"

namespace optpipe {
namespace {

constexpr double kInfinity = RankMemoryNeed::kInfinity;

// The copy channels of one link group: its ranks' transfers run within [head, makespan - tail]
// after the first op's start. On duplex channels every offload is followed by its own reload and
// every reload preceded by its own offload, so the slower direction's channel has the window less
// one least transfer of the other direction.
struct CopyLink {
  double bytes_per_time = 0;
  double head = kInfinity;
  double tail = kInfinity;
  double turnaround = kInfinity;

  double capacity(double makespan) const {
    return bytes_per_time * std::max(0.0, makespan - head - tail - turnaround);
  }
};

// The relaxation of docs/semantics.md: fractional offloads per (rank, stage), recompute wherever
// it saves more.
struct MemoryRelaxation {
  struct Rank {
    RankMemoryNeed need;
    int link = -1;  // its copy channels in `links`
  };
  std::vector<Rank> ranks;  // those with activations and a positive budget
  std::vector<CopyLink> links;

  explicit MemoryRelaxation(const Problem& problem) {
    const MicrobatchPaths paths = microbatch_paths(problem);
    std::map<int, int> link_of_channel;
    for (int r = 0; r < problem.ranks; ++r) {
      Rank rank{rank_memory_need(problem, paths, r)};
      const RankMemoryNeed& need = rank.need;
      // A rank without room has no schedule at all; leaving it out keeps the bound finite.
      if (need.area.head == kInfinity || need.area.per_time <= 0) continue;
      if (need.offloads()) {
        const auto [it, added] =
            link_of_channel.try_emplace(channel_of(problem, r, Op::kOffload), links.size());
        if (added) links.push_back({copy_bytes_per_time(problem, r)});
        rank.link = it->second;
        CopyLink& link = links[rank.link];
        link.head = std::min(link.head, need.transfer_head);
        link.tail = std::min(link.tail, need.transfer_tail);
        link.turnaround = std::min(link.turnaround, need.transfer_turnaround);  // any rank's
      }
      ranks.push_back(std::move(rank));
    }
  }

  // A makespan at which every rank fits without offload.
  double fitting_makespan() const {
    double makespan = 0;
    for (const Rank& rank : ranks) makespan = std::max(makespan, rank.need.fitting_makespan());
    return makespan;
  }

  // Whether every rank fits by `makespan` with offloads its link's channels can carry. Ranks of
  // a link group interact only through the sum of their bytes, so the least per rank is exact.
  bool fits(double makespan, std::vector<double>& link_bytes) const {
    link_bytes.assign(links.size(), 0.0);
    for (const Rank& rank : ranks) {
      const double bytes = rank.need.offload_bytes(makespan);
      if (bytes == 0) continue;
      if (bytes == kInfinity) return false;
      link_bytes[rank.link] += bytes;
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

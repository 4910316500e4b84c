#include "compiler/memory_bound.h"

#include <algorithm>
#include <map>
#include <vector>

#include "compiler/dependencies.h"
#include "compiler/microbatch_paths.h"
#include "compiler/rank_memory_need.h"

namespace optpipe {
namespace {

constexpr double kInfinity = RankMemoryNeed::kInfinity;

// The copy channels of one link group: its ranks' transfers run within [head, makespan - tail]
// after the first op's start. On duplex channels each offload is followed by its reload and each
// reload preceded by its offload, so each direction loses one least transfer of the other.
struct CopyLink {
  double d2h_bytes_per_time = 0;
  double h2d_bytes_per_time = 0;
  bool shared = false;
  double head = kInfinity;
  double tail = kInfinity;
  double least_bytes = kInfinity;

  double capacity(double makespan) const {
    const double window = makespan - head - tail;
    if (shared) {
      return std::max(0.0, window) / (1 / d2h_bytes_per_time + 1 / h2d_bytes_per_time);
    }
    const double offloads = d2h_bytes_per_time * (window - least_bytes / h2d_bytes_per_time);
    const double reloads = h2d_bytes_per_time * (window - least_bytes / d2h_bytes_per_time);
    return std::max(0.0, std::min(offloads, reloads));
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
        if (added) {
          const OffloadLink& offload = *problem.offload;
          links.push_back({offload.d2h_bytes_per_time, offload.h2d_bytes_per_time,
                           offload.channels == ChannelMode::kShared});
        }
        rank.link = it->second;
        CopyLink& link = links[rank.link];
        link.head = std::min(link.head, need.transfer_head);
        link.tail = std::min(link.tail, need.transfer_tail);
        link.least_bytes = std::min(link.least_bytes, need.least_transfer_bytes);
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

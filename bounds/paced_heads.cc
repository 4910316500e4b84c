#include "bounds/paced_heads.h"

#include <algorithm>
#include <map>
#include <utility>

#include "bounds/microbatch_paths.h"
#include "bounds/paced_memory.h"
#include "bounds/rank_load_heads.h"

namespace optpipe {

namespace {

using pacing::Counted;
using pacing::ended_by;
using pacing::first_fit_after;
using pacing::kInfinity;
using pacing::offload_ends;
using pacing::RankMemory;

// Each round raises some heads and lets the others catch up; every round's heads are valid, so
// stopping early only weakens the bound (R = 32, m = 256 settles in about 30).
constexpr int kMaxRounds = 100;

bool raise(double& head, double at_least) {
  if (at_least <= head) return false;
  head = at_least;
  return true;
}

// The k-th F of stage s starts after k + 1 Fs of stage s - 1 have ended (one per microbatch that
// has reached stage s), so after the k-th of them, and after the (k - 1)-th F of stage s; the
// k-th B of the last stage after its k-th F, of another stage after the k-th B of the stage
// after it; the k-th W after the k-th B.
void raise_along_dependencies(const Problem& problem, OpHeads& heads) {
  const int stages = problem.num_stages();
  const int m = problem.microbatches;
  for (int s = 0; s < stages; ++s) {
    for (int k = 0; k < m; ++k) {
      if (s > 0) {
        raise(heads.forward[s][k],
              heads.forward[s - 1][k] + problem.stages[s - 1].forward + problem.p2p(s - 1, s));
      }
      if (k > 0) raise(heads.forward[s][k], heads.forward[s][k - 1] + problem.stages[s].forward);
    }
  }
  for (int s = stages - 1; s >= 0; --s) {
    const StageCosts& cost = problem.stages[s];
    for (int k = 0; k < m; ++k) {
      raise(heads.backward[s][k], s == stages - 1 ? heads.forward[s][k] + cost.forward
                                                  : heads.backward[s + 1][k] +
                                                        problem.stages[s + 1].backward_input +
                                                        problem.p2p(s + 1, s));
      if (k > 0) raise(heads.backward[s][k], heads.backward[s][k - 1] + cost.backward_input);
      raise(heads.weight[s][k], heads.backward[s][k] + cost.backward_input);
      if (k > 0) raise(heads.weight[s][k], heads.weight[s][k - 1] + cost.backward_weight);
    }
  }
}

// The ranks that share their copy channels (a link group) as the pacing of their Fs sees them.
// When the k-th F of a stage starts, k + 1 microbatches have passed every earlier stage, so each
// other rank of the group holds k + 1 activations of each of its stages before that one, and
// fits its own budget only with enough of them away: the group's offloads, one at a time on the
// shared channel, serve all its ranks, and so do its reloads.
class LinkGroup {
 public:
  LinkGroup(std::vector<int> ranks, const std::vector<RankMemory>& memory, double makespan)
      : ranks_(std::move(ranks)), memory_(memory), makespan_(makespan) {
    // Earliest deadline first: the rank whose reloads must end soonest before the makespan.
    std::sort(ranks_.begin(), ranks_.end(),
              [&](int a, int b) { return memory_[a].after_reload() > memory_[b].after_reload(); });
    std::vector<double> forwards;
    double shortest_forward = kInfinity;
    double offload_time = kInfinity;
    for (int r : ranks_) {
      const RankMemory& rank = memory_[r];
      forwards.insert(forwards.end(), rank.forward_heads().begin(), rank.forward_heads().end());
      shortest_forward = std::min(shortest_forward, rank.shortest_forward());
      offload_time = std::min(offload_time, rank.offload_time());
      moments_.insert(moments_.end(), rank.moments().begin(), rank.moments().end());
    }
    std::sort(forwards.begin(), forwards.end());
    offloads_end_ = offload_ends(forwards, shortest_forward, offload_time);
    moments_.insert(moments_.end(), offloads_end_.begin(), offloads_end_.end());
    std::sort(moments_.begin(), moments_.end());
    moments_.erase(std::unique(moments_.begin(), moments_.end()), moments_.end());
  }

  // The earliest moment from `head` on at which the k-th F of `stage`, the c-th stage of `rank`
  // (one of the group's), and what the group's other ranks hold then fit, with no more
  // activations away than the shared channels can have moved and can bring back in time.
  double earliest_fit(int rank, size_t c, int stage, int k, double head) const {
    const RankMemory& own = memory_[rank];
    const Counted counted = own.at_forward(c, k);
    std::vector<Counted> others;
    for (int r : ranks_) others.push_back(memory_[r].before_stage(stage, k));
    std::vector<int> away(ranks_.size());
    auto fits = [&](double time) {
      const int own_away = own.offloads_needed(counted, time);
      // Without an offload of its own, the others need no more than their own channels (which
      // the group's already counts) can have moved: the rank's own pacing decides.
      if (own_away == 0) return true;
      const int channel = ended_by(offloads_end_, time);
      int total = 0;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        away[i] =
            ranks_[i] == rank ? own_away : memory_[ranks_[i]].offloads_needed(others[i], time);
        if (away[i] == RankMemory::kNoneFits) return false;
        total += away[i];
        if (total > channel) return false;
      }
      return reloads_fit(away, time);
    };
    if (fits(head)) return head;
    const bool stay =
        std::all_of(ranks_.begin(), ranks_.end(), [&](int r) { return memory_[r].fits_stay(); });
    return first_fit_after(moments_, head, stay, fits).value_or(head);
  }

 private:
  // Whether `away[i]` activations of each rank, away at `time`, can all come back in a schedule
  // of the makespan: by reloads after `time`, one at a time on the shared channel, each followed
  // by its rank's least time from a reload's end to the schedule's end. Those due by each
  // deadline must fit before it (earliest deadline first).
  bool reloads_fit(const std::vector<int>& away, double time) const {
    if (makespan_ == kInfinity) return true;
    double reloading = 0;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (away[i] == 0) continue;
      const RankMemory& rank = memory_[ranks_[i]];
      reloading += away[i] * rank.reload_time();
      if (time + reloading > makespan_ - rank.after_reload()) return false;
    }
    return true;
  }

  std::vector<int> ranks_;  // by their reloads' deadline, earliest first
  const std::vector<RankMemory>& memory_;
  const double makespan_;  // without one (infinity), a check that holds keeps holding later
  std::vector<double> offloads_end_;  // the group's i-th offload to end ends no earlier than [i]
  std::vector<double> moments_;       // when a release or an offload's end can happen
};

// One round of the pacing: every rank's memory and link group as the heads at its start give
// them, so that each rank is paced once and each group's channel merged once.
class Round {
 public:
  Round(const Problem& problem, const MicrobatchPaths& paths, const OpHeads& heads, double makespan,
        const CheckpointCaps& checkpoints, bool link_groups)
      : problem_(problem), group_of_rank_(problem.ranks, -1) {
    memory_.reserve(problem.ranks);
    for (int r = 0; r < problem.ranks; ++r) {
      memory_.emplace_back(problem, paths, r, heads, makespan,
                           checkpoints.empty() ? CheckpointCap{} : checkpoints[r]);
    }
    if (!link_groups || !problem.offload || problem.offload->link_group_of_rank.empty()) return;
    std::map<int, std::vector<int>> members;
    for (int r = 0; r < problem.ranks; ++r) {
      if (memory_[r].moves()) members[problem.offload->link_group_of_rank[r]].push_back(r);
    }
    for (auto& [group, ranks] : members) {
      if (ranks.size() < 2) continue;
      for (int r : ranks) group_of_rank_[r] = static_cast<int>(groups_.size());
      groups_.emplace_back(std::move(ranks), memory_, makespan);
    }
  }

  // Raises the F heads of `rank` where its memory, or its link group's, makes them wait; true
  // when one rose.
  bool pace(int rank, OpHeads& heads) const {
    const RankMemory& memory = memory_[rank];
    const LinkGroup* group = group_of_rank_[rank] >= 0 ? &groups_[group_of_rank_[rank]] : nullptr;
    const std::vector<int> stages = problem_.stages_of_rank(rank);
    bool raised = false;
    for (size_t c = 0; c < stages.size(); ++c) {
      for (int k = 0; k < problem_.microbatches; ++k) {
        double& head = heads.forward[stages[c]][k];
        double paced = memory.earliest_fit(c, k, head);
        if (group) paced = group->earliest_fit(rank, c, stages[c], k, paced);
        raised |= raise(head, paced);
      }
    }
    return raised;
  }

 private:
  const Problem& problem_;
  std::vector<RankMemory> memory_;  // per rank
  std::vector<LinkGroup> groups_;   // of two ranks or more that offload
  std::vector<int> group_of_rank_;  // index in groups_, -1 for none
};

// Whether some F's head and its microbatch's path to the end pass `makespan`: the bound is then
// above it however far the pacing goes on, so going on only costs (heads can creep up for many
// rounds where the makespan is too short for any schedule). Not for a makespan of 0, which asks
// for the pacing without offloads (bounds/sequencing_bound.cc) whole.
bool beyond(const Problem& problem, const MicrobatchPaths& paths, const OpHeads& heads,
            double makespan) {
  for (int s = 0; s < problem.num_stages(); ++s) {
    if (heads.forward[s].back() + paths.forward_tail[s] > makespan) return true;
  }
  return false;
}

}  // namespace

OpHeads paced_heads(const Problem& problem, OpHeads heads, double makespan, bool* settled,
                    const CheckpointCaps& checkpoints, const std::function<bool()>& stop) {
  const MicrobatchPaths paths = microbatch_paths(problem);
  // Each rank alone first, then with its link group: the group's check costs several times the
  // rank's, and the ranks alone settle most heads. Where the memory raises no head, the ranks'
  // load (bounds/rank_load_heads.h), which costs several rounds, in the pacings for every
  // makespan: the others start from those heads (bounds/sequencing_bound.cc), and the load in
  // theirs too raised no bound of the suite (docs/semantics.md).
  const bool load = makespan == std::numeric_limits<double>::infinity();
  bool raised = true;
  bool stopped = false;
  for (const bool link_groups : {false, true}) {
    for (int round = 0; round < kMaxRounds && !stopped; ++round) {
      raise_along_dependencies(problem, heads);
      const OpHeads at_start = heads;
      const Round pacing(problem, paths, at_start, makespan, checkpoints, link_groups);
      raised = false;
      for (int r = 0; r < problem.ranks; ++r) {
        // Each head raised so far holds on its own: the pacing may end between ranks.
        stopped = stopped || (stop && stop());
        if (stopped) break;
        raised |= pacing.pace(r, heads);
      }
      if (stopped) {
        raised = true;  // not settled
        break;
      }
      if (!raised && load) raised = raise_by_rank_load(problem, heads);
      if (!raised || (makespan > 0 && beyond(problem, paths, heads, makespan))) break;
    }
  }
  if (settled) *settled = !raised;
  raise_along_dependencies(problem, heads);
  return heads;
}

}  // namespace optpipe

#include "compiler/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "compiler/dependencies.h"
#include "compiler/errors.h"
#include "compiler/op_table.h"

namespace optpipe {

namespace {

constexpr double kNotDone = std::numeric_limits<double>::quiet_NaN();

struct PendingTransfer {
  OpRef ref;
  double issue_time;
};

// Event-driven list scheduling: repeatedly commit the ready action with the earliest possible
// start. Starts are committed in non-decreasing order, so a channel never receives a transfer
// that should have gone before one it already ran.
class Simulation {
 public:
  Simulation(const Problem& problem, const Order& order)
      : problem_(problem),
        order_(order),
        end_(problem, kNotDone),
        listed_(problem, false),
        next_(problem.ranks, 0),
        compute_free_(problem.ranks, 0.0),
        queues_(problem.ranks, std::vector<std::deque<PendingTransfer>>(num_channels(problem))),
        channel_free_(num_channels(problem), 0.0),
        schedule_{} {
    check_order();
  }

  Schedule run(const std::string& method) {
    schedule_.method = method;
    schedule_.ranks.assign(problem_.ranks, {});
    for (int r = 0; r < problem_.ranks; ++r) issue_transfers(r);
    while (remaining_ > 0) {
      Candidate best = pick_earliest();
      if (!best.found) throw DeadlockError(deadlock_message());
      commit(best);
    }
    for (auto& actions : schedule_.ranks) {
      std::stable_sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
        return a.start < b.start || (a.start == b.start && is_compute(a.ref.op) &&
                                     is_transfer(b.ref.op));
      });
    }
    return std::move(schedule_);
  }

 private:
  struct Candidate {
    bool found = false;
    double start = 0;
    int rank = 0;
    int channel = -1;  // -1: the rank's next compute op
  };

  void check_order() {
    if (static_cast<int>(order_.ranks.size()) != problem_.ranks) {
      throw Error(kExitInternal, fmt::format("order has {} ranks, the problem {}",
                                             order_.ranks.size(), problem_.ranks));
    }
    for (int r = 0; r < problem_.ranks; ++r) {
      for (const OpRef& ref : order_.ranks[r]) {
        if (!in_range(problem_, ref) || problem_.rank_of_stage[ref.stage] != r) {
          throw Error(kExitInternal, fmt::format("order lists {} on rank {}, which does not "
                                                 "host that stage",
                                                 describe(ref), r));
        }
        if (is_transfer(ref.op) && !problem_.offload) {
          throw Error(kExitInternal, fmt::format("order lists {} but the profile has no offload "
                                                 "link",
                                                 describe(ref)));
        }
        if (listed_[ref]) {
          throw Error(kExitInternal, fmt::format("order lists {} twice", describe(ref)));
        }
        listed_[ref] = true;
        ++remaining_;
      }
    }
  }

  BackwardForm backward_form(int stage, int mb) const {
    return listed_[{Op::kBackward, stage, mb}] ? BackwardForm::kFused : BackwardForm::kSplit;
  }
  bool offloaded(int stage, int mb) const { return listed_[{Op::kReload, stage, mb}]; }

  // Earliest start allowed by dependencies, or NaN while one of them has not been timed.
  double ready_time(const OpRef& ref) const {
    double ready = 0;
    auto form = [this](int s, int j) { return backward_form(s, j); };
    auto off = [this](int s, int j) { return offloaded(s, j); };
    for (const Predecessor& p : predecessors(problem_, ref, form, off)) {
      const double pred_end = end_[p.pred];
      if (std::isnan(pred_end)) return kNotDone;
      ready = std::max(ready, pred_end + p.lag);
    }
    return ready;
  }

  // Transfers up to the next compute op are issued once the compute op before them has ended.
  void issue_transfers(int rank) {
    const auto& refs = order_.ranks[rank];
    while (next_[rank] < refs.size() && is_transfer(refs[next_[rank]].op)) {
      const OpRef& ref = refs[next_[rank]++];
      queues_[rank][channel_of(problem_, rank, ref.op)].push_back({ref, compute_free_[rank]});
    }
  }

  // `ready` is NaN while a dependency is untimed; `resource_free` is when the stream is free.
  static void consider(Candidate& best, double ready, double resource_free, int rank, int channel) {
    if (std::isnan(ready)) return;
    const double start = std::max(ready, resource_free);
    if (!best.found || start < best.start) best = {true, start, rank, channel};
  }

  Candidate pick_earliest() const {
    Candidate best;
    for (int r = 0; r < problem_.ranks; ++r) {
      const auto& refs = order_.ranks[r];
      if (next_[r] < refs.size()) {
        consider(best, ready_time(refs[next_[r]]), compute_free_[r], r, -1);
      }
    }
    for (int r = 0; r < problem_.ranks; ++r) {
      for (int c = 0; c < static_cast<int>(queues_[r].size()); ++c) {
        if (queues_[r][c].empty()) continue;
        const PendingTransfer& head = queues_[r][c].front();
        consider(best, ready_time(head.ref), std::max(head.issue_time, channel_free_[c]), r, c);
      }
    }
    return best;
  }

  void commit(const Candidate& chosen) {
    OpRef ref;
    if (chosen.channel < 0) {
      ref = order_.ranks[chosen.rank][next_[chosen.rank]++];
    } else {
      ref = queues_[chosen.rank][chosen.channel].front().ref;
      queues_[chosen.rank][chosen.channel].pop_front();
    }
    const double end = chosen.start + duration(problem_, ref);
    end_[ref] = end;
    schedule_.ranks[chosen.rank].push_back(
        {ref, chosen.start, end, transfer_bytes(problem_, ref)});
    --remaining_;
    if (chosen.channel < 0) {
      compute_free_[chosen.rank] = end;
      issue_transfers(chosen.rank);
    } else {
      channel_free_[chosen.channel] = end;
    }
  }

  std::string deadlock_message() const {
    std::string blocked;
    auto form = [this](int s, int j) { return backward_form(s, j); };
    auto off = [this](int s, int j) { return offloaded(s, j); };
    for (int r = 0; r < problem_.ranks; ++r) {
      const auto& refs = order_.ranks[r];
      if (next_[r] >= refs.size()) continue;
      const OpRef& ref = refs[next_[r]];
      for (const Predecessor& p : predecessors(problem_, ref, form, off)) {
        if (!std::isnan(end_[p.pred])) continue;
        blocked += fmt::format("{}rank {}: {} waits for {}{}", blocked.empty() ? "" : "; ", r,
                               describe(ref), describe(p.pred),
                               listed_[p.pred] ? "" : " (not in the order)");
        break;
      }
    }
    return "deadlock: " + blocked;
  }

  const Problem& problem_;
  const Order& order_;
  OpTable<double> end_;
  OpTable<uint8_t> listed_;  // not bool: vector<bool> has no references
  std::vector<size_t> next_;
  std::vector<double> compute_free_;
  std::vector<std::vector<std::deque<PendingTransfer>>> queues_;  // [rank][channel]
  std::vector<double> channel_free_;
  Schedule schedule_;
  int remaining_ = 0;
};

}  // namespace

Schedule simulate(const Problem& problem, const Order& order, const std::string& method) {
  return Simulation(problem, order).run(method);
}

}  // namespace optpipe

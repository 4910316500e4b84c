#include "timing/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <tuple>

#include "model/dependencies.h"
#include "model/errors.h"
#include "model/op_table.h"
#include "timing/memory_fence.h"
#include "timing/memory_timeline.h"
#include "timing/previous_timing.h"

namespace optpipe {

namespace {

constexpr double kNotDone = std::numeric_limits<double>::quiet_NaN();
constexpr double kNever = std::numeric_limits<double>::infinity();
// Relative margin of the abandon test: work_left_ is a running difference of sums.
constexpr double kAbandonMargin = 1e-9;

struct HeadReady {
  OpRef head{Op::kForward, -1, -1};   // no head yet
  OpRef blocker{Op::kForward, 0, 0};  // an untimed predecessor, while ready is NaN
  double ready = 0;
};

struct PendingTransfer {
  OpRef ref;
  double issue_time;
};

// A candidate in the heap: the head of a rank's compute stream (queue -1) or of one of its copy
// queues, with the start it could have. Entries go stale when their slot changes (version).
struct Candidate {
  double start;
  int is_transfer;  // compute wins ties
  int rank;
  int channel;
  int slot;
  unsigned version;
  bool operator>(const Candidate& o) const {
    return std::tie(start, is_transfer, rank, channel) >
           std::tie(o.start, o.is_transfer, o.rank, o.channel);
  }
};

// Event-driven list scheduling: repeatedly commit the ready action with the earliest possible
// start (a heap of candidates, re-pushed lazily when their start moved later). Starts are
// committed in non-decreasing order, so a channel never receives a transfer that should have gone
// before one it already ran, and a rank's memory is known at each start. An order without
// transfers needs no such order (run_compute_only).
class Simulation {
 public:
  Simulation(const Problem& problem, const Order& order, const OpTable<double>* not_before,
             bool memory_fence, double abandon_above = kNever)
      : problem_(problem),
        order_(order),
        not_before_(not_before),
        abandon_above_(abandon_above),
        end_(problem, kNotDone),
        listed_(problem, 0),
        next_(problem.ranks, 0),
        compute_free_(problem.ranks, 0.0),
        work_left_(problem.ranks, 0.0),
        channel_free_(num_channels(problem), 0.0),
        queue_channel_(problem.ranks),
        queues_(problem.ranks),
        slot_base_(problem.ranks) {
    check_order();
    int slots = 0;
    for (int r = 0; r < problem.ranks; ++r) {
      if (problem.offload) {
        // One queue per channel the rank uses: a stream is FIFO in issue order.
        const int d2h = channel_of(problem, r, Op::kOffload);
        const int h2d = channel_of(problem, r, Op::kReload);
        queue_channel_[r].push_back(std::min(d2h, h2d));
        if (d2h != h2d) queue_channel_[r].push_back(std::max(d2h, h2d));
        queues_[r].resize(queue_channel_[r].size());
      }
      slot_base_[r] = slots;
      slots += 1 + static_cast<int>(queues_[r].size());
    }
    version_.assign(slots, 0);
    queued_start_.assign(slots, kNotDone);
    head_ready_.assign(slots, HeadReady{});
    // Without transfers nothing frees memory while a rank waits: the fence changes nothing.
    if (memory_fence && transfers_ > 0) {
      for (int r = 0; r < problem.ranks; ++r) fences_.emplace_back(problem.activation_budget(r));
    }
  }

  // Whether the timing stopped once a rank was sure to end after abandon_above (run() then
  // returns an empty schedule).
  bool abandoned() const { return abandoned_; }
  // What each blocked rank waits for where the ranks wait on each other in a cycle (run() then
  // returns an empty schedule); empty where they do not.
  const std::string& deadlock() const { return deadlock_; }

  // With `previous`, the actions that start before `revision.unchanged_before` there are taken
  // from it, and those after the moment the timing catches up with it (see
  // simulate_within_budget).
  Schedule run(const std::string& method, const Schedule* previous = nullptr,
               const OrderRevision& revision = {}) {
    schedule_.method = method;
    schedule_.ranks.assign(problem_.ranks, {});
    for (int r = 0; r < problem_.ranks; ++r) {
      schedule_.ranks[r].reserve(order_.ranks[r].size());
      issue_transfers(r);
    }
    // Only run_events() commits in start order, which catching up relies on.
    if (previous && revision.rank >= 0 && transfers_ > 0) {
      previous_timing_.emplace(problem_, order_, *previous, revision);
    }
    if (previous) replay(*previous, revision.unchanged_before);
    if (transfers_ == 0) {
      run_compute_only();
    } else {
      run_events();
    }
    if (abandoned_ || !deadlock_.empty()) return {};
    auto listed_first = [](const Action& a, const Action& b) {
      return a.start < b.start ||
             (a.start == b.start && is_compute(a.ref.op) && is_transfer(b.ref.op));
    };
    for (auto& actions : schedule_.ranks) {
      // Without transfers the actions are committed in start order already.
      if (!std::is_sorted(actions.begin(), actions.end(), listed_first)) {
        std::stable_sort(actions.begin(), actions.end(), listed_first);
      }
    }
    return std::move(schedule_);
  }

 private:
  void run_events() {
    for (int r = 0; r < problem_.ranks; ++r) refresh_rank(r);
    while (remaining_ > 0) {
      if (heap_.empty()) {
        deadlock_ = deadlock_message();
        return;
      }
      const Candidate c = heap_.top();
      heap_.pop();
      if (c.version != version_[c.slot]) continue;
      queued_start_[c.slot] = kNotDone;
      const int queue = c.channel < 0 ? -1 : queue_of(c.rank, c.channel);
      const double start = candidate_start(c.rank, queue);
      if (std::isnan(start)) continue;
      if (start > c.start) {
        push(c.rank, queue, start);
        continue;
      }
      if (previous_timing_ && previous_timing_->caught_up(start, end_)) {
        previous_timing_->append_rest(schedule_);
        return;
      }
      refresh_after(c.rank, commit(c.rank, queue, start));
      if (abandoned_) return;
    }
  }

  // Without transfers no channel orders anything, so when an op starts depends only on the
  // ends of its predecessors and of its rank's previous op, whatever the order of commits: the
  // same times as run_events, without the heap. Each rank runs ahead as far as its next op is
  // ready and is visited again once an op it may wait for is committed (on a neighbouring stage).
  void run_compute_only() {
    std::vector<int> to_visit(problem_.ranks);
    std::iota(to_visit.begin(), to_visit.end(), 0);
    std::vector<uint8_t> listed_to_visit(problem_.ranks, 1);
    while (!to_visit.empty()) {
      const int rank = to_visit.back();
      to_visit.pop_back();
      listed_to_visit[rank] = 0;
      for (double start = candidate_start(rank, -1); !std::isnan(start);
           start = candidate_start(rank, -1)) {
        const OpRef committed = commit(rank, -1, start);
        if (abandoned_) return;
        for (int s : {committed.stage - 1, committed.stage + 1}) {
          if (s < 0 || s >= problem_.num_stages()) continue;
          const int neighbour = problem_.rank_of_stage[s];
          if (!listed_to_visit[neighbour]) {
            listed_to_visit[neighbour] = 1;
            to_visit.push_back(neighbour);
          }
        }
      }
    }
    if (remaining_ > 0) deadlock_ = deadlock_message();
  }

  // Commits the actions of `previous` that start before `before`, at their times there: the state
  // the simulation reaches by then when the order changed nothing that starts earlier. Rank by
  // rank, each in start order: a rank's compute stream, queues and memory see their own actions
  // in the order they ran, and a channel keeps the latest end of the ranks that share it.
  void replay(const Schedule& previous, double before) {
    for (int rank = 0; rank < static_cast<int>(previous.ranks.size()); ++rank) {
      for (const Action& action : previous.ranks[rank]) {
        if (action.start >= before) break;
        const OpRef& ref = action.ref;
        const int queue =
            is_transfer(ref.op) ? queue_of(rank, channel_of(problem_, rank, ref.op)) : -1;
        const bool head =
            queue < 0
                ? next_[rank] < order_.ranks[rank].size() && order_.ranks[rank][next_[rank]] == ref
                : !queues_[rank][queue].empty() && queues_[rank][queue].front().ref == ref;
        if (!head) {
          throw Error(ErrorKind::kInternal,
                      fmt::format("the previous timing has {} at {:.6g}, where "
                                  "the order does not reach it",
                                  describe(ref), action.start));
        }
        commit(rank, queue, action.start, action.end);
      }
    }
  }

  void check_order() {
    if (static_cast<int>(order_.ranks.size()) != problem_.ranks) {
      throw Error(ErrorKind::kInternal, fmt::format("order has {} ranks, the problem {}",
                                                    order_.ranks.size(), problem_.ranks));
    }
    for (int r = 0; r < problem_.ranks; ++r) {
      for (const OpRef& ref : order_.ranks[r]) {
        if (!in_range(problem_, ref) || problem_.rank_of_stage[ref.stage] != r) {
          throw Error(ErrorKind::kInternal, fmt::format("order lists {} on rank {}, which does not "
                                                        "host that stage",
                                                        describe(ref), r));
        }
        if (is_transfer(ref.op) && !problem_.offload) {
          throw Error(ErrorKind::kInternal,
                      fmt::format("order lists {} but the profile has no offload "
                                  "link",
                                  describe(ref)));
        }
        if (ref.op == Op::kRecompute && !problem_.stages[ref.stage].can_recompute()) {
          throw Error(ErrorKind::kInternal, fmt::format("order lists {} but stage {} has no "
                                                        "checkpoint_bytes",
                                                        describe(ref), ref.stage));
        }
        if (listed_[ref]) {
          throw Error(ErrorKind::kInternal, fmt::format("order lists {} twice", describe(ref)));
        }
        listed_[ref] = 1;
        ++remaining_;
        if (is_transfer(ref.op)) {
          ++transfers_;
        } else if (abandon_above_ != kNever) {
          work_left_[r] += duration(problem_, ref);
        }
      }
    }
  }

  Predecessors predecessors_of(const OpRef& ref) const {
    auto form = [this](int s, int j) {
      return listed_[{Op::kBackward, s, j}] ? BackwardForm::kFused : BackwardForm::kSplit;
    };
    auto offloaded = [this](int s, int j) { return listed_[{Op::kReload, s, j}] != 0; };
    auto recomputed = [this](int s, int j) { return listed_[{Op::kRecompute, s, j}] != 0; };
    return predecessors(problem_, ref, form, offloaded, recomputed);
  }

  // Earliest start allowed by dependencies, or NaN while one of them has not been timed (then
  // `blocker`, when given, is set to it).
  double ready_time(const OpRef& ref, OpRef* blocker = nullptr) const {
    double ready = not_before_ ? (*not_before_)[ref] : 0.0;
    for (const Predecessor& p : predecessors_of(ref)) {
      const double pred_end = end_[p.pred];
      if (std::isnan(pred_end)) {
        if (blocker) *blocker = p.pred;
        return kNotDone;
      }
      ready = std::max(ready, pred_end + p.lag);
    }
    return ready;
  }

  // ready_time() of a slot's head, remembered: a head is asked again after every commit on its
  // rank or a neighbouring one, and while it waits for an untimed predecessor (its blocker) the
  // answer stays NaN. Once all its predecessors are timed its ready time no longer changes.
  double head_ready_time(int rank, int queue, const OpRef& head) const {
    HeadReady& cached = head_ready_[slot_base_[rank] + 1 + queue];
    if (cached.head != head || (std::isnan(cached.ready) && !std::isnan(end_[cached.blocker]))) {
      cached.head = head;
      cached.ready = ready_time(head, &cached.blocker);
    }
    return cached.ready;
  }

  int queue_of(int rank, int channel) const { return queue_channel_[rank][0] == channel ? 0 : 1; }

  // Earliest start of a slot's head, NaN when it has none or a dependency is untimed.
  double candidate_start(int rank, int queue) const {
    if (queue < 0) {
      const auto& refs = order_.ranks[rank];
      if (next_[rank] >= refs.size()) return kNotDone;
      const OpRef& ref = refs[next_[rank]];
      return fenced(
          rank, -1, ref,
          std::max(head_ready_time(rank, -1, ref), compute_free_[rank]));  // NaN stays NaN
    }
    const auto& pending = queues_[rank][queue];
    if (pending.empty()) return kNotDone;
    const double ready = head_ready_time(rank, queue, pending.front().ref);
    if (std::isnan(ready)) return kNotDone;
    return fenced(
        rank, queue, pending.front().ref,
        std::max({ready, pending.front().issue_time, channel_free_[queue_channel_[rank][queue]]}));
  }

  MemoryEffect memory_effect_of(const OpRef& ref) const {
    return memory_effect(problem_, ref, transfer_bytes(problem_, ref),
                         listed_[{Op::kRecompute, ref.stage, ref.microbatch}] != 0);
  }

  // With the memory fence, an allocation that does not fit at `start` waits for the end of the
  // first timed offload that frees enough, or, when that is not enough, until the offloads queued
  // on the rank have been timed (NaN; a RELOAD does not count those behind it in its own queue).
  // What nothing can fit starts at `start`, as without the fence (the validator rejects it).
  // `queue` is the slot `ref` heads: -1 for the compute stream.
  double fenced(int rank, int queue, const OpRef& ref, double start) const {
    if (fences_.empty() || std::isnan(start)) return start;
    const int64_t bytes = memory_effect_of(ref).allocated_at_start;
    if (bytes == 0) return start;
    const MemoryFence& fence = fences_[rank];
    if (const std::optional<double> fit = fence.earliest_fit(start, bytes)) return *fit;
    if (fence.shortfall(start, bytes) <= queued_offload_bytes(rank, queue)) return kNotDone;
    return start;
  }

  // Bytes of the offloads queued on the rank, outside `skipped_queue`, that can run: each queue
  // up to its first entry whose dependency is untimed (an offload listed before its own F would
  // wait for the F that waits for it).
  int64_t queued_offload_bytes(int rank, int skipped_queue) const {
    int64_t bytes = 0;
    for (int q = 0; q < static_cast<int>(queues_[rank].size()); ++q) {
      if (q == skipped_queue) continue;
      for (const PendingTransfer& transfer : queues_[rank][q]) {
        if (std::isnan(ready_time(transfer.ref))) break;
        if (transfer.ref.op == Op::kOffload) bytes += transfer_bytes(problem_, transfer.ref);
      }
    }
    return bytes;
  }

  void push(int rank, int queue, double start) {
    const int slot = slot_base_[rank] + 1 + queue;
    ++version_[slot];
    queued_start_[slot] = start;
    heap_.push({start, queue < 0 ? 0 : 1, rank, queue < 0 ? -1 : queue_channel_[rank][queue], slot,
                version_[slot]});
  }

  // Most refreshes find the start unchanged (a neighbour's op did not concern this slot's head):
  // the entry already in the heap stays, which keeps the heap free of duplicates.
  void refresh(int rank, int queue) {
    const double start = candidate_start(rank, queue);
    const int slot = slot_base_[rank] + 1 + queue;
    if (start == queued_start_[slot]) return;
    if (std::isnan(start)) {
      ++version_[slot];
      queued_start_[slot] = kNotDone;
    } else {
      push(rank, queue, start);
    }
  }

  void refresh_rank(int rank) {
    refresh(rank, -1);
    for (int q = 0; q < static_cast<int>(queues_[rank].size()); ++q) refresh(rank, q);
  }

  // Transfers up to the next compute op are issued once the compute op before them has ended.
  void issue_transfers(int rank) {
    const auto& refs = order_.ranks[rank];
    while (next_[rank] < refs.size() && is_transfer(refs[next_[rank]].op)) {
      const OpRef& ref = refs[next_[rank]++];
      queues_[rank][queue_of(rank, channel_of(problem_, rank, ref.op))].push_back(
          {ref, compute_free_[rank]});
    }
  }

  // Times the head of the rank's compute stream (queue -1) or copy queue; returns it. A replayed
  // action brings its `end`, which saves looking up its duration.
  OpRef commit(int rank, int queue, double start, double end = kNotDone) {
    OpRef ref;
    if (queue < 0) {
      ref = order_.ranks[rank][next_[rank]++];
    } else {
      ref = queues_[rank][queue].front().ref;
      queues_[rank][queue].pop_front();
    }
    if (std::isnan(end)) end = start + duration(problem_, ref);
    const double took = end - start;
    end_[ref] = end;
    schedule_.ranks[rank].push_back({ref, start, end, transfer_bytes(problem_, ref)});
    if (previous_timing_) previous_timing_->record(ref, start, end);
    if (!fences_.empty()) {
      fences_[rank].record(start, end, memory_effect_of(ref), ref.op == Op::kOffload);
    }
    --remaining_;
    if (queue < 0) {
      compute_free_[rank] = end;
      work_left_[rank] -= took;
      abandoned_ |= end + work_left_[rank] > abandon_above_;
      issue_transfers(rank);
    } else {
      double& channel_free = channel_free_[queue_channel_[rank][queue]];
      channel_free = std::max(channel_free, end);  // replay() commits rank by rank
    }
    return ref;
  }

  // What an op of `rank` can unblock: its own rank, and the ranks of the neighbouring stages.
  void refresh_after(int rank, const OpRef& committed) {
    refresh_rank(rank);
    if (committed.stage + 1 < problem_.num_stages()) {
      refresh(problem_.rank_of_stage[committed.stage + 1], -1);
    }
    if (committed.stage > 0) refresh(problem_.rank_of_stage[committed.stage - 1], -1);
  }

  std::string deadlock_message() const {
    std::string blocked;
    for (int r = 0; r < problem_.ranks; ++r) {
      const auto& refs = order_.ranks[r];
      if (next_[r] >= refs.size()) continue;
      const OpRef& ref = refs[next_[r]];
      for (const Predecessor& p : predecessors_of(ref)) {
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
  const OpTable<double>* not_before_;  // optional release times
  // A rank ends no earlier than the end of its last committed compute op plus the durations of
  // those it has not run (work_left_, counted only when there is a limit); once that passes
  // abandon_above_ the timing stops.
  double abandon_above_;
  bool abandoned_ = false;
  OpTable<double> end_;
  OpTable<uint8_t> listed_;  // not bool: vector<bool> has no references
  std::vector<size_t> next_;
  std::vector<double> compute_free_;
  std::vector<double> work_left_;  // per rank
  std::vector<double> channel_free_;
  std::vector<std::vector<int>> queue_channel_;                   // [rank][queue] -> channel
  std::vector<std::vector<std::deque<PendingTransfer>>> queues_;  // [rank][queue]
  std::vector<int> slot_base_;
  std::vector<unsigned> version_;
  std::vector<double> queued_start_;  // per slot: start of its current heap entry, NaN if none
  mutable std::vector<HeadReady> head_ready_;  // per slot
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap_;
  std::vector<MemoryFence> fences_;                // per rank, when allocations wait for memory
  std::optional<PreviousTiming> previous_timing_;  // when a revision may catch up with it
  Schedule schedule_;
  int remaining_ = 0;
  int transfers_ = 0;  // listed in the order
  std::string deadlock_;
};

SimulationOutcome outcome_of(Simulation& simulation, Schedule schedule) {
  if (!simulation.deadlock().empty()) return {std::nullopt, simulation.deadlock()};
  return {std::move(schedule), {}};
}

// For orders that cannot deadlock by construction: one that does is a bug in its maker.
Schedule schedule_or_throw(SimulationOutcome timing) {
  if (!timing.schedule) throw DeadlockError(timing.deadlock);
  return std::move(*timing.schedule);
}

}  // namespace

SimulationOutcome try_simulate(const Problem& problem, const Order& order, const std::string& method) {
  Simulation simulation(problem, order, nullptr, false);
  return outcome_of(simulation, simulation.run(method));
}

Schedule simulate(const Problem& problem, const Order& order, const std::string& method) {
  return schedule_or_throw(try_simulate(problem, order, method));
}

SimulationOutcome try_simulate(const Problem& problem, const Order& order,
                               const std::string& method, const OpTable<double>& not_before) {
  Simulation simulation(problem, order, &not_before, false);
  return outcome_of(simulation, simulation.run(method));
}

Schedule simulate(const Problem& problem, const Order& order, const std::string& method,
                  const OpTable<double>& not_before) {
  return schedule_or_throw(try_simulate(problem, order, method, not_before));
}

SimulationOutcome try_simulate_within_budget(const Problem& problem, const Order& order,
                                  const std::string& method) {
  Simulation simulation(problem, order, nullptr, true);
  return outcome_of(simulation, simulation.run(method));
}

Schedule simulate_within_budget(const Problem& problem, const Order& order,
                                const std::string& method) {
  return schedule_or_throw(try_simulate_within_budget(problem, order, method));
}

double unchanged_before(const Order& order, const Schedule& timing, int rank, size_t position) {
  const std::vector<OpRef>& refs = order.ranks[rank];
  auto computes_before = std::count_if(refs.begin(), refs.begin() + position,
                                       [](const OpRef& r) { return is_compute(r.op); });
  if (computes_before == 0) return 0;
  for (const Action& a : timing.ranks[rank]) {  // the computes_before-th compute op
    if (is_compute(a.ref.op) && --computes_before == 0) return a.start;
  }
  return 0;
}

Schedule simulate_within_budget(const Problem& problem, const Order& order,
                                const std::string& method, const Schedule& previous,
                                const OrderRevision& revision) {
  Simulation simulation(problem, order, nullptr, true);
  return schedule_or_throw(outcome_of(simulation, simulation.run(method, &previous, revision)));
}

std::optional<Schedule> simulate_within_budget(const Problem& problem, const Order& order,
                                               const std::string& method, const Schedule& previous,
                                               const OrderRevision& revision,
                                               double abandon_above) {
  const double threshold = abandon_above + kAbandonMargin * (1 + std::abs(abandon_above));
  Simulation simulation(problem, order, nullptr, true, threshold);
  Schedule schedule = simulation.run(method, &previous, revision);
  if (simulation.abandoned() || !simulation.deadlock().empty()) return std::nullopt;
  return schedule;
}

}  // namespace optpipe

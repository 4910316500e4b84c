#include "heuristics/list_scheduler.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <tuple>

#include "bounds/microbatch_paths.h"
#include "model/dependencies.h"
#include "model/errors.h"
#include "model/op_table.h"

namespace optpipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

struct RankState {
  std::vector<int> stages;         // model order; stages[0] is where microbatches enter the rank
  std::vector<int> next_forward;   // per local stage: next microbatch to run F
  std::vector<int> next_backward;  // per local stage: next microbatch to run B
  std::deque<OpRef> pending_weights;
  std::vector<OpRef> on_device;     // with offload: Fs whose activation is here, before their B
  std::vector<int> last_offloaded;  // with offload, per local stage: its latest microbatch away
  std::vector<int64_t> held_bytes;  // per microbatch: activation bytes it holds on this rank
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  double first_start = -1;
  int64_t memory_limit = kNoLimit;
  int max_in_flight = std::numeric_limits<int>::max();
  int in_flight = 0;
  int remaining = 0;
  double remaining_work = 0;  // durations of its compute ops left
  double free_at = 0;         // when the rank next decides
  double last_end = 0;        // end of its last op
  double idle = 0;            // time between its ops so far
  bool waiting = false;  // found nothing ready at free_at; let ranks free at the same time go first
  // Found nothing it may run: free_at is when its next op that is known to become ready does, or
  // infinity; a commit elsewhere that readies one of its next ops earlier wakes it then.
  bool asleep = false;
  int decision_version = 0;  // bumped at every reschedule
  // End of its last op were no B held up by its reload (ListScheduler::unhindered_end).
  double unhindered_last_end = 0;
};

// A rank's next decision; the earliest goes first, waiting ranks last among equals, then by rank.
// `version` tells whether the rank has been rescheduled since (a heap with lazy deletion).
struct Decision {
  double time;
  bool waiting;
  int rank;
  int version;
  bool operator>(const Decision& other) const {
    return std::tie(time, waiting, rank) > std::tie(other.time, other.waiting, other.rank);
  }
};

enum class ForwardVerdict { kAllowed, kBlockedByMemory, kBlockedByCount };

class ListScheduler {
 public:
  ListScheduler(const Problem& problem, const ListPolicy& policy)
      : problem_(problem),
        policy_(policy),
        end_(problem, kInfinity),
        local_of_stage_(problem.num_stages()) {
    ranks_.resize(problem.ranks);
    for (int r = 0; r < problem.ranks; ++r) {
      RankState& rank = ranks_[r];
      rank.stages = problem.stages_of_rank(r);
      for (size_t i = 0; i < rank.stages.size(); ++i) local_of_stage_[rank.stages[i]] = i;
      rank.next_forward.assign(rank.stages.size(), 0);
      rank.next_backward.assign(rank.stages.size(), 0);
      rank.held_bytes.assign(problem.microbatches, 0);
      rank.last_offloaded.assign(rank.stages.size(), -1);
      rank.remaining = 3 * static_cast<int>(rank.stages.size()) * problem.microbatches;
      for (int s : rank.stages) {
        const StageCosts& costs = problem.stages[s];
        rank.remaining_work +=
            problem.microbatches * (costs.forward + costs.backward_input + costs.backward_weight);
      }
      if (!policy.memory_limit_bytes.empty()) rank.memory_limit = policy.memory_limit_bytes[r];
      if (!policy.max_in_flight.empty()) rank.max_in_flight = policy.max_in_flight[r];
    }
    order_.ranks.resize(problem.ranks);
    if (policy.offload && problem.offload) {
      ledger_.emplace(problem, *policy.offload);
      paths_ = microbatch_paths(problem);
      chain_progress_.resize(problem.microbatches);
      unhindered_end_.emplace(problem, kInfinity);
    }
    for (int r = 0; r < problem.ranks; ++r) {
      if (ranks_[r].remaining > 0) decisions_.push({0, false, r, 0});
    }
  }

  ListOutcome run() {
    while (true) {
      const int r = pop_next_rank();
      if (r < 0) return outcome();
      if (abandoned_) {
        ListOutcome outcome;
        outcome.abandoned = true;
        return outcome;
      }
      RankState& rank = ranks_[r];
      now_ = rank.free_at;
      if (ledger_) issue_due_reloads(r);
      if (const auto op = choose(r)) {
        commit(r, *op);
      } else if (another_rank_decides_at(rank.free_at)) {
        reschedule(r, rank.free_at, true);
      } else {
        fall_asleep(r);
      }
    }
  }

 private:
  // Once no rank has a decision to make: the result, or a deadlock when ranks with work left
  // sleep with none of their next ops in sight.
  ListOutcome outcome() {
    ListOutcome outcome;
    for (const RankState& rank : ranks_) {
      if (rank.remaining > 0) {
        outcome.deadlock = "list scheduler: no rank can make progress (in-flight limit too low?)";
        return outcome;
      }
      outcome.peak_live_bytes.push_back(rank.peak_bytes);
      if (rank.first_start >= 0) {
        outcome.span = std::max(outcome.span, rank.last_end - rank.first_start);
      }
    }
    outcome.order = std::move(order_);
    outcome.makespan = makespan_;
    return outcome;
  }

  // The rank with work left that becomes free first (waiting ranks last among equals): every op
  // starting earlier is committed, so what is ready at its free time is known. It is taken off the
  // queue: every outcome of its decision reschedules it.
  int pop_next_rank() {
    drop_outdated_decisions();
    if (decisions_.empty()) return -1;
    const int r = decisions_.top().rank;
    decisions_.pop();
    return r;
  }

  // Whether another rank decides at `time` too, one not waiting (nothing ready when it was free).
  bool another_rank_decides_at(double time) {
    drop_outdated_decisions();
    return !decisions_.empty() && decisions_.top().time == time && !decisions_.top().waiting;
  }

  void drop_outdated_decisions() {
    while (!decisions_.empty() &&
           decisions_.top().version != ranks_[decisions_.top().rank].decision_version) {
      decisions_.pop();
    }
  }

  // Moves rank r's next decision; a rank without work left decides no more, and one asleep with
  // none of its next ops in sight waits for a wake-up.
  void reschedule(int r, double time, bool waiting) {
    RankState& rank = ranks_[r];
    rank.free_at = time;
    rank.waiting = waiting;
    ++rank.decision_version;
    if (rank.remaining > 0 && time < kInfinity) {
      decisions_.push({time, waiting, r, rank.decision_version});
    }
  }

  // When `ref` could start, or infinity while a predecessor is not committed: a B also waits
  // for its activation to be back from host.
  double ready_time(const OpRef& ref) const {
    const double ready = compute_ready_time(end_, ref);
    if (!ledger_ || ref.op != Op::kBackwardInput) return ready;
    return std::max(ready, ledger_->back_on_device(ref.stage, ref.microbatch));
  }

  // When the compute ops before `ref`, ending at `ends`, let it start. The dependencies of
  // model/dependencies.h for split backward without transfers, spelled out: this is the inner
  // loop.
  double compute_ready_time(const OpTable<double>& ends, const OpRef& ref) const {
    const int s = ref.stage;
    const int j = ref.microbatch;
    switch (ref.op) {
      case Op::kForward:
        return s == 0 ? 0.0 : ends[{Op::kForward, s - 1, j}] + problem_.p2p(s - 1, s);
      case Op::kBackwardInput:
        if (s == problem_.num_stages() - 1) return ends[{Op::kForward, s, j}];
        return ends[{Op::kBackwardInput, s + 1, j}] + problem_.p2p(s + 1, s);
      default:
        return ends[{Op::kBackwardInput, s, j}];
    }
  }

  int64_t activation(int stage) const { return problem_.stages[stage].activation_bytes; }
  int64_t weight_grad(int stage) const { return problem_.stages[stage].weight_grad_bytes; }

  // Whether the rank may start the F of local stage `local` now (its dependencies aside).
  ForwardVerdict forward_verdict(const RankState& rank, size_t local) const {
    const int j = rank.next_forward[local];
    if (local == 0 && rank.in_flight >= rank.max_in_flight) return ForwardVerdict::kBlockedByCount;
    if (rank.memory_limit == kNoLimit) return ForwardVerdict::kAllowed;
    const int64_t bytes = activation(rank.stages[local]);
    // Memory when the simulator will start the F: as soon as the rank and its input are ready.
    int64_t live = rank.live_bytes;
    int64_t reserve = 0;
    if (ledger_) {
      const int r = problem_.rank_of_stage[rank.stages[local]];
      const double start =
          std::max(rank.last_end, ready_time({Op::kForward, rank.stages[local], j}));
      live -= ledger_->released_by(r, std::max(start, rank.free_at));
      reserve = ledger_->reserve(r, rank.next_backward, j);
    }
    // Leanest order: a rank that holds nothing but this microbatch may always go on with it.
    if (live == rank.held_bytes[j]) return ForwardVerdict::kAllowed;
    if (live + bytes + reserve > rank.memory_limit) return ForwardVerdict::kBlockedByMemory;
    return safe_after_forward(rank, local) ? ForwardVerdict::kAllowed
                                           : ForwardVerdict::kBlockedByMemory;
  }

  // Banker's check: after this F, can the rank still run the remaining Fs of its admitted
  // microbatches in microbatch order, each once the older ones have released their bytes? A
  // microbatch k with unstarted Fs needs the bytes held by microbatches >= k plus its own
  // remaining activations under the limit. With one chunk per rank nothing is ever pending.
  bool safe_after_forward(const RankState& rank, size_t local) const {
    const int j = rank.next_forward[local];
    auto next_after = [&](size_t i) { return rank.next_forward[i] + (i == local ? 1 : 0); };
    int oldest_pending = next_after(0);
    for (size_t i = 1; i < rank.stages.size(); ++i) {
      oldest_pending = std::min(oldest_pending, next_after(i));
    }
    int64_t held_by_younger = 0;
    for (int k = next_after(0) - 1; k >= oldest_pending; --k) {
      held_by_younger += rank.held_bytes[k] + (k == j ? activation(rank.stages[local]) : 0);
      int64_t needed = 0;
      for (size_t i = 1; i < rank.stages.size(); ++i) {
        if (next_after(i) <= k) needed += activation(rank.stages[i]);
      }
      if (held_by_younger + needed > rank.memory_limit) return false;
    }
    return true;
  }

  // Lists the reloads that are due on rank `r`; they allocate their bytes from now on.
  // A reload goes when its bytes fit under the limit, or regardless when its B is the next one
  // its microbatch needs on the rank (the backwards before it have run), so none waits forever.
  void issue_due_reloads(int r) {
    RankState& rank = ranks_[r];
    int64_t reloading = 0;
    auto may_reload = [&](const OpRef& forward) {
      const int64_t bytes = problem_.stages[forward.stage].offloadable_bytes;
      const bool fits =
          rank.live_bytes + reloading - ledger_->released_by(r, rank.last_end) + bytes <=
          rank.memory_limit;
      if (!fits && !backward_is_near(rank.next_backward, local_of_stage_[forward.stage],
                                     forward.microbatch, 1)) {
        return false;
      }
      reloading += bytes;
      return true;
    };
    for (const LedgerTransfer& reload :
         ledger_->due_reloads(r, rank.next_backward, rank.last_end, rank.free_at,
                              backward_ready_estimate_, may_reload)) {
      const int64_t bytes = problem_.stages[reload.ref.stage].offloadable_bytes;
      rank.live_bytes += bytes;
      order_.ranks[r].push_back(reload.ref);
    }
  }

  // The earliest B (stage, microbatch) can become ready: the end of its microbatch's latest
  // committed F or B, then the rest of its path at its durations, no waiting.
  double earliest_backward_ready(int stage, int microbatch) const {
    const ChainProgress& progress = chain_progress_[microbatch];
    return progress.end + (backward_offset(stage) - progress.offset_end);
  }

  // Least time from F(0, j)'s start to B(stage, j)'s start, and the same to the end of the F or
  // B `ref` on j's path (MicrobatchPaths).
  double backward_offset(int stage) const {
    return paths_.forward_offset[stage] + paths_.round_trip[stage] -
           problem_.stages[stage].backward_input;
  }
  double offset_end(const OpRef& ref) const {
    if (ref.op == Op::kForward) {
      return paths_.forward_offset[ref.stage] + problem_.stages[ref.stage].forward;
    }
    return paths_.forward_offset[ref.stage] + paths_.round_trip[ref.stage];
  }

  std::optional<OpRef> ready_backward(const RankState& rank) const {
    // Later chunks first: they drain the pipeline.
    for (size_t k = 0; k < rank.stages.size(); ++k) {
      const size_t i = rank.stages.size() - 1 - k;
      if (rank.next_backward[i] >= problem_.microbatches) continue;
      const OpRef ref{Op::kBackwardInput, rank.stages[i], rank.next_backward[i]};
      if (ready_time(ref) <= rank.free_at) return ref;
    }
    return std::nullopt;
  }

  // The first ready F the policy allows; `blocked_by_memory` tells whether memory held one back.
  std::optional<OpRef> allowed_forward(const RankState& rank, bool& blocked_by_memory) const {
    blocked_by_memory = false;
    for (size_t k = 0; k < rank.stages.size(); ++k) {
      const size_t i = policy_.later_chunk_first ? rank.stages.size() - 1 - k : k;
      if (rank.next_forward[i] >= problem_.microbatches) continue;
      const OpRef ref{Op::kForward, rank.stages[i], rank.next_forward[i]};
      if (ready_time(ref) > rank.free_at) continue;
      switch (forward_verdict(rank, i)) {
        case ForwardVerdict::kAllowed:
          return ref;
        case ForwardVerdict::kBlockedByMemory:
          blocked_by_memory = true;
          break;
        case ForwardVerdict::kBlockedByCount:
          break;
      }
    }
    return std::nullopt;
  }

  std::optional<OpRef> choose(int r) const {
    const RankState& rank = ranks_[r];
    bool blocked_by_memory = false;
    const auto b = ready_backward(rank);
    if (b && policy_.backward_first) return b;
    if (auto f = allowed_forward(rank, blocked_by_memory)) return f;
    if (b) return b;
    if (rank.pending_weights.empty()) return std::nullopt;
    const bool only_weights_left = rank.remaining == static_cast<int>(rank.pending_weights.size());
    if (policy_.weights == WeightTiming::kFillGaps || blocked_by_memory || only_weights_left) {
      return rank.pending_weights.front();
    }
    if (policy_.weights == WeightTiming::kGapAware) {
      const double gap = next_known_ready(rank) - rank.free_at;
      if (gap >= duration(problem_, rank.pending_weights.front()) || rank.idle + gap > max_idle_) {
        return rank.pending_weights.front();
      }
    }
    return std::nullopt;
  }

  // The earliest time a B or an allowed F of the rank becomes ready, among those whose
  // predecessors are committed (infinity when none is).
  double next_known_ready(const RankState& rank) const {
    double next = kInfinity;
    for (size_t i = 0; i < rank.stages.size(); ++i) {
      if (rank.next_backward[i] < problem_.microbatches) {
        next =
            std::min(next, ready_time({Op::kBackwardInput, rank.stages[i], rank.next_backward[i]}));
      }
      if (rank.next_forward[i] < problem_.microbatches &&
          forward_verdict(rank, i) == ForwardVerdict::kAllowed) {
        next = std::min(next, ready_time({Op::kForward, rank.stages[i], rank.next_forward[i]}));
      }
    }
    return next;
  }

  void commit(int r, const OpRef& ref) {
    RankState& rank = ranks_[r];
    const int local = local_of_stage_[ref.stage];
    int64_t allocated = 0;
    switch (ref.op) {
      case Op::kForward:
        ++rank.next_forward[local];
        if (local == 0) ++rank.in_flight;
        allocated = activation(ref.stage);
        break;
      case Op::kBackwardInput:
        ++rank.next_backward[local];
        if (local == 0) --rank.in_flight;
        rank.pending_weights.push_back({Op::kBackwardWeight, ref.stage, ref.microbatch});
        allocated = -(activation(ref.stage) - weight_grad(ref.stage));
        break;
      default:
        rank.pending_weights.pop_front();
        allocated = -weight_grad(ref.stage);
        break;
    }
    const double start = start_time(r, ref, allocated);
    // A rank runs one op at a time, so a release at this op's end precedes its next decision.
    rank.live_bytes += allocated;
    rank.held_bytes[ref.microbatch] += allocated;
    rank.peak_bytes = std::max(rank.peak_bytes, rank.live_bytes);
    if (rank.first_start < 0) {
      rank.first_start = start;
    } else {
      rank.idle += start - rank.last_end;
      max_idle_ = std::max(max_idle_, rank.idle);
    }
    const double end = start + duration(problem_, ref);
    makespan_ = std::max(makespan_, end);  // F(s0, mb0) starts at 0
    end_[ref] = end;
    if (ledger_ && ref.op != Op::kBackwardWeight)
      chain_progress_[ref.microbatch] = {end, offset_end(ref)};
    rank.last_end = end;
    rank.asleep = false;
    --rank.remaining;
    // The rank runs its ops one after another, so it ends no earlier than this (give or take the
    // rounding of the running sum, which must not cut a run that ties the bound).
    rank.remaining_work -= duration(problem_, ref);
    if (unhindered_end(rank, ref) + rank.remaining_work >
        policy_.abandon_above_makespan * (1 + 1e-9)) {
      abandoned_ = true;
    }
    reschedule(r, std::max(rank.free_at, end), false);
    wake_successor(ref, end);
    order_.ranks[r].push_back(ref);
    if (ledger_ && ref.op == Op::kForward) {
      rank.on_device.push_back(ref);
      offload_after_forward(r, ref, end);
    } else if (ledger_ && ref.op == Op::kBackwardInput) {
      std::erase(rank.on_device, OpRef{Op::kForward, ref.stage, ref.microbatch});
    }
  }

  // Offload where memory needs it: another forward would not fit beside this one once the
  // offloads under way complete; under an eager policy, whatever the ledger lets go. The
  // activations that stay away longest go first.
  void offload_after_forward(int r, const OpRef& forward, double end) {
    RankState& rank = ranks_[r];
    const bool eager = policy_.offload->eager;
    while (
        !rank.on_device.empty() &&
        (eager || rank.live_bytes - ledger_->released_by(r, kInfinity) + activation(forward.stage) >
                      rank.memory_limit)) {
      auto longest = rank.on_device.end();
      double latest_ready = -kInfinity;
      for (auto it = rank.on_device.begin(); it != rank.on_device.end(); ++it) {
        // Offloads of a stage keep microbatch order, as its reloads do (and the MILP's FIFO
        // symmetry, solver/order_model.h, assumes).
        if (it->microbatch < rank.last_offloaded[local_of_stage_[it->stage]]) continue;
        if (const double ready = earliest_backward_ready(it->stage, it->microbatch);
            ready > latest_ready) {
          latest_ready = ready;
          longest = it;
        }
      }
      if (longest == rank.on_device.end()) return;
      const OpRef chosen = *longest;
      const int local = local_of_stage_[chosen.stage];
      const int awaiting = chosen.microbatch - rank.next_backward[local];
      const auto offload = ledger_->offload_activation(r, local, chosen, end, awaiting);
      if (!offload) return;
      rank.last_offloaded[local] = chosen.microbatch;
      rank.on_device.erase(longest);
      order_.ranks[r].push_back(offload->ref);
    }
  }

  // As the simulator times the order: the op starts once the rank's previous op has ended and
  // it is ready. That is the decision time, except for a W that memory forced after the rank
  // sat idle: it moves back into the idle time, where the simulator will run it. With offload,
  // an F that fits only once an offload under way has ended waits for it, as the memory fence
  // has it (timing/simulator.h).
  double start_time(int r, const OpRef& ref, int64_t allocated) const {
    const RankState& rank = ranks_[r];
    const double start = std::max(rank.last_end, ready_time(ref));
    if (!ledger_ || ref.op != Op::kForward || rank.live_bytes == rank.held_bytes[ref.microbatch]) {
      return start;
    }
    const int64_t excess = rank.live_bytes + allocated - rank.memory_limit;
    return excess <= 0 ? start : std::max(start, ledger_->when_released(r, start, excess));
  }

  // When the simulator's timing of the order ends `ref` at the earliest, which is `ref`'s end
  // without offload. With offload the ledger's transfer times are estimates (transfers of ranks
  // sharing a channel may run in another order), but transfers only add dependencies, so the
  // order timed without them ends no later than the simulator's.
  double unhindered_end(RankState& rank, const OpRef& ref) {
    if (!ledger_) return end_[ref];
    const double start =
        std::max(rank.unhindered_last_end, compute_ready_time(*unhindered_end_, ref));
    rank.unhindered_last_end = (*unhindered_end_)[ref] = start + duration(problem_, ref);
    return rank.unhindered_last_end;
  }

  // Nothing the rank may run becomes ready before one of its next ops does, or with offload
  // before one of its offloads ends (memory for an F) or a reload becomes due: the rank's own
  // state is fixed while it waits, and commits elsewhere only tighten the gap rule (max_idle_
  // grows, next_known_ready falls). So instead of stepping through every event, it sleeps until
  // then.
  void fall_asleep(int r) {
    RankState& rank = ranks_[r];
    double wake_at = kInfinity;
    auto consider = [&](const OpRef& ref) {
      const double ready = ready_time(ref);
      if (ready > rank.free_at) wake_at = std::min(wake_at, ready);
    };
    for (size_t i = 0; i < rank.stages.size(); ++i) {
      if (rank.next_forward[i] < problem_.microbatches) {
        consider({Op::kForward, rank.stages[i], rank.next_forward[i]});
      }
      if (rank.next_backward[i] < problem_.microbatches) {
        consider({Op::kBackwardInput, rank.stages[i], rank.next_backward[i]});
      }
    }
    if (ledger_) {
      wake_at = std::min(wake_at, ledger_->next_release_after(r, rank.free_at));
      // A reload due already waits for memory, which only a commit can free.
      const double reload_due =
          ledger_->next_reload_due(r, rank.next_backward, backward_ready_estimate_);
      if (reload_due > rank.free_at) wake_at = std::min(wake_at, reload_due);
    }
    reschedule(r, wake_at, false);
    rank.asleep = true;
  }

  // `done` ending at `end` readies the F or B that follows it on the next stage; if that is the
  // next op of a sleeping rank, the rank wakes when it becomes ready (not before now).
  void wake_successor(const OpRef& done, double end) {
    OpRef next;
    if (done.op == Op::kForward && done.stage + 1 < problem_.num_stages()) {
      next = {Op::kForward, done.stage + 1, done.microbatch};
    } else if (done.op == Op::kBackwardInput && done.stage > 0) {
      next = {Op::kBackwardInput, done.stage - 1, done.microbatch};
    } else {
      return;
    }
    const int r = problem_.rank_of_stage[next.stage];
    RankState& rank = ranks_[r];
    const double ready = std::max(now_, end + problem_.p2p(done.stage, next.stage));
    if (!rank.asleep || ready >= rank.free_at) return;
    const int local = local_of_stage_[next.stage];
    const int upcoming =
        next.op == Op::kForward ? rank.next_forward[local] : rank.next_backward[local];
    if (upcoming == next.microbatch) reschedule(r, ready, false);
  }

  const Problem& problem_;
  const ListPolicy& policy_;
  std::optional<OffloadLedger> ledger_;
  // With offload: microbatch paths and, per microbatch, where its latest committed F or B ends
  // and where it ends on the path, for earliest_backward_ready.
  struct ChainProgress {
    double end = 0;
    double offset_end = 0;
  };
  MicrobatchPaths paths_;
  std::vector<ChainProgress> chain_progress_;
  OffloadLedger::BackwardReady backward_ready_estimate_ = [this](int stage, int microbatch) {
    return earliest_backward_ready(stage, microbatch);
  };
  OpTable<double> end_;
  // With offload: end_ were no B held up by its reload (unhindered_end).
  std::optional<OpTable<double>> unhindered_end_;
  std::vector<int> local_of_stage_;  // index of each stage among its rank's stages
  std::vector<RankState> ranks_;
  // The next decisions of the ranks with work left (but those asleep with no op in sight), and
  // outdated entries.
  std::priority_queue<Decision, std::vector<Decision>, std::greater<>> decisions_;
  Order order_;
  double now_ = 0;          // the time of the decision being made
  bool abandoned_ = false;  // the makespan will exceed policy_.abandon_above_makespan
  double makespan_ = 0;
  double max_idle_ = 0;  // largest idle time of any rank so far
};

}  // namespace

Order list_schedule(const Problem& problem, const ListPolicy& policy) {
  ListOutcome outcome = ListScheduler(problem, policy).run();
  if (!outcome.deadlock.empty()) throw DeadlockError(outcome.deadlock);
  return std::move(outcome.order);
}

ListOutcome list_schedule_with_outcome(const Problem& problem, const ListPolicy& policy) {
  return ListScheduler(problem, policy).run();
}

}  // namespace optpipe

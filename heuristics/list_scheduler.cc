#include "heuristics/list_scheduler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <queue>

#include "compiler/dependencies.h"
#include "compiler/errors.h"
#include "compiler/op_table.h"

namespace optpipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct RankState {
  std::vector<int> stages;
  std::vector<int> next_forward;   // per local stage: next microbatch to run F
  std::vector<int> next_backward;  // per local stage: next microbatch to run B
  std::deque<OpRef> pending_weights;
  int in_flight = 0;
  int remaining = 0;
  double free_at = 0;
  bool waiting = false;  // found nothing ready at free_at; let ranks free at the same time go first
};

class ListScheduler {
 public:
  ListScheduler(const Problem& problem, const ListPolicy& policy)
      : problem_(problem), policy_(policy), end_(problem, kInfinity) {
    ranks_.resize(problem.ranks);
    for (int r = 0; r < problem.ranks; ++r) {
      RankState& rank = ranks_[r];
      rank.stages = problem.stages_of_rank(r);
      rank.next_forward.assign(rank.stages.size(), 0);
      rank.next_backward.assign(rank.stages.size(), 0);
      rank.remaining = 3 * static_cast<int>(rank.stages.size()) * problem.microbatches;
    }
    order_.ranks.resize(problem.ranks);
  }

  Order run() {
    while (true) {
      const int r = next_rank();
      if (r < 0) return std::move(order_);
      RankState& rank = ranks_[r];
      if (const auto op = choose(r)) {
        commit(r, *op);
      } else if (another_rank_decides_at(r, rank.free_at)) {
        rank.waiting = true;
      } else {
        rank.free_at = next_event_after(rank.free_at);
        rank.waiting = false;
      }
    }
  }

 private:
  // The rank with work left that becomes free first (waiting ranks last among equals): every op
  // starting earlier is committed, so what is ready at its free time is known.
  int next_rank() const {
    int best = -1;
    for (int r = 0; r < problem_.ranks; ++r) {
      const RankState& rank = ranks_[r];
      if (rank.remaining == 0) continue;
      if (best < 0 || std::pair(rank.free_at, rank.waiting) <
                          std::pair(ranks_[best].free_at, ranks_[best].waiting)) {
        best = r;
      }
    }
    return best;
  }

  bool another_rank_decides_at(int r, double time) const {
    for (int other = 0; other < problem_.ranks; ++other) {
      const RankState& rank = ranks_[other];
      if (other != r && rank.remaining > 0 && !rank.waiting && rank.free_at == time) return true;
    }
    return false;
  }

  // When `ref` could start, or infinity while a predecessor is not committed.
  double ready_time(const OpRef& ref) const {
    auto split = [](int, int) { return BackwardForm::kSplit; };
    auto kept = [](int, int) { return false; };
    double ready = 0;
    for (const Predecessor& p : predecessors(problem_, ref, split, kept)) {
      ready = std::max(ready, end_[p.pred] + p.lag);
    }
    return ready;
  }

  std::optional<OpRef> first_ready(const RankState& rank, Op op,
                                   const std::vector<int>& next) const {
    // Later chunks first for backward, earlier first for forward: both drain the pipeline.
    for (size_t k = 0; k < rank.stages.size(); ++k) {
      const size_t i = op == Op::kForward ? k : rank.stages.size() - 1 - k;
      if (next[i] >= problem_.microbatches) continue;
      const OpRef ref{op, rank.stages[i], next[i]};
      if (ready_time(ref) <= rank.free_at) return ref;
    }
    return std::nullopt;
  }

  std::optional<OpRef> choose(int r) const {
    const RankState& rank = ranks_[r];
    if (auto b = first_ready(rank, Op::kBackwardInput, rank.next_backward)) return b;
    if (rank.in_flight < policy_.max_in_flight[r]) {
      if (auto f = first_ready(rank, Op::kForward, rank.next_forward)) return f;
    }
    if (!rank.pending_weights.empty()) return rank.pending_weights.front();
    return std::nullopt;
  }

  void commit(int r, const OpRef& ref) {
    RankState& rank = ranks_[r];
    const size_t local = std::find(rank.stages.begin(), rank.stages.end(), ref.stage) -
                         rank.stages.begin();
    switch (ref.op) {
      case Op::kForward:
        ++rank.next_forward[local];
        ++rank.in_flight;
        break;
      case Op::kBackwardInput:
        ++rank.next_backward[local];
        --rank.in_flight;
        rank.pending_weights.push_back({Op::kBackwardWeight, ref.stage, ref.microbatch});
        break;
      default:
        rank.pending_weights.pop_front();
        break;
    }
    const double end = rank.free_at + duration(problem_, ref);
    end_[ref] = end;
    events_.push(end);
    if (problem_.p2p_latency > 0) events_.push(end + problem_.p2p_latency);
    rank.free_at = end;
    rank.waiting = false;
    --rank.remaining;
    order_.ranks[r].push_back(ref);
  }

  double next_event_after(double time) {
    while (!events_.empty() && events_.top() <= time) events_.pop();
    if (events_.empty()) {
      throw DeadlockError("list scheduler: no rank can make progress (in-flight limit too low?)");
    }
    return events_.top();
  }

  const Problem& problem_;
  const ListPolicy& policy_;
  OpTable<double> end_;
  std::vector<RankState> ranks_;
  std::priority_queue<double, std::vector<double>, std::greater<>> events_;
  Order order_;
};

}  // namespace

Order list_schedule(const Problem& problem, const ListPolicy& policy) {
  return ListScheduler(problem, policy).run();
}

}  // namespace optpipe

#include "heuristics/zero_bubble_greedy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "heuristics/fastest_order.h"

namespace optpipe {

namespace {

enum Kind { kF = 0, kB = 1, kW = 2 };

constexpr Op kOpOfKind[] = {Op::kForward, Op::kBackwardInput, Op::kBackwardWeight};

class Greedy {
 public:
  Greedy(const Problem& problem, const std::vector<int64_t>& max_live_bytes,
         const ZeroBubbleGreedyChoices& choices)
      : problem_(problem),
        stages_(problem.num_stages()),
        microbatches_(problem.microbatches),
        max_mem_(max_live_bytes),
        choices_(choices),
        count_(stages_, {0, 0, 0}),
        free_at_(stages_, 0),
        live_(stages_, 0),
        bubble_(stages_, 0),
        end_(stages_),
        ops_(stages_) {
    for (auto& of_stage : end_) {
      for (auto& of_kind : of_stage) {
        of_kind.assign(microbatches_, std::numeric_limits<double>::quiet_NaN());
      }
    }
  }

  std::optional<Order> run() {
    warm_up();
    for (int i = 1; i < microbatches_ && ok_; ++i) steady(i);
    for (int j = 0; j < stages_ && ok_; ++j) {
      while (ok_ && count_[j][kW] < microbatches_) put(j, kW);
    }
    if (!ok_) return std::nullopt;
    Order order;
    order.ranks.resize(problem_.ranks);
    for (int j = 0; j < stages_; ++j) order.ranks[problem_.rank_of_stage[j]] = std::move(ops_[j]);
    return order;
  }

 private:
  double cost(int j, int kind) const {
    const StageCosts& s = problem_.stages[j];
    return kind == kF ? s.forward : kind == kB ? s.backward_input : s.backward_weight;
  }
  int64_t bytes(int j, int kind) const {
    const StageCosts& s = problem_.stages[j];
    if (kind == kF) return s.activation_bytes;
    if (kind == kB) return -(s.activation_bytes - s.weight_grad_bytes);
    return -s.weight_grad_bytes;
  }
  // The activation bytes stage j's rank may hold.
  int64_t limit(int j) const { return max_mem_[problem_.rank_of_stage[j]]; }
  // Latency from stage `from` to `to` (adjacent stages).
  double comm(int from, int to) const { return problem_.p2p(from, to); }

  // End of an op already placed; an op not placed yet means these choices starve a stage.
  double end(int j, int kind, int mb) {
    if (mb >= microbatches_ || std::isnan(end_[j][kind][mb])) {
      ok_ = false;
      return 0;
    }
    return end_[j][kind][mb];
  }

  double max_bubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }

  void put(int j, int kind) {
    if (!ok_) return;
    const int mb = count_[j][kind];
    if (mb >= microbatches_) {
      ok_ = false;
      return;
    }
    const double c = cost(j, kind);
    double finish = free_at_[j] + c;
    const double without_wait = finish;
    if (kind == kF && j > 0) finish = std::max(finish, end(j - 1, kF, mb) + comm(j - 1, j) + c);
    if (kind == kB && j + 1 < stages_) {
      finish = std::max(finish, end(j + 1, kB, mb) + comm(j + 1, j) + c);
    }
    if (count_[j][kF] > 0) bubble_[j] += finish - without_wait;
    free_at_[j] = finish;
    end_[j][kind][mb] = finish;
    live_[j] += bytes(j, kind);
    ++count_[j][kind];
    ops_[j].push_back({kOpOfKind[kind], j, mb});
  }

  // Ws until the next op of `kind` fits the limit; false when none is left to run.
  bool make_room(int j, int kind) {
    while (ok_ && live_[j] + bytes(j, kind) > limit(j)) {
      if (count_[j][kW] >= count_[j][kB]) return false;
      put(j, kW);
    }
    return ok_;
  }

  // Before an op whose input arrives at `arrival`: Ws that end by then, then one more into the
  // remaining gap unless the bubble rule says the gap is cheaper left idle.
  void fill_gap(int j, double arrival) {
    while (ok_ && count_[j][kW] < count_[j][kB] && free_at_[j] + cost(j, kW) <= arrival) {
      put(j, kW);
    }
    if (ok_ && count_[j][kW] < count_[j][kB] && free_at_[j] < arrival) {
      if (arrival - free_at_[j] <= max_bubble() - bubble_[j]) {
        if (choices_.no_bubble_greedy) put(j, kW);
      } else {
        put(j, kW);
      }
    }
  }

  // Microbatch 0: one F on every stage; from the last stage back, each stage runs as many extra
  // Fs as fit its memory and the time until B comes back to it; fewer on a stage than on the one
  // before it; then B down the pipeline.
  void warm_up() {
    for (int j = 0; j < stages_; ++j) put(j, kF);
    std::vector<int> extra(stages_, 0);
    double b_back = 0;  // when microbatch 0's B could end on stage j + 1
    for (int j = stages_ - 1; j >= 0; --j) {
      if (j == stages_ - 1) {
        b_back = end(j, kF, 0) + cost(j, kB);
        continue;
      }
      int64_t mem = live_[j];
      double busy = free_at_[j];
      const double arrival = b_back + comm(j + 1, j);
      while (count_[j][kF] + extra[j] < microbatches_ && mem + bytes(j, kF) <= limit(j)) {
        if (choices_.allow_bubble_before_first_b ? busy + cost(j, kF) > arrival
                                                 : busy >= arrival) {
          break;
        }
        mem += bytes(j, kF);
        busy += cost(j, kF);
        ++extra[j];
      }
      b_back = std::max(busy, arrival) + cost(j, kB);
    }
    for (int j = 1; j < stages_; ++j) {
      while (extra[j] > 0 && extra[j] >= extra[j - 1] &&
             count_[j][kF] + extra[j] < microbatches_) {
        --extra[j];
      }
    }
    for (int j = 0; j < stages_; ++j) {
      for (int k = 0; k < extra[j]; ++k) put(j, kF);
    }
    for (int j = stages_ - 1; j >= 0; --j) put(j, kB);
  }

  // Microbatch i >= 1: which stages run one more F (none after one that does not), each after
  // the Ws its memory and its input's arrival call for; then B(i) down the pipeline.
  void steady(int i) {
    std::vector<int> next_f(stages_, 0);
    for (int j = 0; j < stages_; ++j) {
      if (count_[j][kF] >= microbatches_) continue;
      if (j + 1 < stages_ && count_[j][kF] >= count_[j + 1][kF] + 2 && choices_.prioritize_b) {
        const double next_f_and_b =
            free_at_[j + 1] + cost(j + 1, kF) + cost(j + 1, kB) + comm(j + 1, j);
        if (free_at_[j] >= next_f_and_b) continue;
        int64_t with_w = live_[j] + bytes(j, kF);
        double w_time = 0;
        for (int w = count_[j][kW]; with_w > limit(j) && w < count_[j][kB]; ++w) {
          w_time += cost(j, kW);
          with_w += bytes(j, kW);
        }
        if (free_at_[j] + cost(j, kF) + w_time <= next_f_and_b) {
          next_f[j] = 1;
          continue;
        }
        if (next_f_and_b - free_at_[j] <= max_bubble() - bubble_[j]) continue;
      }
      next_f[j] = 1;
    }
    for (int j = stages_ - 2; j >= 0; --j) next_f[j] = std::min(next_f[j], next_f[j + 1]);
    for (int j = 0; j < stages_ && ok_; ++j) {
      if (next_f[j] == 0) continue;
      if (!make_room(j, kF)) {
        ok_ = false;
        return;
      }
      if (j > 0) fill_gap(j, end(j - 1, kF, count_[j][kF]) + comm(j - 1, j));
      put(j, kF);
    }
    for (int j = stages_ - 1; j >= 0 && ok_; --j) {
      if (count_[j][kB] != i || !make_room(j, kB)) {
        ok_ = false;
        return;
      }
      if (j + 1 < stages_) fill_gap(j, end(j + 1, kB, i) + comm(j + 1, j));
      if (j == 0 && count_[j][kF] == microbatches_) {
        while (ok_ && count_[j][kW] < count_[j][kB]) put(j, kW);
      }
      put(j, kB);
    }
  }

  const Problem& problem_;
  int stages_;
  int microbatches_;
  const std::vector<int64_t>& max_mem_;  // per rank
  ZeroBubbleGreedyChoices choices_;
  std::vector<std::array<int, 3>> count_;  // ops placed per stage and kind
  std::vector<double> free_at_;            // when each stage's rank is free
  std::vector<int64_t> live_;              // activation bytes held per stage
  std::vector<double> bubble_;             // idle time per stage after its first F
  std::vector<std::array<std::vector<double>, 3>> end_;  // end times; NaN: not placed yet
  std::vector<std::vector<OpRef>> ops_;
  bool ok_ = true;
};

}  // namespace

std::optional<Order> zero_bubble_greedy_order(const Problem& problem,
                                              const std::vector<int64_t>& max_live_bytes,
                                              const ZeroBubbleGreedyChoices& choices) {
  if (problem.chunks_per_rank != 1) return std::nullopt;
  return Greedy(problem, max_live_bytes, choices).run();
}

std::optional<Order> best_zero_bubble_greedy_order(const Problem& problem,
                                                   const std::vector<int64_t>& max_live_bytes) {
  FastestOrder fastest(problem, "zero-bubble greedy");
  for (bool allow_bubble : {true, false}) {
    for (bool prioritize_b : {true, false}) {
      for (bool no_bubble_greedy : {true, false}) {
        if (std::optional<Order> order = zero_bubble_greedy_order(
                problem, max_live_bytes, {allow_bubble, prioritize_b, no_bubble_greedy})) {
          fastest.offer(std::move(*order));
        }
      }
    }
  }
  return fastest.take();
}

}  // namespace optpipe

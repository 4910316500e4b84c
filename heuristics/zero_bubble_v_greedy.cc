#include "heuristics/zero_bubble_v_greedy.h"

#include <algorithm>
#include <array>
#include <deque>

#include "heuristics/fastest_order.h"

namespace optpipe {

namespace {

// Op classes per rank, as (category, chunk): category 0 F, 1 B, 2 W. For F, chunk 0 is the down
// chunk (stage r) and chunk 1 the up chunk (stage 2R-1-r). For B and W it is the other way round:
// chunk 0 is the up chunk's backward, which flows down the ranks like the down chunk's F.
enum Category { kF = 0, kB = 1, kW = 2 };

constexpr Op kOpOf[] = {Op::kForward, Op::kBackwardInput, Op::kBackwardWeight};

struct Pass {
  std::vector<std::vector<OpRef>> ops;
  std::vector<double> bubble;
  double max_bubble = 0;
};

class VGreedy {
 public:
  VGreedy(const Problem& problem, const std::vector<int64_t>& max_live_bytes,
          const ZeroBubbleVChoices& choices, const std::vector<double>* approved)
      : problem_(problem),
        ranks_(problem.ranks),
        microbatches_(problem.microbatches),
        max_mem_(max_live_bytes),
        choices_(choices),
        approved_(approved),
        count_(ranks_, {0, 0, 0, 0, 0, 0}),
        end_(6 * static_cast<size_t>(ranks_) * microbatches_, -1.0),
        free_at_(ranks_, 0),
        live_(ranks_, 0),
        bubble_(ranks_, 0),
        pending_w_(ranks_),
        ops_(ranks_) {
    if (approved_) max_approved_ = *std::max_element(approved_->begin(), approved_->end());
  }

  std::optional<Pass> run() {
    warm_up();
    steady();
    for (int r = 0; r < ranks_ && ok_; ++r) {
      while (ok_ && !pending_w_[r].empty()) put_w(r);
    }
    if (!ok_) return std::nullopt;
    Pass pass;
    pass.ops = std::move(ops_);
    pass.max_bubble = max_bubble(-1);
    pass.bubble = std::move(bubble_);
    return pass;
  }

 private:
  int stage_of(int cat, int chunk, int r) const {
    const bool down = (cat == kF) == (chunk == 0);
    return down ? r : 2 * ranks_ - 1 - r;
  }
  double cost(int cat, int chunk, int r) const {
    const StageCosts& s = problem_.stages[stage_of(cat, chunk, r)];
    return cat == kF ? s.forward : cat == kB ? s.backward_input : s.backward_weight;
  }
  int64_t bytes(int cat, int chunk, int r) const {
    const StageCosts& s = problem_.stages[stage_of(cat, chunk, r)];
    if (cat == kF) return s.activation_bytes;
    if (cat == kB) return -(s.activation_bytes - s.weight_grad_bytes);
    return -s.weight_grad_bytes;
  }
  double comm() const { return problem_.p2p_latency; }

  size_t id(int cat, int chunk, int r, int mb) const {
    return ((static_cast<size_t>(cat) * 2 + chunk) * ranks_ + r) * microbatches_ + mb;
  }
  // The end of an op, -1 before it is placed; `none` stands for "no such op" and reads the last
  // op's end as the authors' code does (a W that is placed last, so -1 until the end).
  double end_of(std::optional<size_t> op) const { return op ? end_[*op] : end_.back(); }

  double max_bubble(int r) const {
    double most = *std::max_element(bubble_.begin(), bubble_.end());
    if (r >= 0 && approved_) most = std::max(most, max_approved_ - (*approved_)[r]);
    return most;
  }

  void fail() { ok_ = false; }

  void put(int cat, int chunk, int r) {
    if (!ok_) return;
    const int n = count_[r][cat * 2 + chunk];
    if (n >= microbatches_ || live_[r] + bytes(cat, chunk, r) > max_mem_[r]) return fail();
    const double c = cost(cat, chunk, r);
    double finish = free_at_[r] + c;
    const double without_wait = finish;
    if (cat > kF || chunk > 0) {
      const int before = cat * 2 + chunk - 1;
      const size_t needed = cat < kW ? id(before / 2, before % 2, r, n) : id(kB, chunk, r, n);
      if (end_[needed] < 0) return fail();
    }
    if (cat < kW) {
      std::optional<size_t> input;
      if (chunk == 1 && r + 1 < ranks_) input = id(cat, 1, r + 1, n);
      if (chunk == 0 && r > 0) input = id(cat, 0, r - 1, n);
      if (input) {
        if (end_[*input] < 0) return fail();
        finish = std::max(finish, end_[*input] + comm() + c);
      }
    }
    if (count_[r][0] > 0) bubble_[r] += finish - without_wait;
    end_[id(cat, chunk, r, n)] = finish;
    free_at_[r] = finish;
    live_[r] += bytes(cat, chunk, r);
    ops_[r].push_back({kOpOf[cat], stage_of(cat, chunk, r), n});
    if (cat == kB) pending_w_[r].push_back(chunk);
    ++count_[r][cat * 2 + chunk];
  }

  void put_w(int r) {
    if (pending_w_[r].empty()) return fail();
    const int chunk = pending_w_[r].front();
    pending_w_[r].pop_front();
    put(kW, chunk, r);
  }

  // Ws until an op with `need` bytes fits.
  void make_room(int r, int64_t need) {
    while (ok_ && live_[r] + need > max_mem_[r]) put_w(r);
  }

  // Before an op whose input is `input`: Ws that end before it arrives, then one more where the
  // gap exceeds what the bubble rule approves and `fill` says so.
  void fill_gap(int r, std::optional<size_t> input, bool fill) {
    while (ok_ && !pending_w_[r].empty() && input &&
           end_[*input] + comm() >= free_at_[r] + cost(kW, pending_w_[r].front(), r)) {
      put_w(r);
    }
    if (ok_ && !pending_w_[r].empty() &&
        end_of(input) + comm() - free_at_[r] > max_bubble(r) - bubble_[r] && fill) {
      put_w(r);
    }
  }

  void warm_up() {
    for (int r = 0; r < ranks_; ++r) put(kF, 0, r);
    for (int r = ranks_ - 1; r >= 0 && ok_; --r) {
      if (r == ranks_ - 1) {
        put(kF, 1, r);
        continue;
      }
      const double back = end_[id(kF, 1, r + 1, 0)] + comm();
      const int64_t headroom = bytes(kF, 0, r) * (2 + 2 * static_cast<int64_t>(r));
      while (ok_ && live_[r] + headroom <= max_mem_[r] && free_at_[r] + cost(kF, 0, r) <= back &&
             count_[r][0] < microbatches_) {
        for (int q = 0; q <= r; ++q) put(kF, 0, q);
      }
      put(kF, 1, r);
    }
    int chunk = 0;
    for (int r = 1; r < ranks_ && ok_; ++r) {
      // Each rank catches up with the one before it, alternating chunks from the last rank back.
      for (int rounds = 0; ok_; ++rounds) {
        const auto& here = count_[r];
        const auto& before = count_[r - 1];
        const bool behind = here[0] + here[1] < before[0] + before[1] ||
                            (here[1] <= before[1] && before[1] < microbatches_);
        if (!behind) break;
        if (rounds > 4 * microbatches_) return fail();
        for (int q = ranks_ - 1; q >= r; --q) {
          if (count_[q][chunk] < microbatches_) put(kF, chunk, q);
        }
        chunk = 1 - chunk;
      }
    }
  }

  void steady() {
    for (int step = 0; step < 2 * microbatches_ && ok_; ++step) {
      for (int r = 0; r < ranks_; ++r) {
        make_room(r, bytes(kB, 0, r));
      }
      std::vector<int> b0_ranks, b1_ranks;
      for (int r = 0; r < ranks_; ++r) {
        if (count_[r][3] >= count_[r][2]) {
          b0_ranks.push_back(r);
        } else if (r == ranks_ - 1) {
          b1_ranks.push_back(r);
        } else if (end_[id(kB, 1, r + 1, count_[r][3])] >= 0 || count_[r][2] >= microbatches_) {
          b1_ranks.push_back(r);
        } else {
          b0_ranks.push_back(r);
        }
      }
      std::vector<std::pair<int, int>> backwards;  // rank, chunk
      for (auto it = b1_ranks.rbegin(); it != b1_ranks.rend(); ++it) backwards.push_back({*it, 1});
      for (int r : b0_ranks) backwards.push_back({r, 0});
      for (const auto& [r, chunk] : backwards) {
        if (!ok_) return;
        std::optional<size_t> input;
        if (chunk == 1 && r + 1 < ranks_) input = id(kB, 1, r + 1, count_[r][3]);
        if (chunk == 0 && r > 0) input = id(kB, 0, r - 1, count_[r][2]);
        fill_gap(r, input, chunk == 1 || choices_.fill_b);
        put(kB, chunk, r);
      }
      for (int r = 0; r < ranks_ && ok_; ++r) {
        if (count_[r][1] >= microbatches_) continue;
        int chunk = -1;
        if (count_[r][1] >= count_[r][0]) {
          chunk = 0;
        } else if (r == ranks_ - 1) {
          chunk = 1;
        } else if (end_[id(kF, 1, r + 1, count_[r][1])] >= 0) {
          chunk = 1;
        } else if (count_[r][0] < microbatches_) {
          if (r == 0 || end_[id(kF, 0, r - 1, count_[r][0])] >= 0) chunk = 0;
        }
        if (chunk < 0) continue;
        make_room(r, bytes(kF, chunk, r));
        std::optional<size_t> input;
        if (chunk == 0 && r > 0) input = id(kF, 0, r - 1, count_[r][0]);
        if (chunk == 1 && r + 1 < ranks_) input = id(kF, 1, r + 1, count_[r][1]);
        fill_gap(r, input, choices_.fill_f);
        put(kF, chunk, r);
      }
    }
  }

  const Problem& problem_;
  int ranks_;
  int microbatches_;
  const std::vector<int64_t>& max_mem_;
  ZeroBubbleVChoices choices_;
  const std::vector<double>* approved_;
  double max_approved_ = -1;
  std::vector<std::array<int, 6>> count_;  // per rank: F0, F1, B0, B1, W0, W1 placed
  std::vector<double> end_;
  std::vector<double> free_at_;
  std::vector<int64_t> live_;
  std::vector<double> bubble_;
  std::vector<std::deque<int>> pending_w_;  // chunks of the Bs whose W has not run
  std::vector<std::vector<OpRef>> ops_;
  bool ok_ = true;
};

// One choice: passes that approve the previous pass's bubbles, while the largest bubble shrinks.
std::optional<Pass> repeated_passes(const Problem& problem,
                                    const std::vector<int64_t>& max_live_bytes,
                                    const ZeroBubbleVChoices& choices) {
  std::optional<Pass> best = VGreedy(problem, max_live_bytes, choices, nullptr).run();
  for (int pass = 0; best && pass < 64; ++pass) {
    std::optional<Pass> next = VGreedy(problem, max_live_bytes, choices, &best->bubble).run();
    if (!next || next->max_bubble >= best->max_bubble) break;
    best = std::move(next);
  }
  return best;
}

}  // namespace

std::optional<Order> zero_bubble_v_greedy_order(const Problem& problem,
                                                const std::vector<int64_t>& max_live_bytes,
                                                const ZeroBubbleVChoices& choices) {
  if (problem.placement != PlacementKind::kVShape || problem.chunks_per_rank != 2) {
    return std::nullopt;
  }
  std::optional<Pass> pass = repeated_passes(problem, max_live_bytes, choices);
  if (!pass) return std::nullopt;
  Order order;
  order.ranks = std::move(pass->ops);
  return order;
}

std::optional<Order> best_zero_bubble_v_greedy_order(const Problem& problem,
                                                     const std::vector<int64_t>& max_live_bytes) {
  FastestOrder fastest(problem, "zb-v greedy");
  for (bool fill_b : {true, false}) {
    for (bool fill_f : {true, false}) {
      if (std::optional<Order> order =
              zero_bubble_v_greedy_order(problem, max_live_bytes, {fill_f, fill_b})) {
        fastest.offer(std::move(*order));
      }
    }
  }
  return fastest.take();
}

}  // namespace optpipe

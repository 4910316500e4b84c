#include "heuristics/vshape_patterns.h"

#include <algorithm>
#include <array>
#include <deque>
#include <numeric>

namespace optpipe {

std::array<int, 4> vshape_pattern_first_slots(VShapePattern pattern, int ranks, int r) {
  if (pattern == VShapePattern::kMin) {
    const int interval = ranks % 3 == 0 ? 2 : 0;
    return {r, 2 * ranks - r - 1, 2 * ranks + interval + r, 4 * ranks + interval - r - 1};
  }
  const int interval = ranks % 2 == 0 ? 3 : 0;
  return {2 * r, 3 * ranks - r - 2, 3 * ranks + interval + 2 * r - 1, 6 * ranks + interval - r - 2};
}

namespace {

// Op kinds of one rank: F of the down chunk (stage r), F of the up chunk (stage 2R-1-r), B of the
// up chunk, B of the down chunk, and (while squeezing) W, the k-th W following the k-th B.
enum Kind { kForwardDown, kForwardUp, kBackwardUp, kBackwardDown, kWeight, kNumKinds };
constexpr int kSlotsPerMicrobatch = 6;  // F, F, B, B, W, W: one unit slot each

// slots[kind][i]: unit slot of the i-th op of that kind on one rank.
using RankSlots = std::array<std::vector<int>, kNumKinds>;

struct Slotted {
  int slot;
  int kind;
  int index;  // microbatch for F and B, order among the rank's Ws for W
};

// A counting sort (by slot, then kind, then index): the squeeze calls this for every slot it
// tries, and slots are dense.
std::vector<Slotted> by_slot(const RankSlots& slots) {
  int last_slot = -1;
  size_t ops = 0;
  for (const std::vector<int>& of_kind : slots) {
    for (int slot : of_kind) last_slot = std::max(last_slot, slot);
    ops += of_kind.size();
  }
  std::vector<int> first_of_slot(last_slot + 2, 0);
  for (const std::vector<int>& of_kind : slots) {
    for (int slot : of_kind) ++first_of_slot[slot + 1];
  }
  std::partial_sum(first_of_slot.begin(), first_of_slot.end(), first_of_slot.begin());
  std::vector<Slotted> sorted(ops);
  for (int kind = 0; kind < kNumKinds; ++kind) {
    for (int i = 0; i < static_cast<int>(slots[kind].size()); ++i) {
      const int slot = slots[kind][i];
      sorted[first_of_slot[slot]++] = {slot, kind, i};
    }
  }
  return sorted;
}

// Ws (one anonymous kind) into the free slots after the Bs they follow, the rest at the end.
void place_weights(RankSlots& slots) {
  slots[kWeight].clear();
  int pending = 0;
  int slot = 0;
  for (const Slotted& op : by_slot(slots)) {
    for (; slot < op.slot && pending > 0; ++slot, --pending) slots[kWeight].push_back(slot);
    slot = op.slot + 1;
    if (op.kind == kBackwardUp || op.kind == kBackwardDown) ++pending;
  }
  for (; pending > 0; --pending) slots[kWeight].push_back(slot++);
}

class Pattern {
 public:
  Pattern(const Problem& problem, VShapePattern pattern)
      : problem_(problem), ranks_(problem.ranks), slots_(problem.ranks) {
    for (int r = 0; r < ranks_; ++r) {
      const std::array<int, 4> first = vshape_pattern_first_slots(pattern, ranks_, r);
      for (int kind = 0; kind < 4; ++kind) {
        for (int j = 0; j < problem.microbatches; ++j) {
          slots_[r][kind].push_back(first[kind] + kSlotsPerMicrobatch * j);
        }
      }
      place_weights(slots_[r]);
    }
  }

  // The paper's "squeeze": in slot order, move each op of the warm-up (before rank 0's first B of
  // its down chunk) and of the cool-down (after rank 0's last F) to the earliest free slot after
  // its dependencies where the rank's peak memory does not grow. The steady state stays as is.
  void squeeze() {
    std::vector<std::array<int, 4>> ops;  // original slot, rank, kind, index
    int last_slot = 0;
    for (int r = 0; r < ranks_; ++r) {
      for (const Slotted& op : by_slot(slots_[r])) {
        ops.push_back({op.slot, r, op.kind, op.index});
        last_slot = std::max(last_slot, op.slot);
      }
    }
    std::sort(ops.begin(), ops.end());
    std::vector<std::vector<uint8_t>> occupied(ranks_, std::vector<uint8_t>(last_slot + 1, 0));
    std::vector<int64_t> cap(ranks_);
    for (int r = 0; r < ranks_; ++r) {
      for (const Slotted& op : by_slot(slots_[r])) occupied[r][op.slot] = 1;
      cap[r] = peak_bytes(r);
    }
    int phase = 0;  // 0 warm-up, 1 steady, 2 cool-down
    for (const auto& [original, r, kind, index] : ops) {
      if (phase == 0 && kind == kBackwardDown && r == 0) phase = 1;
      if (phase == 1) {
        if (kind == kForwardDown && index == problem_.microbatches - 1) phase = 2;
        continue;
      }
      int& slot = slots_[r][kind][index];
      for (int candidate = earliest_slot(r, kind, index); candidate < slot; ++candidate) {
        if (occupied[r][candidate]) continue;
        const int was = slot;
        slot = candidate;
        if (peak_bytes(r) <= cap[r]) {
          occupied[r][was] = 0;
          occupied[r][candidate] = 1;
          break;
        }
        slot = was;
      }
    }
  }

  // Ws re-placed per chunk (the up chunk's first: its B came first), ops in slot order.
  Order order() const {
    Order order;
    order.ranks.resize(ranks_);
    for (int r = 0; r < ranks_; ++r) {
      const int down = r;
      const int up = 2 * ranks_ - 1 - r;
      RankSlots slots = slots_[r];
      slots[kWeight].clear();
      std::array<int, 2> backwards_done = {0, 0};  // up, down
      std::array<int, 2> weights_done = {0, 0};
      auto next_weight = [&](std::vector<OpRef>& refs) {
        for (int c = 0; c < 2; ++c) {
          if (weights_done[c] < backwards_done[c]) {
            refs.push_back({Op::kBackwardWeight, c == 0 ? up : down, weights_done[c]++});
            return true;
          }
        }
        return false;
      };
      auto& refs = order.ranks[r];
      int slot = 0;
      for (const Slotted& op : by_slot(slots)) {
        for (; slot < op.slot && next_weight(refs); ++slot) {
        }
        slot = op.slot + 1;
        refs.push_back(ref_of(r, op.kind, op.index));
        if (op.kind == kBackwardUp) ++backwards_done[0];
        if (op.kind == kBackwardDown) ++backwards_done[1];
      }
      while (next_weight(refs)) {
      }
    }
    return order;
  }

 private:
  OpRef ref_of(int r, int kind, int mb) const {
    const int down = r;
    const int up = 2 * ranks_ - 1 - r;
    switch (kind) {
      case kForwardDown:
        return {Op::kForward, down, mb};
      case kForwardUp:
        return {Op::kForward, up, mb};
      case kBackwardUp:
        return {Op::kBackwardInput, up, mb};
      default:
        return {Op::kBackwardInput, down, mb};
    }
  }

  // One past the latest slot of the op's dependencies (docs/semantics.md, on the V-shape): the
  // previous rank down, the next rank up, the same rank's previous kind for the same microbatch,
  // the same kind's previous op; for a W, the B it follows.
  int earliest_slot(int r, int kind, int index) const {
    const RankSlots& own = slots_[r];
    int dep = -1;
    if (kind == kWeight) {
      std::vector<int> backwards = own[kBackwardUp];
      backwards.insert(backwards.end(), own[kBackwardDown].begin(), own[kBackwardDown].end());
      std::nth_element(backwards.begin(), backwards.begin() + index, backwards.end());
      dep = backwards[index];
    } else {
      if ((kind == kForwardDown || kind == kBackwardUp) && r > 0) {
        dep = std::max(dep, slots_[r - 1][kind][index]);
      }
      if ((kind == kForwardUp || kind == kBackwardDown) && r + 1 < ranks_) {
        dep = std::max(dep, slots_[r + 1][kind][index]);
      }
      if (kind > kForwardDown) dep = std::max(dep, own[kind - 1][index]);
    }
    if (index > 0) dep = std::max(dep, own[kind][index - 1]);
    return dep + 1;
  }

  // Peak live bytes of rank r in slot order; the k-th W releases G of the k-th B.
  int64_t peak_bytes(int r) const {
    const int down = r;
    const int up = 2 * ranks_ - 1 - r;
    std::deque<int> awaiting_weight;
    int64_t live = 0;
    int64_t peak = 0;
    for (const Slotted& op : by_slot(slots_[r])) {
      const int stage = op.kind == kForwardDown || op.kind == kBackwardDown ? down : up;
      const StageCosts& costs = problem_.stages[stage];
      switch (op.kind) {
        case kForwardDown:
        case kForwardUp:
          live += costs.activation_bytes;
          break;
        case kBackwardUp:
        case kBackwardDown:
          live -= costs.activation_bytes - costs.weight_grad_bytes;
          awaiting_weight.push_back(stage);
          break;
        default:
          if (!awaiting_weight.empty()) {
            live -= problem_.stages[awaiting_weight.front()].weight_grad_bytes;
            awaiting_weight.pop_front();
          }
          break;
      }
      peak = std::max(peak, live);
    }
    return peak;
  }

  const Problem& problem_;
  int ranks_;
  std::vector<RankSlots> slots_;
};

}  // namespace

Order vshape_pattern_order(const Problem& problem, VShapePattern pattern, bool squeeze) {
  Pattern slots(problem, pattern);
  if (squeeze) slots.squeeze();
  return slots.order();
}

}  // namespace optpipe

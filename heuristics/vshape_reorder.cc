#include "heuristics/vshape_reorder.h"

#include <algorithm>
#include <array>
#include <climits>
#include <tuple>
#include <vector>

namespace optpipe {

namespace {

// Types of a rank's ops, in slot lists: 0 F of the down chunk, 1 F of the up chunk, 2 B of the up
// chunk, 3 B of the down chunk; 4 W (one list, or the up chunk's Ws when split), 5 the down
// chunk's Ws when split. B of the up chunk flows down the ranks like the down chunk's F.
using Lists = std::vector<std::vector<int>>;  // [type][i]: slot of the type's i-th op

constexpr int kUnused = INT_MIN;

int last_slot(const Lists& lists) {
  int last = -1;
  for (const std::vector<int>& of_type : lists) {
    if (!of_type.empty()) last = std::max(last, of_type.back());
  }
  return last;
}

// The type whose next op (after heads[type]) has the smallest slot, lowest type on ties; -1 when
// every list is done.
int next_type(const Lists& lists, const std::vector<size_t>& heads, int types, int* slot) {
  int best = -1;
  *slot = INT_MAX;
  for (int t = 0; t < types; ++t) {
    if (heads[t] < lists[t].size() && lists[t][heads[t]] < *slot) {
      *slot = lists[t][heads[t]];
      best = t;
    }
  }
  return best;
}

// Ws into the free slots, each after the Bs it follows (split: a list per chunk, the up chunk's
// first), the rest after the last slot.
Lists with_weights(Lists lists, bool split) {
  lists.resize(4);
  const int bound = last_slot(lists);
  lists.resize(split ? 6 : 5);
  std::array<int, 2> waiting = {0, 0};
  std::vector<size_t> heads(4, 0);
  for (int i = 0; i <= bound; ++i) {
    int slot = 0;
    const int t = next_type(lists, heads, 4, &slot);
    if (slot == i) {
      ++heads[t];
      if (t >= 2) ++waiting[split ? t - 2 : 0];
      continue;
    }
    for (int w = 0; w < 2; ++w) {
      if (waiting[w] > 0) {
        lists[4 + w].push_back(i);
        --waiting[w];
        break;
      }
    }
  }
  int slot = bound;
  for (int w = 0; w < 2; ++w) {
    for (; waiting[w] > 0; --waiting[w]) lists[4 + w].push_back(++slot);
  }
  return lists;
}

// Peak chunk activations of a rank: F of either chunk holds one until its W. Without W lists, a W
// takes each free slot while a B awaits one.
int peak_units(const Lists& lists) {
  static constexpr int kUnits[] = {1, 1, 0, 0, -1};
  const int types = static_cast<int>(std::min<size_t>(lists.size(), 5));
  const bool explicit_w = types > 4;
  const int bound = last_slot(lists);
  std::vector<size_t> heads(types, 0);
  int awaiting = 0;
  int live = 0;
  int peak = 0;
  for (int i = 0; i <= bound; ++i) {
    int slot = 0;
    const int t = next_type(lists, heads, types, &slot);
    if (slot == i) {
      ++heads[t];
      live += kUnits[t];
      if (t == 2 || t == 3) ++awaiting;
    } else if (!explicit_w && awaiting > 0) {
      --live;
      --awaiting;
    }
    peak = std::max(peak, live);
  }
  return peak;
}

struct SlotOp {
  int slot;
  int rank;
  int type;
  int index;
  bool operator<(const SlotOp& o) const {
    return std::tie(slot, rank, type, index) < std::tie(o.slot, o.rank, o.type, o.index);
  }
};

std::vector<SlotOp> in_slot_order(const std::vector<Lists>& ranks) {
  std::vector<SlotOp> ops;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (int t = 0; t < static_cast<int>(ranks[r].size()); ++t) {
      for (int i = 0; i < static_cast<int>(ranks[r][t].size()); ++i) {
        ops.push_back({ranks[r][t][i], r, t, i});
      }
    }
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

// Every op as early as its dependencies and its rank's previous op allow, one slot each (the
// paper's squeeze): the new slot lists. nullopt where a dependency comes later in slot order.
std::optional<std::vector<Lists>> squeezed(const std::vector<Lists>& ranks) {
  const int count = static_cast<int>(ranks.size());
  std::vector<Lists> start(count);
  for (int r = 0; r < count; ++r) {
    start[r].resize(ranks[r].size());
    for (size_t t = 0; t < ranks[r].size(); ++t) start[r][t].assign(ranks[r][t].size(), kUnused);
  }
  std::vector<int> rank_free(count, 0);
  for (const SlotOp& op : in_slot_order(ranks)) {
    int ready = rank_free[op.rank];
    auto after = [&](int r, int t, int i) {
      if (start[r][t][i] == kUnused) return false;
      ready = std::max(ready, start[r][t][i] + 1);
      return true;
    };
    const int t = op.type;
    bool ok = true;
    if ((t == 0 || t == 2) && op.rank > 0) ok &= after(op.rank - 1, t, op.index);
    if ((t == 1 || t == 3) && op.rank + 1 < count) ok &= after(op.rank + 1, t, op.index);
    if (t > 0 && t < 4) ok &= after(op.rank, t - 1, op.index);
    if (op.index > 0) ok &= after(op.rank, t, op.index - 1);
    if (!ok) return std::nullopt;
    start[op.rank][t][op.index] = ready;
    rank_free[op.rank] = ready + 1;
  }
  return start;
}

// One greedy pass: in slot order, each warm-up op (with `move_warm_up`) and each cool-down op goes
// to the earliest free slot after its dependencies where the rank's peak stays within the largest
// peak of any rank before the pass.
std::optional<std::vector<Lists>> reorder(std::vector<Lists> ranks, bool with_w, int microbatches) {
  if (with_w) {
    for (Lists& lists : ranks) lists = with_weights(std::move(lists), false);
  }
  int cap = 0;
  for (const Lists& lists : ranks) cap = std::max(cap, peak_units(lists));
  std::vector<std::vector<uint8_t>> occupied;
  for (const Lists& lists : ranks) occupied.emplace_back(last_slot(lists) + 1, 0);
  const int count = static_cast<int>(ranks.size());
  int phase = 0;  // 0 warm-up, 1 steady, 2 cool-down
  for (const SlotOp& op : in_slot_order(ranks)) {
    const int r = op.rank;
    const int t = op.type;
    const int i = op.index;
    if (t == 3 && r == 0 && phase == 0) phase = 1;
    const bool keep = phase == 1 || (phase == 0 && !with_w);
    if (phase == 1 && t == 0 && i == microbatches - 1) phase = 2;
    if (keep) {
      occupied[r][op.slot] = 1;
      continue;
    }
    Lists& own = ranks[r];
    int deps = -1;
    if ((t == 0 || t == 2) && r > 0) deps = std::max(deps, ranks[r - 1][t][i]);
    if ((t == 1 || t == 3) && r + 1 < count) deps = std::max(deps, ranks[r + 1][t][i]);
    if (t > 0 && t < 4) deps = std::max(deps, own[t - 1][i]);
    if (t == 4) {
      std::vector<int> backwards = own[2];
      backwards.insert(backwards.end(), own[3].begin(), own[3].end());
      std::nth_element(backwards.begin(), backwards.begin() + i, backwards.end());
      deps = std::max(deps, backwards[i]);
    }
    if (i > 0) deps = std::max(deps, own[t][i - 1]);
    if (++deps > op.slot) return std::nullopt;
    int& slot = own[t][i];
    slot = op.slot;
    for (int candidate = deps; candidate < op.slot; ++candidate) {
      if (occupied[r][candidate]) continue;
      slot = candidate;
      if (peak_units(own) <= cap) break;
      slot = op.slot;
    }
    occupied[r][slot] = 1;
  }
  if (!with_w) {
    for (Lists& lists : ranks) lists = with_weights(std::move(lists), false);
  }
  return squeezed(ranks);
}

}  // namespace

std::optional<Order> vshape_reordered_pattern_order(const Problem& problem,
                                                    VShapePattern pattern) {
  if (problem.placement != PlacementKind::kVShape || problem.chunks_per_rank != 2) {
    return std::nullopt;
  }
  const int ranks = problem.ranks;
  const int m = problem.microbatches;
  std::vector<Lists> slots(ranks, Lists(4));
  for (int r = 0; r < ranks; ++r) {
    const std::array<int, 4> first = vshape_pattern_first_slots(pattern, ranks, r);
    for (int t = 0; t < 4; ++t) {
      for (int j = 0; j < m; ++j) slots[r][t].push_back(first[t] + 6 * j);
    }
  }
  std::optional<std::vector<Lists>> pass = reorder(std::move(slots), true, m);
  if (!pass) return std::nullopt;
  for (Lists& lists : *pass) lists.resize(4);
  pass = reorder(std::move(*pass), false, m);
  if (!pass) return std::nullopt;
  Order order;
  order.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    const Lists lists = with_weights(std::move((*pass)[r]), true);
    const int down = r;
    const int up = 2 * ranks - 1 - r;
    const std::array<OpRef, 6> kinds = {
        OpRef{Op::kForward, down, 0},       OpRef{Op::kForward, up, 0},
        OpRef{Op::kBackwardInput, up, 0},   OpRef{Op::kBackwardInput, down, 0},
        OpRef{Op::kBackwardWeight, up, 0},  OpRef{Op::kBackwardWeight, down, 0}};
    std::vector<SlotOp> ops = in_slot_order({lists});
    for (const SlotOp& op : ops) {
      OpRef ref = kinds[op.type];
      ref.microbatch = op.index;
      order.ranks[r].push_back(ref);
    }
  }
  return order;
}

}  // namespace optpipe

#include "solver/milp_segment.h"

#include <algorithm>

#include "model/dependencies.h"
#include "model/op_table.h"

namespace optpipe {

size_t Segment::size() const {
  size_t n = 0;
  for (size_t r = 0; r < begin.size(); ++r) n += end[r] - begin[r];
  return n;
}

Segment whole_order(const Order& order) {
  Segment segment;
  for (const auto& refs : order.ranks) {
    segment.begin.push_back(0);
    segment.end.push_back(refs.size());
  }
  return segment;
}

Segment microbatch_band(const Problem& problem, const Order& order, int first_mb, int count) {
  const int ranks = static_cast<int>(order.ranks.size());
  Segment segment;
  segment.begin.assign(ranks, 0);
  segment.end.assign(ranks, 0);
  OpTable<int> rank_of(problem, -1);
  OpTable<size_t> position(problem, 0);
  for (int r = 0; r < ranks; ++r) {
    const auto& refs = order.ranks[r];
    size_t lo = refs.size(), hi = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      rank_of[refs[i]] = r;
      position[refs[i]] = i;
      if (refs[i].microbatch >= first_mb && refs[i].microbatch < first_mb + count) {
        lo = std::min(lo, i);
        hi = std::max(hi, i + 1);
      }
    }
    segment.begin[r] = lo < hi ? lo : refs.size();
    segment.end[r] = lo < hi ? hi : refs.size();
  }
  auto split = [](int, int) { return BackwardForm::kSplit; };
  auto offloaded = [&](int s, int j) { return rank_of[{Op::kReload, s, j}] >= 0; };
  // Widen to a fixpoint: a prefix op's predecessors must be in prefixes, a segment op's in
  // prefixes or segments.
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < ranks; ++r) {
      const auto& refs = order.ranks[r];
      for (size_t i = 0; i < refs.size(); ++i) {
        const bool in_prefix = i < segment.begin[r];
        const bool in_segment = !in_prefix && i < segment.end[r];
        if (!in_prefix && !in_segment) continue;
        for (const Predecessor& p : predecessors(problem, refs[i], split, offloaded)) {
          const int pr = rank_of[p.pred];
          if (pr < 0) continue;
          const size_t pi = position[p.pred];
          if (in_prefix && pi >= segment.begin[pr]) {
            if (segment.begin[r] == segment.end[r]) segment.end[r] = i + 1;  // was empty
            segment.begin[r] = i;  // this op and those after it join the segment
            changed = true;
            break;
          }
          if (in_segment && pi >= segment.end[pr]) {
            if (segment.begin[pr] == segment.end[pr]) segment.begin[pr] = pi;  // was empty
            segment.end[pr] = pi + 1;
            changed = true;
          }
        }
      }
    }
  }
  return segment;
}

}  // namespace optpipe

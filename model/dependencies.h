// The dependencies of docs/design.md §3, shared by the simulator, the validator and the solver.
#pragma once

#include <array>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// An op must start at least `lag` after `pred` ends.
struct Predecessor {
  OpRef pred;
  double lag;
};

// Which backward op a schedule uses for (stage, microbatch): B (then W) or the fused BW.
enum class BackwardForm { kSplit, kFused };

// At most three: the upstream op and, for a backward, its reload and its recompute (a valid
// schedule has at most one of those two).
struct Predecessors {
  std::array<Predecessor, 3> items;
  int count = 0;
  void add(const OpRef& pred, double lag) { items[count++] = {pred, lag}; }
  const Predecessor* begin() const { return items.data(); }
  const Predecessor* end() const { return items.data() + count; }
};

// For callers whose schedules never recompute.
struct NeverRecomputed {
  bool operator()(int, int) const { return false; }
};

// Predecessors of `ref` among compute ops and transfers. `backward_form(stage, mb)` says whether
// the downstream stage ran B or BW; `offloaded(stage, mb)` whether the activation went to host;
// `recomputed(stage, mb)` whether the schedule runs R for it before its backward.
template <typename BackwardFormFn, typename OffloadedFn, typename RecomputedFn = NeverRecomputed>
Predecessors predecessors(const Problem& problem, const OpRef& ref, BackwardFormFn backward_form,
                          OffloadedFn offloaded, RecomputedFn recomputed = {}) {
  const int s = ref.stage;
  const int j = ref.microbatch;
  const int last = problem.num_stages() - 1;
  Predecessors preds;
  switch (ref.op) {
    case Op::kForward:
      if (s > 0) preds.add({Op::kForward, s - 1, j}, problem.p2p(s - 1, s));
      break;
    case Op::kBackwardInput:
    case Op::kBackward:
      if (s == last) {
        preds.add({Op::kForward, s, j}, 0.0);
      } else {
        const Op upstream =
            backward_form(s + 1, j) == BackwardForm::kFused ? Op::kBackward : Op::kBackwardInput;
        preds.add({upstream, s + 1, j}, problem.p2p(s + 1, s));
      }
      if (offloaded(s, j)) preds.add({Op::kReload, s, j}, 0.0);
      if (recomputed(s, j)) preds.add({Op::kRecompute, s, j}, 0.0);
      break;
    case Op::kBackwardWeight:
      preds.add({Op::kBackwardInput, s, j}, 0.0);
      break;
    case Op::kOffload:
    case Op::kRecompute:
      preds.add({Op::kForward, s, j}, 0.0);
      break;
    case Op::kReload:
      preds.add({Op::kOffload, s, j}, 0.0);
      break;
  }
  return preds;
}

// Duration of an op on its stage (transfers: bytes over the link's bandwidth).
double duration(const Problem& problem, const OpRef& ref);
// Bytes a transfer moves (0 for compute ops).
int64_t transfer_bytes(const Problem& problem, const OpRef& ref);

// Copy channel a transfer of `rank` runs on: ranks in one link group share channels; `duplex`
// gives each group one channel per direction, `shared` one for both.
int channel_of(const Problem& problem, int rank, Op transfer);
int num_channels(const Problem& problem);

}  // namespace optpipe

// Offload decided while list scheduling (ListPolicy::offload, AdaOffload in docs/methods.md).
// An activation goes to host right after its F when enough older microbatches of its stage
// still await their B and its copy channel is free soon enough; it comes back once its
// microbatch is within a lookahead of the stage's next B. The ledger times every transfer on its
// channel as the simulator will (issued after the compute op listed before it, served in order
// per channel) and tells the scheduler what memory that frees and what it will need again.
//
// Why decide during scheduling rather than after: an order fitted afterwards keeps the density
// it was built with, so when the link cannot carry what that density needs, nothing fits. Here
// an F is admitted only where the memory the offloads actually freed by its start allows it, so
// the order slows down exactly as far as the link requires.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/op_table.h"
#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct ListOffloadPolicy {
  // An F's activation is offloaded when at least this many older microbatches of its stage
  // still await their B (its lifespan is then several steady-state cycles).
  int min_awaiting = 2;
  // A reload is issued once its microbatch is at most this many places behind the stage's next B
  // (1: as soon as it is the next).
  int reload_lookahead = 1;
  // An offload waits at most this long for its channel after its F ends, else the activation
  // stays on the device: a busy link is not worth queueing on.
  double max_channel_wait = 0;
};

// A transfer the ledger scheduled: its action and when it ends.
struct LedgerTransfer {
  OpRef ref;
  double end = 0;
};

class OffloadLedger {
 public:
  OffloadLedger(const Problem& problem, const ListOffloadPolicy& policy);

  // F `forward` of `rank` (local stage `local`) was listed and ends at `forward_end`, with
  // `awaiting` older microbatches of its stage before their B. Returns its OFFLOAD, to be listed
  // right after the F, when the activation goes to host.
  std::optional<LedgerTransfer> offload_after_forward(int rank, size_t local, const OpRef& forward,
                                                      double forward_end, int awaiting);

  // RELOADs of `rank` that are due now that its local stages' next backwards are
  // `next_backward`, issued after its last compute op, which ends at `issue_time`. Each
  // allocates O(s) on the rank from then on.
  std::vector<LedgerTransfer> due_reloads(int rank, const std::vector<int>& next_backward,
                                          double issue_time);

  // Bytes of `rank`'s offloads the scheduler may take as freed for an allocation at `time` that
  // lasts: those complete by then, and those already reloaded (their reload gives the bytes back,
  // so over the allocation's lifetime the activation never holds more than if it had stayed).
  int64_t released_by(int rank, double time) const;

  // Bytes an F of `microbatch` on `rank` must leave free for the reloads of older microbatches
  // still to be issued, beyond what the backwards before them release: taking them would starve
  // a B of its activation. (Fs of older microbatches must run first, so they are not held back.)
  int64_t reserve(int rank, const std::vector<int>& next_backward, int microbatch) const;

  // When the activation of (stage, mb) is back on the device: 0 if it never left, infinity
  // while its reload is not issued.
  double back_on_device(int stage, int mb) const { return back_[{Op::kForward, stage, mb}]; }

 private:
  const Problem& problem_;
  ListOffloadPolicy policy_;
  std::vector<double> channel_free_;
  OpTable<double> offload_end_;
  OpTable<double> back_;
  std::vector<std::vector<int>> stages_;  // per rank, model order
  // Per rank and local stage: microbatches on host whose reload is not issued yet, in B order.
  std::vector<std::vector<std::deque<int>>> away_;
  // Per rank: offload ends (non-decreasing: one channel, F order) and cumulative bytes.
  std::vector<std::vector<double>> release_times_;
  std::vector<std::vector<int64_t>> released_total_;
  // Per rank: offloads (end, bytes) still running when their reload was issued.
  std::vector<std::vector<std::pair<double, int64_t>>> reloaded_early_;
};

}  // namespace optpipe

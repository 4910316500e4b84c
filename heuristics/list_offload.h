// Offload decided while list scheduling (ListPolicy::offload, AdaOffload in docs/methods.md).
// When the next F would not fit, the activations on the rank whose B is furthest off go to host
// (enough older microbatches of their stage must still await their B, and the copy channel must
// be free soon enough); one comes back once waiting for the rank's next decision would bring it
// back after its B could start, or once its microbatch is near its stage's next B, where memory
// allows it (or its B is the next one). The ledger times every transfer on its channel as the
// simulator will (issued after the compute op listed before it, served in order per channel) and
// tells the scheduler what memory that frees and what it will need again. An F that fits only once
// an offload under way ends waits for it, as the memory fence of simulate_within_budget has it.
//
// Why decide during scheduling rather than after: an order fitted afterwards keeps the density
// it was built with, so when the link cannot carry what that density needs, nothing fits. Here
// an F is admitted only where the memory the offloads actually freed by its start allows it, so
// the order slows down exactly as far as the link requires.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "model/op_table.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct ListOffloadPolicy {
  // An F's activation is offloaded when at least this many older microbatches of its stage
  // still await their B (its lifespan is then several steady-state cycles).
  int min_awaiting = 2;
  // A reload is issued once deferring it by this many of the rank's ops (each as long as its
  // stage's longer of T_F and T_B) would bring the activation back after its B's earliest start,
  // or once its microbatch is at most this many places behind its stage's next B and the rank's
  // later stages have run its B.
  int reload_lookahead = 1;
  // An offload waits at most this long for its channel after the compute op it is listed after
  // ends, else the activation stays on the device: a busy link is not worth queueing on.
  double max_channel_wait = 0;
  // Every activation the rules above let go goes right after its F, not only when the rank's
  // next F would not fit: memory kept free admits more microbatches, which long pipelines need
  // to stay busy where each round trip outlasts many forwards.
  bool eager = false;
};

// A transfer the ledger scheduled: its action and when it ends.
struct LedgerTransfer {
  OpRef ref;
  double end = 0;
};

// Whether the B of `microbatch` on a rank's local stage `local` is at most `places` behind that
// stage's next B (1: it is the next) and its Bs on the rank's later local stages have run, given
// their next backwards `next_backward`.
bool backward_is_near(const std::vector<int>& next_backward, size_t local, int microbatch,
                      int places);

class OffloadLedger {
 public:
  OffloadLedger(const Problem& problem, const ListOffloadPolicy& policy);

  // The earliest time the B of (stage, microbatch) can start, as the scheduler knows it now.
  using BackwardReady = std::function<double(int stage, int microbatch)>;

  // The activation of F `forward` of `rank` (local stage `local`), which has run, with
  // `awaiting` older microbatches of its stage before their B, may go to host after the compute
  // op that ends at `issue_time`. Returns its OFFLOAD, to be listed after that op, when it goes.
  std::optional<LedgerTransfer> offload_activation(int rank, size_t local, const OpRef& forward,
                                                   double issue_time, int awaiting);

  // Whether the scheduler lets the activation of this F come back now (memory allows it).
  using MayReload = std::function<bool(const OpRef& forward)>;

  // RELOADs of `rank` due at its decision at `decision_time` that `may_reload` allows, issued
  // after its last compute op, which ends at `issue_time`; per local stage in B order. Each
  // allocates O(s) on the rank from then on.
  std::vector<LedgerTransfer> due_reloads(int rank, const std::vector<int>& next_backward,
                                          double issue_time, double decision_time,
                                          const BackwardReady& backward_ready,
                                          const MayReload& may_reload);
  // When the next reload of `rank` becomes due (infinity when none is away): a rank with nothing
  // to run decides again then.
  double next_reload_due(int rank, const std::vector<int>& next_backward,
                         const BackwardReady& backward_ready) const;

  // Bytes of `rank`'s offloads the scheduler may take as freed for an allocation at `time` that
  // lasts: those complete by then, and those already reloaded (their reload gives the bytes back,
  // so over the allocation's lifetime the activation never holds more than if it had stayed).
  int64_t released_by(int rank, double time) const;
  // The first moment from `time` on by which `rank`'s offloads have released `bytes` (infinity
  // if they never do): where the memory fence (timing/simulator.h) starts an allocation.
  double when_released(int rank, double time, int64_t bytes) const;
  // When the next offload of `rank` after `time` completes (infinity if none is under way).
  double next_release_after(int rank, double time) const;

  // Bytes an F of `microbatch` on `rank` must leave free for the reloads of older microbatches
  // still to be issued, beyond what the backwards before them release (those of its stage up to
  // the lookahead, and those of the same and older microbatches on the rank's later stages, given
  // its local stages' next backwards `next_backward`): taking them would starve a B of its
  // activation. (Fs of older microbatches must run first, so they are not held back.)
  int64_t reserve(int rank, const std::vector<int>& next_backward, int microbatch) const;

  // When the activation of (stage, mb) is back on the device: 0 if it never left, infinity
  // while its reload is not issued.
  double back_on_device(int stage, int mb) const { return back_[{Op::kForward, stage, mb}]; }

 private:
  // When the first reload away on `rank`'s local stage `local` becomes due.
  double reload_due_time(int rank, size_t local, const std::vector<int>& next_backward,
                         const BackwardReady& backward_ready) const;

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

// The MILP over a segment of a schedule (docs/design.md §6, docs/solver.md): start times of the
// segment's F, B and W ops, one ordering binary per pair of same-rank ops that dependencies,
// microbatch order (FIFO per stage and op type) and start-time windows leave open, memory at every
// allocation within the budget, and the makespan. When it decides activations, each one gets an
// offload and a recompute binary (at most one set), with the transfers' start times on the copy
// channels and R run right before its B.
#pragma once

#include <vector>

#include "model/op_table.h"
#include "model/problem.h"
#include "model/schedule.h"
#include "solver/linear_model.h"
#include "solver/milp_segment.h"

namespace optpipe {

enum class SegmentObjective {
  kMakespan,          // min C: the whole order is the segment; the bound is a makespan bound
  kMakespanThenRanks  // min R*C + sum of per-rank segment ends: a window inside a larger order
};

enum class ActivationChoice {
  kAsGiven,  // every activation kept: the order must have no transfers and no R
  kDecide    // keep, offload or recompute per activation (whole orders only)
};

// `order` without its transfers and R ops: what the order model reorders.
Order compute_order(const Order& order);

// `schedule` at its own times with each fused BW as B then W: a `current` for the order model.
// Re-simulating order_of(schedule) instead may move transfers (they are issued where they are
// listed), so a schedule whose F waited for an offload could come back over budget.
Schedule split_backward(const Problem& problem, const Schedule& schedule);

class OrderModel {
 public:
  // `order` has split backwards and no transfers or R; `current` is the simulated schedule it
  // came from (with the transfers and R, if any), which supplies the prefix's fixed times and the
  // MIP start.
  OrderModel(const Problem& problem, const Order& order, const Schedule& current,
             const Segment& segment, SegmentObjective objective,
             ActivationChoice activations = ActivationChoice::kAsGiven);

  const LinearModel& model() const { return model_; }
  // Column values that describe `current` (a feasible solution).
  const std::vector<double>& start_solution() const { return start_; }
  // The order a solution describes: each rank's segment sorted by start time, with the R,
  // offloads and reloads the solution chose.
  Order decode(const std::vector<double>& solution) const;
  // The solution's start of every action it places (whole orders only), for simulate()'s
  // not_before: ops may wait there for an offload to free memory, which an order re-timed as
  // soon as possible cannot express.
  OpTable<double> release_times(const std::vector<double>& solution) const;
  int makespan_column() const { return makespan_; }
  // Whether some activation may be recomputed: the model then runs R right before its B, a
  // restriction, so its bound holds for the model only.
  bool restricts_recompute() const { return restricts_recompute_; }

 private:
  struct SegmentOp {
    int rank;
    OpRef ref;
    double duration;
    double earliest = 0;
    double latest = 0;
    int column = -1;
    int local = -1;       // index among its rank's segment ops
    int activation = -1;  // F and B ops when activations are decided
  };

  // One (stage, microbatch) whose keep / offload / recompute choice the model makes.
  struct Activation {
    int forward = -1;    // op index of F
    int backward = -1;   // op index of B
    int offload = -1;    // binary column, -1 when offload cannot pay off
    int recompute = -1;  // binary column, -1 when the stage cannot recompute
    int d2h = -1;        // start column of the offload (with `offload`)
    int h2d = -1;        // start column of the reload
  };

  // A point in time as column + offset (an R starts T_R before its B).
  struct EventTime {
    int column;
    double offset = 0;
  };

  void collect(const Order& order, const Schedule& current);
  void add_edges();
  void compute_windows(double horizon);
  void add_start_columns();
  void add_pair_rows(const Order& order);
  void add_sequence_row(int first, int second, int binary, bool negated);
  void add_pairwise_order(int rank);
  void add_memory_rows();
  void add_objective(SegmentObjective objective);

  // Activation choices (solver/order_model_activations.cc).
  void add_activation_columns();
  void add_lead_rows();
  void add_channel_rows();
  void add_reload_memory_rows();
  // Subtracts from `row` what the other activations do not hold at `event`: offloaded and not
  // yet reloaded, or recomputed and not yet rebuilt. `event_op` is the compute op at the event,
  // -1 for a reload.
  void add_savings(Row& row, int rank, EventTime event, int event_op, int own_activation);
  // A binary with its MIP-start value.
  int add_binary(const std::string& name, bool start_value);
  // An event's time in the MIP start (the seed).
  double seed_time(EventTime event) const { return start_[event.column] + event.offset; }
  // R's duration when `op` is a B that may be recomputed: the rank is busy that long before it.
  double lead(int op) const;
  int lead_column(int op) const;
  void insert_activation_ops(const std::vector<double>& solution, int rank,
                             std::vector<OpRef>& refs) const;

  // x runs before y on their rank: a constant, or a pair binary (its complement if `negated`).
  OrderLiteral before(int x, int y) const;
  // row + constant <= limit, relaxed when the binary `relax_column` is 0 (-1: never).
  void add_memory_row(Row row, double constant, int64_t limit, int relax_column);

  const Problem& problem_;
  const Segment& segment_;
  Order order_;
  OpTable<double> seed_start_;  // each action's start in `current` (NaN: not in it)
  std::vector<SegmentOp> ops_;
  std::vector<std::vector<std::pair<int, double>>> successors_;  // (op, lag) within the segment
  std::vector<int> topological_;
  std::vector<std::vector<uint64_t>> reach_;  // transitive closure bitsets
  std::vector<std::vector<int>> ops_of_rank_;
  std::vector<double> rank_free_;       // end of the rank's prefix
  std::vector<int64_t> live_at_start_;  // live activation bytes at the end of the prefix
  std::vector<double> current_start_;   // per segment op, in `current`
  // Per rank, for local indices a < b: kFirstBefore, kSecondBefore, or the column of a binary
  // that is 1 when a runs before b.
  static constexpr int kFirstBefore = -1;
  static constexpr int kSecondBefore = -2;
  std::vector<std::vector<int>> pair_state_;
  int pair(int rank, int a, int b) const;  // a < b, local indices
  bool reaches(int x, int y) const;        // y depends on x, directly or not
  // Live-byte change when an op runs (allocation at F, releases at B and W): docs/semantics.md.
  int64_t memory_delta(const OpRef& ref) const;
  LinearModel model_;
  std::vector<double> start_;
  int makespan_ = -1;
  std::vector<Activation> activations_;
  bool restricts_recompute_ = false;
};

}  // namespace optpipe

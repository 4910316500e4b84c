// The MILP over a segment of a schedule (DESIGN.md §6, docs/solver.md): start times of the
// segment's F, B and W ops, one ordering binary per pair of same-rank ops that dependencies,
// microbatch order (FIFO per stage and op type) and start-time windows leave open, memory at every
// F start within the budget, and the makespan.
#pragma once

#include <vector>

#include "compiler/problem.h"
#include "compiler/schedule.h"
#include "solver/linear_model.h"
#include "solver/segment.h"

namespace optpipe {

enum class SegmentObjective {
  kMakespan,          // min C: the whole order is the segment; the bound is a makespan bound
  kMakespanThenRanks  // min R*C + sum of per-rank segment ends: a window inside a larger order
};

class OrderModel {
 public:
  // `order` has split backwards and no transfers; `current` is its simulated schedule, which
  // supplies the prefix's fixed times and the MIP start.
  OrderModel(const Problem& problem, const Order& order, const Schedule& current,
             const Segment& segment, SegmentObjective objective);

  const LinearModel& model() const { return model_; }
  // Column values that describe `current` (a feasible solution).
  const std::vector<double>& start_solution() const { return start_; }
  // The order a solution describes: each rank's segment sorted by start time.
  Order decode(const std::vector<double>& solution) const;
  int makespan_column() const { return makespan_; }

 private:
  struct SegmentOp {
    int rank;
    OpRef ref;
    double duration;
    double earliest = 0;
    double latest = 0;
    int column = -1;
    int local = -1;  // index among its rank's segment ops
  };

  void collect(const Order& order, const Schedule& current);
  void add_edges();
  void compute_windows(double horizon);
  void add_start_columns();
  void add_pair_rows(const Order& order);
  void add_memory_rows();
  void add_objective(SegmentObjective objective);

  const Problem& problem_;
  const Segment& segment_;
  Order order_;
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
  LinearModel model_;
  std::vector<double> start_;
  int makespan_ = -1;
};

}  // namespace optpipe

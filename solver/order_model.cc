#include "solver/order_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "model/dependencies.h"
#include "model/errors.h"
#include "model/op_table.h"

namespace optpipe {

namespace {

bool test_bit(const std::vector<uint64_t>& bits, int i) {
  return (bits[i / 64] >> (i % 64)) & 1;
}
void set_bit(std::vector<uint64_t>& bits, int i) {
  bits[i / 64] |= uint64_t{1} << (i % 64);
}

std::string op_name(const OpRef& ref) {
  return fmt::format("{}_{}_{}", to_string(ref.op), ref.stage, ref.microbatch);
}

}  // namespace

int64_t OrderModel::memory_delta(const OpRef& ref) const {
  const StageCosts& c = problem_.stages[ref.stage];
  switch (ref.op) {
    case Op::kForward:
      return c.activation_bytes;
    case Op::kBackwardInput:
      return -(c.activation_bytes - c.weight_grad_bytes);
    case Op::kBackwardWeight:
      return -c.weight_grad_bytes;
    default:
      return 0;
  }
}

Order compute_order(const Order& order) {
  Order result;
  for (const auto& refs : order.ranks) {
    auto& kept = result.ranks.emplace_back();
    for (const OpRef& ref : refs) {
      if (!is_transfer(ref.op) && ref.op != Op::kRecompute) kept.push_back(ref);
    }
  }
  return result;
}

Schedule split_backward(const Problem& problem, const Schedule& schedule) {
  Schedule result{schedule.method, {}};
  for (const auto& actions : schedule.ranks) {
    auto& split = result.ranks.emplace_back();
    for (const Action& a : actions) {
      if (a.ref.op != Op::kBackward) {
        split.push_back(a);
        continue;
      }
      const double b_end = a.start + problem.stages[a.ref.stage].backward_input;
      split.push_back({{Op::kBackwardInput, a.ref.stage, a.ref.microbatch}, a.start, b_end});
      split.push_back({{Op::kBackwardWeight, a.ref.stage, a.ref.microbatch}, b_end, a.end});
    }
  }
  return result;
}

OrderModel::OrderModel(const Problem& problem, const Order& order, const Schedule& current,
                       const Segment& segment, SegmentObjective objective,
                       ActivationChoice activations)
    : problem_(problem), segment_(segment), order_(order), seed_start_(problem, std::nan("")) {
  collect(order, current);
  add_edges();
  double horizon = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    horizon = std::max(horizon, current_start_[i] + ops_[i].duration);
  }
  compute_windows(horizon);
  add_start_columns();
  if (activations == ActivationChoice::kDecide) add_activation_columns();
  add_pair_rows(order);
  add_memory_rows();
  if (!activations_.empty()) {
    add_lead_rows();
    add_channel_rows();
    add_reload_memory_rows();
  }
  add_objective(objective);
}

int OrderModel::pair(int rank, int a, int b) const {
  return pair_state_[rank][a * ops_of_rank_[rank].size() + b];
}

bool OrderModel::reaches(int x, int y) const {
  return test_bit(reach_[x], y);
}

OrderLiteral OrderModel::before(int x, int y) const {
  const SegmentOp& a = ops_[x];
  const SegmentOp& b = ops_[y];
  const bool x_first = a.local < b.local;
  const int state = x_first ? pair(a.rank, a.local, b.local) : pair(a.rank, b.local, a.local);
  if (state == kFirstBefore || state == kSecondBefore) {
    return {-1, false, (state == kFirstBefore) == x_first};
  }
  return {state, !x_first};  // the binary is 1 when the lower local index runs first
}

void OrderModel::collect(const Order& order, const Schedule& current) {
  OpTable<double> end(problem_, 0.0);
  for (const auto& actions : current.ranks) {
    for (const Action& a : actions) {
      seed_start_[a.ref] = a.start;
      end[a.ref] = a.end;
    }
  }
  const int ranks = problem_.ranks;
  ops_of_rank_.assign(ranks, {});
  rank_free_.assign(ranks, 0.0);
  live_at_start_.assign(ranks, 0);
  for (int r = 0; r < ranks; ++r) {
    const auto& refs = order.ranks[r];
    for (size_t i = 0; i < refs.size(); ++i) {
      if (is_transfer(refs[i].op) || refs[i].op == Op::kBackward) {
        throw Error(ErrorKind::kInternal,
                    "order model: the order must have split backwards and no "
                    "transfers");
      }
      if (i < segment_.begin[r]) {
        rank_free_[r] = std::max(rank_free_[r], end[refs[i]]);
        live_at_start_[r] += memory_delta(refs[i]);
      } else if (i < segment_.end[r]) {
        SegmentOp op{r, refs[i], duration(problem_, refs[i])};
        op.local = static_cast<int>(ops_of_rank_[r].size());
        ops_of_rank_[r].push_back(static_cast<int>(ops_.size()));
        ops_.push_back(op);
        current_start_.push_back(seed_start_[refs[i]]);
      }
    }
  }
  // Release times from prefix predecessors on other ranks.
  OpTable<int> index(problem_, -1);
  for (size_t i = 0; i < ops_.size(); ++i) index[ops_[i].ref] = static_cast<int>(i);
  auto split = [](int, int) { return BackwardForm::kSplit; };
  auto kept = [](int, int) { return false; };
  successors_.assign(ops_.size(), {});
  for (size_t i = 0; i < ops_.size(); ++i) {
    SegmentOp& op = ops_[i];
    op.earliest = rank_free_[op.rank];
    for (const Predecessor& p : predecessors(problem_, op.ref, split, kept)) {
      const int pi = index[p.pred];
      if (pi < 0) {
        op.earliest = std::max(op.earliest, end[p.pred] + p.lag);  // fixed prefix op
      } else {
        successors_[pi].push_back({static_cast<int>(i), p.lag});
      }
    }
  }
}

// Microbatch order per (op type, stage): F(s,j) before F(s,j+1), likewise B and W.
void OrderModel::add_edges() {
  std::map<std::pair<int, int>, std::vector<int>> by_kind;
  for (size_t i = 0; i < ops_.size(); ++i) {
    by_kind[{static_cast<int>(ops_[i].ref.op), ops_[i].ref.stage}].push_back(static_cast<int>(i));
  }
  for (auto& [kind, members] : by_kind) {
    std::sort(members.begin(), members.end(),
              [&](int a, int b) { return ops_[a].ref.microbatch < ops_[b].ref.microbatch; });
    for (size_t k = 1; k < members.size(); ++k)
      successors_[members[k - 1]].push_back({members[k], 0.0});
  }
  // Topological order (Kahn) and transitive closure.
  const int n = static_cast<int>(ops_.size());
  std::vector<int> indegree(n, 0);
  for (const auto& succ : successors_) {
    for (const auto& [j, lag] : succ) ++indegree[j];
  }
  std::vector<int> ready;
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    topological_.push_back(i);
    for (const auto& [j, lag] : successors_[i]) {
      if (--indegree[j] == 0) ready.push_back(j);
    }
  }
  if (static_cast<int>(topological_.size()) != n) {
    throw Error(ErrorKind::kInternal,
                "order model: dependencies and microbatch order form a cycle");
  }
  reach_.assign(n, std::vector<uint64_t>((n + 63) / 64, 0));
  for (auto it = topological_.rbegin(); it != topological_.rend(); ++it) {
    for (const auto& [j, lag] : successors_[*it]) {
      set_bit(reach_[*it], j);
      for (size_t w = 0; w < reach_[j].size(); ++w) reach_[*it][w] |= reach_[j][w];
    }
  }
}

// Earliest starts by longest path from the prefix; latest starts back from the horizon.
void OrderModel::compute_windows(double horizon) {
  for (int i : topological_) {
    for (const auto& [j, lag] : successors_[i]) {
      ops_[j].earliest = std::max(ops_[j].earliest, ops_[i].earliest + ops_[i].duration + lag);
    }
  }
  std::vector<double> tail(ops_.size(), 0.0);  // longest path from an op's end to the horizon
  for (auto it = topological_.rbegin(); it != topological_.rend(); ++it) {
    for (const auto& [j, lag] : successors_[*it]) {
      tail[*it] = std::max(tail[*it], lag + ops_[j].duration + tail[j]);
    }
    // Same-rank ops that must follow also occupy the rank before the horizon.
    double after_on_rank = 0;
    for (int k : ops_of_rank_[ops_[*it].rank]) {
      if (test_bit(reach_[*it], k)) after_on_rank += ops_[k].duration;
    }
    tail[*it] = std::max(tail[*it], after_on_rank);
    ops_[*it].latest = std::max(ops_[*it].earliest, horizon - ops_[*it].duration - tail[*it]);
  }
}

void OrderModel::add_start_columns() {
  for (size_t i = 0; i < ops_.size(); ++i) {
    SegmentOp& op = ops_[i];
    op.column = model_.add_column({op.earliest, op.latest, 0, false, "t_" + op_name(op.ref)});
    start_.push_back(current_start_[i]);
  }
  for (int i = 0; i < static_cast<int>(ops_.size()); ++i) {
    for (const auto& [j, lag] : successors_[i]) {
      model_.add_row({{{ops_[j].column, 1.0}, {ops_[i].column, -1.0}},
                      ops_[i].duration + lag,
                      kInf,
                      fmt::format("dep_{}_{}", i, j)});
    }
  }
}

// One compute op at a time per rank: each open pair gets a binary and two big-M rows with M from
// the start-time windows. An op's rank work starts lead() earlier when an R runs before it.
void OrderModel::add_pair_rows(const Order& order) {
  OpTable<int> position(problem_, 0);
  for (const auto& refs : order.ranks) {
    for (size_t i = 0; i < refs.size(); ++i) position[refs[i]] = static_cast<int>(i);
  }
  pair_state_.assign(problem_.ranks, {});
  for (int r = 0; r < problem_.ranks; ++r) {
    const auto& members = ops_of_rank_[r];
    const size_t n = members.size();
    pair_state_[r].assign(n * n, kFirstBefore);
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        const int xi = members[a];
        const int yi = members[b];
        const SegmentOp& x = ops_[xi];
        const SegmentOp& y = ops_[yi];
        int& state = pair_state_[r][a * n + b];
        if (test_bit(reach_[xi], yi) || x.latest + x.duration <= y.earliest - lead(yi)) {
          state = kFirstBefore;
          continue;
        }
        if (test_bit(reach_[yi], xi) || y.latest + y.duration <= x.earliest - lead(xi)) {
          state = kSecondBefore;
          continue;
        }
        state = add_binary(fmt::format("y_{}_{}", xi, yi), position[x.ref] < position[y.ref]);
        add_sequence_row(xi, yi, state, false);
        add_sequence_row(yi, xi, state, true);
      }
    }
    add_pairwise_order(r);
  }
}

// The rank's ops as one of the model's pairwise orders, for transitivity cuts: only where three
// of them exist and some pair is open.
void OrderModel::add_pairwise_order(int rank) {
  const auto& members = ops_of_rank_[rank];
  const int n = static_cast<int>(members.size());
  PairwiseOrder order{n, std::vector<OrderLiteral>(static_cast<size_t>(n) * n)};
  bool open = false;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      order.before[a * n + b] = before(members[a], members[b]);
      open |= !order.before[a * n + b].settled();
    }
  }
  if (n >= 3 && open) model_.orders.push_back(std::move(order));
}

// `second` starts its rank work (lead included) after `first` ends, when `binary` says `first`
// runs first (binary = 1, or 0 when `negated`); -1: always.
void OrderModel::add_sequence_row(int first, int second, int binary, bool negated) {
  const SegmentOp& x = ops_[first];
  const SegmentOp& y = ops_[second];
  Row row{{{y.column, 1.0}, {x.column, -1.0}},
          x.duration,
          kInf,
          fmt::format("seq_{}_{}", first, second)};
  if (lead_column(second) >= 0) row.terms.push_back({lead_column(second), -lead(second)});
  if (binary >= 0) {
    // Relaxed by the slack of the windows when the other op runs first.
    relax_unless(row, binary, negated, x.latest + x.duration - (y.earliest - lead(second)));
  }
  model_.add_row(std::move(row));
}

// At each F start, and at each R start (R runs right before its B): prefix bytes + what
// same-rank ops that ran before it allocated or released - what other activations hold off the
// device <= budget - static. An R-start row binds only when the activation is recomputed.
void OrderModel::add_memory_rows() {
  for (int r = 0; r < problem_.ranks; ++r) {
    const auto& members = ops_of_rank_[r];
    for (int event : members) {
      const SegmentOp& op = ops_[event];
      const bool allocates = op.ref.op == Op::kForward;
      if (!allocates && lead_column(event) < 0) continue;
      double constant = static_cast<double>(live_at_start_[r]);
      if (allocates) constant += static_cast<double>(memory_delta(op.ref));
      Row row;
      row.name = fmt::format("mem_{}", event);
      for (int other : members) {
        if (other == event) continue;
        add_literal(row, constant, static_cast<double>(memory_delta(ops_[other].ref)),
                    before(other, event));
      }
      if (!activations_.empty()) {
        add_savings(row, r, {op.column, -lead(event)}, event, op.activation);
      }
      add_memory_row(std::move(row), constant, problem_.activation_budget(r),
                     allocates ? -1 : lead_column(event));
    }
  }
}

// row + constant <= limit, relaxed when `relax_column` (a binary) is 0. Rows that can never bind
// are kept when unrelaxed: without them Clp's root LP stalled for minutes on some windows.
void OrderModel::add_memory_row(Row row, double constant, int64_t limit, int relax_column) {
  if (row.terms.empty()) return;  // fixed by the given order, which the seed shows fits
  row.upper = static_cast<double>(limit) - constant;
  if (relax_column >= 0) {
    double highest = constant;
    for (const auto& [column, coefficient] : row.terms) highest += std::max(0.0, coefficient);
    const double excess = highest - static_cast<double>(limit);
    if (excess <= 0) return;
    row.terms.push_back({relax_column, excess});
    row.upper += excess;
  }
  model_.add_row(std::move(row));
}

// C covers every op's end plus the same-rank work that must follow it.
void OrderModel::add_objective(SegmentObjective objective) {
  const int ranks = problem_.ranks;
  double current_makespan = 0;
  std::vector<double> current_rank_end(ranks, 0.0);
  for (size_t i = 0; i < ops_.size(); ++i) {
    const double end = current_start_[i] + ops_[i].duration;
    current_makespan = std::max(current_makespan, end);
    current_rank_end[ops_[i].rank] = std::max(current_rank_end[ops_[i].rank], end);
  }
  const bool windowed = objective == SegmentObjective::kMakespanThenRanks;
  makespan_ = model_.add_column({0, kInf, windowed ? static_cast<double>(ranks) : 1.0, false, "C"});
  start_.push_back(current_makespan);
  std::vector<int> rank_end(ranks, -1);
  if (windowed) {
    for (int r = 0; r < ranks; ++r) {
      rank_end[r] = model_.add_column({0, kInf, 1.0, false, fmt::format("E_{}", r)});
      start_.push_back(current_rank_end[r]);
      model_.add_row({{{makespan_, 1.0}, {rank_end[r], -1.0}}, 0, kInf, fmt::format("CE_{}", r)});
    }
  }
  for (size_t i = 0; i < ops_.size(); ++i) {
    const SegmentOp& op = ops_[i];
    double after_on_rank = 0;
    for (int k : ops_of_rank_[op.rank]) {
      if (test_bit(reach_[i], k)) after_on_rank += ops_[k].duration;
    }
    const int target = windowed ? rank_end[op.rank] : makespan_;
    model_.add_row({{{target, 1.0}, {op.column, -1.0}},
                    op.duration + after_on_rank,
                    kInf,
                    fmt::format("end_{}", i)});
  }
}

Order OrderModel::decode(const std::vector<double>& solution) const {
  Order order = order_;
  std::vector<int> topo_rank(ops_.size());
  for (size_t k = 0; k < topological_.size(); ++k) topo_rank[topological_[k]] = static_cast<int>(k);
  auto work_start = [&](int op) {
    return solution[ops_[op].column] - (is_one(solution, lead_column(op)) ? lead(op) : 0.0);
  };
  for (int r = 0; r < problem_.ranks; ++r) {
    std::vector<int> members = ops_of_rank_[r];
    std::sort(members.begin(), members.end(), [&](int a, int b) {
      const double ta = work_start(a);
      const double tb = work_start(b);
      return ta < tb || (ta == tb && topo_rank[a] < topo_rank[b]);
    });
    for (size_t k = 0; k < members.size(); ++k) {
      order.ranks[r][segment_.begin[r] + k] = ops_[members[k]].ref;
    }
    if (!activations_.empty()) insert_activation_ops(solution, r, order.ranks[r]);
  }
  return order;
}

}  // namespace optpipe

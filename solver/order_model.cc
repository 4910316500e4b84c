#include "solver/order_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "compiler/dependencies.h"
#include "compiler/errors.h"
#include "compiler/op_table.h"

namespace optpipe {

namespace {

bool test_bit(const std::vector<uint64_t>& bits, int i) {
  return (bits[i / 64] >> (i % 64)) & 1;
}
void set_bit(std::vector<uint64_t>& bits, int i) {
  bits[i / 64] |= uint64_t{1} << (i % 64);
}

// Live-byte change when an op runs (allocation at F, releases at B and W): docs/semantics.md.
int64_t memory_delta(const Problem& problem, const OpRef& ref) {
  const StageCosts& c = problem.stages[ref.stage];
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

std::string op_name(const OpRef& ref) {
  return fmt::format("{}_{}_{}", to_string(ref.op), ref.stage, ref.microbatch);
}

}  // namespace

OrderModel::OrderModel(const Problem& problem, const Order& order, const Schedule& current,
                       const Segment& segment, SegmentObjective objective)
    : problem_(problem), segment_(segment), order_(order) {
  collect(order, current);
  add_edges();
  double horizon = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    horizon = std::max(horizon, current_start_[i] + ops_[i].duration);
  }
  compute_windows(horizon);
  add_start_columns();
  add_pair_rows(order);
  add_memory_rows();
  add_objective(objective);
}

int OrderModel::pair(int rank, int a, int b) const {
  return pair_state_[rank][a * ops_of_rank_[rank].size() + b];
}

void OrderModel::collect(const Order& order, const Schedule& current) {
  OpTable<double> start(problem_, 0.0), end(problem_, 0.0);
  for (const auto& actions : current.ranks) {
    for (const Action& a : actions) {
      start[a.ref] = a.start;
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
        throw Error(kExitInternal,
                    "order model: the order must have split backwards and no "
                    "transfers");
      }
      if (i < segment_.begin[r]) {
        rank_free_[r] = std::max(rank_free_[r], end[refs[i]]);
        live_at_start_[r] += memory_delta(problem_, refs[i]);
      } else if (i < segment_.end[r]) {
        SegmentOp op{r, refs[i], duration(problem_, refs[i])};
        op.local = static_cast<int>(ops_of_rank_[r].size());
        ops_of_rank_[r].push_back(static_cast<int>(ops_.size()));
        ops_.push_back(op);
        current_start_.push_back(start[refs[i]]);
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
    throw Error(kExitInternal, "order model: dependencies and microbatch order form a cycle");
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
// the start-time windows.
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
        const SegmentOp& x = ops_[members[a]];
        const SegmentOp& y = ops_[members[b]];
        int& state = pair_state_[r][a * n + b];
        if (test_bit(reach_[members[a]], members[b]) || x.latest + x.duration <= y.earliest) {
          state = kFirstBefore;
          continue;
        }
        if (test_bit(reach_[members[b]], members[a]) || y.latest + y.duration <= x.earliest) {
          state = kSecondBefore;
          continue;
        }
        state = model_.add_column({0, 1, 0, true, fmt::format("y_{}_{}", members[a], members[b])});
        start_.push_back(position[x.ref] < position[y.ref] ? 1.0 : 0.0);
        const double m_xy = x.latest + x.duration - y.earliest;  // slack when y runs first
        const double m_yx = y.latest + y.duration - x.earliest;
        // y = 1: t_y >= t_x + d_x.   y = 0: t_x >= t_y + d_y.
        model_.add_row({{{y.column, 1.0}, {x.column, -1.0}, {state, -m_xy}},
                        x.duration - m_xy,
                        kInf,
                        fmt::format("seq_{}_{}", members[a], members[b])});
        model_.add_row({{{x.column, 1.0}, {y.column, -1.0}, {state, m_yx}},
                        y.duration,
                        kInf,
                        fmt::format("seqr_{}_{}", members[a], members[b])});
      }
    }
  }
}

// At each F start: prefix bytes + the F's own activation + what same-rank ops that ran before it
// allocated or released <= budget - static.
void OrderModel::add_memory_rows() {
  for (int r = 0; r < problem_.ranks; ++r) {
    const auto& members = ops_of_rank_[r];
    const int64_t limit = problem_.activation_budget(r);
    for (size_t f = 0; f < members.size(); ++f) {
      const SegmentOp& forward = ops_[members[f]];
      if (forward.ref.op != Op::kForward) continue;
      double constant =
          static_cast<double>(live_at_start_[r] + memory_delta(problem_, forward.ref));
      Row row;
      row.name = fmt::format("mem_{}", members[f]);
      for (size_t o = 0; o < members.size(); ++o) {
        if (o == f) continue;
        const double delta = static_cast<double>(memory_delta(problem_, ops_[members[o]].ref));
        const int state = o < f ? pair(r, static_cast<int>(o), static_cast<int>(f))
                                : pair(r, static_cast<int>(f), static_cast<int>(o));
        const bool first_is_o = o < f;
        if (state == kFirstBefore || state == kSecondBefore) {
          const bool o_before = (state == kFirstBefore) == first_is_o;
          if (o_before) constant += delta;
        } else if (first_is_o) {
          row.terms.push_back({state, delta});  // binary = 1: o before f
        } else {
          constant += delta;  // binary = 1: f before o, so o before f is 1 - binary
          row.terms.push_back({state, -delta});
        }
      }
      if (row.terms.empty()) continue;
      row.upper = static_cast<double>(limit) - constant;
      model_.add_row(std::move(row));
    }
  }
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
  for (int r = 0; r < problem_.ranks; ++r) {
    std::vector<int> members = ops_of_rank_[r];
    std::sort(members.begin(), members.end(), [&](int a, int b) {
      const double ta = solution[ops_[a].column];
      const double tb = solution[ops_[b].column];
      return ta < tb || (ta == tb && topo_rank[a] < topo_rank[b]);
    });
    for (size_t k = 0; k < members.size(); ++k) {
      order.ranks[r][segment_.begin[r] + k] = ops_[members[k]].ref;
    }
  }
  return order;
}

}  // namespace optpipe

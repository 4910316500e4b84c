// The order model's keep / offload / recompute choice per activation (docs/solver.md): binaries,
// transfer start times on the copy channels, R right before its B, and memory rows that count
// what is off the device. Built only when the model covers the whole order.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/dependencies.h"
#include "model/op_table.h"
#include "solver/order_model.h"

namespace optpipe {

namespace {

constexpr double kTimeTolerance = 1e-9;
// An allocation and a reload at the same time both count: a reload leaves an activation off the
// device at an event only when it starts at least this much later (in time units).
constexpr double kStrictGap = 1e-5;
// Allocations (F, R, reload) are released this much after the solution's time, so that rounding
// in the solution or the simulator never puts one before a release the solution placed at the
// same time. Above CBC's feasibility tolerance, below kStrictGap.
constexpr double kAllocationDelay = 1e-6;

// A column's bounds, copied: adding columns moves the model's column storage.
struct Window {
  double lower;
  double upper;
};

Window window_of(const LinearModel& model, int column) {
  return {model.columns[column].lower, model.columns[column].upper};
}

}  // namespace

int OrderModel::add_binary(const std::string& name, bool start_value) {
  start_.push_back(start_value ? 1.0 : 0.0);
  return model_.add_column({0, 1, 0, true, name});
}

double OrderModel::lead(int op) const {
  return lead_column(op) >= 0 ? problem_.stages[ops_[op].ref.stage].recompute_forward : 0.0;
}

int OrderModel::lead_column(int op) const {
  const SegmentOp& o = ops_[op];
  if (o.activation < 0 || o.ref.op != Op::kBackwardInput) return -1;
  return activations_[o.activation].recompute;
}

// An activation gets an offload binary when its round trip can fit between the earliest end of
// its F and the latest start of its B, and a recompute binary when its stage can recompute.
void OrderModel::add_activation_columns() {
  OpTable<int> index(problem_, -1);
  for (size_t i = 0; i < ops_.size(); ++i) index[ops_[i].ref] = static_cast<int>(i);
  for (size_t i = 0; i < ops_.size(); ++i) {
    const OpRef& f = ops_[i].ref;
    if (f.op != Op::kForward) continue;
    const int b = index[{Op::kBackwardInput, f.stage, f.microbatch}];
    if (b < 0) continue;
    const StageCosts& costs = problem_.stages[f.stage];
    const double forward_end = ops_[i].earliest + costs.forward;
    const double round_trip = problem_.offload_time(f.stage) + problem_.reload_time(f.stage);
    const bool may_offload =
        problem_.offload_frees_memory(f.stage) && ops_[b].latest - forward_end >= round_trip;
    const bool may_recompute = problem_.recompute_frees_memory(f.stage);
    if (!may_offload && !may_recompute) continue;

    Activation act{static_cast<int>(i), b};
    const std::string tag = fmt::format("{}_{}", f.stage, f.microbatch);
    if (may_offload) {
      const bool offloaded = !std::isnan(seed_start_[{Op::kOffload, f.stage, f.microbatch}]);
      const double seed_forward_end = current_start_[i] + costs.forward;
      act.offload = add_binary("o_" + tag, offloaded);
      // Without an offload both starts sit at F's end, where they cost nothing.
      start_.push_back(offloaded ? seed_start_[{Op::kOffload, f.stage, f.microbatch}]
                                 : seed_forward_end);
      act.d2h = model_.add_column({forward_end, ops_[b].latest, 0, false, "d_" + tag});
      start_.push_back(offloaded ? seed_start_[{Op::kReload, f.stage, f.microbatch}]
                                 : seed_forward_end);
      act.h2d = model_.add_column({forward_end, ops_[b].latest, 0, false, "h_" + tag});
      const double t_off = problem_.offload_time(f.stage);
      const double t_rel = problem_.reload_time(f.stage);
      model_.add_row({{{act.d2h, 1.0}, {ops_[i].column, -1.0}}, costs.forward, kInf, "dF_" + tag});
      model_.add_row(
          {{{act.h2d, 1.0}, {act.d2h, -1.0}, {act.offload, -t_off}}, 0, kInf, "hd_" + tag});
      model_.add_row(
          {{{ops_[b].column, 1.0}, {act.h2d, -1.0}, {act.offload, -t_rel}}, 0, kInf, "Bh_" + tag});
    }
    if (may_recompute) {
      const bool recomputed = !std::isnan(seed_start_[{Op::kRecompute, f.stage, f.microbatch}]);
      act.recompute = add_binary("q_" + tag, recomputed);
      restricts_recompute_ = true;
    }
    if (may_offload && may_recompute) {
      model_.add_row({{{act.offload, 1.0}, {act.recompute, 1.0}}, -kInf, 1, "oq_" + tag});
    }
    ops_[i].activation = ops_[b].activation = static_cast<int>(activations_.size());
    activations_.push_back(act);
  }
}

// R starts after every same-rank op that precedes its B has ended, F included.
void OrderModel::add_lead_rows() {
  for (size_t y = 0; y < ops_.size(); ++y) {
    if (lead_column(static_cast<int>(y)) < 0) continue;
    for (int x : ops_of_rank_[ops_[y].rank]) {
      if (reaches(x, static_cast<int>(y))) add_sequence_row(x, static_cast<int>(y), -1, false);
    }
  }
}

// One transfer at a time per copy channel. Transfers of one stage and direction on one rank keep
// microbatch order (FIFO symmetry); other pairs get a binary. A transfer that does not happen
// (its offload binary is 0) constrains nothing.
void OrderModel::add_channel_rows() {
  struct Transfer {
    int activation;
    Op op;
    int column;
    double duration;
  };
  std::vector<std::vector<Transfer>> channels(num_channels(problem_));
  for (size_t a = 0; a < activations_.size(); ++a) {
    const Activation& act = activations_[a];
    if (act.offload < 0) continue;
    const OpRef& f = ops_[act.forward].ref;
    const int rank = ops_[act.forward].rank;
    channels[channel_of(problem_, rank, Op::kOffload)].push_back(
        {static_cast<int>(a), Op::kOffload, act.d2h, problem_.offload_time(f.stage)});
    channels[channel_of(problem_, rank, Op::kReload)].push_back(
        {static_cast<int>(a), Op::kReload, act.h2d, problem_.reload_time(f.stage)});
  }
  // t_second >= t_first + d_first, relaxed by `slack` per binary term that is off.
  auto add_order_row = [&](const Transfer& first, const Transfer& second, int binary,
                           bool negated) {
    const double slack = window_of(model_, first.column).upper + first.duration -
                         window_of(model_, second.column).lower;
    if (slack <= 0) return;
    Row row{{{second.column, 1.0}, {first.column, -1.0}},
            first.duration,
            kInf,
            fmt::format("ch_{}_{}", first.column, second.column)};
    for (int a : {first.activation, second.activation}) {
      relax_unless(row, activations_[a].offload, false, slack);
    }
    if (binary >= 0) relax_unless(row, binary, negated, slack);
    model_.add_row(std::move(row));
  };
  for (const auto& transfers : channels) {
    for (size_t i = 0; i < transfers.size(); ++i) {
      for (size_t k = i + 1; k < transfers.size(); ++k) {
        const Transfer& x = transfers[i];
        const Transfer& y = transfers[k];
        if (x.activation == y.activation) continue;  // a reload follows its own offload
        const SegmentOp& fx = ops_[activations_[x.activation].forward];
        const SegmentOp& fy = ops_[activations_[y.activation].forward];
        if (x.op == y.op && fx.rank == fy.rank && fx.ref.stage == fy.ref.stage) {
          const bool x_first = fx.ref.microbatch < fy.ref.microbatch;
          add_order_row(x_first ? x : y, x_first ? y : x, -1, false);
          continue;
        }
        const int binary = add_binary(fmt::format("c_{}_{}", x.column, y.column),
                                      start_[x.column] <= start_[y.column]);
        add_order_row(x, y, binary, false);
        add_order_row(y, x, binary, true);
      }
    }
  }
}

// At each reload start: the rank's bytes from ops that started (allocations) or ended (releases)
// before it, each an indicator tied to the start times, less what other activations hold off the
// device. Binds only when the activation is offloaded.
void OrderModel::add_reload_memory_rows() {
  for (size_t a = 0; a < activations_.size(); ++a) {
    const Activation& act = activations_[a];
    if (act.offload < 0) continue;
    const SegmentOp& forward = ops_[act.forward];
    const int rank = forward.rank;
    const Window reload = window_of(model_, act.h2d);
    double constant = static_cast<double>(live_at_start_[rank] + memory_delta(forward.ref));
    Row row;
    row.name = fmt::format("memh_{}", a);
    for (int o : ops_of_rank_[rank]) {
      const SegmentOp& op = ops_[o];
      const bool own =
          op.ref.stage == forward.ref.stage && op.ref.microbatch == forward.ref.microbatch;
      const double delta = static_cast<double>(memory_delta(op.ref));
      if (own || delta == 0) continue;
      const bool allocation = delta > 0;  // at the op's start; releases happen at its end
      const double at = allocation ? 0.0 : op.duration;
      if (op.latest + at <= reload.lower) {
        constant += delta;
        continue;
      }
      if (allocation ? op.earliest >= reload.upper + kStrictGap : op.earliest + at > reload.upper) {
        continue;
      }
      const bool seed_before = allocation
                                   ? current_start_[o] < start_[act.h2d] + kStrictGap
                                   : current_start_[o] + at <= start_[act.h2d] + kTimeTolerance;
      const int k = add_binary(fmt::format("k_{}_{}", a, o), seed_before);
      if (allocation) {  // k = 0 only if t_o >= h + gap
        const double big_m = reload.upper - op.earliest + kStrictGap;
        model_.add_row({{{act.h2d, 1.0}, {op.column, -1.0}, {k, -big_m}},
                        -kInf,
                        -kStrictGap,
                        fmt::format("ka_{}_{}", a, o)});
      } else {  // k <= [t_o + d_o <= h]
        const double big_m = op.latest + at - reload.lower;
        model_.add_row({{{op.column, 1.0}, {act.h2d, -1.0}, {k, big_m}},
                        -kInf,
                        big_m - at,
                        fmt::format("kr_{}_{}", a, o)});
      }
      row.terms.push_back({k, delta});
    }
    add_savings(row, rank, {act.h2d, 0.0}, -1, static_cast<int>(a));
    add_memory_row(std::move(row), constant, problem_.activation_budget(rank), act.offload);
  }
}

void OrderModel::add_savings(Row& row, int rank, EventTime event, int event_op,
                             int own_activation) {
  const Window event_window = window_of(model_, event.column);
  const Window at{event_window.lower + event.offset, event_window.upper + event.offset};
  const double seed_at = seed_time(event);
  for (size_t c = 0; c < activations_.size(); ++c) {
    if (static_cast<int>(c) == own_activation) continue;
    const Activation& act = activations_[c];
    const SegmentOp& forward = ops_[act.forward];
    const SegmentOp& backward = ops_[act.backward];
    if (forward.rank != rank) continue;
    const StageCosts& costs = problem_.stages[forward.ref.stage];
    const std::string tag = fmt::format("{}_{}_{}", row.name, c, row.terms.size());

    if (act.offload >= 0) {
      // z <= o, and z = 1 only if the offload has ended and the reload not begun at the event.
      const double t_off = problem_.offload_time(forward.ref.stage);
      const Window d2h = window_of(model_, act.d2h);
      const Window h2d = window_of(model_, act.h2d);
      if (d2h.lower + t_off <= at.upper && h2d.upper >= at.lower + kStrictGap) {
        const bool seed_out = is_one(start_, act.offload) &&
                              start_[act.d2h] + t_off <= seed_at + kTimeTolerance &&
                              start_[act.h2d] >= seed_at + kStrictGap;
        const int z = add_binary("z_" + tag, seed_out);
        const double m_done = d2h.upper + t_off - at.lower;
        const double m_back = at.upper + kStrictGap - h2d.lower;
        model_.add_row({{{z, 1.0}, {act.offload, -1.0}}, -kInf, 0, "zo_" + tag});
        model_.add_row({{{act.d2h, 1.0}, {act.offload, t_off}, {event.column, -1.0}, {z, m_done}},
                        -kInf,
                        m_done + event.offset,
                        "zd_" + tag});
        model_.add_row({{{event.column, 1.0}, {act.h2d, -1.0}, {z, m_back}},
                        -kInf,
                        m_back - event.offset - kStrictGap,
                        "zh_" + tag});
        row.terms.push_back({z, -static_cast<double>(costs.offloadable_bytes)});
      }
    }
    if (act.recompute >= 0) {
      // w <= q, and w = 1 only if F has ended and R not begun at the event.
      const double t_r = costs.recompute_forward;
      int w = -1;
      if (event_op >= 0) {
        const OrderLiteral ended = before(act.forward, event_op);
        const OrderLiteral pending = before(event_op, act.backward);
        if ((ended.settled() && !ended.value) || (pending.settled() && !pending.value)) continue;
        w = add_binary("w_" + tag, is_one(start_, act.recompute) && ended.at(start_.data()) > 0.5 &&
                                       pending.at(start_.data()) > 0.5);
        for (const OrderLiteral& b : {ended, pending}) {
          if (b.settled()) continue;
          model_.add_row({{{w, 1.0}, {b.column, b.negated ? 1.0 : -1.0}},
                          -kInf,
                          b.negated ? 1.0 : 0.0,
                          "wb_" + tag});
        }
      } else {
        const double forward_end_lower = forward.earliest + costs.forward;
        if (forward_end_lower > at.upper || backward.latest - t_r < at.lower + kStrictGap) continue;
        const double seed_forward_end = start_[forward.column] + costs.forward;
        const double seed_rebuild = start_[backward.column] - t_r;
        w = add_binary("w_" + tag, is_one(start_, act.recompute) &&
                                       seed_forward_end <= seed_at + kTimeTolerance &&
                                       seed_rebuild >= seed_at + kStrictGap);
        const double m_ended = forward.latest + costs.forward - at.lower;
        const double m_pending = at.upper + kStrictGap - (backward.earliest - t_r);
        // t_F + T_F <= event and event + gap <= t_B - T_R when w = 1.
        model_.add_row({{{forward.column, 1.0}, {event.column, -1.0}, {w, m_ended}},
                        -kInf,
                        m_ended - costs.forward + event.offset,
                        "wf_" + tag});
        model_.add_row({{{event.column, 1.0}, {backward.column, -1.0}, {w, m_pending}},
                        -kInf,
                        m_pending - t_r - event.offset - kStrictGap,
                        "wr_" + tag});
      }
      model_.add_row({{{w, 1.0}, {act.recompute, -1.0}}, -kInf, 0, "wq_" + tag});
      row.terms.push_back({w, -static_cast<double>(costs.recomputed_bytes())});
    }
  }
}

// Each R right before its B; each transfer after the last compute op that ends by its start, so
// it is issued in time, in start order, which is then each copy queue's order.
void OrderModel::insert_activation_ops(const std::vector<double>& solution, int rank,
                                       std::vector<OpRef>& refs) const {
  OpTable<int> index(problem_, -1);
  for (int o : ops_of_rank_[rank]) index[ops_[o].ref] = o;
  // Transfers issued after the compute op at a position (-1: before the first).
  std::vector<std::vector<std::pair<double, OpRef>>> issued_after(refs.size() + 1);
  for (const Activation& act : activations_) {
    if (ops_[act.forward].rank != rank || !is_one(solution, act.offload)) continue;
    const OpRef& f = ops_[act.forward].ref;
    for (const auto& [op, column] : {std::pair{Op::kOffload, act.d2h}, {Op::kReload, act.h2d}}) {
      const double start = solution[column];
      size_t slot = 0;
      for (size_t k = 0; k < refs.size(); ++k) {
        const int o = index[refs[k]];
        if (o >= 0 && solution[ops_[o].column] + ops_[o].duration <= start + kTimeTolerance) {
          slot = k + 1;
        }
      }
      issued_after[slot].push_back({start, {op, f.stage, f.microbatch}});
    }
  }
  std::vector<OpRef> result;
  auto emit_transfers = [&](std::vector<std::pair<double, OpRef>>& transfers) {
    std::stable_sort(transfers.begin(), transfers.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [start, ref] : transfers) result.push_back(ref);
  };
  emit_transfers(issued_after[0]);
  for (size_t k = 0; k < refs.size(); ++k) {
    const OpRef ref = refs[k];
    const int o = index[ref];
    if (o >= 0 && is_one(solution, lead_column(o))) {
      result.push_back({Op::kRecompute, ref.stage, ref.microbatch});
    }
    result.push_back(ref);
    emit_transfers(issued_after[k + 1]);
  }
  refs = std::move(result);
}

OpTable<double> OrderModel::release_times(const std::vector<double>& solution) const {
  OpTable<double> release(problem_, 0.0);
  for (size_t o = 0; o < ops_.size(); ++o) {
    const SegmentOp& op = ops_[o];
    const bool allocates = op.ref.op == Op::kForward;
    release[op.ref] = solution[op.column] + (allocates ? kAllocationDelay : 0.0);
    if (is_one(solution, lead_column(static_cast<int>(o)))) {
      release[{Op::kRecompute, op.ref.stage, op.ref.microbatch}] =
          solution[op.column] - lead(static_cast<int>(o)) + kAllocationDelay;
    }
  }
  for (const Activation& act : activations_) {
    if (!is_one(solution, act.offload)) continue;
    const OpRef& f = ops_[act.forward].ref;
    release[{Op::kOffload, f.stage, f.microbatch}] = solution[act.d2h];
    release[{Op::kReload, f.stage, f.microbatch}] = solution[act.h2d] + kAllocationDelay;
  }
  return release;
}

}  // namespace optpipe

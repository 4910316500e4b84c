#include "tests/test_problems.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "heuristics/one_f_one_b.h"
#include "heuristics/registry.h"
#include "model/errors.h"
#include "timing/memory_timeline.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe::testing {

std::string describe_uniform(int ranks, int microbatches, const UniformCosts& costs) {
  std::string name = fmt::format("R{}_m{}_F{:g}_B{:g}_W{:g}_A{}_G{}", ranks, microbatches,
                                 costs.forward, costs.backward_input, costs.backward_weight,
                                 costs.activation_bytes, costs.weight_grad_bytes);
  if (costs.checkpoint_bytes) name += fmt::format("_C{}", *costs.checkpoint_bytes);
  return name;
}

void PrintTo(const UniformCase& c, std::ostream* os) {
  *os << describe_uniform(c.ranks, c.microbatches, c.costs);
}

Problem uniform_problem(int ranks, int chunks, int microbatches, UniformCosts costs,
                        PlacementKind placement, double p2p_latency) {
  Problem p;
  p.name = "uniform";
  p.ranks = ranks;
  p.chunks_per_rank = chunks;
  p.microbatches = microbatches;
  p.placement = placement;
  p.rank_of_stage = place_stages(placement, ranks, chunks);
  StageCosts stage;
  stage.forward = costs.forward;
  stage.backward_input = costs.backward_input;
  stage.backward_weight = costs.backward_weight;
  stage.activation_bytes = costs.activation_bytes;
  stage.weight_grad_bytes = costs.weight_grad_bytes;
  stage.offloadable_bytes = costs.activation_bytes;
  stage.recompute_forward = costs.forward;
  stage.checkpoint_bytes = costs.checkpoint_bytes;
  p.stages.assign(ranks * chunks, stage);
  p.p2p_latency = p2p_latency;
  p.static_bytes.assign(ranks, 1 << 20);
  p.budget_bytes.assign(ranks, (int64_t{1} << 20) + costs.activation_bytes * chunks *
                                                        static_cast<int64_t>(microbatches));
  return p;
}

UniformCosts with_weight_grads() {
  UniformCosts costs;
  costs.weight_grad_bytes = 200;
  return costs;
}

Problem offloading_uniform(Problem problem, double bytes_per_time, int64_t activation_bytes) {
  OffloadLink link;
  link.d2h_bytes_per_time = bytes_per_time;
  link.h2d_bytes_per_time = bytes_per_time;
  link.channels = ChannelMode::kDuplex;
  for (int r = 0; r < problem.ranks; ++r) link.link_group_of_rank.push_back(r);
  problem.offload = link;
  for (StageCosts& stage : problem.stages) stage.offloadable_bytes = 900;
  for (int r = 0; r < problem.ranks; ++r) {
    problem.budget_bytes[r] = problem.static_bytes[r] + activation_bytes;
  }
  return problem;
}

Problem random_problem(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  const int ranks = pick(1, 8);
  const int chunks = pick(1, 3);
  const int placement_pick = pick(0, 2);
  PlacementKind placement = PlacementKind::kLoop;
  if (placement_pick == 1 && chunks == 2) placement = PlacementKind::kVShape;
  Problem p = uniform_problem(ranks, chunks, pick(1, 3 * ranks + 2), {}, placement,
                              pick(0, 1) ? real(0, 0.3) : 0.0);
  if (placement_pick == 2) {
    // Explicit placement: a random permutation of the loop placement.
    std::vector<int> perm(ranks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int& r : p.rank_of_stage) r = perm[r];
    p.placement = PlacementKind::kExplicit;
  }
  for (StageCosts& c : p.stages) {
    c.forward = real(0.2, 2);
    c.backward_input = real(0.2, 3);
    c.backward_weight = real(0.1, 2);
    c.activation_bytes = pick(100, 5000);
    c.weight_grad_bytes = pick(0, static_cast<int>(c.activation_bytes));
    c.offloadable_bytes = pick(0, static_cast<int>(c.activation_bytes));
  }
  if (pick(0, 1)) {
    OffloadLink link;
    link.d2h_bytes_per_time = real(200, 20000);
    link.h2d_bytes_per_time = real(200, 20000);
    link.channels = pick(0, 1) ? ChannelMode::kDuplex : ChannelMode::kShared;
    const int group_size = pick(1, 2);
    for (int r = 0; r < ranks; ++r) link.link_group_of_rank.push_back(r / group_size);
    p.offload = link;
  }
  int64_t total = 0;
  for (const StageCosts& c : p.stages) total += c.activation_bytes * p.microbatches;
  p.budget_bytes.assign(ranks, p.static_bytes[0] + total);
  return p;
}

OpHeads zero_heads(const Problem& problem) {
  OpHeads heads;
  for (int s = 0; s < problem.num_stages(); ++s) {
    heads.forward.emplace_back(problem.microbatches, 0.0);
    heads.backward.emplace_back(problem.microbatches, 0.0);
    heads.weight.emplace_back(problem.microbatches, 0.0);
  }
  return heads;
}

Problem with_budget_fraction(Problem p, double fraction) {
  for (int r = 0; r < p.ranks; ++r) {
    int64_t all = 0;
    for (const int s : p.stages_of_rank(r)) all += p.stages[s].activation_bytes * p.microbatches;
    p.budget_bytes[r] = p.static_bytes[r] + static_cast<int64_t>(fraction * all);
  }
  return p;
}

Problem at_own_peaks(const Problem& problem, const Schedule& schedule) {
  Problem at_peaks = problem;
  for (int r = 0; r < problem.ranks; ++r) {
    at_peaks.budget_bytes[r] =
        problem.static_bytes[r] + peak_live_bytes(memory_timeline(problem, schedule.ranks[r]));
  }
  return at_peaks;
}

int64_t one_microbatch_bytes(const Problem& p, int rank) {
  int64_t bytes = 0;
  for (int s : p.stages_of_rank(rank)) bytes += p.stages[s].activation_bytes;
  return bytes;
}

bool has_action(const Schedule& schedule, Op op) {
  return std::any_of(schedule.ranks.begin(), schedule.ranks.end(), [op](const auto& actions) {
    return std::any_of(actions.begin(), actions.end(),
                       [op](const Action& a) { return a.ref.op == op; });
  });
}

int count_ops(const Schedule& schedule, Op op) {
  int n = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) n += a.ref.op == op;
  }
  return n;
}

TimedSchedule run_generator(const std::string& method, const Problem& problem) {
  const Generator* generator = find_generator(method);
  if (!generator) throw std::invalid_argument("no generator " + method);
  Schedule schedule = simulate_within_budget(problem, generator->build(problem), method);
  Metrics metrics = compute_metrics(problem, schedule);
  return {std::move(schedule), std::move(metrics)};
}

Schedule offloading_1f1b(Problem& problem) {
  std::vector<int> own_group(problem.ranks);
  std::iota(own_group.begin(), own_group.end(), 0);
  problem.offload = OffloadLink{1000, 1000, ChannelMode::kDuplex, own_group};
  Order order = one_f_one_b_order(problem);
  std::vector<OpRef> with_transfers;
  for (const OpRef& ref : order.ranks[0]) {
    if (ref.op == Op::kBackward) with_transfers.push_back({Op::kReload, ref.stage, ref.microbatch});
    with_transfers.push_back(ref);
    if (ref.op == Op::kForward) with_transfers.push_back({Op::kOffload, ref.stage, ref.microbatch});
  }
  order.ranks[0] = with_transfers;
  return simulate(problem, order, "1f1b+offload");
}

Order recompute_all(Order order) {
  return recompute_some(std::move(order), [] { return true; });
}

Order recompute_some(Order order, const std::function<bool()>& pick) {
  for (auto& refs : order.ranks) {
    std::vector<OpRef> with_recompute;
    for (const OpRef& ref : refs) {
      if (is_input_backward(ref.op) && pick()) {
        with_recompute.push_back({Op::kRecompute, ref.stage, ref.microbatch});
      }
      with_recompute.push_back(ref);
    }
    refs = std::move(with_recompute);
  }
  return order;
}

Schedule recomputing_1f1b(Problem& problem, int64_t checkpoint_bytes) {
  for (StageCosts& stage : problem.stages) stage.checkpoint_bytes = checkpoint_bytes;
  return simulate(problem, recompute_all(one_f_one_b_order(problem)), "1f1b+recompute");
}

namespace {

// Every order of split F/B/W ops of each rank's one stage (exhaustive_optimum), per rank.
std::vector<std::vector<std::vector<OpRef>>> every_rank_order(const Problem& problem, bool fifo) {
  std::vector<std::vector<std::vector<OpRef>>> per_rank;
  for (int r = 0; r < problem.ranks; ++r) {
    const int stage = problem.stages_of_rank(r).front();
    std::vector<std::vector<OpRef>> orders;
    std::vector<OpRef> current;
    std::vector<int> done(problem.microbatches, 0);  // 0 none, 1 F, 2 F+B, 3 all
    std::function<void()> extend = [&] {
      if (static_cast<int>(current.size()) == 3 * problem.microbatches) {
        orders.push_back(current);
        return;
      }
      for (int j = 0; j < problem.microbatches; ++j) {
        if (done[j] == 3) continue;
        if (fifo && j > 0 && done[j - 1] <= done[j]) continue;  // j-1 must be ahead of j
        const Op op = done[j] == 0   ? Op::kForward
                      : done[j] == 1 ? Op::kBackwardInput
                                     : Op::kBackwardWeight;
        current.push_back({op, stage, j});
        ++done[j];
        extend();
        --done[j];
        current.pop_back();
      }
    };
    extend();
    per_rank.push_back(std::move(orders));
  }
  return per_rank;
}

// The least makespan of the valid schedules that `time` gives over every combination of one
// order per rank, each timed as it is or, given `variants`, the orders it returns for it.
double best_over_orders(const Problem& problem, bool fifo,
                        const std::function<Schedule(const Order&)>& time,
                        const std::function<std::vector<Order>(const Order&)>& variants = {}) {
  const std::vector<std::vector<std::vector<OpRef>>> per_rank = every_rank_order(problem, fifo);
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> pick(problem.ranks, 0);
  while (true) {
    Order order;
    for (int r = 0; r < problem.ranks; ++r) order.ranks.push_back(per_rank[r][pick[r]]);
    auto try_order = [&](const Order& timed) {
      try {
        const Schedule s = time(timed);
        if (!validate(problem, s)) best = std::min(best, compute_metrics(problem, s).makespan);
      } catch (const DeadlockError&) {
      }
    };
    if (variants) {
      for (const Order& variant : variants(order)) try_order(variant);
    } else {
      try_order(order);
    }
    int r = 0;
    while (r < problem.ranks && ++pick[r] == per_rank[r].size()) pick[r++] = 0;
    if (r == problem.ranks) break;
  }
  return best;
}

// `order` with OFFLOAD listed right after F(j) of rank 0 for each j in `offloaded` (a bit mask),
// and its RELOAD `lookahead` compute ops before B(j), never before the OFFLOAD.
Order offloading_rank_zero(const Order& order, unsigned offloaded, int lookahead) {
  Order result = order;
  std::vector<OpRef>& refs = result.ranks[0];
  for (int j = 0; offloaded >> j; ++j) {
    if (!(offloaded >> j & 1u)) continue;
    auto is = [j](Op op) {
      return [op, j](const OpRef& ref) { return ref.op == op && ref.microbatch == j; };
    };
    const auto forward = std::find_if(refs.begin(), refs.end(), is(Op::kForward));
    if (forward == refs.end()) continue;
    const OpRef f = *forward;
    const long offload_at = (forward - refs.begin()) + 1;
    refs.insert(refs.begin() + offload_at, {Op::kOffload, f.stage, j});
    long at = std::find_if(refs.begin(), refs.end(), is(Op::kBackwardInput)) - refs.begin();
    for (int back = 0; back < lookahead && at > offload_at + 1; ++back) {
      do --at;
      while (at > offload_at + 1 && !is_compute(refs[at].op));
    }
    refs.insert(refs.begin() + at, {Op::kReload, f.stage, j});
  }
  return result;
}

}  // namespace

double exhaustive_optimum(const Problem& problem, bool fifo) {
  return best_over_orders(
      problem, fifo, [&](const Order& order) { return simulate(problem, order, "exhaustive"); });
}

double exhaustive_offloading_optimum(const Problem& problem, bool fifo) {
  const unsigned subsets = 1u << problem.microbatches;
  return best_over_orders(
      problem, fifo,
      [&](const Order& order) { return simulate_within_budget(problem, order, "exhaustive"); },
      [&](const Order& order) {
        std::vector<Order> variants;
        for (unsigned offloaded = 0; offloaded < subsets; ++offloaded) {
          for (int lookahead = 0; lookahead <= (offloaded ? 2 : 0); ++lookahead) {
            variants.push_back(offloading_rank_zero(order, offloaded, lookahead));
          }
        }
        return variants;
      });
}

}  // namespace optpipe::testing

#include "timing/validator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "model/dependencies.h"
#include "model/op_table.h"
#include "timing/memory_timeline.h"

namespace optpipe {

namespace {

constexpr double kRelativeTolerance = 1e-9;
constexpr double kAbsoluteTolerance = 1e-6;
// Rounding at the largest times a profile allows (10^12 time units) is about 10^-4; a tolerance
// relative to the time alone would grow past any op's duration late in a schedule.
constexpr double kMaxTolerance = 1e-3;
constexpr double kMaxTime = 1e12;

bool nearly_equal(double a, double b) {
  return at_or_before(a, b) && at_or_before(b, a);
}

std::string bytes_text(int64_t bytes) {
  return fmt::format("{} B ({:.3f} GiB)", bytes, bytes / 1073741824.0);
}

class Validation {
 public:
  Validation(const Problem& problem, const Schedule& schedule)
      : problem_(problem),
        schedule_(schedule),
        count_(problem, 0),
        slot_(problem, nullptr),
        position_(problem, 0) {}

  std::optional<Violation> run() {
    if (auto v = check_actions()) return v;
    if (auto v = check_completeness()) return v;
    if (auto v = check_listed_order()) return v;
    if (auto v = check_dependencies()) return v;
    if (auto v = check_compute_overlap()) return v;
    if (auto v = check_channels()) return v;
    return validate_memory(problem_, schedule_);
  }

 private:
  static Violation violation(std::string message) { return {std::move(message)}; }

  std::optional<Violation> check_actions() {
    if (static_cast<int>(schedule_.ranks.size()) != problem_.ranks) {
      return violation(fmt::format("schedule has {} ranks, the profile {}", schedule_.ranks.size(),
                                   problem_.ranks));
    }
    for (int r = 0; r < problem_.ranks; ++r) {
      for (const Action& a : schedule_.ranks[r]) {
        // Messages are formatted only for the violation found: validation runs on every state of
        // the local search.
        auto what = [&] { return fmt::format("rank {}: {}", r, describe(a.ref)); };
        if (!in_range(problem_, a.ref)) {
          return violation(what() + ": stage or microbatch out of range");
        }
        if (problem_.rank_of_stage[a.ref.stage] != r) {
          return violation(fmt::format("{}: stage {} runs on rank {}", what(), a.ref.stage,
                                       problem_.rank_of_stage[a.ref.stage]));
        }
        if (is_transfer(a.ref.op) && !problem_.offload) {
          return violation(what() + ": transfer but the profile has no offload link");
        }
        if (a.ref.op == Op::kRecompute && !problem_.stages[a.ref.stage].can_recompute()) {
          return violation(fmt::format(
              "{}: stage {} cannot recompute: the profile gives it no checkpoint_bytes; set "
              "checkpoint_bytes for it (what F keeps, usually the stage input)",
              what(), a.ref.stage));
        }
        if (!std::isfinite(a.start) || !std::isfinite(a.end) || a.start < 0 || a.end > kMaxTime) {
          return violation(fmt::format("{}: bad times [{}, {}] (times run from 0 to 10^12)", what(),
                                       a.start, a.end));
        }
        // Compared at the end's magnitude: late in a long schedule a short op's two times carry
        // more rounding than its duration's tolerance.
        const double expected = duration(problem_, a.ref);
        if (!nearly_equal(a.end, a.start + expected)) {
          return violation(fmt::format("{}: lasts {:.6g}, the profile says {:.6g}", what(),
                                       a.end - a.start, expected));
        }
        if (a.bytes != transfer_bytes(problem_, a.ref)) {
          return violation(fmt::format("{}: moves {} bytes, the profile says {}", what(), a.bytes,
                                       transfer_bytes(problem_, a.ref)));
        }
        ++count_[a.ref];
        slot_[a.ref] = &a;
        position_[a.ref] = static_cast<int>(&a - schedule_.ranks[r].data());
      }
    }
    return std::nullopt;
  }

  // The listed order is what a runtime executes (docs/schedule.md): by start, compute before
  // transfers at equal starts.
  std::optional<Violation> check_listed_order() const {
    for (int r = 0; r < problem_.ranks; ++r) {
      const std::vector<Action>& actions = schedule_.ranks[r];
      for (size_t i = 1; i < actions.size(); ++i) {
        const Action& before = actions[i - 1];
        const Action& a = actions[i];
        const bool earlier = !at_or_before(before.start, a.start);
        const bool transfer_first =
            is_transfer(before.ref.op) && is_compute(a.ref.op) && a.start <= before.start;
        if (earlier || transfer_first) {
          return violation(fmt::format(
              "rank {}: {} (start {:.6g}) is listed after {} (start {:.6g}); a rank's actions are "
              "listed in the order they run: by start, compute before transfers at equal starts",
              r, describe(a.ref), a.start, describe(before.ref), before.start));
        }
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check_completeness() const {
    for (int s = 0; s < problem_.num_stages(); ++s) {
      for (int j = 0; j < problem_.microbatches; ++j) {
        auto n = [&](Op op) { return count_[{op, s, j}]; };
        auto where = [&] { return fmt::format("stage {} microbatch {}", s, j); };
        if (n(Op::kForward) != 1) {
          return violation(
              fmt::format("{}: F appears {} times, expected once", where(), n(Op::kForward)));
        }
        const bool split =
            n(Op::kBackwardInput) == 1 && n(Op::kBackwardWeight) == 1 && n(Op::kBackward) == 0;
        const bool fused =
            n(Op::kBackward) == 1 && n(Op::kBackwardInput) == 0 && n(Op::kBackwardWeight) == 0;
        if (!split && !fused) {
          return violation(fmt::format(
              "{}: needs B and W once each, or BW once; has B x{}, W x{}, "
              "BW x{}",
              where(), n(Op::kBackwardInput), n(Op::kBackwardWeight), n(Op::kBackward)));
        }
        if (n(Op::kOffload) > 1 || n(Op::kOffload) != n(Op::kReload)) {
          return violation(fmt::format("{}: needs one RELOAD per OFFLOAD; has {} and {}", where(),
                                       n(Op::kOffload), n(Op::kReload)));
        }
        if (n(Op::kRecompute) > 1) {
          return violation(fmt::format("{}: R appears {} times, expected at most once", where(),
                                       n(Op::kRecompute)));
        }
        if (n(Op::kRecompute) > 0 && n(Op::kOffload) > 0) {
          return violation(fmt::format(
              "{}: both offloaded and recomputed; an activation is kept, offloaded or recomputed",
              where()));
        }
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check_dependencies() const {
    auto form = [this](int s, int j) {
      return count_[{Op::kBackward, s, j}] ? BackwardForm::kFused : BackwardForm::kSplit;
    };
    auto offloaded = [this](int s, int j) { return count_[{Op::kOffload, s, j}] > 0; };
    auto recomputed = [this](int s, int j) { return count_[{Op::kRecompute, s, j}] > 0; };
    for (int r = 0; r < problem_.ranks; ++r) {
      for (const Action& a : schedule_.ranks[r]) {
        for (const Predecessor& p : predecessors(problem_, a.ref, form, offloaded, recomputed)) {
          const Action& pred = *slot_[p.pred];
          // Ops of no duration may share a start with what they depend on: the list says which
          // runs first.
          if (problem_.rank_of_stage[p.pred.stage] == r && position_[p.pred] > position_[a.ref]) {
            return violation(fmt::format("rank {}: {} is listed before {}, which it depends on", r,
                                         describe(a.ref), describe(p.pred)));
          }
          if (!at_or_before(pred.end + p.lag, a.start)) {
            return violation(
                fmt::format("rank {}: {} starts at {:.6g}, before {} ends at {:.6g}{}", r,
                            describe(a.ref), a.start, describe(p.pred), pred.end,
                            p.lag > 0 ? fmt::format(" plus p2p latency {:.6g}", p.lag) : ""));
          }
        }
      }
    }
    return std::nullopt;
  }

  // Actions sorted by start, and an op of no duration before one that starts with it; each must
  // start after the previous one ends. `resource()` names what they share.
  template <typename ResourceName>
  static std::optional<Violation> check_serial(std::vector<const Action*> actions,
                                               ResourceName resource) {
    std::sort(actions.begin(), actions.end(), [](const Action* a, const Action* b) {
      return std::tie(a->start, a->end) < std::tie(b->start, b->end);
    });
    for (size_t i = 1; i < actions.size(); ++i) {
      if (!at_or_before(actions[i - 1]->end, actions[i]->start)) {
        return violation(fmt::format("{}: {} [{:.6g}, {:.6g}] overlaps {} [{:.6g}, {:.6g}]",
                                     resource(), describe(actions[i]->ref), actions[i]->start,
                                     actions[i]->end, describe(actions[i - 1]->ref),
                                     actions[i - 1]->start, actions[i - 1]->end));
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check_compute_overlap() const {
    for (int r = 0; r < problem_.ranks; ++r) {
      std::vector<const Action*> compute;
      for (const Action& a : schedule_.ranks[r]) {
        if (is_compute(a.ref.op)) compute.push_back(&a);
      }
      if (auto v = check_serial(compute, [r] { return fmt::format("rank {} compute", r); })) {
        return v;
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check_channels() const {
    std::vector<std::vector<const Action*>> by_channel(num_channels(problem_));
    for (int r = 0; r < problem_.ranks; ++r) {
      for (const Action& a : schedule_.ranks[r]) {
        if (is_transfer(a.ref.op)) by_channel[channel_of(problem_, r, a.ref.op)].push_back(&a);
      }
    }
    for (size_t c = 0; c < by_channel.size(); ++c) {
      if (auto v = check_serial(by_channel[c], [c] { return fmt::format("copy channel {}", c); })) {
        return v;
      }
    }
    return std::nullopt;
  }

  const Problem& problem_;
  const Schedule& schedule_;
  OpTable<int> count_;
  OpTable<const Action*> slot_;
  OpTable<int> position_;  // index in its rank's list
};

}  // namespace

bool at_or_before(double a, double b) {
  return a <= b + std::max(kAbsoluteTolerance,
                           std::min(kMaxTolerance, kRelativeTolerance * std::abs(b)));
}

std::optional<Violation> validate(const Problem& problem, const Schedule& schedule) {
  return Validation(problem, schedule).run();
}

std::optional<Violation> validate_memory(const Problem& problem, const Schedule& schedule) {
  for (int r = 0; r < problem.ranks; ++r) {
    const int64_t limit = problem.activation_budget(r);
    for (const MemoryStep& step : memory_timeline(problem, schedule.ranks[r])) {
      if (step.live_bytes > limit) {
        return Violation{fmt::format("rank {}: memory {} at time {:.6g} ({}) exceeds the budget {}",
                                     r, bytes_text(problem.static_bytes[r] + step.live_bytes),
                                     step.time, describe(step.cause),
                                     bytes_text(problem.budget_bytes[r]))};
      }
    }
  }
  return std::nullopt;
}

}  // namespace optpipe

#include "model/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>

namespace optpipe {

namespace {
constexpr std::array<std::string_view, kNumOps> kOpNames = {"F",       "B",      "W", "BW",
                                                            "OFFLOAD", "RELOAD", "R"};
}  // namespace

std::string_view to_string(Op op) {
  return kOpNames[static_cast<size_t>(op)];
}

std::optional<Op> parse_op(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::string describe(const OpRef& ref) {
  return fmt::format("{}(s{}, mb{})", to_string(ref.op), ref.stage, ref.microbatch);
}

Order order_of(const Schedule& schedule) {
  Order order;
  for (const auto& actions : schedule.ranks) {
    auto& refs = order.ranks.emplace_back();
    // A transfer is issued when the compute op listed before it ends, so it goes after the last
    // compute op that ends by its start. Listed by start, it would follow the compute op running
    // when it starts (it waited for its channel) or starting with it, and be issued only after
    // that one ends: later than it ran. Compute ops run one at a time, so only the last one
    // listed can end after a transfer that starts after it. An offload never goes before the F
    // it copies, whatever rounding did to the times (the runtime shim's runner, issue_order,
    // issues by the same rule).
    size_t last_compute = 0;
    double last_end = -std::numeric_limits<double>::infinity();
    auto copies_last = [&](const OpRef& t) {
      return t.op == Op::kOffload &&
             refs[last_compute] == OpRef{Op::kForward, t.stage, t.microbatch};
    };
    for (const Action& a : actions) {
      if (is_transfer(a.ref.op) && a.start < last_end && !copies_last(a.ref)) {
        refs.insert(refs.begin() + static_cast<std::ptrdiff_t>(last_compute++), a.ref);
        continue;
      }
      if (is_compute(a.ref.op)) {
        last_compute = refs.size();
        last_end = a.end;
      }
      refs.push_back(a.ref);
    }
  }
  return order;
}

std::vector<OpRef> split_backward(const std::vector<OpRef>& refs) {
  std::vector<OpRef> out;
  out.reserve(refs.size() * 3 / 2);
  for (const OpRef& ref : refs) {
    if (ref.op == Op::kBackward) {
      out.push_back({Op::kBackwardInput, ref.stage, ref.microbatch});
      out.push_back({Op::kBackwardWeight, ref.stage, ref.microbatch});
    } else {
      out.push_back(ref);
    }
  }
  return out;
}

Order split_backward(const Order& order) {
  Order split;
  for (const auto& refs : order.ranks) split.ranks.push_back(split_backward(refs));
  return split;
}

TimeExtent time_extent(const Schedule& schedule) {
  double begin = std::numeric_limits<double>::infinity();
  double end = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      begin = std::min(begin, a.start);
      end = std::max(end, a.end);
    }
  }
  if (begin > end) return {};
  return {begin, end};
}

}  // namespace optpipe

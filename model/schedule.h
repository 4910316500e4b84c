// The schedule IR (docs/design.md §1, §7): per-rank ordered actions. Generators emit an Order (what
// runs in which sequence); the simulator turns it into a timed Schedule; the validator checks one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace optpipe {

enum class Op : uint8_t {
  kForward,         // F
  kBackwardInput,   // B
  kBackwardWeight,  // W
  kBackward,        // BW: B and W fused, back to back
  kOffload,         // D2H copy of the offloadable part of an activation
  kReload,          // H2D copy back before the backward
  kRecompute,       // R: the forward run again from the checkpoint, before the backward
};
inline constexpr int kNumOps = static_cast<int>(Op::kRecompute) + 1;

// Inline: the simulator asks them for every action of every timing.
inline bool is_transfer(Op op) {
  return op == Op::kOffload || op == Op::kReload;
}
inline bool is_compute(Op op) {
  return !is_transfer(op);
}
// B or a fused BW: the backward that ends its activation's life (what B(s, j) means in the docs).
inline bool is_input_backward(Op op) {
  return op == Op::kBackwardInput || op == Op::kBackward;
}
// Short names used in every file format: F, B, W, BW, OFFLOAD, RELOAD, R.
std::string_view to_string(Op op);
std::optional<Op> parse_op(std::string_view name);

struct OpRef {
  Op op;
  int stage;
  int microbatch;
  friend bool operator==(const OpRef&, const OpRef&) = default;
};

std::string describe(const OpRef& ref);  // e.g. "F(s3, mb7)"

// What a generator decides: per rank, the sequence in which the rank issues its actions. Compute
// actions run one at a time in this order; a transfer is issued when the rank reaches it (after the
// compute action before it has ended) and then runs on its copy channel without blocking compute.
struct Order {
  std::vector<std::vector<OpRef>> ranks;
};

struct Action {
  OpRef ref;
  double start = 0;
  double end = 0;
  int64_t bytes = 0;  // transfers only
};

// A timed schedule: per rank, actions sorted by start (compute and transfers interleaved).
struct Schedule {
  std::string method;
  std::vector<std::vector<Action>> ranks;
};

// The order a timed schedule follows: each rank's actions as listed (by start), each transfer
// right after the last compute op that ends by its start, where the simulator issues it again.
Order order_of(const Schedule& schedule);

// First start and last end over every action; {0, 0} for an empty schedule.
struct TimeExtent {
  double begin = 0;
  double end = 0;
};
TimeExtent time_extent(const Schedule& schedule);

// Each fused BW replaced by B immediately followed by W.
std::vector<OpRef> split_backward(const std::vector<OpRef>& refs);
Order split_backward(const Order& order);

}  // namespace optpipe

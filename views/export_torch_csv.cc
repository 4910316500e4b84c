#include "views/export_torch_csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "model/errors.h"
#include "model/op_table.h"

namespace optpipe {

namespace {

// What PyTorch's loader distinguishes: a forward, the input-gradient part of a backward (I or a
// full B, which is what the next stage down waits for), and a weight-gradient W.
enum class TorchKind { kForward, kBackwardInput, kBackwardWeight };

struct TorchCell {
  TorchKind kind;
  int stage;
  int microbatch;
  std::string token;
};

std::string token(int stage, const char* op, int microbatch) {
  return fmt::format("{}{}{}", stage, op, microbatch);
}

// The loader's cells for one optpipe compute action.
void append_cells(const Action& action, TorchDialect dialect, std::vector<TorchCell>& cells) {
  const int s = action.ref.stage;
  const int j = action.ref.microbatch;
  const bool v26 = dialect == TorchDialect::kTorch26;
  switch (action.ref.op) {
    case Op::kForward:
      cells.push_back({TorchKind::kForward, s, j, token(s, "F", j)});
      break;
    case Op::kBackwardInput:
      cells.push_back({TorchKind::kBackwardInput, s, j, token(s, v26 ? "I" : "B", j)});
      break;
    case Op::kBackwardWeight:
      cells.push_back({TorchKind::kBackwardWeight, s, j, token(s, "W", j)});
      break;
    case Op::kBackward:
      if (v26) {
        cells.push_back({TorchKind::kBackwardInput, s, j, token(s, "B", j)});
      } else {
        // 2.5 runs every B as input-only once W tokens exist: split the fused backward.
        cells.push_back({TorchKind::kBackwardInput, s, j, token(s, "B", j)});
        cells.push_back({TorchKind::kBackwardWeight, s, j, token(s, "W", j)});
      }
      break;
    case Op::kOffload:
    case Op::kReload:
      break;  // no token exists for host transfers; they travel in the optpipe schedule file
    case Op::kRecompute:
      break;  // local to the stage: PyTorch recomputes inside the backward (checkpointing)
  }
}

class StepTable {
 public:
  StepTable(int stages, int microbatches)
      : stages_(stages), microbatches_(microbatches), steps_(3 * stages * microbatches, -1) {}
  int& at(TorchKind kind, int stage, int microbatch) {
    return steps_[(static_cast<size_t>(kind) * stages_ + stage) * microbatches_ + microbatch];
  }

 private:
  int stages_;
  int microbatches_;
  std::vector<int> steps_;
};

// Step of the action `cell` waits for, -1 when it waits for nothing; nullopt while that action has
// no step yet.
std::optional<int> dependency_step(const Problem& problem, StepTable& steps,
                                   const TorchCell& cell) {
  const int last_stage = problem.num_stages() - 1;
  int step = -1;
  switch (cell.kind) {
    case TorchKind::kForward:
      if (cell.stage == 0) return -1;
      step = steps.at(TorchKind::kForward, cell.stage - 1, cell.microbatch);
      break;
    case TorchKind::kBackwardInput:
      step = cell.stage < last_stage
                 ? steps.at(TorchKind::kBackwardInput, cell.stage + 1, cell.microbatch)
                 : steps.at(TorchKind::kForward, cell.stage, cell.microbatch);
      break;
    case TorchKind::kBackwardWeight:
      step = steps.at(TorchKind::kBackwardInput, cell.stage, cell.microbatch);
      break;
  }
  if (step < 0) return std::nullopt;
  return step;
}

}  // namespace

TorchDialect parse_torch_dialect(std::string_view name) {
  if (name == "2.5") return TorchDialect::kTorch25;
  if (name == "2.6") return TorchDialect::kTorch26;
  throw InputError(
      fmt::format("--torch-dialect: must be {} (2.6 also serves later PyTorch), got '{}'",
                  kTorchDialectNames, name));
}

const char* to_string(TorchDialect dialect) {
  return dialect == TorchDialect::kTorch25 ? "2.5" : "2.6";
}

void check_torch_dialect(const Problem& problem, TorchDialect dialect) {
  if (dialect != TorchDialect::kTorch25) return;
  // Adjacent stages on one rank hand activations over locally only from 2.6 on; 2.5 would post a
  // send and a receive to the rank itself.
  for (int s = 0; s + 1 < problem.num_stages(); ++s) {
    if (problem.rank_of_stage[s] == problem.rank_of_stage[s + 1]) {
      throw InputError(fmt::format(
          "--torch-dialect 2.5: PyTorch 2.5 cannot run adjacent stages {} and {} on one rank "
          "(placement {}); use --torch-dialect 2.6",
          s, s + 1, to_string(problem.placement)));
    }
  }
}

std::vector<std::vector<std::string>> torch_step_grid(const Problem& problem,
                                                      const Schedule& schedule,
                                                      TorchDialect dialect) {
  const int ranks = problem.ranks;
  if (static_cast<int>(schedule.ranks.size()) != ranks) {
    throw InputError(
        fmt::format("schedule has {} ranks, the profile {}", schedule.ranks.size(), ranks));
  }
  check_torch_dialect(problem, dialect);
  std::vector<std::vector<TorchCell>> cells(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> compute;
    for (const Action& a : schedule.ranks[r]) {
      if (!is_compute(a.ref.op)) continue;
      if (!in_range(problem, a.ref) || problem.rank_of_stage[a.ref.stage] != r) {
        throw InputError(
            fmt::format("schedule: {} on rank {} does not belong there", describe(a.ref), r));
      }
      compute.push_back(a);
    }
    std::stable_sort(compute.begin(), compute.end(),
                     [](const Action& a, const Action& b) { return a.start < b.start; });
    for (const Action& a : compute) append_cells(a, dialect, cells[r]);
  }

  // Assign steps rank by rank, as far as each rank's dependencies allow, until all are placed.
  StepTable steps(problem.num_stages(), problem.microbatches);
  std::vector<std::vector<std::string>> grid(ranks);
  std::vector<size_t> next(ranks, 0);
  std::vector<int> last_step(ranks, -1);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (next[r] < cells[r].size()) {
        const TorchCell& cell = cells[r][next[r]];
        const std::optional<int> dep = dependency_step(problem, steps, cell);
        if (!dep) break;
        const int step = std::max(last_step[r], *dep) + 1;
        steps.at(cell.kind, cell.stage, cell.microbatch) = step;
        grid[r].resize(step + 1);
        grid[r][step] = cell.token;
        last_step[r] = step;
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < ranks; ++r) {
    if (next[r] < cells[r].size()) {
      throw InputError(fmt::format(
          "schedule: cannot write the PyTorch CSV: rank {} waits at {} for an action that "
          "never runs before it",
          r, cells[r][next[r]].token));
    }
  }
  return grid;
}

std::string export_torch_csv(const Problem& problem, const Schedule& schedule,
                             TorchDialect dialect) {
  std::string out;
  for (const std::vector<std::string>& row : torch_step_grid(problem, schedule, dialect)) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      out += row[i];
    }
    out += '\n';
  }
  return out;
}

}  // namespace optpipe

// PyTorch `torch.distributed.pipelining` compute-only CSV (docs/design.md §7, docs/exports.md):
// what `PipelineScheduleMulti._load_csv` / `_PipelineScheduleRuntime._load_csv` read. One row per
// rank in rank order, one cell per time step, global stage ids, empty cells where the rank idles.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Token sets of the loader. kTorch26 (2.6 and later): F, I (backward input), W, B (full
// backward). kTorch25: F, B (backward input, loaded with use_full_backward=False), W; it has no
// full-backward token, so a fused BW is written as B then W in consecutive steps.
enum class TorchDialect { kTorch25, kTorch26 };

inline constexpr std::string_view kTorchDialectNames = "2.5|2.6";

// "2.5" or "2.6"; InputError naming --torch-dialect otherwise.
TorchDialect parse_torch_dialect(std::string_view name);
const char* to_string(TorchDialect dialect);
// InputError when the dialect's PyTorch cannot run the problem's placement: 2.5 has no local
// hand-over between adjacent stages on one rank (V-shape).
void check_torch_dialect(const Problem& problem, TorchDialect dialect);

// The step grid: per rank, one cell per step ("" = idle). Each rank's compute actions keep their
// order; a step is the earliest after the rank's previous action and after every action it depends
// on (the F before it, the backward after it), so the lock-step executor, which receives at the
// step of the send, and the send/recv lowering both see every input before its use. Offloads,
// reloads and recomputes have no token and are left out. Runs check_torch_dialect first.
std::vector<std::vector<std::string>> torch_step_grid(const Problem& problem,
                                                      const Schedule& schedule,
                                                      TorchDialect dialect);

// The grid as CSV text: cells joined by ',', rows by '\n', no header.
std::string export_torch_csv(const Problem& problem, const Schedule& schedule,
                             TorchDialect dialect = TorchDialect::kTorch26);

}  // namespace optpipe

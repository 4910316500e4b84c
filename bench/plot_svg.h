// Memory-vs-makespan plot of one profile, written directly as SVG: a point per method that fits
// at each budget (x: its peak memory per rank, y: its makespan), the budgets as dashed lines.
#pragma once

#include <string>
#include <vector>

#include "bench/measure.h"

namespace optpipe::bench {

std::string memory_makespan_svg(const std::string& profile, const std::vector<CaseResult>& cases);

}  // namespace optpipe::bench

// The timeline picture behind `optpipe render` (docs/exports.md): per rank a compute row coloured
// by op type, offload (D2H) and reload (H2D) lanes under it, and a strip with the rank's memory
// curve against its budget; makespan and idle percentages in the title.
#pragma once

#include <string>
#include <string_view>

#include "model/problem.h"
#include "model/schedule.h"
#include "timing/metrics.h"

namespace optpipe {

// A standalone SVG document. Every action is one <rect class="action ..."> with a <title>
// tooltip naming it and its times.
std::string render_svg(const Problem& problem, const Schedule& schedule, const Metrics& metrics);

// Text made safe inside XML content and attribute values (& < > " ').
std::string escape_xml(std::string_view text);

// The same SVG inline in a minimal HTML page.
std::string render_html(const Problem& problem, const Schedule& schedule, const Metrics& metrics);

}  // namespace optpipe

#include "bench/plot_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "views/render_svg.h"

namespace optpipe::bench {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kWidth = 960, kHeight = 540;
constexpr double kLeft = 70, kRight = 220, kTop = 40, kBottom = 50;  // margins; legend on the right

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
                                "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"};

struct Point {
  double peak_gib;
  double makespan;
  double budget_fraction;
};

// A "nice" tick step giving about `ticks` ticks over `span`.
double tick_step(double span, int ticks) {
  const double raw = span / ticks;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * magnitude) return m * magnitude;
  }
  return 10 * magnitude;
}

}  // namespace

std::string memory_makespan_svg(const std::string& profile, const std::vector<CaseResult>& cases) {
  std::map<std::string, std::vector<Point>> series;  // label -> points that fit
  std::vector<std::pair<double, double>> budgets;    // GiB, fraction
  for (const CaseResult& c : cases) {
    if (c.profile != profile) continue;
    budgets.emplace_back(*std::max_element(c.budget_bytes.begin(), c.budget_bytes.end()) / kGiB,
                         c.budget_fraction);
    auto add = [&](const MethodResult& r, const std::string& label) {
      if (r.error.empty() && r.feasible) {
        series[label].push_back({r.peak_bytes / kGiB, r.makespan, c.budget_fraction});
      }
    };
    for (const MethodResult& r : c.generators) add(r, r.label());
    for (const MethodResult& r : c.optimizer) add(r, r.label());
  }
  double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
  for (const auto& [label, points] : series) {
    for (const Point& p : points) {
      x_lo = std::min(x_lo, p.peak_gib);
      x_hi = std::max(x_hi, p.peak_gib);
      y_lo = std::min(y_lo, p.makespan);
      y_hi = std::max(y_hi, p.makespan);
    }
  }
  for (const auto& [gib, fraction] : budgets) {
    x_lo = std::min(x_lo, gib);
    x_hi = std::max(x_hi, gib);
  }
  if (x_lo > x_hi) x_lo = 0, x_hi = 1;
  if (y_lo > y_hi) y_lo = 0, y_hi = 1;
  const double x_pad = std::max(0.5, 0.05 * (x_hi - x_lo));
  const double y_pad = std::max(1.0, 0.05 * (y_hi - y_lo));
  x_lo -= x_pad, x_hi += x_pad, y_lo -= y_pad, y_hi += y_pad;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}: makespan vs peak memory per rank "
      "(schedules within budget)</text>\n",
      kWidth, kHeight, kLeft, escape_xml(profile));
  // Axes and ticks.
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      kLeft, kTop, plot_w, plot_h);
  const double xs = tick_step(x_hi - x_lo, 8), ys = tick_step(y_hi - y_lo, 8);
  for (double x = std::ceil(x_lo / xs) * xs; x <= x_hi; x += xs) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        px(x), kTop + plot_h, kTop + plot_h + 5, kTop + plot_h + 18, x);
  }
  for (double y = std::ceil(y_lo / ys) * ys; y <= y_hi; y += ys) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"black\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft - 5, py(y), kLeft, kLeft - 8, py(y) + 4, y);
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak memory per rank (GiB, "
      "highest rank)</text>\n",
      kLeft + plot_w / 2, kHeight - 12);
  svg += fmt::format(
      "<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">"
      "makespan (ms)</text>\n",
      kTop + plot_h / 2);
  // Budgets: dashed vertical lines.
  for (const auto& [gib, fraction] : budgets) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#999\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{0:.1f}\" y=\"{3}\" fill=\"#666\" "
        "text-anchor=\"end\" font-size=\"10\">budget {4:.0f}%</text>\n",
        px(gib), kTop, kTop + plot_h, kTop + 12, 100 * fraction);
  }
  // Points and legend: squares for the optimiser, circles for generators.
  int index = 0;
  for (const auto& [label, points] : series) {
    const char* colour = kPalette[index % std::size(kPalette)];
    const bool milp = label.rfind("milp", 0) == 0;
    auto marker = [&](double x, double y) {
      return milp ? fmt::format(
                        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" "
                        "fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                        x - 4, y - 4, colour)
                  : fmt::format(
                        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" "
                        "fill-opacity=\"0.8\"/>",
                        x, y, colour);
    };
    for (const Point& p : points) {
      svg += fmt::format("<g>{}<title>{} at {:.0f}% budget: {:.1f} ms, {:.2f} GiB</title></g>\n",
                         marker(px(p.peak_gib), py(p.makespan)), escape_xml(label),
                         100 * p.budget_fraction, p.makespan, p.peak_gib);
    }
    const double ly = kTop + 8 + 16 * index;
    svg +=
        fmt::format("{}<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", marker(kWidth - kRight + 20, ly),
                    kWidth - kRight + 30, ly + 4, escape_xml(label));
    ++index;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace optpipe::bench

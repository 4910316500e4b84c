#include "views/render_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "formats/units.h"
#include "timing/memory_timeline.h"

namespace optpipe {

namespace {

// Layout in pixels.
constexpr double kLeft = 150;  // rank labels
constexpr double kPlotWidth = 1200;
constexpr double kRight = 20;
constexpr double kHeader = 78;  // title, subtitle, legend
constexpr double kAxis = 22;
constexpr double kComputeRow = 20;
constexpr double kLane = 8;
constexpr double kMemoryStrip = 34;
constexpr double kRankGap = 12;
constexpr double kFooter = 16;

const char* colour_of(Op op) {
  switch (op) {
    case Op::kForward:
      return "#4c78a8";
    case Op::kBackwardInput:
      return "#f58518";
    case Op::kBackwardWeight:
      return "#54a24b";
    case Op::kBackward:
      return "#e45756";
    case Op::kOffload:
      return "#b279a2";
    case Op::kReload:
      return "#9d755d";
    case Op::kRecompute:
      return "#72b7b2";
  }
  return "#888888";
}

const char* meaning_of(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackwardInput:
      return "input backward";
    case Op::kBackwardWeight:
      return "weight backward";
    case Op::kBackward:
      return "fused backward";
    case Op::kOffload:
      return "(D2H)";
    case Op::kReload:
      return "(H2D)";
    case Op::kRecompute:
      return "recompute";
  }
  return "";
}

// 1, 2 or 5 times a power of ten, giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10 * power;
}

struct Canvas {
  double begin;  // time at the left edge
  double span;   // time across the plot
  double x(double t) const { return kLeft + (t - begin) / span * kPlotWidth; }
};

struct RankLayout {
  double top;
  double compute_y;
  double offload_y;
  double reload_y;
  double memory_y;  // top of the memory strip
  double bottom;
};

class SvgBuilder {
 public:
  SvgBuilder(const Problem& problem, const Schedule& schedule, const Metrics& metrics)
      : problem_(problem), schedule_(schedule), metrics_(metrics) {
    const auto [begin, end] = time_extent(schedule);
    for (const auto& actions : schedule.ranks) {
      for (const Action& a : actions) has_transfers_ = has_transfers_ || is_transfer(a.ref.op);
    }
    canvas_ = {begin, end > begin ? end - begin : 1.0};
    has_transfers_ = has_transfers_ || problem.offload.has_value();
  }

  std::string build() {
    const int ranks = static_cast<int>(schedule_.ranks.size());
    const double block =
        kComputeRow + (has_transfers_ ? 2 * kLane + 2 : 0) + kMemoryStrip + kRankGap;
    const double width = kLeft + kPlotWidth + kRight;
    const double height = kHeader + kAxis + ranks * block + kFooter;
    out_ += fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
        "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"Helvetica, Arial, sans-serif\" "
        "font-size=\"11\">\n",
        width, height);
    out_ += fmt::format("<title>{}</title>\n", escape_xml(title()));
    out_ +=
        fmt::format("<rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n",
                    width, height);
    header();
    axis(kHeader + kAxis + ranks * block);
    for (int r = 0; r < ranks; ++r) {
      const double top = kHeader + kAxis + r * block;
      RankLayout layout{top, top, 0, 0, 0, 0};
      double y = top + kComputeRow;
      if (has_transfers_) {
        layout.offload_y = y + 1;
        layout.reload_y = y + 1 + kLane + 1;
        y += 2 * kLane + 2;
      }
      layout.memory_y = y + 2;
      layout.bottom = y + kMemoryStrip;
      rank(r, layout);
    }
    out_ += "</svg>\n";
    return std::move(out_);
  }

  std::string title() const {
    return fmt::format("{} · {} · makespan {:.3f} {} · idle {:.1f}% · bubble rate {:.1f}%{}",
                       problem_.name, schedule_.method, metrics_.makespan,
                       to_string(problem_.time_unit), 100 * metrics_.idle_fraction,
                       100 * metrics_.bubble_rate, metrics_.within_budget ? "" : " · OVER BUDGET");
  }

 private:
  void header() {
    out_ +=
        fmt::format("<text x=\"{:.0f}\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                    kLeft, escape_xml(title()));
    out_ += fmt::format(
        "<text x=\"{:.0f}\" y=\"40\" fill=\"#555555\">{} ranks × {} chunks, {} microbatches; "
        "lower bound {:.3f} {} from {} (gap {:.1f}%); labels: {}; memory strips run from static "
        "bytes (bottom) to the budget</text>\n",
        kLeft, problem_.ranks, problem_.chunks_per_rank, problem_.microbatches,
        metrics_.lower_bound, to_string(problem_.time_unit), to_string(metrics_.lower_bound_source),
        std::max(0.0, 100 * metrics_.gap),  // no "-0.0%" from rounding
        problem_.chunks_per_rank > 1 ? "stage:microbatch" : "microbatch");
    double x = kLeft;
    for (Op op : {Op::kForward, Op::kBackwardInput, Op::kBackwardWeight, Op::kBackward,
                  Op::kRecompute, Op::kOffload, Op::kReload}) {
      out_ += fmt::format(
          "<rect class=\"legend\" x=\"{:.0f}\" y=\"50\" width=\"12\" height=\"12\" fill=\"{}\"/>"
          "<text x=\"{:.0f}\" y=\"60\">{} {}</text>\n",
          x, colour_of(op), x + 16, to_string(op), meaning_of(op));
      x += 135;
    }
    out_ += fmt::format(
        "<line x1=\"{0:.0f}\" y1=\"56\" x2=\"{1:.0f}\" y2=\"56\" stroke=\"#d62728\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{2:.0f}\" y=\"60\">budget</text>\n",
        x, x + 18, x + 22);
  }

  void axis(double bottom) {
    const double step = tick_step(canvas_.span, 10);
    const double axis_y = kHeader + kAxis - 6;
    for (double t = 0; t <= canvas_.span * (1 + 1e-9); t += step) {
      const double x = canvas_.x(canvas_.begin + t);
      out_ += fmt::format(
          "<line x1=\"{0:.2f}\" y1=\"{1:.0f}\" x2=\"{0:.2f}\" y2=\"{2:.0f}\" stroke=\"#e6e6e6\"/>"
          "<text x=\"{0:.2f}\" y=\"{3:.0f}\" text-anchor=\"middle\" "
          "fill=\"#555555\">{4:g}</text>\n",
          x, axis_y, bottom, axis_y - 4, canvas_.begin + t);
    }
    out_ += fmt::format(
        "<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\" fill=\"#555555\">{}</text>\n",
        kLeft - 8, axis_y - 4, to_string(problem_.time_unit));
  }

  void rank(int r, const RankLayout& layout) {
    const RankMetrics& rm = metrics_.ranks[r];
    const double idle = metrics_.makespan > 0 ? 100 * (1 - rm.busy / metrics_.makespan) : 0;
    out_ += fmt::format("<g class=\"rank\" id=\"rank{}\">\n", r);
    out_ += fmt::format(
        "<text x=\"8\" y=\"{0:.1f}\" font-weight=\"bold\">rank {1}</text>"
        "<text x=\"{2:.0f}\" y=\"{0:.1f}\" text-anchor=\"end\">idle {3:.1f}%</text>\n",
        layout.compute_y + 14, r, kLeft - 8, idle);
    out_ += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#f4f4f4\"/>\n",
        kLeft, layout.compute_y, kPlotWidth, kComputeRow);
    if (has_transfers_) {
      for (const auto& [y, name] : {std::pair{layout.offload_y, "D2H"}, {layout.reload_y, "H2D"}}) {
        out_ += fmt::format(
            "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#f9f9f9\"/>"
            "<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"8\" "
            "fill=\"#777777\">{}</text>\n",
            kLeft, y, kPlotWidth, kLane, kLeft - 2, y + 7, name);
      }
    }
    for (const Action& a : schedule_.ranks[r]) action(a, layout);
    memory(r, layout);
    out_ += "</g>\n";
  }

  void action(const Action& a, const RankLayout& layout) {
    double y = layout.compute_y;
    double h = kComputeRow;
    if (is_transfer(a.ref.op)) {
      y = a.ref.op == Op::kOffload ? layout.offload_y : layout.reload_y;
      h = kLane;
    }
    const double x = canvas_.x(a.start);
    const double w = std::max(canvas_.x(a.end) - x, 0.5);
    const std::string_view op = to_string(a.ref.op);
    out_ += fmt::format(
        "<rect class=\"action {}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" "
        "fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>{} s{} mb{}: {:g} to {:g} "
        "{}{}</title></rect>\n",
        op, x, y, w, h, colour_of(a.ref.op), op, a.ref.stage, a.ref.microbatch, a.start, a.end,
        to_string(problem_.time_unit),
        is_transfer(a.ref.op) ? fmt::format(", {}", format_bytes_short(a.bytes)) : "");
    if (is_compute(a.ref.op)) {
      const std::string label = problem_.chunks_per_rank > 1
                                    ? fmt::format("{}:{}", a.ref.stage, a.ref.microbatch)
                                    : fmt::format("{}", a.ref.microbatch);
      if (w >= 6.5 * label.size() + 2) {
        out_ += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"10\" "
            "fill=\"#ffffff\" pointer-events=\"none\">{}</text>\n",
            x + w / 2, y + 14, label);
      }
    }
  }

  // Static + live bytes as a step curve, scaled so the budget (or the peak, if higher) fills the
  // strip, with the budget as a dashed line.
  void memory(int r, const RankLayout& layout) {
    const int64_t static_bytes = problem_.static_bytes[r];
    const int64_t budget = problem_.budget_bytes[r];
    const int64_t peak = metrics_.ranks[r].peak_bytes;
    const double top = layout.memory_y + 2;
    const double bottom = layout.bottom;
    // From static bytes up, so that the activations' rise and fall is visible.
    const double range =
        static_cast<double>(std::max({budget, peak, static_bytes + 1}) - static_bytes);
    auto y_of = [&](int64_t bytes) {
      return bottom - (bottom - top) * static_cast<double>(bytes - static_bytes) / range;
    };

    const std::vector<MemoryStep> timeline = memory_timeline(problem_, schedule_.ranks[r]);
    std::string path = fmt::format("M{:.2f},{:.2f} L{:.2f},{:.2f}", canvas_.x(canvas_.begin),
                                   bottom, canvas_.x(canvas_.begin), y_of(static_bytes));
    for (const MemoryStep& step : timeline) {
      const double x = canvas_.x(step.time);
      path += fmt::format(" H{:.2f} V{:.2f}", x, y_of(static_bytes + step.live_bytes));
    }
    path += fmt::format(" H{:.2f} V{:.2f} Z", canvas_.x(canvas_.begin + canvas_.span), bottom);
    out_ += fmt::format(
        "<path class=\"memory\" d=\"{}\" fill=\"#9ecae1\" fill-opacity=\"0.6\" stroke=\"#3182bd\" "
        "stroke-width=\"1\"/>\n",
        path);
    out_ += fmt::format(
        "<line class=\"budget\" x1=\"{:.0f}\" y1=\"{:.2f}\" x2=\"{:.0f}\" y2=\"{:.2f}\" "
        "stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n",
        kLeft, y_of(budget), kLeft + kPlotWidth, y_of(budget));
    out_ += fmt::format(
        "<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"9\" fill=\"{}\">peak {} / "
        "{}</text>\n",
        kLeft - 8, bottom - 4, peak > budget ? "#d62728" : "#555555",
        escape_xml(format_bytes_short(peak)), escape_xml(format_bytes_short(budget)));
  }

  const Problem& problem_;
  const Schedule& schedule_;
  const Metrics& metrics_;
  Canvas canvas_{0, 1};
  bool has_transfers_ = false;
  std::string out_;
};

}  // namespace

std::string render_svg(const Problem& problem, const Schedule& schedule, const Metrics& metrics) {
  return SvgBuilder(problem, schedule, metrics).build();
}

std::string render_html(const Problem& problem, const Schedule& schedule, const Metrics& metrics) {
  SvgBuilder builder(problem, schedule, metrics);
  const std::string title = escape_xml(builder.title());
  std::string svg = builder.build();
  svg.erase(0, svg.find("<svg"));  // the XML declaration does not belong inside HTML
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n"
      "</head>\n<body style=\"margin:0\">\n{}</body>\n</html>\n",
      title, svg);
}

std::string escape_xml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace optpipe

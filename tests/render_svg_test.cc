// The timeline SVG is well-formed XML and complete: one rect per action, a memory curve and a
// budget line per rank, makespan and idle percentage in the title.
#include "views/render_svg.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "driver/compile_driver.h"
#include "formats/profile.h"
#include "heuristics/gpipe.h"
#include "heuristics/interleaved_1f1b.h"
#include "heuristics/one_f_one_b.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"

namespace optpipe {
namespace {

using testing::uniform_problem;

// A minimal XML well-formedness check: one root element, tags nest and match, attributes are
// quoted and unique, '<' never appears in text or values, every '&' starts an entity. Returns the
// first problem, or "" when well-formed. Counts start tags by their `class` attribute.
class XmlChecker {
 public:
  explicit XmlChecker(std::string_view text) : text_(text) {}

  std::string check() {
    int roots = 0;
    while (pos_ < text_.size()) {
      const size_t lt = text_.find('<', pos_);
      const std::string_view chars =
          text_.substr(pos_, lt == std::string_view::npos ? lt : lt - pos_);
      if (auto error = check_text(chars); !error.empty()) return error;
      if (stack_.empty() && chars.find_first_not_of(" \t\r\n") != std::string_view::npos) {
        return "text outside the root element";
      }
      if (lt == std::string_view::npos) break;
      pos_ = lt;
      if (starts_with("<?")) {
        if (!skip_past("?>")) return "unterminated processing instruction";
      } else if (starts_with("<!--")) {
        if (!skip_past("-->")) return "unterminated comment";
      } else if (starts_with("</")) {
        pos_ += 2;
        const std::string name = read_name();
        skip_space();
        if (!starts_with(">")) return "bad end tag " + name;
        ++pos_;
        if (stack_.empty() || stack_.back() != name) return "mismatched end tag " + name;
        stack_.pop_back();
      } else {
        if (stack_.empty() && roots++ > 0) return "second root element";
        if (auto error = start_tag(); !error.empty()) return error;
      }
    }
    if (!stack_.empty()) return "unclosed element " + stack_.back();
    if (roots != 1) return "no root element";
    return {};
  }

  const std::map<std::string, int>& classes() const { return classes_; }
  const std::map<std::string, int>& elements() const { return elements_; }

 private:
  std::string start_tag() {
    ++pos_;
    const std::string name = read_name();
    if (name.empty()) return "tag without a name";
    ++elements_[name];
    std::set<std::string> attributes;
    for (;;) {
      const size_t before = pos_;
      skip_space();
      if (starts_with("/>")) {
        pos_ += 2;
        return {};
      }
      if (starts_with(">")) {
        ++pos_;
        stack_.push_back(name);
        return {};
      }
      if (pos_ == before) return "attributes of " + name + " not separated by space";
      const std::string attribute = read_name();
      if (attribute.empty()) return "bad attribute in " + name;
      if (!attributes.insert(attribute).second) return "duplicate attribute " + attribute;
      skip_space();
      if (!starts_with("=")) return "attribute " + attribute + " without value";
      ++pos_;
      skip_space();
      if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\'')) {
        return "unquoted attribute " + attribute;
      }
      const char quote = text_[pos_++];
      const size_t end = text_.find(quote, pos_);
      if (end == std::string_view::npos) return "unterminated attribute " + attribute;
      const std::string_view value = text_.substr(pos_, end - pos_);
      if (value.find('<') != std::string_view::npos) return "'<' in attribute " + attribute;
      if (auto error = check_text(value); !error.empty()) return error;
      if (attribute == "class") ++classes_[std::string(value.substr(0, value.find(' ')))];
      pos_ = end + 1;
    }
  }

  static std::string check_text(std::string_view chars) {
    for (size_t amp = chars.find('&'); amp != std::string_view::npos;
         amp = chars.find('&', amp + 1)) {
      const size_t semi = chars.find(';', amp);
      if (semi == std::string_view::npos || semi == amp + 1 || semi - amp > 10) {
        return "bare '&' in text";
      }
      const std::string_view entity = chars.substr(amp + 1, semi - amp - 1);
      static const std::set<std::string_view> known = {"amp", "lt", "gt", "quot", "apos"};
      if (entity[0] != '#' && !known.count(entity)) return "unknown entity " + std::string(entity);
    }
    return {};
  }

  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '-' ||
            text_[pos_] == '_' || text_[pos_] == ':' || text_[pos_] == '.')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool starts_with(std::string_view s) const { return text_.substr(pos_).starts_with(s); }
  bool skip_past(std::string_view s) {
    const size_t end = text_.find(s, pos_);
    if (end == std::string_view::npos) return false;
    pos_ = end + s.size();
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<std::string> stack_;
  std::map<std::string, int> classes_;
  std::map<std::string, int> elements_;
};

TEST(XmlChecker, CatchesMalformedDocuments) {
  EXPECT_EQ(XmlChecker("<a x=\"1\"><b/>t &amp; u</a>").check(), "");
  EXPECT_NE(XmlChecker("<a><b></a></b>").check(), "");
  EXPECT_NE(XmlChecker("<a x=1/>").check(), "");
  EXPECT_NE(XmlChecker("<a>R&D</a>").check(), "");
  EXPECT_NE(XmlChecker("<a/><b/>").check(), "");
  EXPECT_NE(XmlChecker("<a x=\"1\" x=\"2\"/>").check(), "");
  EXPECT_NE(XmlChecker("<a>").check(), "");
}

size_t count_of(const std::string& text, std::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

void expect_complete_svg(const Problem& p, const Schedule& s) {
  const Metrics metrics = compute_metrics(p, s);
  const std::string svg = render_svg(p, s, metrics);
  XmlChecker xml(svg);
  ASSERT_EQ(xml.check(), "");
  size_t actions = 0;
  std::map<std::string, int> per_op;
  for (const auto& rank : s.ranks) {
    actions += rank.size();
    for (const Action& a : rank) ++per_op[std::string(to_string(a.ref.op))];
  }
  EXPECT_EQ(xml.classes().at("action"), static_cast<int>(actions));
  EXPECT_EQ(count_of(svg, "<rect class=\"action "), actions);
  for (const auto& [op, n] : per_op) {
    EXPECT_EQ(count_of(svg, "<rect class=\"action " + op + "\""), static_cast<size_t>(n)) << op;
  }
  EXPECT_EQ(xml.classes().at("rank"), p.ranks);
  EXPECT_EQ(xml.classes().at("memory"), p.ranks);
  EXPECT_EQ(xml.classes().at("budget"), p.ranks);
  EXPECT_NE(svg.find(fmt::format("makespan {:.3f}", metrics.makespan)), std::string::npos);
  EXPECT_NE(svg.find(fmt::format("idle {:.1f}%", 100 * metrics.idle_fraction)), std::string::npos);
}

TEST(RenderSvg, OneFOneBIsWellFormedAndComplete) {
  const Problem p = uniform_problem(4, 1, 8);
  expect_complete_svg(p, simulate(p, one_f_one_b_order(p), "1f1b"));
}

TEST(RenderSvg, DrawsOffloadAndReloadLanes) {
  Problem p = uniform_problem(2, 1, 3);
  const Schedule s = testing::offloading_1f1b(p);
  expect_complete_svg(p, s);
  const std::string svg = render_svg(p, s, compute_metrics(p, s));
  EXPECT_EQ(count_of(svg, "<rect class=\"action OFFLOAD\""), 3u);
  EXPECT_EQ(count_of(svg, "<rect class=\"action RELOAD\""), 3u);
  EXPECT_NE(svg.find(">D2H<"), std::string::npos);
  EXPECT_NE(svg.find(">H2D<"), std::string::npos);
}

TEST(RenderSvg, DrawsRecomputesInTheComputeRow) {
  Problem p = uniform_problem(2, 1, 3);
  const Schedule s = testing::recomputing_1f1b(p, 100);
  expect_complete_svg(p, s);
  const std::string svg = render_svg(p, s, compute_metrics(p, s));
  EXPECT_EQ(count_of(svg, "<rect class=\"action R\""), 6u);
  EXPECT_NE(svg.find(">R recompute<"), std::string::npos);  // its legend entry
}

TEST(RenderSvg, EscapesNamesAndFlagsOverBudget) {
  Problem p = uniform_problem(2, 1, 4);
  p.name = "a<b & \"c\"";
  p.budget_bytes.assign(2, p.static_bytes[0] + 1500);  // GPipe holds 4 activations of 1000 B
  const Schedule s = simulate(p, gpipe_order(p), "gpipe");
  const std::string svg = render_svg(p, s, compute_metrics(p, s));
  EXPECT_EQ(XmlChecker(svg).check(), "");
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("OVER BUDGET"), std::string::npos);
}

TEST(RenderSvg, RendersACompiledExample) {
  const char* dir = std::getenv("OPTPIPE_SOURCE_DIR");
  ASSERT_NE(dir, nullptr);
  const Problem p = load_profile(std::string(dir) + "/examples/gpt-8rank.json");
  const CompileResult result = compile(p, "auto");
  expect_complete_svg(p, result.best.schedule);
}

TEST(RenderHtml, WrapsTheSvgInAPage) {
  const Problem p = uniform_problem(2, 2, 4);
  const Schedule s = simulate(p, interleaved_1f1b_order(p), "interleaved-1f1b");
  const std::string html = render_html(p, s, compute_metrics(p, s));
  ASSERT_TRUE(html.starts_with("<!DOCTYPE html>"));
  const size_t begin = html.find("<svg");
  const size_t end = html.find("</svg>");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(XmlChecker(html.substr(begin, end + 6 - begin)).check(), "");
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
}

}  // namespace
}  // namespace optpipe

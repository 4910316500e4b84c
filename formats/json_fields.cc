#include "formats/json_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/errors.h"

namespace optpipe {

namespace {

using nlohmann::json;

constexpr size_t kPreviewChars = 60;
constexpr int kPreviewDepth = 4;

// Every message is one line, whatever a key, value or file name holds.
[[noreturn]] void throw_at(const std::string& source, std::string_view path,
                           std::string_view message) {
  std::string line = path.empty() ? fmt::format("{}: {}", source, message)
                                  : fmt::format("{}: {}: {}", source, path, message);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  throw InputError(line);
}

bool is_plain_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  });
}

std::string json_quoted(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Joins names as `"a", "b" or "c"` (quoted) or `a, b, c` (plain).
std::string join_names(const std::vector<std::string_view>& names, bool quote) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += quote ? (i + 1 == names.size() ? " or " : ", ") : ", ";
    out += quote ? json_quoted(names[i]) : std::string(names[i]);
  }
  return out;
}

std::optional<int64_t> as_int64(const json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (value.is_number_float()) {
    const double x = value.get<double>();
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (!std::isfinite(x) || std::trunc(x) != x || x < -kTwoTo63 || x >= kTwoTo63) {
      return std::nullopt;
    }
    return static_cast<int64_t>(x);
  }
  return std::nullopt;
}

void append_preview(const json& value, int depth, std::string& out) {
  if (out.size() > kPreviewChars) return;
  if (!value.is_structured()) {
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  const bool object = value.is_object();
  out += object ? '{' : '[';
  if (depth >= kPreviewDepth && !value.empty()) {
    out += "...";
  } else {
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= kPreviewChars; ++it) {
      if (!first) out += ',';
      first = false;
      if (object) out += json_quoted(it.key()) + ':';
      append_preview(*it, depth + 1, out);
    }
  }
  out += object ? '}' : ']';
}

// "<source>:<line>:<column>" of a byte offset, both counted from 1.
std::string text_position(std::string_view text, size_t offset, const std::string& source) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
  const size_t line_start =
      before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  return fmt::format("{}:{}:{}", source, line, offset - line_start + 1);
}

[[noreturn]] void throw_malformed(std::string_view position, std::string_view reason) {
  constexpr size_t kLongestReason = 160;
  std::string message =
      fmt::format("{}: malformed JSON: {}", position, reason.substr(0, kLongestReason));
  // The reason quotes raw input; keep the message one line of ASCII (it may land in JSON output).
  for (char& c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20) c = ' ';
    if (byte >= 0x80) c = '?';
  }
  throw InputError(message);
}

// nlohmann's messages start "[json.exception.parse_error.101] parse error at line 3, column 17: ";
// the position is recomputed from the byte offset, the rest is the reason.
std::string_view parse_error_reason(std::string_view what) {
  const size_t start = what.find("parse error");
  const size_t colon = what.find(": ", start == std::string_view::npos ? 0 : start);
  return colon == std::string_view::npos ? what : what.substr(colon + 2);
}

}  // namespace

std::string preview_json(const json& value) {
  std::string out;
  append_preview(value, 0, out);
  if (out.size() <= kPreviewChars) return out;
  size_t cut = kPreviewChars;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8
  return out.substr(0, cut) + "...";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string_view> nearest_name(std::string_view word,
                                             const std::vector<std::string_view>& options) {
  constexpr size_t kLongestTypo = 64;
  if (word.empty() || word.size() > kLongestTypo) return std::nullopt;
  auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string lower_word = lower(word);
  std::optional<std::string_view> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (std::string_view option : options) {
    const size_t distance = edit_distance(lower_word, lower(option));
    if (distance < best_distance && distance < std::max(word.size(), option.size())) {
      best = option;
      best_distance = distance;
    }
  }
  if (best) return best;
  // An abbreviation: "fwd" for "forward".
  for (std::string_view option : options) {
    const std::string lower_option = lower(option);
    if (lower_option.empty() || lower_option.front() != lower_word.front()) continue;
    size_t matched = 0;
    for (char c : lower_option) {
      if (matched < lower_word.size() && c == lower_word[matched]) ++matched;
    }
    if (matched == lower_word.size() && word.size() >= 2) return option;
  }
  return std::nullopt;
}

namespace {

// nlohmann keeps the last of two equal keys; a document that says "ranks" twice is a mistake.
// Found by a SAX pass of its own: nlohmann's callback parser erases discarded values by scanning
// the enclosing object or array at each object's end, quadratic in a long array of objects.
class RepeatedKeyFinder : public nlohmann::json_sax<json> {
 public:
  std::string twice;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second && twice.empty()) twice = key;
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // reported by the parse proper
  }

 private:
  std::vector<std::set<std::string>> keys_;  // per object open at this point
};

// Where the text first opens its (kMaxJsonDepth + 1)-th nested array or object, outside strings:
// refused before a document is built, whose copies recurse once per level.
std::optional<size_t> too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace

json parse_json_document(std::string_view text, const std::string& source) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw_malformed(text_position(text, nul, source),
                    "a NUL byte, which JSON text never has (a binary file?)");
  }
  if (const std::optional<size_t> at = too_deep(text)) {
    throw_malformed(text_position(text, *at, source),
                    fmt::format("arrays and objects nested deeper than {} levels, the most "
                                "optpipe reads",
                                kMaxJsonDepth));
  }
  try {
    json document = json::parse(text.begin(), text.end());
    RepeatedKeyFinder finder;
    json::sax_parse(text.begin(), text.end(), &finder);
    if (!finder.twice.empty()) {
      throw_malformed(
          source, fmt::format("key \"{}\" appears twice in one object; keep one", finder.twice));
    }
    return document;
  } catch (const json::parse_error& e) {
    throw_malformed(text_position(text, e.byte == 0 ? 0 : e.byte - 1, source),
                    parse_error_reason(e.what()));
  } catch (const json::out_of_range& e) {
    // A number too large for a double ("1e999"): nlohmann quotes it but gives no offset.
    const std::string_view what = e.what();
    const size_t open = what.find('\'');
    const size_t close = what.rfind('\'');
    const std::string_view number =
        open < close ? what.substr(open + 1, close - open - 1) : std::string_view();
    const size_t at = number.empty() ? std::string_view::npos : text.find(number);
    throw_malformed(at == std::string_view::npos ? source : text_position(text, at, source),
                    "number out of range" + (number.empty() ? "" : fmt::format(" {}", number)));
  } catch (const json::exception& e) {
    throw_malformed(source, e.what());
  }
}

JsonField::JsonField(const json& root, const std::string& source)
    : JsonField(root, std::string(), &source) {}

JsonField::JsonField(const json& value, std::string path, const std::string* source)
    : value_(&value), path_(std::move(path)), source_(source) {}

std::string JsonField::where() const {
  return path_.empty() ? *source_ : fmt::format("{}: {}", *source_, path_);
}

void JsonField::fail(std::string_view what, std::string_view fix) const {
  std::string message = fmt::format("{}, got {}", what, preview_json(value()));
  if (!fix.empty()) message += fmt::format("; {}", fix);
  throw_at(*source_, path_, message);
}

void JsonField::fail_plain(std::string_view message) const {
  throw_at(*source_, path_, message);
}

std::string JsonField::child_path(std::string_view key) const {
  const std::string name = is_plain_key(key) ? std::string(key) : "[" + json_quoted(key) + "]";
  if (path_.empty()) return name;
  return name.front() == '[' ? path_ + name : path_ + "." + name;
}

void JsonField::expect_object(std::initializer_list<std::string_view> known_keys) const {
  if (!value().is_object()) fail("must be an object");
  const std::vector<std::string_view> known(known_keys);
  for (const auto& item : value().items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto suggestion = nearest_name(key, known);
    throw_at(*source_, child_path(key),
             suggestion ? fmt::format("unknown key; did you mean {}?", json_quoted(*suggestion))
                        : fmt::format("unknown key; expected one of {}", join_names(known, false)));
  }
}

std::optional<JsonField> JsonField::find(std::string_view key) const {
  if (!value().is_object()) fail("must be an object");
  const auto it = value().find(key);
  if (it == value().end()) return std::nullopt;
  return JsonField(*it, child_path(key), source_);
}

void JsonField::fail_missing(std::string_view key, std::string_view hint) const {
  throw_at(*source_, child_path(key), hint.empty() ? "missing" : fmt::format("missing; {}", hint));
}

JsonField JsonField::get(std::string_view key, std::string_view hint) const {
  if (auto child = find(key)) return *child;
  fail_missing(key, hint);
}

std::vector<JsonField> JsonField::items() const {
  if (!value().is_array()) fail("must be a list");
  std::vector<JsonField> out;
  out.reserve(value().size());
  for (size_t i = 0; i < value().size(); ++i) {
    out.push_back(JsonField(value()[i], fmt::format("{}[{}]", path_, i), source_));
  }
  return out;
}

std::string JsonField::string() const {
  if (!value().is_string()) fail("must be a string");
  return value().get<std::string>();
}

int64_t JsonField::integer(int64_t min, int64_t max, std::string_view expected) const {
  const std::optional<int64_t> n = as_int64(value());
  if (n && *n >= min && *n <= max) return *n;
  if (!expected.empty()) fail(expected);
  const bool above =
      n ? *n > max : value().is_number() && value().get<double>() > static_cast<double>(max);
  if (above) fail(fmt::format("must be an integer <= {}", max));
  fail(fmt::format("must be an integer >= {}", min));
}

double JsonField::non_negative_number(double max) const {
  return number(0, /*min_allowed=*/true, max);
}

double JsonField::positive_number(double max) const {
  return number(0, /*min_allowed=*/false, max);
}

double JsonField::number(double min, bool min_allowed, double max) const {
  const std::string expected = fmt::format("must be a number {} {}", min_allowed ? ">=" : ">", min);
  if (!value().is_number()) fail(expected);
  const double x = value().get<double>();
  if (!std::isfinite(x) || x < min || (!min_allowed && x == min)) fail(expected);
  if (x > max) fail(fmt::format("must be a number <= {:g}", max));
  return x;
}

std::string JsonField::choice_name(const std::vector<std::string_view>& names) const {
  const std::string what = fmt::format("must be {}", join_names(names, true));
  if (!value().is_string()) fail(what);
  const std::string name = value().get<std::string>();
  if (std::find(names.begin(), names.end(), name) != names.end()) return name;
  const auto suggestion = nearest_name(name, names);
  fail(what,
       suggestion ? fmt::format("did you mean {}?", json_quoted(*suggestion)) : std::string());
}

}  // namespace optpipe

// Reading JSON input field by field. A JsonField is a value plus the path that leads to it, so
// a check that fails can name the field in the one-line style of errors.h:
//   "<source>: <json.path>: <what is wrong>, got <value>[; <how to fix>]"
// Used by the profile reader; any other reader of a JSON input can use it too.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace optpipe {

// The deepest nesting of arrays and objects parse_json_document reads (profiles, schedules and
// Hugging Face configs nest a few levels).
inline constexpr int kMaxJsonDepth = 512;

// Parses a whole document; malformed JSON, or JSON nested deeper than kMaxJsonDepth, throws
// InputError "<source>:<line>:<column>: malformed JSON: <reason>".
nlohmann::json parse_json_document(std::string_view text, const std::string& source);

class JsonField {
 public:
  static constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

  // The document root. `source` (usually the file path) must outlive the field and its children.
  JsonField(const nlohmann::json& root, const std::string& source);

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  // "<source>: <path>", the prefix of every message about this field.
  std::string where() const;

  // Throw InputError: "<where>: <what>, got <value>[; <fix>]".
  [[noreturn]] void fail(std::string_view what, std::string_view fix = {}) const;
  // Throw InputError without quoting the value: "<where>: <message>".
  [[noreturn]] void fail_plain(std::string_view message) const;
  // Throw InputError about an absent child: "<where>.<key>: missing[; <hint>]".
  [[noreturn]] void fail_missing(std::string_view key, std::string_view hint = {}) const;

  // Objects. expect_object() rejects any key outside `known_keys`, suggesting the nearest one.
  void expect_object(std::initializer_list<std::string_view> known_keys) const;
  std::optional<JsonField> find(std::string_view key) const;
  // The child `key`; "<path>.<key>: missing[; <hint>]" when absent.
  JsonField get(std::string_view key, std::string_view hint = {}) const;
  // The path a child would have, to name a key that is absent.
  std::string child_path(std::string_view key) const;
  // Lists.
  std::vector<JsonField> items() const;

  // Scalars: each checks the type and the range, and names what it expected when it fails.
  std::string string() const;
  // An integer in [min, max]; an integral number such as 4.0 counts. `expected` replaces the
  // default "must be an integer >= min" / "<= max" wording.
  int64_t integer(int64_t min, int64_t max = kNoMax, std::string_view expected = {}) const;
  // A number >= 0 (or > 0) and <= max; JSON numbers are always finite.
  double non_negative_number(double max = std::numeric_limits<double>::max()) const;
  double positive_number(double max = std::numeric_limits<double>::max()) const;
  // One of `options` by name; a near miss gets a suggestion.
  template <typename T>
  T choice(std::initializer_list<std::pair<std::string_view, T>> options) const;

 private:
  JsonField(const nlohmann::json& value, std::string path, const std::string* source);
  std::string choice_name(const std::vector<std::string_view>& names) const;
  double number(double min, bool min_allowed, double max) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* source_;
};

// A short one-line rendering of a JSON value for messages (long values are cut with "...").
std::string preview_json(const nlohmann::json& value);
// Levenshtein distance; used to suggest the key or name that was probably meant.
size_t edit_distance(std::string_view a, std::string_view b);
// The option closest to `word` when it is close enough to be a plausible typo.
std::optional<std::string_view> nearest_name(std::string_view word,
                                             const std::vector<std::string_view>& options);

template <typename T>
T JsonField::choice(std::initializer_list<std::pair<std::string_view, T>> options) const {
  std::vector<std::string_view> names;
  for (const auto& option : options) names.push_back(option.first);
  const std::string name = choice_name(names);
  for (const auto& option : options) {
    if (option.first == name) return option.second;
  }
  return options.begin()->second;  // not reached: choice_name() throws on anything else
}

}  // namespace optpipe

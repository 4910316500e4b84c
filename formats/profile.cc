#include "formats/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>

#include "formats/file_io.h"
#include "formats/json_fields.h"
#include "formats/sha256.h"
#include "formats/units.h"
#include "model/errors.h"

namespace optpipe {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "optpipe.profile/v1";

// Limits far beyond any real pipeline. They keep a hostile profile from allocating without bound
// and keep sums of times and bytes over a whole schedule far from overflow.
constexpr int kMaxRanks = 4096;
constexpr int kMaxChunksPerRank = 64;
constexpr int kMaxMicrobatches = 65536;
constexpr double kMaxTime = 1e12;  // in the profile's time unit
constexpr int64_t kMaxBytes = kMaxSizeBytes;
constexpr double kMinGbPerS = 1e-3;
constexpr double kMaxGbPerS = 1e6;

constexpr std::array<std::string_view, 4> kTimeKeys = {"forward", "backward_input",
                                                       "backward_weight", "recompute_forward"};
constexpr std::array<std::string_view, 4> kSizeKeys = {"activation_bytes", "weight_grad_bytes",
                                                       "offloadable_bytes", "checkpoint_bytes"};

int64_t read_size(const JsonField& field) {
  if (field.value().is_string()) return parse_size(field.value().get<std::string>(), field.where());
  return field.integer(0, kMaxBytes,
                       "must be a size: a byte count in [0, 2^50] or a string like \"40GiB\"");
}

int read_rank(const JsonField& field, int ranks) {
  return static_cast<int>(
      field.integer(0, ranks - 1, fmt::format("must be a rank in [0, {})", ranks)));
}

void read_format(const JsonField& root) {
  const JsonField format = root.get("format", fmt::format("set \"format\": \"{}\"", kFormat));
  if (!format.value().is_string() || format.value().get<std::string>() != kFormat) {
    format.fail(fmt::format("must be \"{}\"", kFormat), "is this an optpipe profile?");
  }
}

std::string default_name(const std::string& source) {
  const std::string stem = std::filesystem::path(source).stem().string();
  return stem.empty() ? "profile" : stem;
}

void read_placement(const std::optional<JsonField>& field, Problem& problem) {
  const std::string_view expected = R"(must be "loop", "vshape" or a list of ranks)";
  if (field && field->value().is_array()) {
    const std::vector<JsonField> entries = field->items();
    const int num_stages = problem.ranks * problem.chunks_per_rank;
    if (static_cast<int>(entries.size()) != num_stages) {
      field->fail_plain(fmt::format("must list ranks * chunks_per_rank = {} stages, got {}",
                                    num_stages, entries.size()));
    }
    std::vector<int> stages_on_rank(problem.ranks, 0);
    for (const JsonField& entry : entries) {
      problem.rank_of_stage.push_back(read_rank(entry, problem.ranks));
      ++stages_on_rank[problem.rank_of_stage.back()];
    }
    for (int rank = 0; rank < problem.ranks; ++rank) {
      if (stages_on_rank[rank] != problem.chunks_per_rank) {
        field->fail_plain(fmt::format("rank {} must host chunks_per_rank = {} stages, got {}", rank,
                                      problem.chunks_per_rank, stages_on_rank[rank]));
      }
    }
    problem.placement = PlacementKind::kExplicit;
    return;
  }
  if (field && !field->value().is_string()) field->fail(expected);
  problem.placement = field ? field->choice<PlacementKind>({{"loop", PlacementKind::kLoop},
                                                            {"vshape", PlacementKind::kVShape}})
                            : PlacementKind::kLoop;
  if (problem.placement == PlacementKind::kVShape && problem.chunks_per_rank != 2) {
    field->fail_plain(fmt::format(
        "\"vshape\" needs chunks_per_rank = 2, got {}; use \"loop\" or an explicit list",
        problem.chunks_per_rank));
  }
  problem.rank_of_stage = place_stages(problem.placement, problem.ranks, problem.chunks_per_rank);
}

void read_pipeline(const JsonField& pipeline, Problem& problem) {
  pipeline.expect_object({"ranks", "chunks_per_rank", "placement", "microbatches"});
  problem.ranks = static_cast<int>(
      pipeline.get("ranks", "the number of pipeline ranks (GPUs)").integer(1, kMaxRanks));
  if (auto chunks = pipeline.find("chunks_per_rank")) {
    problem.chunks_per_rank = static_cast<int>(chunks->integer(1, kMaxChunksPerRank));
  }
  problem.microbatches = static_cast<int>(
      pipeline.get("microbatches", "microbatches per iteration").integer(1, kMaxMicrobatches));
  read_placement(pipeline.find("placement"), problem);
}

// A part of the activation (G, O or C) must fit in it.
int64_t read_part_of_activation(const JsonField& field, int64_t activation_bytes, int stage) {
  const int64_t bytes = read_size(field);
  if (bytes > activation_bytes) {
    field.fail_plain(fmt::format("must be <= activation_bytes of stage {} ({}), got {}", stage,
                                 format_bytes(activation_bytes), format_bytes(bytes)));
  }
  return bytes;
}

// Recompute is enabled for a stage by its checkpoint bytes; T_R defaults to T_F.
void read_recompute(int stage, const std::optional<JsonField>& recompute_forward,
                    const std::optional<JsonField>& checkpoint_bytes, StageCosts& costs) {
  costs.recompute_forward =
      recompute_forward ? recompute_forward->non_negative_number(kMaxTime) : costs.forward;
  if (checkpoint_bytes) {
    costs.checkpoint_bytes =
        read_part_of_activation(*checkpoint_bytes, costs.activation_bytes, stage);
  } else if (recompute_forward) {
    recompute_forward->fail_plain(
        fmt::format("stage {} has no checkpoint_bytes, which recompute needs; set checkpoint_bytes "
                    "(what F keeps when the activation is recomputed, usually the stage input) in "
                    "its stages[] entry or stage_defaults",
                    stage));
  }
}

// Costs of one stage: each key from the stage's own entry, else from stage_defaults.
StageCosts read_stage_costs(int stage, const std::optional<JsonField>& entry,
                            const std::optional<JsonField>& defaults, const JsonField& root) {
  auto find = [&](std::string_view key) -> std::optional<JsonField> {
    if (entry) {
      if (auto field = entry->find(key)) return field;
    }
    return defaults ? defaults->find(key) : std::nullopt;
  };
  auto require = [&](std::string_view key) -> JsonField {
    if (auto field = find(key)) return *field;
    if (entry) {
      entry->fail_missing(key, fmt::format("set it in {} or stage_defaults", entry->path()));
    }
    if (defaults) {
      defaults->fail_missing(key,
                             fmt::format("needed by stage {}, which has no stages[] entry", stage));
    }
    root.fail_missing(
        "stage_defaults",
        fmt::format("stage {} has no stages[] entry, so its {} must come from here", stage, key));
  };
  StageCosts costs;
  costs.forward = require("forward").non_negative_number(kMaxTime);
  costs.backward_input = require("backward_input").non_negative_number(kMaxTime);
  costs.backward_weight = require("backward_weight").non_negative_number(kMaxTime);
  costs.activation_bytes = read_size(require("activation_bytes"));
  costs.offloadable_bytes = costs.activation_bytes;
  if (auto field = find("weight_grad_bytes")) {
    costs.weight_grad_bytes = read_part_of_activation(*field, costs.activation_bytes, stage);
  }
  if (auto field = find("offloadable_bytes")) {
    costs.offloadable_bytes = read_part_of_activation(*field, costs.activation_bytes, stage);
  }
  read_recompute(stage, find("recompute_forward"), find("checkpoint_bytes"), costs);
  return costs;
}

// Checks every value stage_defaults sets, also those that every stage overrides.
void check_stage_defaults(const JsonField& defaults) {
  for (std::string_view key : kTimeKeys) {
    if (auto field = defaults.find(key)) field->non_negative_number(kMaxTime);
  }
  for (std::string_view key : kSizeKeys) {
    if (auto field = defaults.find(key)) read_size(*field);
  }
}

void read_stages(const JsonField& root, Problem& problem) {
  const int num_stages = problem.ranks * problem.chunks_per_rank;
  const std::optional<JsonField> defaults = root.find("stage_defaults");
  if (defaults) {
    defaults->expect_object({"forward", "backward_input", "backward_weight", "activation_bytes",
                             "weight_grad_bytes", "offloadable_bytes", "recompute_forward",
                             "checkpoint_bytes"});
    check_stage_defaults(*defaults);
  }
  std::vector<std::optional<JsonField>> entry_of_stage(num_stages);
  if (auto list = root.find("stages")) {
    for (const JsonField& entry : list->items()) {
      entry.expect_object({"index", "forward", "backward_input", "backward_weight",
                           "activation_bytes", "weight_grad_bytes", "offloadable_bytes",
                           "recompute_forward", "checkpoint_bytes"});
      const JsonField index_field = entry.get("index", "the stage this entry describes");
      const auto index = static_cast<int>(index_field.integer(
          0, num_stages - 1, fmt::format("must be a stage index in [0, {})", num_stages)));
      if (entry_of_stage[index]) {
        index_field.fail(fmt::format("stage {} is already described by {}", index,
                                     entry_of_stage[index]->path()));
      }
      entry_of_stage[index] = entry;
    }
  }
  for (int stage = 0; stage < num_stages; ++stage) {
    problem.stages.push_back(read_stage_costs(stage, entry_of_stage[stage], defaults, root));
  }
}

void read_memory(const JsonField& memory, Problem& problem) {
  memory.expect_object({"budget_bytes", "static_bytes", "per_rank"});
  const std::optional<JsonField> budget_default = memory.find("budget_bytes");
  const std::optional<JsonField> static_default = memory.find("static_bytes");
  if (budget_default) read_size(*budget_default);
  if (static_default) read_size(*static_default);

  std::vector<std::optional<JsonField>> entry_of_rank(problem.ranks);
  if (auto list = memory.find("per_rank")) {
    for (const JsonField& entry : list->items()) {
      entry.expect_object({"rank", "budget_bytes", "static_bytes"});
      const JsonField rank_field = entry.get("rank", "the rank this entry describes");
      const int rank = read_rank(rank_field, problem.ranks);
      if (entry_of_rank[rank]) {
        rank_field.fail(
            fmt::format("rank {} is already described by {}", rank, entry_of_rank[rank]->path()));
      }
      entry_of_rank[rank] = entry;
    }
  }
  for (int rank = 0; rank < problem.ranks; ++rank) {
    const std::optional<JsonField>& entry = entry_of_rank[rank];
    std::optional<JsonField> budget = entry ? entry->find("budget_bytes") : std::nullopt;
    std::optional<JsonField> static_bytes = entry ? entry->find("static_bytes") : std::nullopt;
    if (!budget) budget = budget_default;
    if (!static_bytes) static_bytes = static_default;
    if (!budget) {
      memory.fail_missing(
          "budget_bytes",
          fmt::format("set it for all ranks or in a per_rank entry for rank {}", rank));
    }
    problem.budget_bytes.push_back(read_size(*budget));
    problem.static_bytes.push_back(static_bytes ? read_size(*static_bytes) : 0);
    if (problem.budget_bytes.back() < problem.static_bytes.back()) {
      budget->fail_plain(fmt::format(
          "rank {} budget {} is below its static bytes {}; raise the budget or lower static_bytes",
          rank, format_bytes(problem.budget_bytes.back()),
          format_bytes(problem.static_bytes.back())));
    }
  }
}

// Ranks listed together share their copy channels; every other rank forms a group of its own.
std::vector<int> read_link_groups(const std::optional<JsonField>& field, int ranks) {
  std::vector<int> group_of_rank(ranks, -1);
  int num_groups = 0;
  if (field) {
    for (const JsonField& group : field->items()) {
      const std::vector<JsonField> members = group.items();
      if (members.empty()) group.fail("must list at least one rank");
      for (const JsonField& member : members) {
        const int rank = read_rank(member, ranks);
        if (group_of_rank[rank] != -1) {
          member.fail(fmt::format("rank {} is already in {}[{}]", rank, field->path(),
                                  group_of_rank[rank]));
        }
        group_of_rank[rank] = num_groups;
      }
      ++num_groups;
    }
  }
  for (int& group : group_of_rank) {
    if (group == -1) group = num_groups++;
  }
  return group_of_rank;
}

double read_gb_per_s(const JsonField& field) {
  const double gb_per_s = field.positive_number(kMaxGbPerS);
  if (gb_per_s < kMinGbPerS) field.fail(fmt::format("must be a number >= {:g}", kMinGbPerS));
  return gb_per_s;
}

OffloadLink read_offload(const JsonField& offload, const Problem& problem) {
  offload.expect_object({"d2h_gb_per_s", "h2d_gb_per_s", "channels", "link_groups"});
  // 1 GB/s = 1e9 bytes per second = 1e6 bytes per ms = 1e3 bytes per us.
  const double bytes_per_time_unit_per_gb_per_s =
      problem.time_unit == TimeUnit::kMilliseconds ? 1e6 : 1e3;
  OffloadLink link;
  link.d2h_bytes_per_time =
      read_gb_per_s(offload.get("d2h_gb_per_s", "device-to-host bandwidth in GB/s")) *
      bytes_per_time_unit_per_gb_per_s;
  link.h2d_bytes_per_time =
      read_gb_per_s(offload.get("h2d_gb_per_s", "host-to-device bandwidth in GB/s")) *
      bytes_per_time_unit_per_gb_per_s;
  if (auto channels = offload.find("channels")) {
    link.channels = channels->choice<ChannelMode>(
        {{"shared", ChannelMode::kShared}, {"duplex", ChannelMode::kDuplex}});
  }
  link.link_group_of_rank = read_link_groups(offload.find("link_groups"), problem.ranks);
  return link;
}

// The longest name a profile may give: names are printed in every table and message.
constexpr size_t kMaxNameBytes = 256;

// Characters that change how a terminal shows the rest of a line: C0 and C1 controls, DEL, the
// line and paragraph separators, and the bidirectional embeddings, overrides and isolates.
bool forges_text(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    if (byte(i) < 0x20 || byte(i) == 0x7f) return true;
    if (byte(i) == 0xC2 && i + 1 < text.size() && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9F) {
      return true;  // U+0080..U+009F
    }
    if (byte(i) == 0xE2 && i + 2 < text.size()) {
      const unsigned char second = byte(i + 1), third = byte(i + 2);
      if (second == 0x80 && third >= 0xA8 && third <= 0xAE) return true;  // U+2028..U+202E
      if (second == 0x81 && third >= 0xA6 && third <= 0xA9) return true;  // U+2066..U+2069
    }
  }
  return false;
}

Problem read_profile(const JsonField& root, const std::string& source) {
  read_format(root);
  root.expect_object({"$schema", "format", "name", "time_unit", "pipeline", "stage_defaults",
                      "stages", "p2p_latency", "memory", "offload"});
  if (auto schema = root.find("$schema")) schema->string();  // for editors; not used

  Problem problem;
  const auto name = root.find("name");
  problem.name = name ? name->string() : default_name(source);
  // The name is printed in tables and messages: escape codes, line breaks or direction overrides
  // would forge them, and a name of pages would bury them.
  if (name && forges_text(problem.name)) {
    name->fail_plain("must not contain control characters (escape codes, line breaks, tabs, "
                     "direction overrides)");
  }
  if (name && problem.name.size() > kMaxNameBytes) {
    name->fail_plain(fmt::format("must be at most {} bytes, got {}", kMaxNameBytes,
                                 problem.name.size()));
  }
  if (auto unit = root.find("time_unit")) {
    problem.time_unit =
        unit->choice<TimeUnit>({{"ms", TimeUnit::kMilliseconds}, {"us", TimeUnit::kMicroseconds}});
  }
  read_pipeline(root.get("pipeline"), problem);
  read_stages(root, problem);
  if (auto latency = root.find("p2p_latency")) {
    problem.p2p_latency = latency->non_negative_number(kMaxTime);
  }
  read_memory(root.get("memory", "set memory.budget_bytes, the per-rank memory budget"), problem);
  if (auto offload = root.find("offload")) problem.offload = read_offload(*offload, problem);
  return problem;
}

// The text a profile's SHA-256 is taken of: keys sorted, no whitespace, each floating-point number
// with 17 significant digits (printf's "%.17g", which every language writes alike). nlohmann's
// shortest form is not always Python's (8.521814 came out as 8.521813999999999), and
// optpipe_rt.torch.profile_sha256 must compute the same hash.
void append_canonical(const json& value, std::string& out) {
  if (value.is_object() || value.is_array()) {
    const bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (const auto& item : value.items()) {
      if (!first) out += ',';
      first = false;
      if (object) out += json(item.key()).dump() + ':';
      append_canonical(item.value(), out);
    }
    out += object ? '}' : ']';
  } else if (value.is_number_float()) {
    out += fmt::format("{:.17g}", value.get<double>());
  } else {
    out += value.dump();
  }
}

}  // namespace

Problem parse_profile(std::string_view json_text, const std::string& source) {
  const json document = parse_json_document(json_text, source);
  try {
    Problem problem = read_profile(JsonField(document, source), source);
    std::string canonical;
    append_canonical(document, canonical);
    problem.profile_sha256 = sha256_hex(canonical);
    return problem;
  } catch (const json::exception& e) {
    // Not expected (every access is checked first); still bad input, never a crash.
    std::string message = fmt::format("{}: invalid profile: {}", source, e.what());
    std::replace(message.begin(), message.end(), '\n', ' ');
    throw InputError(message);
  }
}

Problem load_profile(const std::string& path) {
  return parse_profile(read_text_file(path), path);
}

}  // namespace optpipe

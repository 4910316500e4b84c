// Tests of reading `optpipe.profile/v1` (formats/profile.h): the examples, defaults, overrides,
// sizes, one error per way a profile can be wrong, the profile hash, and a fuzz-style property
// test that parse_profile() either returns a consistent Problem or throws a one-line InputError.
#include "formats/profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/errors.h"

namespace optpipe {
namespace {

using nlohmann::json;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;
const char* const kExamples[] = {"gpt-4rank.json", "gpt-8rank.json", "gpt-16rank.json",
                                 "gpt-8rank-vshape.json"};

std::filesystem::path source_dir() {
  if (const char* dir = std::getenv("OPTPIPE_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path();
}

std::filesystem::path example_path(const std::string& name) {
  return source_dir() / "examples" / name;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The smallest complete profile; tests change one thing in it.
json minimal_profile() {
  return json::parse(R"({
    "format": "optpipe.profile/v1",
    "pipeline": {"ranks": 2, "microbatches": 4},
    "stage_defaults": {"forward": 1, "backward_input": 1.5, "backward_weight": 0.5,
                       "activation_bytes": "1GiB"},
    "memory": {"budget_bytes": "16GiB"}
  })");
}

json with_offload(json profile) {
  profile["offload"] = {{"d2h_gb_per_s", 10}, {"h2d_gb_per_s", 20}};
  return profile;
}

Problem parse(const json& profile, const std::string& source = "profile.json") {
  return parse_profile(profile.dump(2), source);
}

// The message parse_profile() throws for `text`, or "" if it accepts it. Fails the test on any
// exception other than InputError.
std::string error_of(const std::string& text) {
  try {
    parse_profile(text, "profile.json");
  } catch (const InputError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception: " << e.what();
  }
  return "";
}

// What every Problem from parse_profile() satisfies, whatever the input was.
void expect_consistent(const Problem& p) {
  ASSERT_GE(p.ranks, 1);
  ASSERT_GE(p.chunks_per_rank, 1);
  ASSERT_GE(p.microbatches, 1);
  const int num_stages = p.ranks * p.chunks_per_rank;
  ASSERT_EQ(p.num_stages(), num_stages);
  ASSERT_EQ(static_cast<int>(p.rank_of_stage.size()), num_stages);
  std::vector<int> stages_on_rank(p.ranks, 0);
  for (int rank : p.rank_of_stage) {
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, p.ranks);
    ++stages_on_rank[rank];
  }
  for (int count : stages_on_rank) EXPECT_EQ(count, p.chunks_per_rank);
  if (p.placement == PlacementKind::kVShape) {
    EXPECT_EQ(p.chunks_per_rank, 2);
  }
  for (const StageCosts& c : p.stages) {
    for (double t : {c.forward, c.backward_input, c.backward_weight}) {
      EXPECT_TRUE(std::isfinite(t) && t >= 0) << t;
    }
    EXPECT_GE(c.weight_grad_bytes, 0);
    EXPECT_LE(c.weight_grad_bytes, c.activation_bytes);
    EXPECT_GE(c.offloadable_bytes, 0);
    EXPECT_LE(c.offloadable_bytes, c.activation_bytes);
    EXPECT_TRUE(std::isfinite(c.recompute_forward) && c.recompute_forward >= 0);
    if (c.checkpoint_bytes) {
      EXPECT_GE(*c.checkpoint_bytes, 0);
      EXPECT_LE(*c.checkpoint_bytes, c.activation_bytes);
    }
  }
  EXPECT_TRUE(std::isfinite(p.p2p_latency) && p.p2p_latency >= 0);
  ASSERT_EQ(static_cast<int>(p.budget_bytes.size()), p.ranks);
  ASSERT_EQ(static_cast<int>(p.static_bytes.size()), p.ranks);
  for (int r = 0; r < p.ranks; ++r) {
    EXPECT_GE(p.static_bytes[r], 0);
    EXPECT_GE(p.budget_bytes[r], p.static_bytes[r]);
  }
  if (p.offload) {
    EXPECT_TRUE(std::isfinite(p.offload->d2h_bytes_per_time) && p.offload->d2h_bytes_per_time > 0);
    EXPECT_TRUE(std::isfinite(p.offload->h2d_bytes_per_time) && p.offload->h2d_bytes_per_time > 0);
    ASSERT_EQ(static_cast<int>(p.offload->link_group_of_rank.size()), p.ranks);
    const std::set<int> groups(p.offload->link_group_of_rank.begin(),
                               p.offload->link_group_of_rank.end());
    EXPECT_EQ(*groups.begin(), 0);
    EXPECT_EQ(*groups.rbegin(), static_cast<int>(groups.size()) - 1);  // ids 0..k-1
  }
  EXPECT_EQ(p.profile_sha256.size(), 64u);
  EXPECT_EQ(p.profile_sha256.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(ProfileExamples, EveryExampleParses) {
  for (const char* name : kExamples) {
    SCOPED_TRACE(name);
    const Problem p = load_profile(example_path(name).string());
    expect_consistent(p);
    EXPECT_FALSE(p.name.empty());
    EXPECT_TRUE(p.offload.has_value());
  }
}

TEST(ProfileExamples, Gpt8RankIsTheDemo) {
  const Problem p = load_profile(example_path("gpt-8rank.json").string());
  EXPECT_EQ(p.ranks, 8);
  EXPECT_EQ(p.chunks_per_rank, 1);
  EXPECT_EQ(p.placement, PlacementKind::kLoop);
  EXPECT_EQ(p.time_unit, TimeUnit::kMilliseconds);
  EXPECT_EQ(p.stages[3].activation_bytes, 3400 * kMiB);  // from stage_defaults
  EXPECT_EQ(p.stages[7].activation_bytes, 4186 * kMiB);  // the LM head stage overrides it
  EXPECT_DOUBLE_EQ(p.stages[7].forward, 33.9);
  EXPECT_EQ(p.stages[7].weight_grad_bytes, 850 * kMiB);
  EXPECT_EQ(p.static_bytes[0], 34 * kGiB);
  EXPECT_EQ(p.static_bytes[3], 30 * kGiB);
  EXPECT_DOUBLE_EQ(p.offload->d2h_bytes_per_time, 25e6);  // 25 GB/s in bytes per ms
  EXPECT_EQ(p.offload->link_group_of_rank, (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  // 1F1B holds R - r activations on rank r: the demo must fit it without offload.
  for (int r = 0; r < p.ranks; ++r) {
    EXPECT_LE((p.ranks - r) * p.stages[r].activation_bytes, p.activation_budget(r)) << r;
  }
}

TEST(ProfileExamples, VShapeExamplePlacesTwoChunksPerRank) {
  const Problem p = load_profile(example_path("gpt-8rank-vshape.json").string());
  EXPECT_EQ(p.placement, PlacementKind::kVShape);
  EXPECT_EQ(p.num_stages(), 16);
  EXPECT_EQ(p.stages_of_rank(0), (std::vector<int>{0, 15}));
  EXPECT_EQ(p.stages_of_rank(7), (std::vector<int>{7, 8}));
}

TEST(ProfileDefaults, OptionalKeysTakeTheirDefaults) {
  const Problem p = parse(minimal_profile(), "some/dir/my-model.json");
  expect_consistent(p);
  EXPECT_EQ(p.name, "my-model");
  EXPECT_EQ(p.time_unit, TimeUnit::kMilliseconds);
  EXPECT_EQ(p.chunks_per_rank, 1);
  EXPECT_EQ(p.placement, PlacementKind::kLoop);
  EXPECT_EQ(p.rank_of_stage, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.p2p_latency, 0);
  EXPECT_EQ(p.static_bytes, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(p.budget_bytes, (std::vector<int64_t>{16 * kGiB, 16 * kGiB}));
  EXPECT_EQ(p.stages[1].weight_grad_bytes, 0);
  EXPECT_EQ(p.stages[1].offloadable_bytes, kGiB);  // O defaults to A
  EXPECT_EQ(p.stages[1].recompute_forward, 1);     // T_R defaults to T_F
  EXPECT_FALSE(p.stages[1].can_recompute());       // no checkpoint_bytes: no recompute
  EXPECT_FALSE(p.offload.has_value());
  EXPECT_EQ(parse(minimal_profile(), "").name, "profile");
}

TEST(ProfileDefaults, OffloadDefaultsToDuplexWithOneGroupPerRank) {
  const Problem p = parse(with_offload(minimal_profile()));
  ASSERT_TRUE(p.offload.has_value());
  EXPECT_EQ(p.offload->channels, ChannelMode::kDuplex);
  EXPECT_EQ(p.offload->link_group_of_rank, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(p.offload->d2h_bytes_per_time, 10e6);
  EXPECT_DOUBLE_EQ(p.offload->h2d_bytes_per_time, 20e6);
}

TEST(ProfileOverrides, StageEntriesOverrideDefaults) {
  json profile = minimal_profile();
  profile["stages"] = {{{"index", 1},
                        {"forward", 3},
                        {"activation_bytes", "2GiB"},
                        {"weight_grad_bytes", "512MiB"},
                        {"offloadable_bytes", 1000}}};
  const Problem p = parse(profile);
  EXPECT_EQ(p.stages[0].forward, 1);
  EXPECT_EQ(p.stages[1].forward, 3);
  EXPECT_EQ(p.stages[1].backward_input, 1.5);
  EXPECT_EQ(p.stages[1].activation_bytes, 2 * kGiB);
  EXPECT_EQ(p.stages[1].weight_grad_bytes, 512 * kMiB);
  EXPECT_EQ(p.stages[1].offloadable_bytes, 1000);
}

TEST(ProfileOverrides, CheckpointBytesEnableRecompute) {
  json profile = minimal_profile();
  profile["stage_defaults"]["checkpoint_bytes"] = "64MiB";
  profile["stages"] = {{{"index", 1}, {"forward", 3}, {"recompute_forward", 2.5}}};
  const Problem p = parse(profile);
  ASSERT_TRUE(p.stages[0].can_recompute());
  EXPECT_EQ(*p.stages[0].checkpoint_bytes, 64 * kMiB);
  EXPECT_EQ(p.stages[0].recomputed_bytes(), kGiB - 64 * kMiB);
  EXPECT_EQ(p.stages[0].recompute_forward, 1);
  EXPECT_EQ(p.stages[1].recompute_forward, 2.5);
  EXPECT_EQ(*p.stages[1].checkpoint_bytes, 64 * kMiB);
}

TEST(ProfileOverrides, StagesAloneNeedNoDefaults) {
  json profile = minimal_profile();
  profile.erase("stage_defaults");
  profile["stages"] = json::array();
  for (int s = 0; s < 2; ++s) {
    profile["stages"].push_back({{"index", 1 - s},
                                 {"forward", s},
                                 {"backward_input", 2},
                                 {"backward_weight", 1},
                                 {"activation_bytes", 100}});
  }
  const Problem p = parse(profile);
  EXPECT_EQ(p.stages[0].forward, 1);
  EXPECT_EQ(p.stages[1].forward, 0);
}

TEST(ProfileOverrides, PerRankMemoryOverridesTheDefault) {
  json profile = minimal_profile();
  profile["memory"] = {
      {"budget_bytes", "16GiB"},
      {"static_bytes", "4GiB"},
      {"per_rank", {{{"rank", 1}, {"budget_bytes", "8GiB"}, {"static_bytes", 0}}}}};
  const Problem p = parse(profile);
  EXPECT_EQ(p.budget_bytes, (std::vector<int64_t>{16 * kGiB, 8 * kGiB}));
  EXPECT_EQ(p.static_bytes, (std::vector<int64_t>{4 * kGiB, 0}));
  EXPECT_EQ(p.activation_budget(0), 12 * kGiB);
}

TEST(ProfileOverrides, BudgetCanComeFromPerRankEntriesOnly) {
  json profile = minimal_profile();
  profile["memory"] = {
      {"per_rank", {{{"rank", 0}, {"budget_bytes", 10}}, {{"rank", 1}, {"budget_bytes", 20}}}}};
  EXPECT_EQ(parse(profile).budget_bytes, (std::vector<int64_t>{10, 20}));
}

TEST(ProfileOverrides, PlacementsAndChunks) {
  json profile = minimal_profile();
  profile["pipeline"] = {
      {"ranks", 2}, {"chunks_per_rank", 2}, {"microbatches", 4}, {"placement", "vshape"}};
  Problem p = parse(profile);
  EXPECT_EQ(p.placement, PlacementKind::kVShape);
  EXPECT_EQ(p.rank_of_stage, (std::vector<int>{0, 1, 1, 0}));

  profile["pipeline"]["placement"] = "loop";
  EXPECT_EQ(parse(profile).rank_of_stage, (std::vector<int>{0, 1, 0, 1}));

  profile["pipeline"]["placement"] = {1, 0, 0, 1};
  p = parse(profile);
  EXPECT_EQ(p.placement, PlacementKind::kExplicit);
  EXPECT_EQ(p.rank_of_stage, (std::vector<int>{1, 0, 0, 1}));
}

TEST(ProfileOverrides, MicrosecondsAndSharedChannelsAndLinkGroups) {
  json profile = with_offload(minimal_profile());
  profile["time_unit"] = "us";
  profile["pipeline"]["ranks"] = 5;
  profile["offload"]["channels"] = "shared";
  profile["offload"]["link_groups"] = {{3, 1}, {4}};
  const Problem p = parse(profile);
  EXPECT_EQ(p.time_unit, TimeUnit::kMicroseconds);
  EXPECT_DOUBLE_EQ(p.offload->d2h_bytes_per_time, 10e3);  // 10 GB/s in bytes per us
  EXPECT_EQ(p.offload->channels, ChannelMode::kShared);
  // Listed groups first, in order; every unlisted rank alone after them.
  EXPECT_EQ(p.offload->link_group_of_rank, (std::vector<int>{2, 0, 3, 0, 1}));
}

TEST(ProfileOverrides, IntegralNumbersCountAsIntegers) {
  json profile = minimal_profile();
  profile["pipeline"]["ranks"] = 2.0;
  profile["memory"]["budget_bytes"] = 1e10;
  const Problem p = parse(profile);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.budget_bytes[0], 10'000'000'000);
}

// One change to a valid profile and the message it must produce.
struct BadProfileCase {
  const char* name;
  std::function<void(json&)> change;
  const char* expected;
};

std::function<void(json&)> set(const char* pointer, json value) {
  return [=](json& j) { j[json::json_pointer(pointer)] = value; };
}

std::function<void(json&)> erase(const char* parent, const char* key) {
  return [=](json& j) { j[json::json_pointer(parent)].erase(key); };
}

std::function<void(json&)> rename(const char* parent, const char* from, const char* to) {
  return [=](json& j) {
    json& object = j[json::json_pointer(parent)];
    object[to] = object[from];
    object.erase(from);
  };
}

const json kStage = {
    {"forward", 1}, {"backward_input", 1}, {"backward_weight", 1}, {"activation_bytes", 100}};

json stage(int index, json costs = kStage) {
  costs["index"] = index;
  return costs;
}

TEST(ProfileErrors, EachMistakeNamesItsField) {
  const BadProfileCase cases[] = {
      {"wrong format", set("/format", "optpipe.profile/v2"),
       R"(profile.json: format: must be "optpipe.profile/v1", got "optpipe.profile/v2")"},
      {"no format", erase("", "format"), "profile.json: format: missing"},
      {"not an object", [](json& j) { j = json::array(); },
       "profile.json: must be an object, got []"},
      {"negative microbatches", set("/pipeline/microbatches", -4),
       "profile.json: pipeline.microbatches: must be an integer >= 1, got -4"},
      {"fractional ranks", set("/pipeline/ranks", 2.5),
       "pipeline.ranks: must be an integer >= 1, got 2.5"},
      {"too many ranks", set("/pipeline/ranks", 100000),
       "pipeline.ranks: must be an integer <= 4096"},
      {"huge ranks", set("/pipeline/ranks", std::numeric_limits<uint64_t>::max()),
       "pipeline.ranks: must be an integer <= 4096"},
      {"ranks as string", set("/pipeline/ranks", "2"),
       R"(pipeline.ranks: must be an integer >= 1, got "2")"},
      {"no ranks", erase("/pipeline", "ranks"), "pipeline.ranks: missing"},
      {"zero chunks", set("/pipeline/chunks_per_rank", 0),
       "pipeline.chunks_per_rank: must be an integer >= 1"},
      {"unknown pipeline key", rename("/pipeline", "microbatches", "microbatch"),
       R"(profile.json: pipeline.microbatch: unknown key; did you mean "microbatches"?)"},
      {"unknown top-level key", set("/offlaod", json::object()),
       R"(offlaod: unknown key; did you mean "offload"?)"},
      {"far-off key", set("/pipeline/zzzzzzzz", 1),
       "pipeline.zzzzzzzz: unknown key; expected one of ranks,"},
      {"key with a newline", set("/a\nb", 1), R"(profile.json: ["a\nb"]: unknown key)"},
      {"pipeline not an object", set("/pipeline", json::array()),
       "pipeline: must be an object, got []"},
      {"vshape with one chunk", set("/pipeline/placement", "vshape"),
       R"(pipeline.placement: "vshape" needs chunks_per_rank = 2, got 1)"},
      {"misspelt placement", set("/pipeline/placement", "vshap"),
       R"(pipeline.placement: must be "loop" or "vshape", got "vshap"; did you mean "vshape"?)"},
      {"placement of wrong type", set("/pipeline/placement", 3),
       R"(pipeline.placement: must be "loop", "vshape" or a list of ranks, got 3)"},
      {"placement too short", set("/pipeline/placement", {0}),
       "pipeline.placement: must list ranks * chunks_per_rank = 2 stages, got 1"},
      {"placement rank out of range", set("/pipeline/placement", {0, 2}),
       "pipeline.placement[1]: must be a rank in [0, 2), got 2"},
      {"placement rank twice", set("/pipeline/placement", {0, 0}),
       "pipeline.placement: rank 0 must host chunks_per_rank = 1 stages, got 2"},
      {"negative time", set("/stage_defaults/forward", -1),
       "stage_defaults.forward: must be a number >= 0, got -1"},
      {"time as string", set("/stage_defaults/backward_weight", "1ms"),
       R"(stage_defaults.backward_weight: must be a number >= 0, got "1ms")"},
      {"time as null", set("/stage_defaults/backward_input", nullptr),
       "stage_defaults.backward_input: must be a number >= 0, got null"},
      {"negative size", set("/stage_defaults/activation_bytes", -5),
       "stage_defaults.activation_bytes: must be a size: a byte count in [0, 2^50] or a string "
       "like "
       "\"40GiB\", got -5"},
      {"fractional size", set("/stage_defaults/activation_bytes", 1.5),
       "stage_defaults.activation_bytes: must be a size"},
      {"size with a bad unit", set("/stage_defaults/activation_bytes", "12 parsecs"),
       R"(profile.json: stage_defaults.activation_bytes: has unknown unit "parsecs", got "12 parsecs")"},
      {"G above A", set("/stage_defaults/weight_grad_bytes", "2GiB"),
       "stage_defaults.weight_grad_bytes: must be <= activation_bytes of stage 0 (1GiB), got 2GiB"},
      {"O above A in a stage", set("/stages", {{{"index", 1}, {"offloadable_bytes", "1025MiB"}}}),
       "stages[0].offloadable_bytes: must be <= activation_bytes of stage 1 (1GiB), got 1025MiB"},
      {"unused default still checked", set("/stage_defaults/offloadable_bytes", "lots"),
       "stage_defaults.offloadable_bytes: must be a size like"},
      {"C above A", set("/stages", {{{"index", 1}, {"checkpoint_bytes", "2GiB"}}}),
       "profile.json: stages[0].checkpoint_bytes: must be <= activation_bytes of stage 1 (1GiB), "
       "got 2GiB"},
      {"bad checkpoint size", set("/stage_defaults/checkpoint_bytes", "1.5"),
       "stage_defaults.checkpoint_bytes: must be a whole number of bytes"},
      {"negative recompute time", set("/stage_defaults/recompute_forward", -1),
       "stage_defaults.recompute_forward: must be a number >= 0, got -1"},
      {"recompute time without checkpoint bytes",
       set("/stages", {{{"index", 1}, {"recompute_forward", 2}}}),
       "profile.json: stages[0].recompute_forward: stage 1 has no checkpoint_bytes, which "
       "recompute needs; set checkpoint_bytes"},
      {"missing cost, stage entry",
       [](json& j) {
         j["stage_defaults"].erase("forward");
         j["stages"] = {{{"index", 0}}};
       },
       "stages[0].forward: missing; set it in stages[0] or stage_defaults"},
      {"missing cost, no stage entry", erase("/stage_defaults", "activation_bytes"),
       "stage_defaults.activation_bytes: missing; needed by stage 0"},
      {"no stage costs at all", erase("", "stage_defaults"),
       "profile.json: stage_defaults: missing"},
      {"unknown stage key", set("/stages", {stage(0, {{"fwd", 1}})}),
       R"(stages[0].fwd: unknown key; did you mean "forward"?)"},
      {"stage index out of range", set("/stages", {stage(2)}),
       "stages[0].index: must be a stage index in [0, 2), got 2"},
      {"stage without index", set("/stages", {kStage}), "stages[0].index: missing"},
      {"duplicate stage index", set("/stages", {stage(1), stage(0), stage(1)}),
       "stages[2].index: stage 1 is already described by stages[0], got 1"},
      {"stages not a list", set("/stages", json::object()), "stages: must be a list, got {}"},
      {"negative latency", set("/p2p_latency", -0.1),
       "p2p_latency: must be a number >= 0, got -0.1"},
      {"unknown time unit", set("/time_unit", "s"), R"(time_unit: must be "ms" or "us", got "s")"},
      {"name not a string", set("/name", 5), "name: must be a string, got 5"},
      {"no memory", erase("", "memory"), "profile.json: memory: missing"},
      {"no budget", erase("/memory", "budget_bytes"),
       "memory.budget_bytes: missing; set it for all ranks or in a per_rank entry for rank 0"},
      {"budget below static", set("/memory/static_bytes", "17GiB"),
       "profile.json: memory.budget_bytes: rank 0 budget 16GiB is below its static bytes 17GiB; "
       "raise the budget or lower static_bytes"},
      {"per-rank budget below static",
       set("/memory/per_rank", {{{"rank", 1}, {"budget_bytes", 10}, {"static_bytes", 12}}}),
       "memory.per_rank[0].budget_bytes: rank 1 budget 10B is below its static bytes 12B"},
      {"per-rank rank out of range", set("/memory/per_rank", {{{"rank", 7}}}),
       "memory.per_rank[0].rank: must be a rank in [0, 2), got 7"},
      {"per-rank rank twice", set("/memory/per_rank", {{{"rank", 1}}, {{"rank", 1}}}),
       "memory.per_rank[1].rank: rank 1 is already described by memory.per_rank[0], got 1"},
      {"per-rank without rank", set("/memory/per_rank", {{{"budget_bytes", 1}}}),
       "memory.per_rank[0].rank: missing"},
      {"zero bandwidth", set("/offload/d2h_gb_per_s", 0),
       "offload.d2h_gb_per_s: must be a number > 0, got 0"},
      {"no bandwidth", erase("/offload", "h2d_gb_per_s"), "offload.h2d_gb_per_s: missing"},
      {"bad channels", set("/offload/channels", "half"),
       R"(offload.channels: must be "shared" or "duplex", got "half")"},
      {"rank in two link groups", set("/offload/link_groups", {{0, 1}, {1}}),
       "offload.link_groups[1][0]: rank 1 is already in offload.link_groups[0], got 1"},
      {"link group rank out of range", set("/offload/link_groups", {{0, 5}}),
       "offload.link_groups[0][1]: must be a rank in [0, 2), got 5"},
      {"empty link group", set("/offload/link_groups", {json::array()}),
       "offload.link_groups[0]: must list at least one rank, got []"},
      {"link groups not a list", set("/offload/link_groups", "pairs"),
       R"(offload.link_groups: must be a list, got "pairs")"},
  };
  for (const BadProfileCase& c : cases) {
    SCOPED_TRACE(c.name);
    json profile = with_offload(minimal_profile());
    c.change(profile);
    const std::string message = error_of(profile.dump(2));
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// nlohmann keeps the last of two equal keys; the profile's author meant one of them.
TEST(ProfileErrors, AKeyTwiceInOneObjectIsAnError) {
  EXPECT_EQ(error_of(R"({"pipeline": {"ranks": 4, "ranks": 2}})"),
            "profile.json: malformed JSON: key \"ranks\" appears twice in one object; keep one");
  EXPECT_EQ(error_of(R"({"format": "optpipe.profile/v1", "pipeline": {"ranks": 2}, )"
                     R"("stages": [{"index": 0}, {"index": 1}], "memory": {"budget_bytes": 1}})")
                .find("twice"),
            std::string::npos);  // equal keys in two objects are fine
}

TEST(ProfileErrors, MalformedJsonReportsLineAndColumn) {
  const std::pair<std::string, std::string> cases[] = {
      {"{\n  \"format\": \"optpipe.profile/v1\",\n  \"name\": tru\n}",
       "profile.json:3:14: malformed JSON: "},
      {"{\n  \"pipeline\": {\"ranks\": 2,}\n}", "profile.json:2:27: malformed JSON: "},
      {"", "profile.json:1:1: malformed JSON: "},
      {"{\"format\": \"optpipe.profile/v1\"", "profile.json:1:32: malformed JSON: "},
      {"{\n\n  \"p2p_latency\": 1e999\n}",
       "profile.json:3:18: malformed JSON: number out of range 1e999"},
      {"{\"name\": \"a\nb\"}", "profile.json:1:"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    const std::string message = error_of(text);
    EXPECT_EQ(message.rfind(expected, 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ProfileErrors, UnreadableFile) {
  try {
    load_profile("/nonexistent/profile.json");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "cannot read /nonexistent/profile.json: No such file or directory");
  }
}

// The same document written with the keys of its top-level objects in reverse order.
std::string reversed_keys(const nlohmann::ordered_json& value) {
  if (!value.is_object()) return value.dump();
  std::vector<std::string> keys;
  for (const auto& item : value.items()) keys.push_back(item.key());
  std::string text = "{";
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    if (key != keys.rbegin()) text += ",\n";
    text += json(*key).dump() + " :  " + reversed_keys(value.at(*key));
  }
  return text + "}";
}

TEST(ProfileHash, StableUnderFormattingAndKeyOrder) {
  const std::string text = read_text(example_path("gpt-8rank.json"));
  const std::string hash = parse_profile(text, "a.json").profile_sha256;
  EXPECT_EQ(parse_profile(json::parse(text).dump(), "b.json").profile_sha256, hash);
  EXPECT_EQ(parse_profile(json::parse(text).dump(8), "c.json").profile_sha256, hash);
  const std::string reordered = reversed_keys(nlohmann::ordered_json::parse(text));
  ASSERT_NE(reordered, text);
  EXPECT_EQ(parse_profile(reordered, "d.json").profile_sha256, hash);

  json changed = json::parse(text);
  changed["stage_defaults"]["forward"] = 29.3;
  EXPECT_NE(parse_profile(changed.dump(), "e.json").profile_sha256, hash);
  changed = json::parse(text);
  changed["pipeline"]["microbatches"] = 31;
  EXPECT_NE(parse_profile(changed.dump(), "f.json").profile_sha256, hash);
}

// The keys a schema object documents: its properties and those of the definition it refers to.
std::set<std::string> documented_keys(const json& schema, const json& node) {
  std::set<std::string> keys;
  if (node.contains("properties")) {
    for (const auto& item : node["properties"].items()) keys.insert(item.key());
  }
  if (node.contains("$ref")) {
    const std::string ref = node["$ref"].get<std::string>().substr(1);  // "#/$defs/x" -> "/$defs/x"
    keys.merge(documented_keys(schema, schema[json::json_pointer(ref)]));
  }
  return keys;
}

// The keys the parser accepts in one object, from its message about a key far from all of them:
// "...: unknown key; expected one of a, b, c".
std::set<std::string> accepted_keys(json profile, const json::json_pointer& object) {
  profile[object]["zzzzzzzzzzzz"] = 1;
  const std::string message = error_of(profile.dump());
  const std::string marker = "expected one of ";
  const size_t at = message.find(marker);
  if (at == std::string::npos) {
    ADD_FAILURE() << message;
    return {};
  }
  std::set<std::string> keys;
  std::stringstream list(message.substr(at + marker.size()));
  for (std::string key; std::getline(list >> std::ws, key, ',');) keys.insert(key);
  return keys;
}

TEST(ProfileSchema, DocumentsExactlyTheKeysTheParserAccepts) {
  const json schema = json::parse(read_text(source_dir() / "schemas" / "profile.schema.json"));
  const json example = json::parse(read_text(example_path("gpt-8rank.json")));
  // Each object of a profile, and where the schema describes it.
  const std::pair<const char*, const char*> objects[] = {
      {"", ""},
      {"/pipeline", "/properties/pipeline"},
      {"/stage_defaults", "/properties/stage_defaults"},
      {"/stages/0", "/properties/stages/items"},
      {"/memory", "/properties/memory"},
      {"/memory/per_rank/0", "/properties/memory/properties/per_rank/items"},
      {"/offload", "/properties/offload"},
  };
  for (const auto& [object, schema_object] : objects) {
    SCOPED_TRACE(object);
    EXPECT_EQ(accepted_keys(example, json::json_pointer(object)),
              documented_keys(schema, schema[json::json_pointer(schema_object)]));
  }
}

// --- Fuzz-style property test -------------------------------------------------------------------

// Paths (JSON pointers) of every value below the root.
void collect_pointers(const json& value, const json::json_pointer& at,
                      std::vector<json::json_pointer>& out) {
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      const json::json_pointer child = at / item.key();
      out.push_back(child);
      collect_pointers(item.value(), child, out);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const json::json_pointer child = at / i;
      out.push_back(child);
      collect_pointers(value[i], child, out);
    }
  }
}

constexpr const char* kHugeNumberMark = "@huge-number@";

// Values of every type and awkward range a profile field might receive.
std::vector<json> replacement_values() {
  return {nullptr,
          true,
          false,
          0,
          -1,
          -4,
          1,
          2,
          3,
          8,
          2.5,
          -0.0,
          1e308,
          -1e308,
          std::numeric_limits<int64_t>::max(),
          std::numeric_limits<uint64_t>::max(),
          4097,
          65537,
          "",
          "x",
          "40GiB",
          "-1GiB",
          "1.5B",
          "99999999999TiB",
          "loop",
          "vshape",
          "shared",
          "us",
          json::object(),
          json::array(),
          json::array({0}),
          json::array({json::array({0, 1}), 1}),
          json::object({{"index", 0}}),
          json(std::vector<int>(16, 0)),
          kHugeNumberMark};
}

class ProfileMutator {
 public:
  explicit ProfileMutator(uint32_t seed) : rng_(seed) {}

  // A text near `text` (`doc` is it parsed): a few structural changes, then sometimes a few raw
  // byte edits.
  std::string mutate(const std::string& text, const json& doc) {
    std::string out = pick(4) == 0 ? text : mutate_structure(doc);
    if (pick(3) == 0) out = mutate_bytes(out);
    return out;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  std::string mutate_structure(json doc) {
    for (size_t edits = 1 + pick(3); edits > 0; --edits) {
      std::vector<json::json_pointer> pointers;
      collect_pointers(doc, json::json_pointer(), pointers);
      if (pointers.empty()) break;
      const json::json_pointer& at = pointers[pick(pointers.size())];
      json& parent = doc[at.parent_pointer()];
      switch (pick(3)) {
        case 0:
          doc[at] = values_[pick(values_.size())];
          break;
        case 1:  // delete the key or item
          if (parent.is_object())
            parent.erase(at.back());
          else
            parent.erase(std::stoul(at.back()));
          break;
        case 2:  // rename a key by one character
          if (parent.is_object() && !at.back().empty()) {
            std::string key = at.back();
            key[pick(key.size())] = static_cast<char>('a' + pick(26));
            json value = doc[at];
            parent.erase(at.back());
            parent[key] = value;
          }
          break;
      }
    }
    std::string out = doc.dump(pick(2) == 0 ? -1 : 2);
    const std::string mark = json(kHugeNumberMark).dump();
    for (size_t at = out.find(mark); at != std::string::npos; at = out.find(mark)) {
      out.replace(at, mark.size(), pick(2) == 0 ? "1e999" : "-1e400");
    }
    return out;
  }

  std::string mutate_bytes(std::string text) {
    static const std::string kSpecial = "{}[],:\"-.e0123456789 \n\\";
    if (text.empty()) return text;
    if (pick(4) == 0) return text.substr(0, pick(text.size()));  // truncate
    for (size_t edits = 1 + pick(3); edits > 0 && !text.empty(); --edits) {
      const size_t at = pick(text.size());
      const char byte =
          pick(2) == 0 ? kSpecial[pick(kSpecial.size())] : static_cast<char>(pick(256));
      switch (pick(3)) {
        case 0:
          text[at] = byte;
          break;
        case 1:
          text.insert(text.begin() + at, byte);
          break;
        case 2:
          text.erase(at, 1);
          break;
      }
    }
    return text;
  }

  std::mt19937 rng_;
  const std::vector<json> values_ = replacement_values();
};

TEST(ProfileFuzz, MutatedExamplesParseConsistentlyOrFailInOneLine) {
  constexpr int kDocumentsPerExample = 1500;
  ProfileMutator mutator(20240611);
  int accepted = 0;
  int rejected = 0;
  for (const char* name : kExamples) {
    const std::string text = read_text(example_path(name));
    const json doc = json::parse(text);
    for (int i = 0; i < kDocumentsPerExample; ++i) {
      const std::string mutated = mutator.mutate(text, doc);
      try {
        const Problem p = parse_profile(mutated, "fuzz.json");
        expect_consistent(p);
        ++accepted;
      } catch (const InputError& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.rfind("fuzz.json", 0), 0u) << message;
        EXPECT_GT(message.size(), std::string("fuzz.json: ").size()) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "unexpected exception " << e.what() << " for:\n" << mutated;
      } catch (...) {
        ADD_FAILURE() << "unexpected non-std exception for:\n" << mutated;
      }
      if (HasFailure()) return;
    }
  }
  RecordProperty("accepted", accepted);
  RecordProperty("rejected", rejected);
  // Both outcomes must be exercised, or the mutations are too weak or too strong.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace optpipe

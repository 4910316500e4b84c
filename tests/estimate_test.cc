// Tests of the profile estimator (formats/estimate.h, docs/estimate.md): the formulas against
// values computed by hand for a small model, the layer split, the profile it writes (loads with
// the profile reader and compiles), and one error per way a model description can be wrong.
#include "formats/estimate.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "driver/compile_driver.h"
#include "formats/profile.h"
#include "model/errors.h"
#include "tests/command_line_test.h"

namespace optpipe {
namespace {

using nlohmann::json;

// OPTPIPE_SOURCE_DIR comes from tests/CMakeLists.txt.
std::string model_example(const std::string& name) {
  return std::string(OPTPIPE_SOURCE_DIR) + "/examples/models/" + name;
}

// 2 layers, h = 64, a = 4, s = 128, b = 1, vocab 1000: every number below is worked out by hand.
json small_model() {
  return json::parse(R"({
    "format": "optpipe.model/v1",
    "name": "small",
    "model": { "layers": 2, "hidden": 64, "heads": 4, "vocab": 1000 },
    "training": { "seq_length": 128, "microbatch_size": 1, "dtype": "bf16", "optimizer": "adam" },
    "pipeline": { "ranks": 2, "microbatches": 4 },
    "hardware": { "gpu_peak_tflops": 100, "efficiency": 0.5, "gpu_memory": "1GiB",
                  "workspace_bytes": "1MiB", "host_link_gb_per_s": 10 }
  })");
}

ModelDescription parse(const json& document) {
  return parse_model_description(document.dump(), "model.json");
}

// The one-line message parse + estimate throw for `document`.
std::string error_of(const json& document) {
  try {
    estimate_profile(parse(document));
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << document.dump();
  return {};
}

TEST(estimate, TransformerLayerMatchesHandComputedValues) {
  const PartCosts layer = transformer_layer_costs(parse(small_model()));
  // 12 h^2 = 49152 parameters; F = 24 b s h^2 (1 + s / 6h) = 12582912 * 4/3.
  EXPECT_EQ(layer.params, 49152);
  EXPECT_EQ(layer.forward_flops, 16777216);
  // B = matmuls (12582912) + twice the attention scores (2 * 4 b s^2 h = 8388608); W = matmuls.
  EXPECT_EQ(layer.backward_input_flops, 20971520);
  EXPECT_EQ(layer.backward_weight_flops, 12582912);
  EXPECT_EQ(layer.forward_flops + layer.backward_input_flops + layer.backward_weight_flops,
            3 * layer.forward_flops);  // backward = 2 x forward (Narayanan et al. 2021)
  // A = s b (34 h + 5 a s) = 128 * (2176 + 2560); G = 32 s b h.
  EXPECT_EQ(layer.activation_bytes, 606208);
  EXPECT_EQ(layer.weight_grad_bytes, 262144);
}

TEST(estimate, SelectiveRecomputationDropsTheScoresAndRedoesThemInB) {
  json document = small_model();
  document["training"]["selective_recompute"] = true;
  const PartCosts layer = transformer_layer_costs(parse(document));
  EXPECT_EQ(layer.activation_bytes, 278528);  // 34 s b h
  EXPECT_EQ(layer.weight_grad_bytes, 262144);
  EXPECT_EQ(layer.forward_flops, 16777216);
  EXPECT_EQ(layer.backward_input_flops, 20971520 + 4194304);  // + the scores' forward
  EXPECT_EQ(layer.backward_weight_flops, 12582912);
}

TEST(estimate, GroupedQueryAttentionShrinksKAndV) {
  json document = small_model();
  document["model"]["kv_heads"] = 2;  // d = 16, K and V are 64 x 32
  const PartCosts layer = transformer_layer_costs(parse(document));
  EXPECT_EQ(layer.params, 2 * 4096 + 2 * 64 * 32 + 2 * 64 * 256);
  EXPECT_EQ(layer.forward_flops, 2 * 128 * 45056 + 4194304);
  // K and V stored at 32 instead of 64 elements per token: 2 * 2 * 32 bytes * 128 tokens less.
  EXPECT_EQ(layer.activation_bytes, 606208 - 16384);
  EXPECT_EQ(layer.weight_grad_bytes, 262144 - 2 * 128 * 64);  // QKV output gradient 2(h - kd) sb
}

TEST(estimate, SwigluHasThreeMatrices) {
  json document = small_model();
  document["model"]["mlp"] = "swiglu";
  document["model"]["ffn_hidden"] = 160;
  const PartCosts layer = transformer_layer_costs(parse(document));
  EXPECT_EQ(layer.params, 4 * 4096 + 3 * 64 * 160);
  // Stored per token: 2 * (2h + h + 2h + h + h + h + 3f) + 2h masks = 2 * 992 + 128.
  EXPECT_EQ(layer.activation_bytes, 128 * (2 * 992 + 128) + 5 * 4 * 128 * 128);
  // Inputs 3h + f, output gradients 3h + h + 2f + h, in bf16.
  EXPECT_EQ(layer.weight_grad_bytes, 128 * 2 * (3 * 64 + 160 + 5 * 64 + 2 * 160));
}

TEST(estimate, EmbeddingHeadAndOptimizer) {
  const ModelDescription model = parse(small_model());
  const PartCosts embedding = embedding_costs(model);
  EXPECT_EQ(embedding.params, 64000);
  EXPECT_EQ(embedding.forward_flops, 0);
  EXPECT_EQ(embedding.activation_bytes, 128 * 64);  // dropout mask
  const PartCosts head = head_costs(model);
  EXPECT_EQ(head.params, 64000);
  EXPECT_EQ(head.forward_flops, 2.0 * 128 * 64 * 1000);
  EXPECT_EQ(head.backward_input_flops, 2.0 * 128 * 64 * 1000);
  EXPECT_EQ(head.backward_weight_flops, 2.0 * 128 * 64 * 1000);
  // Norm and head inputs 2 * 2 s b h, logits s b V (2 + 4).
  EXPECT_EQ(head.activation_bytes, 32768 + 768000);
  EXPECT_EQ(head.weight_grad_bytes, 16384 + 256000);
  EXPECT_EQ(optimizer_bytes_per_param(model), 16);
  json sgd = small_model();
  sgd["training"]["optimizer"] = "sgd";
  EXPECT_EQ(optimizer_bytes_per_param(parse(sgd)), 12);
  json fp32 = small_model();
  fp32["training"]["dtype"] = "fp32";
  EXPECT_EQ(optimizer_bytes_per_param(parse(fp32)), 16);  // no master copy
}

TEST(estimate, LayersSplitEvenlyWithTheRemainderInTheMiddle) {
  json document = small_model();
  auto split = [&](int layers, int ranks) {
    document["model"]["layers"] = layers;
    document["pipeline"]["ranks"] = ranks;
    return split_layers(parse(document));
  };
  EXPECT_EQ(split(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(split(10, 4), (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(split(11, 4), (std::vector<int64_t>{3, 3, 3, 2}));
  EXPECT_EQ(split(3, 2), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(split(5, 1), (std::vector<int64_t>{5}));
  EXPECT_EQ(split(2, 4), (std::vector<int64_t>{0, 1, 1, 0}));
  document["model"]["layers"] = 6;
  document["pipeline"]["ranks"] = 2;
  document["pipeline"]["layer_split"] = {4, 2};
  EXPECT_EQ(split_layers(parse(document)), (std::vector<int64_t>{4, 2}));
}

TEST(estimate, ProfileOfTheSmallModel) {
  const json profile = estimate_profile(parse(small_model()));
  EXPECT_EQ(profile["format"], "optpipe.profile/v1");
  EXPECT_EQ(profile["name"], "small");
  EXPECT_EQ(profile["time_unit"], "ms");
  EXPECT_EQ(profile["pipeline"]["ranks"], 2);
  EXPECT_EQ(profile["pipeline"]["microbatches"], 4);
  const json& stages = profile["stages"];
  ASSERT_EQ(stages.size(), 2u);
  // ms = FLOPs / (100e12 * 0.5) * 1e3 = FLOPs / 5e10.
  EXPECT_DOUBLE_EQ(stages[0]["forward"].get<double>(), 16777216 / 5e10);
  EXPECT_DOUBLE_EQ(stages[0]["backward_input"].get<double>(), 20971520 / 5e10);
  EXPECT_DOUBLE_EQ(stages[0]["backward_weight"].get<double>(), 12582912 / 5e10);
  EXPECT_EQ(stages[0]["activation_bytes"], 606208 + 8192);
  EXPECT_EQ(stages[0]["weight_grad_bytes"], 262144);
  EXPECT_DOUBLE_EQ(stages[1]["forward"].get<double>(), (16777216 + 16384000) / 5e10);
  EXPECT_DOUBLE_EQ(stages[1]["backward_input"].get<double>(), (20971520 + 16384000) / 5e10);
  EXPECT_DOUBLE_EQ(stages[1]["backward_weight"].get<double>(), (12582912 + 16384000) / 5e10);
  EXPECT_EQ(stages[1]["activation_bytes"], 606208 + 800768);
  EXPECT_EQ(stages[1]["weight_grad_bytes"], 262144 + 272384);
  // Recompute keeps the stage input, one s b h bf16 hidden state, and reruns F.
  EXPECT_EQ(stages[0]["checkpoint_bytes"], 16384);
  EXPECT_EQ(stages[1]["recompute_forward"], stages[1]["forward"]);
  // One s b h bf16 message (16384 bytes) at 50 GB/s.
  EXPECT_DOUBLE_EQ(profile["p2p_latency"].get<double>(), 16384 / 50e6);
  EXPECT_EQ(profile["memory"]["budget_bytes"], int64_t{1} << 30);
  // (49152 + 64000) params x 16 bytes + 1MiB on each rank.
  EXPECT_EQ(profile["memory"]["per_rank"][0]["static_bytes"], 113152 * 16 + 1048576);
  EXPECT_EQ(profile["memory"]["per_rank"][1]["static_bytes"], 113152 * 16 + 1048576);
  EXPECT_EQ(profile["offload"]["d2h_gb_per_s"], 10);
  EXPECT_EQ(profile["offload"]["h2d_gb_per_s"], 10);
  EXPECT_EQ(profile["offload"]["channels"], "duplex");
  EXPECT_EQ(profile["offload"]["link_groups"], json::parse("[[0, 1]]"));

  const Problem problem = parse_profile(profile.dump(), "estimated");
  EXPECT_EQ(problem.num_stages(), 2);
  EXPECT_EQ(problem.stages[1].activation_bytes, 606208 + 800768);
  EXPECT_EQ(problem.stages[1].checkpoint_bytes, 16384);
  EXPECT_EQ(problem.static_bytes[0], 113152 * 16 + 1048576);
  ASSERT_TRUE(problem.offload.has_value());
  EXPECT_EQ(problem.offload->link_group_of_rank, (std::vector<int>{0, 0}));
}

TEST(estimate, VShapePutsEmbeddingAndHeadOnRankZero) {
  json document = small_model();
  document["model"]["layers"] = 8;
  document["pipeline"]["chunks_per_rank"] = 2;
  document["pipeline"]["placement"] = "vshape";
  document["hardware"].erase("host_link_gb_per_s");
  const json profile = estimate_profile(parse(document));
  EXPECT_EQ(profile["pipeline"]["placement"], "vshape");
  EXPECT_FALSE(profile.contains("offload"));
  const int64_t layers_bytes = 4 * 49152 * 16 + 1048576;  // 2 stages of 2 layers
  EXPECT_EQ(profile["memory"]["per_rank"][0]["static_bytes"], layers_bytes + 128000 * 16);
  EXPECT_EQ(profile["memory"]["per_rank"][1]["static_bytes"], layers_bytes);
  EXPECT_NO_THROW(parse_profile(profile.dump(), "estimated"));
}

TEST(estimate, CheckpointBytesAreTheStageInputCappedAtTheActivation) {
  json document = small_model();
  document["pipeline"]["ranks"] = 4;  // layers {0, 1, 1, 0}
  const json profile = estimate_profile(parse(document));
  // Stage 0 holds the embedding only: its activation, the dropout mask (s b h bytes), is smaller
  // than the s b h bf16 hidden state.
  EXPECT_EQ(profile["stages"][0]["activation_bytes"], 8192);
  EXPECT_EQ(profile["stages"][0]["checkpoint_bytes"], 8192);
  EXPECT_EQ(profile["stages"][1]["checkpoint_bytes"], 16384);
  EXPECT_EQ(profile["stages"][3]["checkpoint_bytes"], 16384);
  EXPECT_NO_THROW(parse_profile(profile.dump(), "estimated"));
}

TEST(estimate, ExampleModelsEstimateLoadAndCompile) {
  for (const char* name : {"gpt3-13b.json", "llama-8b.json"}) {
    SCOPED_TRACE(name);
    const std::string path = model_example(name);
    const json profile = estimate_profile(load_model_description(path));
    const Problem problem = parse_profile(profile.dump(2), path);
    EXPECT_EQ(problem.ranks, 8);
    // First and last stages are heavier than a middle one where the split is even.
    const CompileResult result = compile(problem, "1f1b");
    EXPECT_TRUE(result.best.rejection.empty()) << result.best.rejection;
    EXPECT_GT(result.best.metrics.makespan, 0);
  }
}

TEST(estimate, ExampleGpt3MatchesTheClosedForm) {
  const std::string path = model_example("gpt3-13b.json");
  const ModelDescription model = load_model_description(path);
  const PartCosts layer = transformer_layer_costs(model);
  const double s = 2048, h = 5120;
  EXPECT_DOUBLE_EQ(layer.forward_flops, 24 * s * h * h * (1 + s / (6 * h)));
  EXPECT_EQ(layer.activation_bytes, 34 * s * h);  // selective recomputation
  EXPECT_EQ(split_layers(model), std::vector<int64_t>(8, 5));
}

struct BadInput {
  const char* name;
  std::function<void(json&)> edit;
  const char* message;
};

TEST(estimate, BadInputsNameTheField) {
  const BadInput cases[] = {
      {"format", [](json& d) { d["format"] = "optpipe.profile/v1"; },
       "model.json: format: must be \"optpipe.model/v1\", got \"optpipe.profile/v1\"; is this an "
       "optpipe model description?"},
      {"missing format", [](json& d) { d.erase("format"); },
       "model.json: format: missing; set \"format\": \"optpipe.model/v1\""},
      {"unknown top key", [](json& d) { d["hardwar"] = json::object(); },
       "model.json: hardwar: unknown key; did you mean \"hardware\"?"},
      {"unknown model key", [](json& d) { d["model"]["hiden"] = 1; },
       "model.json: model.hiden: unknown key; did you mean \"hidden\"?"},
      {"missing layers", [](json& d) { d["model"].erase("layers"); },
       "model.json: model.layers: missing; the number of transformer layers"},
      {"layers", [](json& d) { d["model"]["layers"] = 0; },
       "model.json: model.layers: must be an integer >= 1, got 0"},
      {"heads divide", [](json& d) { d["model"]["heads"] = 5; },
       "model.json: model.heads: must divide hidden = 64, got 5"},
      {"kv heads divide", [](json& d) { d["model"]["kv_heads"] = 3; },
       "model.json: model.kv_heads: must divide heads = 4, got 3"},
      {"kv heads range", [](json& d) { d["model"]["kv_heads"] = 8; },
       "model.json: model.kv_heads: must be an integer in [1, heads = 4], got 8"},
      {"mlp", [](json& d) { d["model"]["mlp"] = "swigl"; },
       "model.json: model.mlp: must be \"gelu\" or \"swiglu\", got \"swigl\"; did you mean "
       "\"swiglu\"?"},
      {"dtype", [](json& d) { d["training"]["dtype"] = "bf61"; },
       "model.json: training.dtype: must be \"bf16\", \"fp16\" or \"fp32\", got \"bf61\"; did you "
       "mean \"bf16\"?"},
      {"optimizer", [](json& d) { d["training"]["optimizer"] = "adamw"; },
       "model.json: training.optimizer: must be \"adam\" or \"sgd\", got \"adamw\"; did you mean "
       "\"adam\"?"},
      {"selective", [](json& d) { d["training"]["selective_recompute"] = 1; },
       "model.json: training.selective_recompute: must be true or false, got 1"},
      {"seq length", [](json& d) { d["training"]["seq_length"] = -1; },
       "model.json: training.seq_length: must be an integer >= 1, got -1"},
      {"ranks", [](json& d) { d["pipeline"]["ranks"] = "2"; },
       "model.json: pipeline.ranks: must be an integer >= 1, got \"2\""},
      {"vshape", [](json& d) { d["pipeline"]["placement"] = "vshape"; },
       "model.json: pipeline.placement: \"vshape\" needs chunks_per_rank = 2, got 1; use \"loop\" "
       "or an explicit list"},
      {"split length", [](json& d) { d["pipeline"]["layer_split"] = {2}; },
       "model.json: pipeline.layer_split: must list the layers of ranks * chunks_per_rank = 2 "
       "stages, got 1"},
      {"split sum",
       [](json& d) {
         d["pipeline"]["layer_split"] = {1, 2};
       },
       "model.json: pipeline.layer_split: must add up to model.layers = 2, got 3"},
      {"efficiency", [](json& d) { d["hardware"]["efficiency"] = 1.5; },
       "model.json: hardware.efficiency: must be a number <= 1, got 1.5"},
      {"peak", [](json& d) { d["hardware"]["gpu_peak_tflops"] = 0; },
       "model.json: hardware.gpu_peak_tflops: must be a number > 0, got 0"},
      {"memory unit", [](json& d) { d["hardware"]["gpu_memory"] = "80gib"; },
       "model.json: hardware.gpu_memory: has unknown unit \"gib\", got \"80gib\"; did you mean "
       "\"GiB\"?"},
      {"memory missing", [](json& d) { d["hardware"].erase("gpu_memory"); },
       "model.json: hardware.gpu_memory: missing; the GPU's memory, e.g. \"80GiB\""},
      {"host link", [](json& d) { d["hardware"]["host_link_gb_per_s"] = -3; },
       "model.json: hardware.host_link_gb_per_s: must be a number > 0, got -3"},
      {"channels", [](json& d) { d["hardware"]["host_link_channels"] = "dupex"; },
       "model.json: hardware.host_link_channels: must be \"duplex\" or \"shared\", got \"dupex\"; "
       "did you mean \"duplex\"?"},
      {"memory too small", [](json& d) { d["hardware"]["gpu_memory"] = "2MiB"; },
       "model.json: hardware.gpu_memory: 2.00 MiB is below rank 0's static bytes 2.73 MiB"},
  };
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.name);
    json document = small_model();
    c.edit(document);
    const std::string message = error_of(document);
    EXPECT_EQ(message.substr(0, std::string(c.message).size()), c.message) << message;
  }
}

// Random model descriptions: each is rejected with a one-line InputError or yields a profile that
// the profile reader accepts.
TEST(estimate, RandomModelsEstimateOrFailOnOneLine) {
  std::mt19937 random(7);
  auto pick = [&](std::initializer_list<json> options) {
    return *(options.begin() +
             std::uniform_int_distribution<size_t>(0, options.size() - 1)(random));
  };
  int estimated = 0;
  for (int trial = 0; trial < 200; ++trial) {
    json d = small_model();
    d["model"]["layers"] = pick({1, 2, 7, 40, 0, 1 << 21});
    d["model"]["hidden"] = pick({64, 4096, 12288, 1 << 24, 100});
    d["model"]["heads"] = pick({1, 4, 32, 96, 3});
    d["model"]["kv_heads"] = pick({1, 2, 4, 8});
    d["model"]["vocab"] = pick({1, 1000, 128256, 1 << 24});
    d["model"]["mlp"] = pick({"gelu", "swiglu"});
    d["training"]["seq_length"] = pick({1, 128, 4096, 131072, 1 << 24});
    d["training"]["microbatch_size"] = pick({1, 4, 65536});
    d["training"]["selective_recompute"] = pick({true, false});
    d["training"]["dtype"] = pick({"bf16", "fp32"});
    d["pipeline"]["ranks"] = pick({1, 2, 3, 8, 4096});
    d["pipeline"]["chunks_per_rank"] = pick({1, 2});
    d["pipeline"]["placement"] = pick({"loop", "vshape"});
    d["hardware"]["gpu_peak_tflops"] = pick({1e-6, 1, 989, 1e9});
    d["hardware"]["gpu_memory"] = pick({"80GiB", "1MiB", "1024TiB"});
    d["hardware"]["gpus_per_link_group"] = pick({1, 2, 3, 4096});
    try {
      const auto profile = estimate_profile(parse(d));
      const Problem problem = parse_profile(profile.dump(), "estimated");
      EXPECT_EQ(problem.ranks, d["pipeline"]["ranks"].get<int>());
      ++estimated;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("model.json", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(estimated, 10);
}

TEST(estimate, MalformedJsonAndMissingFile) {
  EXPECT_THROW(parse_model_description("{\"format\": ", "model.json"), InputError);
  try {
    load_model_description("/nonexistent/model.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot read /nonexistent/model.json", 0), 0u);
  }
}

// `optpipe estimate` end to end: the profile it writes compiles; bad input exits 2 on one line.
// (Suites are named in lower case so that `ctest -R estimate` selects them.)
class estimate_cli : public testing::CommandLineTest {};

TEST_F(estimate_cli, EstimateThenCompile) {
  const std::string model = model_example("gpt3-13b.json");
  testing::CommandResult r = run("optpipe", "estimate " + model + " -o " + path("profile.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("profile written to"), std::string::npos);
  EXPECT_NO_THROW(load_profile(path("profile.json")));
  r = run("optpipe",
          "compile " + path("profile.json") + " --method 1f1b -q -o " + path("schedule.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run("optpipe", "estimate " + model + " -o -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(slurp(path("profile.json"))));
}

TEST_F(estimate_cli, BadModelExitsTwoWithOneLine) {
  json document = small_model();
  document["training"]["dtype"] = "bf61";
  write("model.json", document.dump());
  const testing::CommandResult r = run("optpipe", "estimate " + path("model.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "optpipe: error: " + path("model.json") +
                     ": training.dtype: must be \"bf16\", \"fp16\" or \"fp32\", got \"bf61\"; "
                     "did you mean \"bf16\"?\n");
}

}  // namespace
}  // namespace optpipe

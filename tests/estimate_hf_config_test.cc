// Tests of `optpipe estimate` on a Hugging Face config.json (formats/hf_config.h, estimate.h's
// combine_model_inputs, docs/estimate.md "From a Hugging Face config.json"): each supported shape
// with a setup estimates exactly the profile of the equivalent hand-written optpipe.model/v1; the
// setup file and flags lay over the input field by field; errors name the field and where it came
// from; and the CLI exits 2 with one line. (Suites are named in lower case so that
// `ctest -R estimate` selects them.)
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/estimate.h"
#include "formats/hf_config.h"
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

// Configs as Hugging Face ships them, abridged but with keys optpipe ignores left in.
json llama3_8b_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256
  })");
}

json mistral_7b_config() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": true, "vocab_size": 32000
  })");
}

json qwen2_7b_config() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.41.2", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 152064
  })");
}

json gpt2_small_config() {
  return json::parse(R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_inner": null, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": { "text-generation": { "do_sample": true, "max_length": 50 } },
    "vocab_size": 50257
  })");
}

ModelDescription combine(const json& config, const json& setup,
                         const EstimateOverrides& flags = {}) {
  return combine_model_inputs({config, "config.json"}, ModelInput{setup, "setup.json"}, flags);
}

ModelDescription hand_written(const std::string& text) {
  return parse_model_description(text, "hand.json");
}

// The profile from config + setup (+ flags) is the hand-written description's, byte for byte,
// and the profile reader accepts it.
void expect_same_profile(const ModelDescription& from_config, const ModelDescription& expected) {
  const nlohmann::ordered_json profile = estimate_profile(from_config);
  const nlohmann::ordered_json reference = estimate_profile(expected);
  ASSERT_EQ(profile["stages"].size(), reference["stages"].size());
  for (size_t s = 0; s < profile["stages"].size(); ++s) {
    SCOPED_TRACE(s);
    for (const char* key : {"activation_bytes", "weight_grad_bytes", "checkpoint_bytes"}) {
      EXPECT_EQ(profile["stages"][s][key], reference["stages"][s][key]) << key;
    }
  }
  EXPECT_EQ(profile["memory"], reference["memory"]);
  EXPECT_EQ(profile.dump(), reference.dump());  // times, p2p, offload and name too
  const Problem problem = parse_profile(profile.dump(2), "from-config");
  EXPECT_EQ(problem.num_stages(), from_config.num_stages());
}

TEST(estimate_hf_config, Llama3EightBWithTheExampleSetupIsTheExample) {
  // examples/models/llama-8b.json is Llama-3-8B: its setup over the config gives its profile.
  const json setup = json::parse(R"({
    "format": "optpipe.model/v1",
    "name": "llama-8b-gqa-seq8192-pp8",
    "training": { "seq_length": 8192, "microbatch_size": 1, "optimizer": "adam",
                  "selective_recompute": true },
    "pipeline": { "ranks": 8, "chunks_per_rank": 1, "placement": "loop", "microbatches": 32,
                  "layer_split": [4, 4, 4, 5, 4, 4, 4, 3] },
    "hardware": { "gpu_peak_tflops": 989, "efficiency": 0.45, "gpu_memory": "80GiB",
                  "workspace_bytes": "4GiB", "inter_gpu_gb_per_s": 50, "host_link_gb_per_s": 25,
                  "gpus_per_link_group": 2 }
  })");
  const ModelDescription model = combine(llama3_8b_config(), setup);
  EXPECT_EQ(model.layers, 32);
  EXPECT_EQ(model.hidden, 4096);
  EXPECT_EQ(model.heads, 32);
  EXPECT_EQ(model.kv_heads, 8);
  EXPECT_EQ(model.ffn_hidden, 14336);
  EXPECT_EQ(model.vocab, 128256);
  EXPECT_EQ(model.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(model.dtype_bytes, 2);  // torch_dtype bfloat16
  expect_same_profile(
      model,
      load_model_description(model_example("llama-8b.json")));
}

TEST(estimate_hf_config, MistralWithGqaSetupAndFlags) {
  // V-shape on 4 ranks; the sequence length and the ranks come from flags.
  const json setup = json::parse(R"({
    "name": "mistral",
    "training": { "microbatch_size": 2 },
    "pipeline": { "ranks": 2, "chunks_per_rank": 2, "placement": "vshape", "microbatches": 16 },
    "hardware": { "gpu_peak_tflops": 312, "gpu_memory": "80GiB" }
  })");
  EstimateOverrides flags;
  flags.ranks = 4;
  flags.seq_length = 4096;
  const ModelDescription model = combine(mistral_7b_config(), setup, flags);
  EXPECT_EQ(model.kv_heads, 8);
  EXPECT_EQ(model.vocab, 32000);
  expect_same_profile(model, hand_written(R"({
    "format": "optpipe.model/v1", "name": "mistral",
    "model": { "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
               "vocab": 32000, "mlp": "swiglu" },
    "training": { "seq_length": 4096, "microbatch_size": 2, "dtype": "bf16" },
    "pipeline": { "ranks": 4, "chunks_per_rank": 2, "placement": "vshape", "microbatches": 16 },
    "hardware": { "gpu_peak_tflops": 312, "gpu_memory": "80GiB" }
  })"));
}

// What qwen2_7b_config() with the Qwen2 tests' setup and flags describes, written by hand.
constexpr const char* kQwen2SetUpByHand = R"({
    "format": "optpipe.model/v1", "name": "qwen2",
    "model": { "layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4, "ffn_hidden": 18944,
               "vocab": 152064, "mlp": "swiglu" },
    "training": { "seq_length": 4096, "dtype": "bf16", "selective_recompute": true },
    "pipeline": { "ranks": 4, "microbatches": 8 },
    "hardware": { "gpu_peak_tflops": 989, "gpu_memory": "80GiB", "host_link_gb_per_s": 25 }
  })";

TEST(estimate_hf_config, Qwen2) {
  const json setup = json::parse(R"({
    "name": "qwen2",
    "training": { "seq_length": 4096, "selective_recompute": true },
    "pipeline": { "ranks": 4, "microbatches": 8 },
    "hardware": { "gpu_peak_tflops": 989, "gpu_memory": "80GiB", "host_link_gb_per_s": 25 }
  })");
  const ModelDescription model = combine(qwen2_7b_config(), setup);
  expect_same_profile(model, hand_written(kQwen2SetUpByHand));
}

TEST(estimate_hf_config, Gpt2SmallWithNullInner) {
  // No torch_dtype in gpt2's config: the setup's fp32 applies; n_inner null is 4 n_embd.
  const json setup = json::parse(R"({
    "name": "gpt2",
    "training": { "seq_length": 1024, "microbatch_size": 8, "dtype": "fp32", "optimizer": "sgd" },
    "pipeline": { "ranks": 4, "microbatches": 8 },
    "hardware": { "gpu_peak_tflops": 19.5, "gpu_memory": "40GB" }
  })");
  const ModelDescription model = combine(gpt2_small_config(), setup);
  EXPECT_EQ(model.ffn_hidden, 3072);
  EXPECT_EQ(model.mlp, MlpKind::kGelu);
  EXPECT_EQ(model.kv_heads, 12);
  expect_same_profile(model, hand_written(R"({
    "format": "optpipe.model/v1", "name": "gpt2",
    "model": { "layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "mlp": "gelu" },
    "training": { "seq_length": 1024, "microbatch_size": 8, "dtype": "fp32", "optimizer": "sgd" },
    "pipeline": { "ranks": 4, "microbatches": 8 },
    "hardware": { "gpu_peak_tflops": 19.5, "gpu_memory": "40GB" }
  })"));
  json inner = gpt2_small_config();
  inner["n_inner"] = 2048;
  EXPECT_EQ(model_from_hf_config(inner, "config.json")["ffn_hidden"], 2048);
}

TEST(estimate_hf_config, ShapeDefaultsAndDtype) {
  // Llama-2 configs have no num_key_value_heads: multi-head attention.
  json llama2 = llama3_8b_config();
  llama2.erase("num_key_value_heads");
  EXPECT_EQ(model_from_hf_config(llama2, "config.json")["kv_heads"], 32);
  llama2["num_key_value_heads"] = nullptr;
  EXPECT_EQ(model_from_hf_config(llama2, "config.json")["kv_heads"], 32);
  // A config with only "architectures" maps by its class.
  json no_type = mistral_7b_config();
  no_type.erase("model_type");
  EXPECT_TRUE(is_hf_config(no_type));
  EXPECT_EQ(model_from_hf_config(no_type, "config.json"),
            model_from_hf_config(mistral_7b_config(), "config.json"));
  // head_dim equal to hidden / heads is the same shape.
  json head_dim = llama3_8b_config();
  head_dim["head_dim"] = 128;
  EXPECT_NO_THROW(model_from_hf_config(head_dim, "config.json"));

  EXPECT_EQ(hf_config_dtype(json{{"torch_dtype", "bfloat16"}}), "bf16");
  EXPECT_EQ(hf_config_dtype(json{{"torch_dtype", "float16"}}), "fp16");
  EXPECT_EQ(hf_config_dtype(json{{"torch_dtype", "float32"}}), "fp32");
  EXPECT_EQ(hf_config_dtype(json{{"dtype", "float32"}}), "fp32");  // transformers >= 4.56
  EXPECT_EQ(hf_config_dtype(json{{"torch_dtype", "float8_e4m3fn"}}), std::nullopt);
  EXPECT_EQ(hf_config_dtype(json::object()), std::nullopt);

  const json setup = json::parse(R"({
    "training": { "seq_length": 128 }, "pipeline": { "ranks": 2, "microbatches": 2 },
    "hardware": { "gpu_peak_tflops": 100, "gpu_memory": "1024TiB" }
  })");
  json fp32 = gpt2_small_config();
  fp32["torch_dtype"] = "float32";
  EXPECT_EQ(combine(fp32, setup).dtype_bytes, 4);
  json setup_bf16 = setup;
  setup_bf16["training"]["dtype"] = "bf16";  // the setup's dtype wins over torch_dtype
  EXPECT_EQ(combine(fp32, setup_bf16).dtype_bytes, 2);
  fp32["torch_dtype"] = "int8";  // not a training dtype: the default
  EXPECT_EQ(combine(fp32, setup).dtype_bytes, 2);
  // The name defaults to the config's file name.
  EXPECT_EQ(combine(fp32, setup).name, "config");
}

TEST(estimate_hf_config, RecognisesOnlyConfigs) {
  EXPECT_TRUE(is_hf_config(llama3_8b_config()));
  EXPECT_FALSE(is_hf_config(json::parse(R"({"format": "optpipe.model/v1", "model_type": "x"})")));
  EXPECT_FALSE(is_hf_config(json::parse(R"({"hidden_size": 4096})")));
  EXPECT_FALSE(is_hf_config(json::array()));
}

TEST(estimate_hf_config, SetupAndFlagsLayOverAModelDescription) {
  const std::string path = model_example("gpt3-13b.json");
  const json document = json::parse(std::ifstream(path));
  EstimateOverrides flags;
  flags.ranks = 4;
  flags.microbatches = 8;
  flags.gpu_memory = "96GiB";
  const json setup = json::parse(R"({ "hardware": { "efficiency": 0.4 } })");
  const ModelDescription model =
      combine_model_inputs({document, path}, ModelInput{setup, "setup.json"}, flags);
  EXPECT_EQ(model.ranks, 4);
  EXPECT_EQ(model.microbatches, 8);
  EXPECT_EQ(model.gpu_memory_bytes, int64_t{96} << 30);
  EXPECT_EQ(model.efficiency, 0.4);
  EXPECT_EQ(model.gpu_peak_tflops, 989);  // the rest from the file
  EXPECT_EQ(model.name, "gpt3-13b-seq2048-pp8");
  // With nothing laid over it, the file reads as it always did.
  EXPECT_EQ(estimate_profile(combine_model_inputs({document, path}, std::nullopt, {})),
            estimate_profile(load_model_description(path)));
}

// Overrides with one flag set.
template <typename T>
EstimateOverrides with_flag(std::optional<T> EstimateOverrides::*flag, T value) {
  EstimateOverrides flags;
  flags.*flag = std::move(value);
  return flags;
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(estimate_hf_config, ErrorsNameTheFieldAndWhereItCameFrom) {
  const json setup = json::parse(R"({
    "training": { "seq_length": 128 }, "pipeline": { "ranks": 2, "microbatches": 2 },
    "hardware": { "gpu_peak_tflops": 100, "gpu_memory": "1024TiB" }
  })");
  auto config_error = [&](const std::function<void(json&)>& edit) {
    json config = llama3_8b_config();
    edit(config);
    return error_of([&] { combine(config, setup); });
  };
  EXPECT_EQ(config_error([](json& c) { c["model_type"] = "gemma"; }),
            "config.json: model_type: \"gemma\" is not supported; optpipe estimate reads llama, "
            "mistral, qwen2, gpt2; for another model write an optpipe.model/v1 description "
            "(docs/estimate.md)");
  EXPECT_EQ(config_error([](json& c) {
              c.erase("model_type");
              c["architectures"] = {"GemmaForCausalLM"};
            }).rfind("config.json: architectures: names no supported model", 0),
            0u);
  EXPECT_EQ(config_error([](json& c) { c.erase("num_hidden_layers"); }),
            "config.json: num_hidden_layers: missing; the number of layers");
  EXPECT_EQ(config_error([](json& c) { c["hidden_size"] = "4096"; }),
            "config.json: hidden_size: must be an integer >= 1, got \"4096\"");
  EXPECT_EQ(config_error([](json& c) { c["num_attention_heads"] = 30; }),
            "config.json: num_attention_heads: must divide hidden_size = 4096, got 30");
  EXPECT_EQ(config_error([](json& c) { c["num_key_value_heads"] = 5; }),
            "config.json: num_key_value_heads: must divide num_attention_heads = 32, got 5");
  EXPECT_EQ(config_error([](json& c) { c["head_dim"] = 160; }),
            "config.json: head_dim: differs from hidden_size / num_attention_heads = 128, which "
            "is all optpipe models, got 160; write an optpipe.model/v1 description "
            "(docs/estimate.md)");
  EXPECT_EQ(config_error([](json& c) { c.erase("intermediate_size"); }),
            "config.json: intermediate_size: missing; the MLP's inner size");
  // A string head_dim is not a number that differs: it is not a number.
  EXPECT_EQ(config_error([](json& c) { c["head_dim"] = "128"; }),
            "config.json: head_dim: must be an integer >= 1, got \"128\"");
  // Mixtral's and Qwen2-MoE's fields under a dense model_type are refused, not estimated dense.
  EXPECT_EQ(config_error([](json& c) { c["architectures"] = {"MixtralForCausalLM"}; }),
            "config.json: architectures[0]: a mixture of experts, which optpipe estimate does "
            "not model (its llama models are dense), got \"MixtralForCausalLM\"; write an "
            "optpipe.model/v1 description (docs/estimate.md)");
  EXPECT_EQ(config_error([](json& c) { c["num_local_experts"] = 8; }),
            "config.json: num_local_experts: a mixture of experts, which optpipe estimate does "
            "not model (its llama models are dense), got 8; write an optpipe.model/v1 "
            "description (docs/estimate.md)");
  EXPECT_EQ(config_error([](json& c) {
              c["model_type"] = "qwen2";
              c["num_experts"] = 60;
            }).rfind("config.json: num_experts: a mixture of experts", 0),
            0u);
  {
    json one_expert = llama3_8b_config();
    one_expert["num_local_experts"] = 1;  // one expert is a dense MLP
    EXPECT_NO_THROW(combine(one_expert, setup));
  }

  // The setup and the flags: each error names the file or flag that gave the field.
  auto setup_error = [&](const std::function<void(json&)>& edit, EstimateOverrides flags = {}) {
    json edited = setup;
    edit(edited);
    return error_of([&] { combine(llama3_8b_config(), edited, flags); });
  };
  EXPECT_EQ(setup_error([](json& s) { s["pipeline"].erase("ranks"); }),
            "config.json: pipeline.ranks: missing; a Hugging Face config.json does not give it: "
            "pass --ranks N or set it in a --setup file");
  EXPECT_EQ(setup_error([](json& s) {
              s.erase("pipeline");
              s["hardware"].erase("gpu_memory");
            }),
            "config.json: pipeline.ranks, pipeline.microbatches and hardware.gpu_memory: missing; "
            "a Hugging Face config.json does not give them: pass --ranks N --microbatches M "
            "--gpu-memory SIZE or set them in a --setup file");
  EXPECT_EQ(setup_error([](json& s) {
              s["model"] = {{"layers", 2}};
            }),
            "setup.json: model: a --setup file has no model section: the model comes from "
            "config.json; remove it");
  EXPECT_EQ(setup_error([](json& s) { s["hardwar"] = json::object(); }),
            "setup.json: hardwar: unknown key; did you mean \"hardware\"?");
  EXPECT_EQ(setup_error([](json& s) { s["format"] = "optpipe.profile/v1"; }),
            "setup.json: format: must be \"optpipe.model/v1\" (or left out), got "
            "\"optpipe.profile/v1\"");
  EXPECT_EQ(setup_error([](json& s) { s["training"]["dtyp"] = "bf16"; }),
            "setup.json: training.dtyp: unknown key; did you mean \"dtype\"?");
  EXPECT_EQ(setup_error([](json& s) { s["training"] = 3; }),
            "setup.json: training: must be an object, got 3");
  EXPECT_EQ(setup_error([](json& s) { s["hardware"]["efficiency"] = 2; }),
            "setup.json: hardware.efficiency: must be a number <= 1, got 2");
  EXPECT_EQ(setup_error(
                [](json& s) {
                  s["pipeline"]["layer_split"] = {32, 0};
                },
                with_flag(&EstimateOverrides::ranks, int64_t{4})),
            "setup.json: pipeline.layer_split: must list the layers of ranks * chunks_per_rank = "
            "4 stages, got 2");
  EXPECT_EQ(
      setup_error([](json&) {}, with_flag(&EstimateOverrides::placement, std::string("vshape"))),
      "--placement: \"vshape\" needs chunks_per_rank = 2, got 1; use \"loop\" or an "
      "explicit list");
  EXPECT_EQ(
      setup_error([](json&) {}, with_flag(&EstimateOverrides::gpu_memory, std::string("80gib"))),
      "--gpu-memory: has unknown unit \"gib\", got \"80gib\"; did you mean \"GiB\"?");
}

// `optpipe estimate config.json` end to end.
class estimate_hf_config_cli : public testing::CommandLineTest {
 protected:
  // Writes `document` into the test's directory; its path.
  std::string write_json(const std::string& name, const json& document) const {
    write(name, document.dump(2));
    return path(name);
  }
};

TEST_F(estimate_hf_config_cli, ConfigSetupAndFlagsWriteTheProfile) {
  const std::string config = write_json("config.json", qwen2_7b_config());
  const std::string setup = write_json("setup.json", json::parse(R"({
    "name": "qwen2", "training": { "selective_recompute": true },
    "hardware": { "gpu_memory": "80GiB", "host_link_gb_per_s": 25 }
  })"));
  const testing::CommandResult r =
      run("optpipe", "estimate " + config + " --setup " + setup +
                         " --ranks 4 --microbatches 8 --seq-length 4096 --gpu-peak-tflops 989 -o " +
                         path("profile.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("profile written to"), std::string::npos);
  const Problem problem = load_profile(path("profile.json"));
  EXPECT_EQ(problem.ranks, 4);
  EXPECT_EQ(json::parse(slurp(path("profile.json"))),
            json(estimate_profile(hand_written(kQwen2SetUpByHand))));
}

TEST_F(estimate_hf_config_cli, FlagsOverrideAModelDescription) {
  const std::string model = model_example("gpt3-13b.json");
  const testing::CommandResult r =
      run("optpipe", "estimate " + model + " --ranks 4 --microbatches 8 -o -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json profile = json::parse(r.out);
  EXPECT_EQ(profile["pipeline"]["ranks"], 4);
  EXPECT_EQ(profile["pipeline"]["microbatches"], 8);
  EXPECT_EQ(profile["stages"].size(), 4u);
}

TEST_F(estimate_hf_config_cli, UnsupportedModelTypeExitsTwoWithOneLine) {
  json gemma = llama3_8b_config();
  gemma["model_type"] = "gemma";
  const std::string config = write_json("config.json", gemma);
  const testing::CommandResult r = run("optpipe", "estimate " + config + " --ranks 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "optpipe: error: " + config +
                     ": model_type: \"gemma\" is not supported; optpipe estimate reads llama, "
                     "mistral, qwen2, gpt2; for another model write an optpipe.model/v1 "
                     "description (docs/estimate.md)\n");
}

TEST_F(estimate_hf_config_cli, MissingRanksExitsTwoWithOneLine) {
  const std::string config = write_json("config.json", gpt2_small_config());
  testing::CommandResult r = run("optpipe", "estimate " + config +
                                                 " --microbatches 8 --seq-length 1024 "
                                                 "--gpu-peak-tflops 100 --gpu-memory 40GB");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "optpipe: error: " + config +
                     ": pipeline.ranks: missing; a Hugging Face config.json does not give it: "
                     "pass --ranks N or set it in a --setup file\n");
  r = run("optpipe", "estimate " + config + " --ranks 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

}  // namespace
}  // namespace optpipe

#include "formats/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "formats/json_fields.h"

namespace optpipe {

namespace {

using nlohmann::json;

// The model reader's bounds (estimate.cc), so that a shape accepted here is accepted there.
constexpr int64_t kMaxDimension = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 1 << 20;

// Where each supported shape keeps its numbers.
struct HfKeys {
  std::string_view layers, hidden, heads, kv_heads, ffn_hidden, vocab;
  const char* mlp;
};

constexpr HfKeys kLlamaKeys = {"num_hidden_layers",
                               "hidden_size",
                               "num_attention_heads",
                               "num_key_value_heads",
                               "intermediate_size",
                               "vocab_size",
                               "swiglu"};
constexpr HfKeys kGpt2Keys = {"n_layer", "n_embd", "n_head", "", "n_inner", "vocab_size", "gelu"};

// A key that is absent or null (Hugging Face writes "n_inner": null for the default).
std::optional<JsonField> find_set(const JsonField& config, std::string_view key) {
  if (key.empty()) return std::nullopt;
  auto field = config.find(key);
  if (field && field->value().is_null()) return std::nullopt;
  return field;
}

int64_t required(const JsonField& config, std::string_view key, int64_t max,
                 std::string_view what) {
  auto field = find_set(config, key);
  if (!field) config.fail_missing(key, what);
  return field->integer(1, max);
}

// The model type: "model_type", or for a config without one, its first architecture's class.
std::string model_type_of(const JsonField& config) {
  if (auto type = config.find("model_type")) return type->string();
  const JsonField architectures = config.get("architectures");
  const std::vector<JsonField> classes = architectures.items();
  static const std::pair<std::string_view, std::string_view> kClasses[] = {
      {"LlamaForCausalLM", "llama"},
      {"MistralForCausalLM", "mistral"},
      {"Qwen2ForCausalLM", "qwen2"},
      {"GPT2LMHeadModel", "gpt2"}};
  if (!classes.empty() && classes.front().value().is_string()) {
    for (const auto& [name, type] : kClasses) {
      if (classes.front().value().get<std::string>() == name) return std::string(type);
    }
  }
  architectures.fail(
      "names no supported model (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
      "GPT2LMHeadModel)",
      "give \"model_type\", or write an optpipe.model/v1 description (docs/estimate.md)");
}

// A mixture of experts under a dense model_type (Mixtral's fields under "llama", Qwen2-MoE's under
// "qwen2"): optpipe's models are dense, so such a config is refused, not estimated as dense.
void refuse_experts(const JsonField& config, const std::string& type) {
  for (std::string_view key : {"num_local_experts", "num_experts", "n_routed_experts",
                               "num_experts_per_tok", "moe_intermediate_size"}) {
    const auto field = find_set(config, key);
    if (field && field->value() != json(0) && field->value() != json(1)) {
      field->fail(fmt::format("a mixture of experts, which optpipe estimate does not model "
                              "(its {} models are dense)",
                              type),
                  "write an optpipe.model/v1 description (docs/estimate.md)");
    }
  }
  const auto architectures = find_set(config, "architectures");
  if (!architectures || !architectures->value().is_array()) return;
  for (const JsonField& entry : architectures->items()) {
    if (!entry.value().is_string()) continue;
    const std::string name = entry.value().get<std::string>();
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower.find("moe") != std::string::npos || lower.find("mixtral") != std::string::npos) {
      entry.fail(fmt::format("a mixture of experts, which optpipe estimate does not model "
                             "(its {} models are dense)",
                             type),
                 "write an optpipe.model/v1 description (docs/estimate.md)");
    }
  }
}

}  // namespace

const std::vector<std::string_view>& supported_hf_model_types() {
  static const std::vector<std::string_view> kTypes = {"llama", "mistral", "qwen2", "gpt2"};
  return kTypes;
}

bool is_hf_config(const json& document) {
  return document.is_object() && !document.contains("format") &&
         (document.contains("model_type") || document.contains("architectures"));
}

json model_from_hf_config(const json& document, const std::string& source) {
  const JsonField config(document, source);
  if (!document.is_object()) config.fail("must be an object");
  const std::string type = model_type_of(config);
  const std::vector<std::string_view>& supported = supported_hf_model_types();
  if (std::find(supported.begin(), supported.end(), type) == supported.end()) {
    std::string names;
    for (std::string_view name : supported)
      names += (names.empty() ? "" : ", ") + std::string(name);
    config.get("model_type")
        .fail_plain(fmt::format("{} is not supported; optpipe estimate reads {}; for another model "
                                "write an optpipe.model/v1 description (docs/estimate.md)",
                                preview_json(json(type)), names));
  }
  refuse_experts(config, type);
  const HfKeys& keys = type == "gpt2" ? kGpt2Keys : kLlamaKeys;

  const int64_t layers = required(config, keys.layers, kMaxLayers, "the number of layers");
  const int64_t hidden = required(config, keys.hidden, kMaxDimension, "the hidden size");
  const int64_t heads = required(config, keys.heads, hidden, "the number of attention heads");
  if (hidden % heads != 0) {
    config.get(keys.heads).fail(fmt::format("must divide {} = {}", keys.hidden, hidden));
  }
  int64_t kv_heads = heads;
  if (auto field = find_set(config, keys.kv_heads)) {
    kv_heads = field->integer(1, heads,
                              fmt::format("must be an integer in [1, {} = {}]", keys.heads, heads));
    if (heads % kv_heads != 0) field->fail(fmt::format("must divide {} = {}", keys.heads, heads));
  }
  // optpipe's attention has a heads of d = h / a; a config whose head_dim differs is another shape.
  if (auto head_dim = find_set(config, "head_dim")) {
    if (head_dim->integer(1, kMaxDimension) != hidden / heads) {
      head_dim->fail(fmt::format("differs from {} / {} = {}, which is all optpipe models",
                                 keys.hidden, keys.heads, hidden / heads),
                     "write an optpipe.model/v1 description (docs/estimate.md)");
    }
  }
  int64_t ffn_hidden = 4 * hidden;  // gpt2's n_inner: null means 4 n_embd
  if (keys.mlp == std::string_view("swiglu")) {
    ffn_hidden = required(config, keys.ffn_hidden, kMaxDimension, "the MLP's inner size");
  } else if (auto field = find_set(config, keys.ffn_hidden)) {
    ffn_hidden = field->integer(1, kMaxDimension);
  }
  const int64_t vocab = required(config, keys.vocab, kMaxDimension, "the vocabulary size");
  return json{{"layers", layers},     {"hidden", hidden},         {"heads", heads},
              {"kv_heads", kv_heads}, {"ffn_hidden", ffn_hidden}, {"vocab", vocab},
              {"mlp", keys.mlp}};
}

std::optional<std::string> hf_config_dtype(const json& config) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_string()) continue;
    const std::string name = it->get<std::string>();
    if (name == "bfloat16") return "bf16";
    if (name == "float16") return "fp16";
    if (name == "float32") return "fp32";
  }
  return std::nullopt;
}

}  // namespace optpipe

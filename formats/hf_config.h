// Reading a Hugging Face `config.json` as the model of `optpipe estimate` (docs/estimate.md, "From
// a Hugging Face config.json"). A config.json gives the transformer's shape only; the training
// setup, the pipeline and the hardware come from a --setup file and flags (estimate.h,
// EstimateOverrides). Keys that optpipe does not model are ignored; a bad one that it reads
// throws InputError with one line naming it, in Hugging Face's name.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace optpipe {

// The model types whose shape maps exactly: llama, mistral, qwen2 (SwiGLU, grouped-query
// attention) and gpt2 (GeLU, multi-head attention).
const std::vector<std::string_view>& supported_hf_model_types();

// Whether `document` looks like a Hugging Face config.json: an object without "format" that has
// "model_type" or "architectures".
bool is_hf_config(const nlohmann::json& document);

// The `model` section of an optpipe.model/v1 document (layers, hidden, heads, kv_heads,
// ffn_hidden, vocab, mlp) for the config's shape. Throws InputError "<source>: <key>: ..." for an
// unsupported model_type (listing the supported ones) or a missing or bad shape key.
nlohmann::json model_from_hf_config(const nlohmann::json& config, const std::string& source);

// The training dtype the config names in "torch_dtype" (or "dtype", its newer name):
// "bfloat16" -> "bf16", "float16" -> "fp16", "float32" -> "fp32"; anything else, or none, gives
// nothing (the setup's dtype or the default applies).
std::optional<std::string> hf_config_dtype(const nlohmann::json& config);

}  // namespace optpipe

// Estimating a profile from a model description (`optpipe estimate`, docs/estimate.md).
// A model description (`optpipe.model/v1` JSON: transformer shape, training setup, pipeline,
// hardware; or a Hugging Face config.json for the shape plus a setup file and flags for the rest)
// becomes a complete `optpipe.profile/v1` by closed-form FLOP and memory counts
// (Narayanan et al. 2021, Korthikanti et al. 2022, Qi et al. 2023). Every input field is checked;
// a bad one throws InputError with one line naming it, like the profile reader.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace optpipe {

enum class MlpKind { kGelu, kSwiglu };  // 2 or 3 weight matrices of hidden x ffn_hidden
enum class OptimizerKind { kAdam, kSgd };

struct ModelDescription {
  std::string source;  // the input's name (usually its path), for messages
  std::string name;
  // model
  int64_t layers = 0;
  int64_t hidden = 0;      // h
  int64_t heads = 0;       // a
  int64_t kv_heads = 0;    // k (GQA; = heads for multi-head attention)
  int64_t ffn_hidden = 0;  // f
  int64_t vocab = 0;       // V
  MlpKind mlp = MlpKind::kGelu;
  // training
  int64_t seq_length = 0;       // s
  int64_t microbatch_size = 1;  // b
  int64_t dtype_bytes = 2;      // D: bf16/fp16 = 2, fp32 = 4
  OptimizerKind optimizer = OptimizerKind::kAdam;
  bool selective_recompute = false;
  // pipeline
  int ranks = 1;
  int chunks_per_rank = 1;
  nlohmann::json placement = "loop";  // "loop", "vshape" or a list of ranks (copied to the profile)
  std::vector<int> rank_of_stage;     // from placement; filled by parse_model_description()
  int microbatches = 1;
  std::vector<int64_t> layer_split;  // layers per stage; empty: split evenly
  // hardware
  double gpu_peak_tflops = 0;
  double efficiency = 0.5;  // achieved fraction of the peak
  int64_t gpu_memory_bytes = 0;
  int64_t workspace_bytes = int64_t{4} << 30;
  double inter_gpu_gb_per_s = 50;  // p2p bandwidth between ranks
  double host_link_gb_per_s = 0;   // 0: no offload section
  std::string host_link_channels = "duplex";
  int gpus_per_link_group = 2;

  int num_stages() const { return ranks * chunks_per_rank; }
};

// What one part of the model costs per microbatch (b sequences of s tokens). Counts are whole
// numbers held in doubles (exact below 2^53), so that huge inputs cannot overflow.
struct PartCosts {
  double forward_flops = 0;
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
  double params = 0;
  double activation_bytes = 0;   // A: allocated by F, held until B and W
  double weight_grad_bytes = 0;  // G <= A: what W still needs after B
};

PartCosts transformer_layer_costs(const ModelDescription& model);
PartCosts embedding_costs(const ModelDescription& model);  // first stage
PartCosts head_costs(const ModelDescription& model);       // last stage: final norm, LM head, loss
// Bytes per parameter held all iteration: weights + gradients (+ fp32 master) + optimizer state.
double optimizer_bytes_per_param(const ModelDescription& model);
// Layers per stage: the explicit split, or as even as possible with the remainder on the middle
// stages first (the first and last stages also carry the embedding and the head).
std::vector<int64_t> split_layers(const ModelDescription& model);

// Reading `optpipe.model/v1`; `source` names the input in messages.
ModelDescription parse_model_description(std::string_view json_text, const std::string& source);
ModelDescription load_model_description(const std::string& path);

// What `optpipe estimate` lays over its input, last wins: the fields of a --setup file (an
// optpipe.model/v1 without its model section: name, training, pipeline, hardware), then one flag
// per common field. The input is an optpipe.model/v1 or a Hugging Face config.json (hf_config.h),
// whose model section comes from its shape and whose training.dtype defaults to its torch_dtype.
struct EstimateOverrides {
  std::optional<int64_t> ranks;            // --ranks: pipeline.ranks
  std::optional<int64_t> microbatches;     // --microbatches: pipeline.microbatches
  std::optional<int64_t> chunks_per_rank;  // --chunks-per-rank: pipeline.chunks_per_rank
  std::optional<std::string> placement;    // --placement: pipeline.placement ("loop", "vshape")
  std::optional<int64_t> seq_length;       // --seq-length: training.seq_length
  std::optional<double> gpu_peak_tflops;   // --gpu-peak-tflops: hardware.gpu_peak_tflops
  std::optional<std::string> gpu_memory;   // --gpu-memory: hardware.gpu_memory (a size)
};

// A JSON document already read, and its name for messages (usually its path).
struct ModelInput {
  nlohmann::json document;
  std::string source;
};

// The optpipe.model/v1 document of `input` with `setup` and `overrides` laid over it, field by
// field. An error names the field and the file or flag that gave it; a required field that a
// config.json input leaves unset names the flag that gives it, e.g.
//   "config.json: pipeline.ranks: missing; a Hugging Face config.json has no pipeline: pass
//    --ranks N or give it in a --setup file".
ModelDescription combine_model_inputs(const ModelInput& input,
                                      const std::optional<ModelInput>& setup,
                                      const EstimateOverrides& overrides);
// The same, reading the input (and the setup file unless `setup_path` is empty).
ModelDescription load_model_inputs(const std::string& path, const std::string& setup_path,
                                   const EstimateOverrides& overrides);

// The complete optpipe.profile/v1 document, keys in the order docs/profile.md lists them. Throws
// InputError (naming the model field) when the result cannot be a valid profile, e.g. a rank's
// static bytes exceed gpu_memory.
nlohmann::ordered_json estimate_profile(const ModelDescription& model);
// A table of what estimate_profile() wrote: per stage its rank, layers, times and activation
// bytes, per rank its static bytes against the budget.
std::string estimate_summary(const ModelDescription& model, const nlohmann::ordered_json& profile);

}  // namespace optpipe

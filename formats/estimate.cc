#include "formats/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "formats/file_io.h"
#include "formats/hf_config.h"
#include "formats/json_fields.h"
#include "formats/profile.h"
#include "formats/units.h"
#include "model/errors.h"
#include "model/problem.h"

namespace optpipe {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kModelFormat = "optpipe.model/v1";
// The profile's own limits (docs/profile.md), so that what we write always loads.
constexpr int kMaxRanks = 4096;
constexpr int kMaxChunksPerRank = 64;
constexpr int kMaxMicrobatches = 65536;
constexpr double kMaxBytes = 1125899906842624.0;  // 2^50
constexpr double kMaxTime = 1e12;
constexpr double kMinGbPerS = 1e-3;
constexpr double kMaxGbPerS = 1e6;
// Bounds on the model's shape: generous, and small enough that the integer products (b·s, k·d)
// cannot overflow. Counts are doubles; results beyond the profile's limits are rejected.
constexpr int64_t kMaxDimension = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 1 << 20;

// ---- reading optpipe.model/v1 ----

int64_t read_size_field(const JsonField& field) {
  if (field.value().is_string()) return parse_size(field.value().get<std::string>(), field.where());
  return field.integer(0, static_cast<int64_t>(kMaxBytes),
                       "must be a size: a byte count in [0, 2^50] or a string like \"80GiB\"");
}

bool read_bool(const JsonField& field) {
  if (!field.value().is_boolean()) field.fail("must be true or false");
  return field.value().get<bool>();
}

double read_gb_per_s(const JsonField& field) {
  const double gb_per_s = field.positive_number(kMaxGbPerS);
  if (gb_per_s < kMinGbPerS) field.fail(fmt::format("must be a number >= {:g}", kMinGbPerS));
  return gb_per_s;
}

void read_model(const JsonField& model, ModelDescription& out) {
  model.expect_object({"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp"});
  out.layers = model.get("layers", "the number of transformer layers").integer(1, kMaxLayers);
  out.hidden = model.get("hidden", "the hidden size h").integer(1, kMaxDimension);
  const JsonField heads = model.get("heads", "the number of attention heads a");
  out.heads = heads.integer(1, out.hidden);
  if (out.hidden % out.heads != 0) {
    heads.fail(fmt::format("must divide hidden = {}", out.hidden));
  }
  out.kv_heads = out.heads;
  if (auto kv_heads = model.find("kv_heads")) {
    out.kv_heads = kv_heads->integer(
        1, out.heads, fmt::format("must be an integer in [1, heads = {}]", out.heads));
    if (out.heads % out.kv_heads != 0) {
      kv_heads->fail(fmt::format("must divide heads = {}", out.heads));
    }
  }
  out.ffn_hidden = 4 * out.hidden;
  if (auto ffn = model.find("ffn_hidden")) out.ffn_hidden = ffn->integer(1, kMaxDimension);
  out.vocab = model.get("vocab", "the vocabulary size").integer(1, kMaxDimension);
  if (auto mlp = model.find("mlp")) {
    out.mlp = mlp->choice<MlpKind>({{"gelu", MlpKind::kGelu}, {"swiglu", MlpKind::kSwiglu}});
  }
}

void read_training(const JsonField& training, ModelDescription& out) {
  training.expect_object(
      {"seq_length", "microbatch_size", "dtype", "optimizer", "selective_recompute"});
  out.seq_length = training.get("seq_length", "tokens per sequence").integer(1, kMaxDimension);
  if (auto b = training.find("microbatch_size")) out.microbatch_size = b->integer(1, 1 << 16);
  if (auto dtype = training.find("dtype")) {
    out.dtype_bytes = dtype->choice<int64_t>({{"bf16", 2}, {"fp16", 2}, {"fp32", 4}});
  }
  if (auto optimizer = training.find("optimizer")) {
    out.optimizer = optimizer->choice<OptimizerKind>(
        {{"adam", OptimizerKind::kAdam}, {"sgd", OptimizerKind::kSgd}});
  }
  if (auto selective = training.find("selective_recompute")) {
    out.selective_recompute = read_bool(*selective);
  }
}

void read_placement(const std::optional<JsonField>& field, ModelDescription& out) {
  if (!field) {
    out.rank_of_stage = place_stages(PlacementKind::kLoop, out.ranks, out.chunks_per_rank);
    return;
  }
  out.placement = field->value();
  if (field->value().is_array()) {
    const std::vector<JsonField> entries = field->items();
    if (static_cast<int>(entries.size()) != out.num_stages()) {
      field->fail_plain(fmt::format("must list ranks * chunks_per_rank = {} stages, got {}",
                                    out.num_stages(), entries.size()));
    }
    std::vector<int> stages_on_rank(out.ranks, 0);
    for (const JsonField& entry : entries) {
      const int rank = static_cast<int>(
          entry.integer(0, out.ranks - 1, fmt::format("must be a rank in [0, {})", out.ranks)));
      out.rank_of_stage.push_back(rank);
      ++stages_on_rank[rank];
    }
    for (int rank = 0; rank < out.ranks; ++rank) {
      if (stages_on_rank[rank] != out.chunks_per_rank) {
        field->fail_plain(fmt::format("rank {} must host chunks_per_rank = {} stages, got {}", rank,
                                      out.chunks_per_rank, stages_on_rank[rank]));
      }
    }
    return;
  }
  if (!field->value().is_string()) field->fail(R"(must be "loop", "vshape" or a list of ranks)");
  const PlacementKind kind = field->choice<PlacementKind>(
      {{"loop", PlacementKind::kLoop}, {"vshape", PlacementKind::kVShape}});
  if (kind == PlacementKind::kVShape && out.chunks_per_rank != 2) {
    field->fail_plain(fmt::format(
        "\"vshape\" needs chunks_per_rank = 2, got {}; use \"loop\" or an explicit list",
        out.chunks_per_rank));
  }
  out.rank_of_stage = place_stages(kind, out.ranks, out.chunks_per_rank);
}

void read_layer_split(const JsonField& field, ModelDescription& out) {
  const std::vector<JsonField> entries = field.items();
  if (static_cast<int>(entries.size()) != out.num_stages()) {
    field.fail_plain(
        fmt::format("must list the layers of ranks * chunks_per_rank = {} stages, got {}",
                    out.num_stages(), entries.size()));
  }
  for (const JsonField& entry : entries) out.layer_split.push_back(entry.integer(0, out.layers));
  const int64_t total = std::accumulate(out.layer_split.begin(), out.layer_split.end(), int64_t{0});
  if (total != out.layers) {
    field.fail_plain(fmt::format("must add up to model.layers = {}, got {}", out.layers, total));
  }
}

void read_pipeline(const JsonField& pipeline, ModelDescription& out) {
  pipeline.expect_object({"ranks", "chunks_per_rank", "placement", "microbatches", "layer_split"});
  out.ranks = static_cast<int>(
      pipeline.get("ranks", "the number of pipeline ranks (GPUs)").integer(1, kMaxRanks));
  if (auto chunks = pipeline.find("chunks_per_rank")) {
    out.chunks_per_rank = static_cast<int>(chunks->integer(1, kMaxChunksPerRank));
  }
  out.microbatches = static_cast<int>(
      pipeline.get("microbatches", "microbatches per iteration").integer(1, kMaxMicrobatches));
  read_placement(pipeline.find("placement"), out);
  if (auto split = pipeline.find("layer_split")) read_layer_split(*split, out);
}

void read_hardware(const JsonField& hardware, ModelDescription& out) {
  hardware.expect_object({"gpu_peak_tflops", "efficiency", "gpu_memory", "workspace_bytes",
                          "inter_gpu_gb_per_s", "host_link_gb_per_s", "host_link_channels",
                          "gpus_per_link_group"});
  out.gpu_peak_tflops =
      hardware.get("gpu_peak_tflops", "the GPU's dense peak TFLOP/s in the training dtype")
          .positive_number(1e9);
  if (auto efficiency = hardware.find("efficiency")) {
    out.efficiency = efficiency->positive_number(1);
  }
  out.gpu_memory_bytes =
      read_size_field(hardware.get("gpu_memory", "the GPU's memory, e.g. \"80GiB\""));
  if (auto workspace = hardware.find("workspace_bytes")) {
    out.workspace_bytes = read_size_field(*workspace);
  }
  if (auto p2p = hardware.find("inter_gpu_gb_per_s")) out.inter_gpu_gb_per_s = read_gb_per_s(*p2p);
  if (auto link = hardware.find("host_link_gb_per_s"))
    out.host_link_gb_per_s = read_gb_per_s(*link);
  if (auto channels = hardware.find("host_link_channels")) {
    out.host_link_channels =
        channels->choice<std::string>({{"duplex", "duplex"}, {"shared", "shared"}});
  }
  if (auto group = hardware.find("gpus_per_link_group")) {
    out.gpus_per_link_group = static_cast<int>(group->integer(1, kMaxRanks));
  }
}

ModelDescription read_model_description(const JsonField& root, const std::string& source) {
  const JsonField format = root.get("format", fmt::format("set \"format\": \"{}\"", kModelFormat));
  if (!format.value().is_string() || format.value().get<std::string>() != kModelFormat) {
    format.fail(fmt::format("must be \"{}\"", kModelFormat),
                "is this an optpipe model description?");
  }
  root.expect_object({"format", "name", "model", "training", "pipeline", "hardware"});
  ModelDescription out;
  out.source = source;
  const auto name = root.find("name");
  const std::string stem = std::filesystem::path(source).stem().string();
  out.name = name ? name->string() : (stem.empty() ? "model" : stem);
  read_model(root.get("model"), out);
  read_training(root.get("training"), out);
  read_pipeline(root.get("pipeline"), out);
  read_hardware(root.get("hardware"), out);
  return out;
}

// Reads the document, turning nlohmann's errors (which a checked reader should not let through)
// into one line about the input.
ModelDescription read_document(const json& document, const std::string& source) {
  try {
    return read_model_description(JsonField(document, source), source);
  } catch (const json::exception& e) {
    std::string message = fmt::format("{}: invalid model description: {}", source, e.what());
    std::replace(message.begin(), message.end(), '\n', ' ');
    throw InputError(message);
  }
}

// ---- laying a setup file and flags over the input ----

// Where the fields of a combined document came from, by path ("pipeline.ranks"): a file's name
// or a flag ("--ranks"). Fields that are not listed came from the input.
using Origins = std::map<std::string, std::string>;

constexpr std::string_view kSetupSections[] = {"training", "pipeline", "hardware"};

// The object `section` of the combined document, created when absent.
json& section_of(json& document, std::string_view section, const ModelInput& input) {
  const std::string key(section);
  if (document.contains(key) && !document[key].is_object()) {
    JsonField(input.document, input.source).get(section).fail("must be an object");
  }
  if (!document.contains(key)) document[key] = json::object();
  return document[key];
}

void lay_setup_over(json& document, Origins& origins, const ModelInput& input,
                    const ModelInput& setup) {
  const JsonField root(setup.document, setup.source);
  if (!setup.document.is_object()) root.fail("must be an object");
  if (auto model = root.find("model")) {
    model->fail_plain(fmt::format(
        "a --setup file has no model section: the model comes from {}; remove it", input.source));
  }
  root.expect_object({"format", "name", "training", "pipeline", "hardware"});
  if (auto format = root.find("format")) {
    if (!format->value().is_string() || format->value().get<std::string>() != kModelFormat) {
      format->fail(fmt::format("must be \"{}\" (or left out)", kModelFormat));
    }
  }
  if (auto name = root.find("name")) {
    document["name"] = name->value();
    origins["name"] = setup.source;
  }
  for (std::string_view section : kSetupSections) {
    const auto fields = root.find(section);
    if (!fields) continue;
    if (!fields->value().is_object()) fields->fail("must be an object");
    json& target = section_of(document, section, input);
    for (const auto& item : fields->value().items()) {
      target[item.key()] = item.value();
      origins[fields->child_path(item.key())] = setup.source;
    }
  }
}

void lay_flags_over(json& document, Origins& origins, const ModelInput& input,
                    const EstimateOverrides& flags) {
  auto set = [&](std::string_view section, const char* key, const json& value, const char* flag) {
    section_of(document, section, input)[key] = value;
    origins[fmt::format("{}.{}", section, key)] = flag;
  };
  if (flags.ranks) set("pipeline", "ranks", *flags.ranks, "--ranks");
  if (flags.microbatches) set("pipeline", "microbatches", *flags.microbatches, "--microbatches");
  if (flags.chunks_per_rank) {
    set("pipeline", "chunks_per_rank", *flags.chunks_per_rank, "--chunks-per-rank");
  }
  if (flags.placement) set("pipeline", "placement", *flags.placement, "--placement");
  if (flags.seq_length) set("training", "seq_length", *flags.seq_length, "--seq-length");
  if (flags.gpu_peak_tflops) {
    set("hardware", "gpu_peak_tflops", *flags.gpu_peak_tflops, "--gpu-peak-tflops");
  }
  if (flags.gpu_memory) {
    set("hardware", "gpu_memory", parse_size(*flags.gpu_memory, "--gpu-memory"), "--gpu-memory");
  }
}

// A config.json gives none of the setup: each required field must come from a flag or the file.
void check_setup_given(const json& document, const std::string& source) {
  static const std::tuple<const char*, const char*, const char*> kRequired[] = {
      {"pipeline", "ranks", "--ranks N"},
      {"pipeline", "microbatches", "--microbatches M"},
      {"training", "seq_length", "--seq-length S"},
      {"hardware", "gpu_peak_tflops", "--gpu-peak-tflops T"},
      {"hardware", "gpu_memory", "--gpu-memory SIZE"}};
  std::vector<std::string> fields;
  std::vector<std::string> flags;
  for (const auto& [section, key, flag] : kRequired) {
    const auto it = document.find(section);
    if (it != document.end() && it->is_object() && it->contains(key)) continue;
    fields.push_back(fmt::format("{}.{}", section, key));
    flags.push_back(flag);
  }
  if (fields.empty()) return;
  std::string names;
  std::string options;
  for (size_t i = 0; i < fields.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == fields.size() ? " and " : ", ") + fields[i];
    options += (i == 0 ? "" : " ") + flags[i];
  }
  const char* them = fields.size() == 1 ? "it" : "them";
  throw InputError(fmt::format(
      "{}: {}: missing; a Hugging Face config.json does not give {}: pass {} or set {} in a "
      "--setup file",
      source, names, them, options, them));
}

// The error `e` about the combined document, said of the file or flag that gave the field.
[[noreturn]] void throw_from_origin(const InputError& e, const std::string& source,
                                    const Origins& origins) {
  const std::string_view message = e.what();
  const std::string prefix = source + ": ";
  if (message.substr(0, prefix.size()) == prefix) {
    const std::string_view rest = message.substr(prefix.size());
    const Origins::value_type* origin = nullptr;
    for (const auto& entry : origins) {
      const std::string& path = entry.first;
      const bool names_it = rest.size() > path.size() && rest.substr(0, path.size()) == path &&
                            std::string_view(":.[").find(rest[path.size()]) != std::string::npos;
      if (names_it && (!origin || path.size() > origin->first.size())) origin = &entry;
    }
    if (origin && origin->second != source) {
      // A flag stands for its field: "--placement: ..."; a file keeps the path.
      if (origin->second.rfind("--", 0) == 0) {
        throw InputError(origin->second + std::string(rest.substr(origin->first.size())));
      }
      throw InputError(origin->second + ": " + std::string(rest));
    }
  }
  throw e;
}

// ---- the profile ----

// A byte count for the profile; InputError when it is beyond the profile's 2^50.
int64_t whole_bytes(double bytes, const ModelDescription& model, std::string_view what) {
  if (bytes > kMaxBytes) {
    throw InputError(
        fmt::format("{}: {} ({:.3g} bytes) exceed the profile's 1024TiB; the model "
                    "or the microbatch is too large for one stage",
                    model.source, what, bytes));
  }
  return static_cast<int64_t>(std::llround(bytes));
}

double milliseconds(double flops, const ModelDescription& model) {
  // flops / (peak * 1e12 * efficiency) seconds, * 1e3 for ms.
  return flops / (model.gpu_peak_tflops * model.efficiency * 1e9);
}

void add(PartCosts& total, const PartCosts& part, double times = 1) {
  total.forward_flops += times * part.forward_flops;
  total.backward_input_flops += times * part.backward_input_flops;
  total.backward_weight_flops += times * part.backward_weight_flops;
  total.params += times * part.params;
  total.activation_bytes += times * part.activation_bytes;
  total.weight_grad_bytes += times * part.weight_grad_bytes;
}

std::vector<PartCosts> stage_costs(const ModelDescription& model) {
  const std::vector<int64_t> layers = split_layers(model);
  const PartCosts layer = transformer_layer_costs(model);
  std::vector<PartCosts> stages(layers.size());
  for (size_t s = 0; s < layers.size(); ++s) add(stages[s], layer, static_cast<double>(layers[s]));
  add(stages.front(), embedding_costs(model));
  add(stages.back(), head_costs(model));
  return stages;
}

ordered_json offload_section(const ModelDescription& model) {
  ordered_json offload = {{"d2h_gb_per_s", model.host_link_gb_per_s},
                          {"h2d_gb_per_s", model.host_link_gb_per_s},
                          {"channels", model.host_link_channels}};
  if (model.gpus_per_link_group > 1) {
    ordered_json groups = ordered_json::array();
    for (int first = 0; first < model.ranks; first += model.gpus_per_link_group) {
      ordered_json group = ordered_json::array();
      for (int r = first; r < std::min(model.ranks, first + model.gpus_per_link_group); ++r) {
        group.push_back(r);
      }
      groups.push_back(group);
    }
    offload["link_groups"] = groups;
  }
  return offload;
}

}  // namespace

PartCosts transformer_layer_costs(const ModelDescription& m) {
  const double h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv_heads * (m.hidden / m.heads));  // k * d
  const double f = static_cast<double>(m.ffn_hidden);
  const double a = static_cast<double>(m.heads);
  const double s = static_cast<double>(m.seq_length);
  const double b = static_cast<double>(m.microbatch_size);
  const double D = static_cast<double>(m.dtype_bytes);
  const double tokens = b * s;
  const bool gated = m.mlp == MlpKind::kSwiglu;

  PartCosts c;
  // Q and O are h x h, K and V are h x kd; the MLP has 2 (gelu) or 3 (swiglu) h x f matrices.
  c.params = 2 * h * h + 2 * h * kv + (gated ? 3 : 2) * h * f;
  const double matmul_flops = 2 * tokens * c.params;  // one pass over every weight, per token
  const double attention_flops = 4 * b * s * s * h;   // Q K^T and P V (a heads of d = h/a)
  c.forward_flops = matmul_flops + attention_flops;
  // B: input gradients of the weight matmuls, and both gradients of both attention matmuls
  // (plus their forward again under selective recomputation); W: weight gradients.
  c.backward_input_flops =
      matmul_flops + 2 * attention_flops + (m.selective_recompute ? attention_flops : 0);
  c.backward_weight_flops = matmul_flops;

  // Korthikanti et al. 2022, generalised to dtype D, GQA and f: D bytes per element stored,
  // 1 byte per dropout-mask element. Standard case (D=2, k=a, f=4h, gelu): sb(34h + 5as).
  const double stored_elements = 2 * h                   // inputs of the two layer norms
                                 + h                     // input of the QKV projection
                                 + (h + kv) + kv         // Q and K for the scores, V
                                 + h                     // input of the output projection
                                 + h                     // input of the MLP
                                 + (gated ? 3 : 2) * f;  // gelu in/out; swiglu gate, up, product
  const double masks = 2 * h;  // attention-output and MLP-output dropout masks
  const double scores = (2 * D + 1) * a * s * s * b;  // softmax out, its dropout mask and output
  c.activation_bytes =
      tokens * (D * stored_elements + masks) + (m.selective_recompute ? 0 : scores);

  // W computes input^T x output-gradient for every weight matmul: it keeps their inputs and the
  // gradients B produced for their outputs. Standard case: 14sbh + 18sbh = 32sbh.
  const double matmul_inputs = h + h + h + f;  // QKV, output projection, MLP up, MLP down
  const double output_grads = (h + 2 * kv) + h + (gated ? 2 : 1) * f + h;
  c.weight_grad_bytes = std::min(c.activation_bytes, tokens * D * (matmul_inputs + output_grads));
  return c;
}

PartCosts embedding_costs(const ModelDescription& m) {
  PartCosts c;
  // A lookup (F) and a scatter-add (W): no matmul FLOPs worth counting.
  c.params = static_cast<double>(m.vocab) * static_cast<double>(m.hidden);
  // Its output is the first layer's input (counted there); only the dropout mask is extra.
  c.activation_bytes =
      static_cast<double>(m.microbatch_size * m.seq_length) * static_cast<double>(m.hidden);
  return c;
}

PartCosts head_costs(const ModelDescription& m) {
  const double h = static_cast<double>(m.hidden);
  const double V = static_cast<double>(m.vocab);
  const double D = static_cast<double>(m.dtype_bytes);
  const double tokens = static_cast<double>(m.microbatch_size * m.seq_length);
  PartCosts c;
  c.params = V * h;  // untied (or a second copy of tied embeddings, as Megatron keeps)
  c.forward_flops = 2 * tokens * h * V;
  c.backward_input_flops = 2 * tokens * h * V;
  c.backward_weight_flops = 2 * tokens * h * V;
  // Final norm input, head input, logits in the dtype plus the fp32 copy the loss keeps.
  c.activation_bytes = 2 * D * tokens * h + tokens * V * (D + 4);
  // W needs the head input and the logits' gradient.
  c.weight_grad_bytes = D * tokens * h + D * tokens * V;
  return c;
}

double optimizer_bytes_per_param(const ModelDescription& m) {
  const double D = static_cast<double>(m.dtype_bytes);
  const double master = m.dtype_bytes < 4 ? 4 : 0;  // fp32 master weights in mixed precision
  const double state = m.optimizer == OptimizerKind::kAdam ? 8 : 4;  // fp32 moments / momentum
  return D + D + master + state;  // weights + gradients + master + state; bf16 Adam: 16
}

std::vector<int64_t> split_layers(const ModelDescription& m) {
  if (!m.layer_split.empty()) return m.layer_split;
  const int stages = m.num_stages();
  std::vector<int64_t> layers(stages, m.layers / stages);
  int64_t remainder = m.layers % stages;
  // Middle stages first (1..S-2), then the first stage; the last, with the head, gets none.
  for (int s = 1; s + 1 < stages && remainder > 0; ++s, --remainder) ++layers[s];
  if (remainder > 0) ++layers[0];
  return layers;
}

ModelDescription parse_model_description(std::string_view json_text, const std::string& source) {
  return read_document(parse_json_document(json_text, source), source);
}

ModelDescription load_model_description(const std::string& path) {
  return parse_model_description(read_text_file(path), path);
}

ModelDescription combine_model_inputs(const ModelInput& input,
                                      const std::optional<ModelInput>& setup,
                                      const EstimateOverrides& overrides) {
  const bool hf = is_hf_config(input.document);
  json document = input.document;
  Origins origins;
  if (hf) {
    // The shape, and the dtype it was saved in as the training dtype unless the setup gives one.
    document = {{"format", kModelFormat},
                {"model", model_from_hf_config(input.document, input.source)}};
    if (const auto dtype = hf_config_dtype(input.document)) {
      document["training"]["dtype"] = *dtype;
    }
  }
  if (!document.is_object()) return read_document(document, input.source);  // says so
  if (setup) lay_setup_over(document, origins, input, *setup);
  lay_flags_over(document, origins, input, overrides);
  if (hf) check_setup_given(document, input.source);
  try {
    return read_document(document, input.source);
  } catch (const InputError& e) {
    throw_from_origin(e, input.source, origins);
  }
}

ModelDescription load_model_inputs(const std::string& path, const std::string& setup_path,
                                   const EstimateOverrides& overrides) {
  const ModelInput input{parse_json_document(read_text_file(path), path), path};
  std::optional<ModelInput> setup;
  if (!setup_path.empty()) {
    setup = ModelInput{parse_json_document(read_text_file(setup_path), setup_path), setup_path};
  }
  return combine_model_inputs(input, setup, overrides);
}

ordered_json estimate_profile(const ModelDescription& model) {
  const std::vector<PartCosts> costs = stage_costs(model);
  const std::vector<int64_t> layers = split_layers(model);
  const double bytes_per_param = optimizer_bytes_per_param(model);

  // One hidden state (s*b*h elements): what a stage receives, sends, and keeps to recompute.
  const double hidden_state_bytes = static_cast<double>(model.seq_length * model.microbatch_size) *
                                    static_cast<double>(model.hidden * model.dtype_bytes);
  ordered_json stages = ordered_json::array();
  std::vector<double> params_of_rank(model.ranks, 0);
  for (int s = 0; s < model.num_stages(); ++s) {
    const PartCosts& c = costs[s];
    const std::string what = fmt::format("stage {} ({} layers)", s, layers[s]);
    const double forward = milliseconds(c.forward_flops, model);
    const double backward_input = milliseconds(c.backward_input_flops, model);
    const double backward_weight = milliseconds(c.backward_weight_flops, model);
    if (std::max({forward, backward_input, backward_weight}) > kMaxTime) {
      throw InputError(
          fmt::format("{}: hardware.gpu_peak_tflops: {} takes over 1e12 ms; check "
                      "gpu_peak_tflops and efficiency",
                      model.source, what));
    }
    // Capped at A: a stage without layers may store less than its input.
    const int64_t checkpoint_bytes =
        whole_bytes(std::min(c.activation_bytes, hidden_state_bytes), model, what);
    stages.push_back({{"index", s},
                      {"forward", forward},
                      {"backward_input", backward_input},
                      {"backward_weight", backward_weight},
                      {"activation_bytes", whole_bytes(c.activation_bytes, model, what)},
                      {"weight_grad_bytes", whole_bytes(c.weight_grad_bytes, model, what)},
                      {"recompute_forward", forward},
                      {"checkpoint_bytes", checkpoint_bytes}});
    params_of_rank[model.rank_of_stage[s]] += c.params;
  }

  ordered_json per_rank = ordered_json::array();
  for (int r = 0; r < model.ranks; ++r) {
    const int64_t static_bytes = whole_bytes(
        params_of_rank[r] * bytes_per_param + static_cast<double>(model.workspace_bytes), model,
        fmt::format("the static bytes of rank {}", r));
    if (static_bytes > model.gpu_memory_bytes) {
      throw InputError(fmt::format(
          "{}: hardware.gpu_memory: {} is below rank {}'s static bytes {} ({:.3g}B params x {:g} "
          "bytes + workspace); use more ranks, a smaller model or more memory",
          model.source, format_bytes_short(model.gpu_memory_bytes), r,
          format_bytes_short(static_bytes), params_of_rank[r] / 1e9, bytes_per_param));
    }
    per_rank.push_back({{"rank", r}, {"static_bytes", static_bytes}});
  }

  ordered_json profile = {
      {"format", "optpipe.profile/v1"},
      {"name", model.name},
      {"time_unit", "ms"},
      {"pipeline",
       {{"ranks", model.ranks},
        {"chunks_per_rank", model.chunks_per_rank},
        {"placement", model.placement},
        {"microbatches", model.microbatches}}},
      {"stages", stages},
      {"p2p_latency", hidden_state_bytes / (model.inter_gpu_gb_per_s * 1e6)},  // in ms
      {"memory", {{"budget_bytes", model.gpu_memory_bytes}, {"per_rank", per_rank}}},
  };
  if (model.host_link_gb_per_s > 0) profile["offload"] = offload_section(model);
  return profile;
}

std::string estimate_summary(const ModelDescription& model, const ordered_json& profile) {
  const std::vector<int64_t> layers = split_layers(model);
  std::string out =
      fmt::format("{:>5} {:>4} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "stage", "rank",
                  "layers", "F ms", "B ms", "W ms", "activation", "kept for W");
  for (const ordered_json& stage : profile["stages"]) {
    const int s = stage["index"].get<int>();
    out +=
        fmt::format("{:>5} {:>4} {:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>12} {:>12}\n", s,
                    model.rank_of_stage[s], layers[s], stage["forward"].get<double>(),
                    stage["backward_input"].get<double>(), stage["backward_weight"].get<double>(),
                    format_bytes_short(stage["activation_bytes"].get<int64_t>()),
                    format_bytes_short(stage["weight_grad_bytes"].get<int64_t>()));
  }
  for (const ordered_json& rank : profile["memory"]["per_rank"]) {
    out += fmt::format("rank {}: static {} of {}\n", rank["rank"].get<int>(),
                       format_bytes_short(rank["static_bytes"].get<int64_t>()),
                       format_bytes_short(model.gpu_memory_bytes));
  }
  out += fmt::format("p2p latency {:.4f} ms\n", profile["p2p_latency"].get<double>());
  return out;
}

}  // namespace optpipe

// The benchmark suite (docs/benchmarks.md): GPT-style profiles built in code, each compiled at
// budgets that are fractions of 1F1B's activation peak, with ample and scarce offload bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/problem.h"

namespace optpipe::bench {

// How the embedding (first stage) and the LM head (last stage) weigh against a middle stage.
struct ModelShape {
  std::string name;
  double first_stage_time_factor = 1;  // compute of the first stage / a middle stage's
  double last_stage_time_factor = 1;
  double last_stage_activation_factor = 1;  // the head's logits make its activations larger
};

struct ProfileSpec {
  std::string name;  // e.g. "gpt-R8-m16-scarce": one SVG per profile
  ModelShape shape;
  int ranks = 4;
  int microbatches = 4;
  std::string link_name;  // "ample" or "scarce"
  double link_gb_per_s = 50;
  // Every stage keeps its input as a checkpoint and may recompute its activations (issue 7):
  // budgets then go below what full offload alone reaches on the link.
  bool recompute = false;
};

// One way to lay the same model out: "v1" (1 stage per rank), "loop2" (v = 2, loop placement,
// for interleaved 1F1B and PipeOffload) or "vshape" (v = 2, V-shape, for ZB-V, V-Half, V-Min).
// Total work and activation bytes are the same in all three; per-chunk costs are halved at v = 2.
struct Variant {
  std::string name;
  Problem problem;
};

struct BenchCase {
  ProfileSpec profile;
  double budget_fraction = 1;         // of 1F1B's activation peak
  std::vector<int64_t> budget_bytes;  // per rank: static + fraction x 1F1B's activation peak
  std::vector<Variant> variants;      // every variant with these budgets
  std::string name() const;           // "gpt-R8-m16-scarce@75%"
};

enum class SuiteKind { kQuick, kFull };

std::vector<ProfileSpec> suite_profiles(SuiteKind kind);
// The budgets of a profile's cases, as fractions of 1F1B's activation peak.
std::vector<double> budget_fractions(const ProfileSpec& profile);

// The profile laid out with `chunks` chunks per rank on `placement`, with an ample budget.
Problem build_problem(const ProfileSpec& profile, int chunks, PlacementKind placement);

// Highest activation bytes (peak - static) over the ranks of the 1f1b generator's schedule.
int64_t one_f_one_b_activation_peak(const Problem& v1_problem);

// The cases of one profile, one per budget fraction (of 1F1B's activation peak; empty: the
// suite's, budget_fractions), in that order.
std::vector<BenchCase> profile_cases(const ProfileSpec& profile,
                                     const std::vector<double>& fractions = {});

// One layout of the full suite's profile `name` at one budget (tests pin cases of the suite);
// throws std::invalid_argument where the suite has none.
Problem suite_problem(const std::string& name, double budget_fraction, const std::string& layout);

}  // namespace optpipe::bench

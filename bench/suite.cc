#include "bench/suite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "heuristics/registry.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe::bench {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// A GPT-13B-like layer at sequence 4096 (examples/gpt-8rank.json has four of these per stage):
// times in ms, bytes per layer. A v = 1 stage holds kLayersPerRank layers.
constexpr int kLayersPerRank = 4;
constexpr double kLayerForwardMs = 7.3;
constexpr double kLayerBackwardInputMs = 8.2;
constexpr double kLayerBackwardWeightMs = 6.45;
constexpr int64_t kLayerActivationBytes = 850 * kMiB;
constexpr int64_t kLayerWeightGradBytes = 212 * kMiB;   // G: about a quarter of A is kept for W
constexpr int64_t kLayerOffloadableBytes = 765 * kMiB;  // O: 90% of A can go to host
// C: a stage's input, kept when its activations are recomputed (s·b·h·2 bytes, h = 5120).
constexpr int64_t kStageInputBytes = 40 * kMiB;
constexpr int64_t kStaticBytes = 30 * kGiB;
constexpr double kP2pLatencyMs = 0.12;

const ModelShape kGpt{"gpt", 1.10, 1.25, 1.25};
const ModelShape kUneven{"uneven", 1.40, 1.80, 1.80};

ProfileSpec make_profile(const ModelShape& shape, int ranks, int microbatches, bool ample,
                         bool recompute = false) {
  ProfileSpec p;
  p.shape = shape;
  p.ranks = ranks;
  p.microbatches = microbatches;
  p.link_name = ample ? "ample" : "scarce";
  p.link_gb_per_s = ample ? 50 : 5;
  p.recompute = recompute;
  p.name = fmt::format("{}-R{}-m{}-{}{}", shape.name, ranks, microbatches, p.link_name,
                       recompute ? "-recompute" : "");
  return p;
}

}  // namespace

std::string BenchCase::name() const {
  return fmt::format("{}@{:.0f}%", profile.name, budget_fraction * 100);
}

std::vector<ProfileSpec> suite_profiles(SuiteKind kind) {
  std::vector<ProfileSpec> profiles;
  if (kind == SuiteKind::kQuick) {
    for (const int r : {4, 8}) {
      for (const int m : {r, 2 * r}) {
        for (const bool ample : {true, false}) profiles.push_back(make_profile(kGpt, r, m, ample));
      }
      profiles.push_back(make_profile(kGpt, r, 2 * r, false, true));
    }
    return profiles;
  }
  for (const int r : {4, 8, 16, 32}) {
    std::vector<int> ms = {r, 2 * r, 4 * r};
    if (r == 32) ms.push_back(256);  // the size at which heuristics must stay sub-second
    for (int& m : ms) m = std::min(m, 256);
    for (const int m : ms) {
      for (const bool ample : {true, false}) profiles.push_back(make_profile(kGpt, r, m, ample));
    }
  }
  for (const int r : {4, 8, 16, 32}) {
    for (const bool ample : {true, false})
      profiles.push_back(make_profile(kUneven, r, 2 * r, ample));
    profiles.push_back(make_profile(kGpt, r, 2 * r, false, true));
  }
  // Recompute beside a link that offload can use, on longer pipelines: where the shared links
  // pace the offloading orders and recompute is the faster way to fit.
  for (const int r : {8, 16}) profiles.push_back(make_profile(kGpt, r, 4 * r, true, true));
  return profiles;
}

std::vector<double> budget_fractions(const ProfileSpec& profile) {
  if (profile.recompute) return {0.5, 0.33, 0.2, 0.1};
  return {1.0, 0.75, 0.5, 0.33};
}

Problem build_problem(const ProfileSpec& profile, int chunks, PlacementKind placement) {
  Problem p;
  p.name = fmt::format("{}-{}", profile.name, chunks == 1 ? "v1" : to_string(placement));
  p.time_unit = TimeUnit::kMilliseconds;
  p.ranks = profile.ranks;
  p.chunks_per_rank = chunks;
  p.microbatches = profile.microbatches;
  p.placement = placement;
  p.rank_of_stage = place_stages(placement, profile.ranks, chunks);
  const int stages = profile.ranks * chunks;
  // Same layers in every layout: a chunk holds kLayersPerRank / chunks layers. The embedding and
  // head add the same absolute work to the first and last stage whatever the layout.
  const double layers = static_cast<double>(kLayersPerRank) / chunks;
  for (int s = 0; s < stages; ++s) {
    double extra_time = 0;  // fraction of a v = 1 stage's compute
    double extra_bytes = 0;
    if (s == 0) extra_time += profile.shape.first_stage_time_factor - 1;
    if (s == stages - 1) {
      extra_time += profile.shape.last_stage_time_factor - 1;
      extra_bytes += profile.shape.last_stage_activation_factor - 1;
    }
    const double time_scale = layers + extra_time * kLayersPerRank;
    const double bytes_scale = layers + extra_bytes * kLayersPerRank;
    StageCosts c;
    c.forward = kLayerForwardMs * time_scale;
    c.backward_input = kLayerBackwardInputMs * time_scale;
    c.backward_weight = kLayerBackwardWeightMs * time_scale;
    c.activation_bytes = std::llround(kLayerActivationBytes * bytes_scale);
    c.weight_grad_bytes = std::llround(kLayerWeightGradBytes * bytes_scale);
    c.offloadable_bytes = std::llround(kLayerOffloadableBytes * bytes_scale);
    if (profile.recompute) {
      c.checkpoint_bytes = kStageInputBytes;
      c.recompute_forward = c.forward;
    }
    p.stages.push_back(c);
  }
  p.p2p_latency = kP2pLatencyMs;
  p.static_bytes.assign(profile.ranks, kStaticBytes);
  p.budget_bytes.assign(profile.ranks, kStaticBytes + 1000 * kGiB);  // ample until a case sets it
  OffloadLink link;
  const double bytes_per_ms = profile.link_gb_per_s * 1e9 / 1e3;
  link.d2h_bytes_per_time = bytes_per_ms;
  link.h2d_bytes_per_time = bytes_per_ms;
  link.channels = ChannelMode::kDuplex;
  for (int r = 0; r < profile.ranks; ++r) link.link_group_of_rank.push_back(r / 2);
  p.offload = link;
  p.profile_sha256 = p.name;  // no profile file: the name identifies the problem
  return p;
}

int64_t one_f_one_b_activation_peak(const Problem& v1_problem) {
  const Generator* one_f_one_b = find_generator("1f1b");
  const Schedule schedule = simulate(v1_problem, one_f_one_b->build(v1_problem), "1f1b");
  const Metrics metrics = compute_metrics(v1_problem, schedule);
  int64_t peak = 0;
  for (const RankMetrics& rm : metrics.ranks) {
    peak = std::max(peak, rm.peak_bytes - v1_problem.static_bytes[rm.rank]);
  }
  return peak;
}

std::vector<BenchCase> profile_cases(const ProfileSpec& profile,
                                     const std::vector<double>& fractions) {
  std::vector<Variant> layouts = {
      {"v1", build_problem(profile, 1, PlacementKind::kLoop)},
      {"loop2", build_problem(profile, 2, PlacementKind::kLoop)},
      {"vshape", build_problem(profile, 2, PlacementKind::kVShape)},
  };
  const int64_t peak = one_f_one_b_activation_peak(layouts.front().problem);
  std::vector<BenchCase> cases;
  for (const double fraction : fractions.empty() ? budget_fractions(profile) : fractions) {
    BenchCase c;
    c.profile = profile;
    c.budget_fraction = fraction;
    // One activation budget for every rank (GPUs have the same memory), on top of each rank's
    // static bytes.
    const auto activation_budget = static_cast<int64_t>(std::floor(fraction * peak));
    for (int r = 0; r < profile.ranks; ++r) {
      c.budget_bytes.push_back(layouts.front().problem.static_bytes[r] + activation_budget);
    }
    c.variants = layouts;
    for (Variant& v : c.variants) v.problem.budget_bytes = c.budget_bytes;
    cases.push_back(std::move(c));
  }
  return cases;
}

Problem suite_problem(const std::string& name, double budget_fraction, const std::string& layout) {
  for (const ProfileSpec& profile : suite_profiles(SuiteKind::kFull)) {
    if (profile.name != name) continue;
    const std::vector<BenchCase> cases = profile_cases(profile, {budget_fraction});
    for (const Variant& variant : cases.front().variants) {
      if (variant.name == layout) return variant.problem;
    }
  }
  throw std::invalid_argument(fmt::format("the suite has no {} on {}", name, layout));
}

}  // namespace optpipe::bench

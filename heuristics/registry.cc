#include "heuristics/registry.h"

#include <fmt/format.h>

#include "heuristics/classic.h"

namespace optpipe {

namespace {

std::string any_problem(const Problem&) { return {}; }

std::string needs_one_chunk(const Problem& problem) {
  if (problem.chunks_per_rank == 1) return {};
  return fmt::format("needs pipeline.chunks_per_rank = 1, the profile has {}",
                     problem.chunks_per_rank);
}

std::string needs_loop_chunks(const Problem& problem) {
  if (problem.chunks_per_rank < 2) return "needs pipeline.chunks_per_rank >= 2";
  if (problem.placement != PlacementKind::kLoop) return "needs pipeline.placement = \"loop\"";
  if (problem.microbatches % problem.ranks != 0) {
    // Megatron-LM asserts the same: a partial last group of microbatches deadlocks its warm-up rule.
    return fmt::format("needs pipeline.microbatches to be a multiple of ranks ({}), the profile has {}",
                       problem.ranks, problem.microbatches);
  }
  return {};
}

}  // namespace

const std::vector<Generator>& generators() {
  static const std::vector<Generator> all = {
      {"gpipe", "all forwards, then all backwards: bubble (R-1)(T_F+T_B+T_W), holds all m activations",
       "Huang et al., GPipe, NeurIPS 2019", any_problem, gpipe_order},
      {"1f1b", "one forward, one backward: bubble (R-1)(T_F+T_B+T_W), rank 0 holds R activations",
       "Narayanan et al., PipeDream-Flush, ICML 2021", needs_one_chunk, one_f_one_b_order},
      {"interleaved-1f1b",
       "v chunks per rank: bubble divided by v, rank 0 holds (v+1)R-1 chunk activations",
       "Narayanan et al., Megatron-LM, SC 2021", needs_loop_chunks, interleaved_1f1b_order},
      {"zb-h1", "split backward, W fills bubbles: bubble (R-1)(T_F+T_B-T_W), 1F1B's memory",
       "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", needs_one_chunk, zb_h1_order},
      {"zb-h2", "longer warm-up: bubble (R-1)(T_F+T_B-2T_W), rank 0 holds 2R-1 activations",
       "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", needs_one_chunk, zb_h2_order},
  };
  return all;
}

const Generator* find_generator(std::string_view name) {
  for (const Generator& g : generators()) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

}  // namespace optpipe

#include "heuristics/registry.h"

#include <fmt/format.h>

#include "heuristics/adaoffload.h"
#include "heuristics/gpipe.h"
#include "heuristics/interleaved_1f1b.h"
#include "heuristics/one_f_one_b.h"
#include "heuristics/paced_offload.h"
#include "heuristics/pipeoffload.h"
#include "heuristics/zero_bubble_handcrafted.h"
#include "heuristics/zero_bubble_memory.h"

namespace optpipe {

namespace {

std::string any_problem(const Problem&) {
  return {};
}

std::string needs_one_chunk(const Problem& problem) {
  if (problem.chunks_per_rank == 1) return {};
  return fmt::format("needs pipeline.chunks_per_rank = 1, the profile has {}",
                     problem.chunks_per_rank);
}

std::string needs_loop_chunks(const Problem& problem) {
  if (problem.chunks_per_rank < 2) return "needs pipeline.chunks_per_rank >= 2";
  if (problem.placement != PlacementKind::kLoop) return "needs pipeline.placement = \"loop\"";
  if (problem.microbatches % problem.ranks != 0) {
    // Megatron-LM asserts the same: a partial last group of microbatches deadlocks its warm-up
    // rule.
    return fmt::format(
        "needs pipeline.microbatches to be a multiple of ranks ({}), the profile has {}",
        problem.ranks, problem.microbatches);
  }
  return {};
}

}  // namespace

const std::vector<Generator>& generators() {
  static const std::vector<Generator> all = {
      {"gpipe",
       "all forwards, then all backwards: bubble (R-1)(T_F+T_B+T_W), holds all m activations",
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
      {"zb-auto",
       "Zero Bubble greedy under the memory budget: fills the warm-up as memory allows, W fills "
       "gaps or frees memory; ZB-H1 at R activations, ZB-H2 at 2R",
       "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024 (automatic scheduling)", any_problem,
       zb_auto_order},
      {"zb-v",
       "V-shape, 2 chunks: zero bubble with 1F1B's peak (R microbatches, 2R chunk activations)",
       "Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", needs_vshape,
       zb_v_order},
      {"v-half",
       "V-shape, 2 chunks: about half of 1F1B's activation memory (2 floor(R/2)+2 chunk "
       "activations), bubble above ZB-V's",
       "Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", needs_vshape,
       v_half_order},
      {"v-min",
       "V-shape, 2 chunks: about a third of 1F1B's activation memory (2 ceil((R+1)/3) chunk "
       "activations), bubble above V-Half's",
       "Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", needs_vshape,
       v_min_order},
      {"pipeoffload",
       "grouped interleaved 1F1B (group g in [R/2, R]) offloading the first K chunks' activations; "
       "g and K chosen for the budget (v = 1: 1F1B + offload of the longest-lived)",
       "Wan et al., PipeOffload: Improving Scalability of Pipeline Parallelism with Memory "
       "Optimization, 2025",
       pipeoffload_unsupported, pipeoffload_order},
      {"paced-offload",
       "1F1B, ZB-H1/H2, interleaved or V-shape order offloading every activation of the ranks "
       "that cannot hold their in-flight set, reloads a few ops ahead, each F waiting for memory: "
       "for coarse stages where only a few activations fit",
       "optpipe (docs/methods.md)", paced_offload_unsupported, paced_offload_order},
      {"adaoffload",
       "densest split-backward schedule that fits the budget, offloading the longest-lived "
       "activations whose round trip fits; the MILP's seed",
       "optpipe (docs/design.md §5)", any_problem, adaoffload_order},
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

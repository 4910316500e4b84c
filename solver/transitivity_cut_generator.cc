#include "solver/transitivity_cut_generator.h"

#include <cmath>

#include "CoinPackedVector.hpp"
#include "OsiCuts.hpp"
#include "OsiRowCut.hpp"
#include "OsiSolverInterface.hpp"
#include "solver/transitivity_cuts.h"

namespace optpipe {

namespace {

// Violations smaller than this are left alone: far above the LP's tolerances.
constexpr double kTolerance = 1e-4;
// The most violated cuts per call, so that one round does not swamp the LP.
constexpr size_t kCutsPerRound = 400;

}  // namespace

void TransitivityCutGenerator::generateCuts(const OsiSolverInterface& solver, OsiCuts& cuts,
                                            const CglTreeInfo /*info*/) {
  if (solver.getNumCols() != columns_) return;
  for (const Row& row :
       violated_transitivity(*orders_, solver.getColSolution(), kTolerance, kCutsPerRound)) {
    CoinPackedVector terms;
    for (const auto& [column, coefficient] : row.terms) terms.insert(column, coefficient);
    OsiRowCut cut;
    cut.setRow(terms);
    cut.setLb(std::isinf(row.lower) ? -solver.getInfinity() : row.lower);
    cut.setUb(std::isinf(row.upper) ? solver.getInfinity() : row.upper);
    cuts.insert(cut);
  }
}

}  // namespace optpipe

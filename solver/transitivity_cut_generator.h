// Transitivity cuts (solver/transitivity_cuts.h) as a CBC cut generator over a model's pairwise
// orders.
#pragma once

#include <memory>
#include <vector>

#include "CglCutGenerator.hpp"
#include "solver/linear_model.h"

namespace optpipe {

class TransitivityCutGenerator : public CglCutGenerator {
 public:
  explicit TransitivityCutGenerator(const LinearModel& model)
      : orders_(std::make_shared<const std::vector<PairwiseOrder>>(model.orders)),
        columns_(static_cast<int>(model.columns.size())) {}

  // The most violated cuts at the solver's LP solution, none where the solver's columns are not
  // the model's: CBC's heuristics solve sub-models with columns of their own, where the orders'
  // columns mean something else (cuts there corrupted memory).
  void generateCuts(const OsiSolverInterface& solver, OsiCuts& cuts,
                    const CglTreeInfo info) override;
  CglCutGenerator* clone() const override { return new TransitivityCutGenerator(*this); }

 private:
  std::shared_ptr<const std::vector<PairwiseOrder>> orders_;  // shared with CBC's clones
  int columns_;
};

}  // namespace optpipe

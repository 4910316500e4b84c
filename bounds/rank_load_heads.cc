#include "bounds/rank_load_heads.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <vector>

namespace optpipe {

namespace {

constexpr double kNone = -std::numeric_limits<double>::infinity();

enum Type { kF, kB, kW };

// The ops of one type on one stage: their heads and how long each runs.
struct Family {
  std::vector<double>* heads;
  double duration;
};

// The jobs of one machine, added one at a time, each with a release time. The least time by which
// the machine can have run those added is the largest, over their releases τ, of τ + the work
// added that is released at τ or later (run in release order). Each job is a leaf, in release
// order, holding τ + that work once its job is added. A segment tree: a node's `added_` applies
// to every leaf below it, and its `best_` is the largest leaf below it counting the `added_` of
// the node and of the nodes between, not of those above.
class LeastCompletion {
 public:
  explicit LeastCompletion(std::vector<double> releases)  // sorted
      : releases_(std::move(releases)),
        leaves_(std::bit_ceil(std::max<size_t>(releases_.size(), 1))),
        best_(2 * leaves_, kNone),
        added_(2 * leaves_, 0.0) {}

  // Adds the job of `leaf`, which runs `duration`: work for every leaf released no later.
  void add(size_t leaf, double duration) {
    const size_t to =
        std::upper_bound(releases_.begin(), releases_.end(), releases_[leaf]) - releases_.begin();
    size_t lo = leaves_;
    size_t hi = leaves_ + to;
    for (; lo < hi; lo /= 2, hi /= 2) {
      if (lo % 2 == 1) apply(lo++, duration);
      if (hi % 2 == 1) apply(--hi, duration);
    }
    update_above(leaves_);
    update_above(leaves_ + to - 1);
    best_[leaves_ + leaf] = releases_[leaf] + added_[leaves_ + leaf];
    update_above(leaves_ + leaf);
  }
  double least() const { return best_[1]; }

 private:
  void apply(size_t node, double work) {
    added_[node] += work;
    best_[node] += work;
  }
  void update_above(size_t node) {
    for (node /= 2; node >= 1; node /= 2) {
      best_[node] = std::max(best_[2 * node], best_[2 * node + 1]) + added_[node];
    }
  }

  std::vector<double> releases_;
  size_t leaves_;
  std::vector<double> best_;   // kNone where no leaf below is counted yet
  std::vector<double> added_;  // work added to every leaf below the node
};

// The heads of the own family's k-th op from the rank's load, for every k: the least completion
// of k + 1 of each of the families `before` and the k heads of `own` before the k-th.
std::vector<double> load_heads(const std::vector<Family>& before, const Family& own, int m) {
  std::vector<Family> families = before;
  families.push_back(own);  // its k-th joins the set of the (k + 1)-th
  const size_t jobs = families.size() * m;
  auto release = [&](size_t job) { return (*families[job / m].heads)[job % m]; };
  std::vector<size_t> by_release(jobs);
  std::iota(by_release.begin(), by_release.end(), 0);
  std::sort(by_release.begin(), by_release.end(),
            [&](size_t a, size_t b) { return release(a) < release(b); });
  std::vector<double> releases(jobs);
  std::vector<size_t> leaf_of(jobs);
  for (size_t leaf = 0; leaf < jobs; ++leaf) {
    releases[leaf] = release(by_release[leaf]);
    leaf_of[by_release[leaf]] = leaf;
  }
  LeastCompletion machine(std::move(releases));
  std::vector<double> heads(m, 0.0);
  for (int k = 0; k < m; ++k) {
    for (size_t f = 0; f < before.size(); ++f)
      machine.add(leaf_of[f * m + k], families[f].duration);
    if (k > 0) machine.add(leaf_of[before.size() * m + k - 1], own.duration);
    heads[k] = std::max(0.0, machine.least());  // nothing added: the first F of a first stage
  }
  return heads;
}

}  // namespace

bool raise_by_rank_load(const Problem& problem, OpHeads& heads) {
  const int m = problem.microbatches;
  bool raised = false;
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<int> stages = problem.stages_of_rank(r);
    auto family = [&](int s, Type type) {
      const StageCosts& cost = problem.stages[s];
      switch (type) {
        case kF:
          return Family{&heads.forward[s], cost.forward};
        case kB:
          return Family{&heads.backward[s], cost.backward_input};
        default:
          return Family{&heads.weight[s], cost.backward_weight};
      }
    };
    // Predecessors first: Fs in model order, then Bs backwards, then Ws.
    const std::vector<int> backwards(stages.rbegin(), stages.rend());
    for (const Type type : {kF, kB, kW}) {
      for (int s : type == kB ? backwards : stages) {
        std::vector<Family> before;
        for (int other : stages) {
          if (type != kF || other < s) before.push_back(family(other, kF));
          if (type != kF && (other > s || (type == kW && other == s))) {
            before.push_back(family(other, kB));
          }
        }
        const Family own = family(s, type);
        const std::vector<double> load = load_heads(before, own, m);
        for (int k = 0; k < m; ++k) {
          if (load[k] > (*own.heads)[k]) {
            (*own.heads)[k] = load[k];
            raised = true;
          }
        }
      }
    }
  }
  return raised;
}

}  // namespace optpipe

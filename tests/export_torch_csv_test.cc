// The PyTorch compute-only CSV conforms to what torch.distributed.pipelining's loader accepts,
// and runs without deadlock once lowered to sends and receives.
#include "views/export_torch_csv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "driver/compile_driver.h"
#include "formats/profile.h"
#include "heuristics/gpipe.h"
#include "heuristics/interleaved_1f1b.h"
#include "heuristics/one_f_one_b.h"
#include "heuristics/registry.h"
#include "heuristics/zero_bubble_handcrafted.h"
#include "model/errors.h"
#include "tests/test_problems.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// ---------------------------------------------------------------------------------------------
// A conformance checker that applies the rules of PyTorch's loader and runtime to a CSV:
//  - `_load_csv`: one row per rank (csv.reader), cells `{stage}{op}{microbatch}` or empty (idle);
//  - `_validate_schedule`: every stage has F for every microbatch; I/B only after that F on the
//    stage's rank; W only after I (2.5: after B); I and W counts equal, B + I = microbatches (2.5:
//    B and W each = microbatches); each stage on one rank (here: the profile's rank);
//  - the lock-step executor (PipelineScheduleMulti._step_microbatches) receives at the step of
//    the send, so an input must come from a strictly earlier step;
//  - `_add_send_recv` lowering, then `_simulate_comms_compute`, which fail on a deadlock.
// ---------------------------------------------------------------------------------------------

enum class Kind { kF, kI, kB, kW, kSendF, kRecvF, kSendB, kRecvB };

struct TorchAction {
  Kind kind;
  int stage;
  int microbatch;
  auto key() const { return std::tuple(static_cast<int>(kind), stage, microbatch); }
  friend bool operator<(const TorchAction& a, const TorchAction& b) { return a.key() < b.key(); }
  friend bool operator==(const TorchAction& a, const TorchAction& b) { return a.key() == b.key(); }
};

using Rows = std::vector<std::vector<std::optional<TorchAction>>>;

std::string trim(std::string s) {
  const auto blank = [](unsigned char c) { return std::isspace(c); };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), blank));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), blank).base(), s.end());
  return s;
}

// Parses the cells; returns an error or fills `rows`.
std::string parse_rows(const std::string& csv, TorchDialect dialect, Rows& rows) {
  std::istringstream lines(csv);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto& row = rows.emplace_back();
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell = trim(cell);
      if (cell.empty()) {
        row.push_back(std::nullopt);
        continue;
      }
      size_t i = 0;
      while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
      if (i == 0 || i + 1 >= cell.size()) return "malformed cell '" + cell + "'";
      const char op = cell[i];
      const std::string mb = cell.substr(i + 1);
      if (!std::all_of(mb.begin(), mb.end(), [](unsigned char c) { return std::isdigit(c); })) {
        return "malformed cell '" + cell + "'";
      }
      Kind kind;
      if (op == 'F')
        kind = Kind::kF;
      else if (op == 'W')
        kind = Kind::kW;
      else if (op == 'I' && dialect == TorchDialect::kTorch26)
        kind = Kind::kI;
      else if (op == 'B')
        kind = dialect == TorchDialect::kTorch26 ? Kind::kB : Kind::kI;
      else
        return "unknown op in cell '" + cell + "'";
      row.push_back(TorchAction{kind, std::stoi(cell.substr(0, i)), std::stoi(mb)});
    }
  }
  return {};
}

std::string validate_rows(const Problem& p, const Rows& rows, TorchDialect dialect) {
  if (static_cast<int>(rows.size()) != p.ranks) {
    return "Schedule has incorrect number of ranks - expected " + std::to_string(p.ranks) +
           ", actual " + std::to_string(rows.size());
  }
  const int S = p.num_stages();
  std::map<std::pair<Kind, int>, std::set<int>> done;  // (kind, stage) -> microbatches
  std::map<int, int> rank_of_stage;
  for (int r = 0; r < p.ranks; ++r) {
    for (const auto& cell : rows[r]) {
      if (!cell) continue;
      const TorchAction& a = *cell;
      if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= p.microbatches) {
        return "out of range: stage " + std::to_string(a.stage);
      }
      auto& seen = done[{a.kind, a.stage}];
      if (seen.count(a.microbatch)) return "duplicate action on rank " + std::to_string(r);
      if ((a.kind == Kind::kI || a.kind == Kind::kB) &&
          !done[{Kind::kF, a.stage}].count(a.microbatch)) {
        return "backward before forward for stage " + std::to_string(a.stage);
      }
      if (a.kind == Kind::kW && !done[{Kind::kI, a.stage}].count(a.microbatch)) {
        return "W before its input backward for stage " + std::to_string(a.stage);
      }
      seen.insert(a.microbatch);
      if (auto [it, fresh] = rank_of_stage.emplace(a.stage, r); !fresh && it->second != r) {
        return "stage " + std::to_string(a.stage) + " on two ranks";
      }
      if (p.rank_of_stage[a.stage] != r) {
        return "stage " + std::to_string(a.stage) + " is on rank " +
               std::to_string(p.rank_of_stage[a.stage]) + " in the profile, row " +
               std::to_string(r) + " in the CSV";
      }
    }
  }
  const size_t m = p.microbatches;
  for (int s = 0; s < S; ++s) {
    const size_t f = done[{Kind::kF, s}].size(), i = done[{Kind::kI, s}].size(),
                 b = done[{Kind::kB, s}].size(), w = done[{Kind::kW, s}].size();
    if (f != m) return "stage " + std::to_string(s) + ": " + std::to_string(f) + " F";
    if (i != w) return "stage " + std::to_string(s) + ": I and W counts differ";
    if (b + i != m) return "stage " + std::to_string(s) + ": backwards missing";
    if (dialect == TorchDialect::kTorch25 && (b != 0 || w != m)) {
      return "stage " + std::to_string(s) + ": 2.5 needs B and W for every microbatch";
    }
  }
  return {};
}

// The lock-step executor: every input comes from a strictly earlier step.
std::string check_lock_step(const Problem& p, const Rows& rows) {
  std::map<std::tuple<int, int, int>, int> step;  // (0=F 1=backward 2=W, stage, mb) -> step
  auto group = [](Kind k) { return k == Kind::kF ? 0 : k == Kind::kW ? 2 : 1; };
  for (const auto& row : rows) {
    for (size_t t = 0; t < row.size(); ++t) {
      if (row[t]) step[{group(row[t]->kind), row[t]->stage, row[t]->microbatch}] = t;
    }
  }
  const int last = p.num_stages() - 1;
  for (const auto& [key, t] : step) {
    const auto [g, s, j] = key;
    std::tuple<int, int, int> dep;
    if (g == 0 && s == 0) continue;
    if (g == 0)
      dep = {0, s - 1, j};
    else if (g == 1)
      dep = s == last ? std::tuple(0, s, j) : std::tuple(1, s + 1, j);
    else
      dep = {1, s, j};
    if (step.at(dep) >= t) {
      return "step " + std::to_string(t) + ": stage " + std::to_string(s) + " mb " +
             std::to_string(j) + " does not come after its input";
    }
  }
  return {};
}

// torch.distributed.pipelining.schedules._add_send_recv.
std::string lower_send_recv(const Problem& p, const Rows& rows,
                            std::vector<std::vector<TorchAction>>& comm) {
  const int last = p.num_stages() - 1;
  auto rank = [&](int stage) { return p.rank_of_stage[stage]; };
  std::vector<std::vector<TorchAction>> compute(p.ranks);
  for (int r = 0; r < p.ranks; ++r) {
    for (const auto& cell : rows[r]) {
      if (cell) compute[r].push_back(*cell);
    }
    std::reverse(compute[r].begin(), compute[r].end());  // pop from the back
  }
  std::vector<std::set<TorchAction>> prev(p.ranks);
  comm.assign(p.ranks, {});
  auto has_comms = [&](const TorchAction& a) {
    if (a.kind == Kind::kF) return a.stage != last && rank(a.stage + 1) != rank(a.stage);
    if (a.kind == Kind::kI || a.kind == Kind::kB) {
      return a.stage != 0 && rank(a.stage - 1) != rank(a.stage);
    }
    return false;
  };
  auto ready = [&](const TorchAction& a, const std::set<TorchAction>& done) {
    const int s = a.stage, j = a.microbatch;
    if (a.kind == Kind::kF && s != 0) {
      return done.count({Kind::kRecvF, s, j}) || done.count({Kind::kF, s - 1, j});
    }
    if ((a.kind == Kind::kI || a.kind == Kind::kB) && s != last) {
      return done.count({Kind::kRecvB, s, j}) || done.count({Kind::kI, s + 1, j}) ||
             done.count({Kind::kB, s + 1, j});
    }
    return true;
  };
  for (;;) {
    bool any = false, progress = false;
    for (int r = 0; r < p.ranks; ++r) {
      if (compute[r].empty()) continue;
      any = true;
      const TorchAction a = compute[r].back();
      if (!ready(a, prev[r])) continue;
      comm[r].push_back(a);
      prev[r].insert(a);
      if (has_comms(a)) {
        const bool fwd = a.kind == Kind::kF;
        const TorchAction send{fwd ? Kind::kSendF : Kind::kSendB, a.stage, a.microbatch};
        const TorchAction recv{fwd ? Kind::kRecvF : Kind::kRecvB, fwd ? a.stage + 1 : a.stage - 1,
                               a.microbatch};
        comm[r].push_back(send);
        prev[r].insert(send);
        comm[rank(recv.stage)].push_back(recv);
        prev[rank(recv.stage)].insert(recv);
      }
      compute[r].pop_back();
      progress = true;
    }
    if (!any) return {};
    if (!progress) return "Malformed compute schedule, can't schedule sends/recvs";
  }
}

// torch.distributed.pipelining.schedules._simulate_comms_compute.
std::string simulate_comms(const Problem& p, std::vector<std::vector<TorchAction>> order) {
  const int last = p.num_stages() - 1;
  auto rank = [&](int stage) { return p.rank_of_stage[stage]; };
  std::vector<std::set<TorchAction>> prev(p.ranks);
  for (auto& actions : order) std::reverse(actions.begin(), actions.end());
  auto ready = [&](const TorchAction& a) {
    const int s = a.stage, j = a.microbatch;
    const auto& done = prev[rank(s)];
    switch (a.kind) {
      case Kind::kF:
        return s == 0 || done.count({Kind::kRecvF, s, j}) || done.count({Kind::kF, s - 1, j});
      case Kind::kI:
      case Kind::kB:
        return s == last || done.count({Kind::kRecvB, s, j}) || done.count({Kind::kI, s + 1, j}) ||
               done.count({Kind::kB, s + 1, j});
      case Kind::kW:
        return true;
      case Kind::kSendF:
        return done.count({Kind::kF, s, j}) > 0;
      case Kind::kRecvF:
        return prev[rank(s - 1)].count({Kind::kSendF, s - 1, j}) > 0;
      case Kind::kSendB:
        return done.count({Kind::kI, s, j}) || done.count({Kind::kB, s, j});
      case Kind::kRecvB:
        return prev[rank(s + 1)].count({Kind::kSendB, s + 1, j}) > 0;
    }
    return false;
  };
  for (;;) {
    bool any = false, progress = false;
    std::vector<bool> idle(p.ranks, false);
    for (int r = 0; r < p.ranks; ++r) {
      if (order[r].empty()) continue;
      any = true;
      if (ready(order[r].back())) {
        prev[r].insert(order[r].back());
        order[r].pop_back();
        progress = true;
      } else {
        idle[r] = true;
      }
    }
    // PyTorch's second pass: a rank that idled this step may run what a later rank unblocked.
    for (int r = 0; r < p.ranks; ++r) {
      if (idle[r] && !order[r].empty() && ready(order[r].back())) {
        prev[r].insert(order[r].back());
        order[r].pop_back();
      }
    }
    if (!any) return {};
    if (!progress) return "Schedule is not progressing";
  }
}

// Empty when the CSV conforms; otherwise the first rule it breaks.
std::string check_torch_csv(const Problem& p, const std::string& csv, TorchDialect dialect) {
  Rows rows;
  std::string error = parse_rows(csv, dialect, rows);
  if (error.empty()) error = validate_rows(p, rows, dialect);
  if (error.empty()) error = check_lock_step(p, rows);
  std::vector<std::vector<TorchAction>> comm;
  if (error.empty()) error = lower_send_recv(p, rows, comm);
  if (error.empty()) error = simulate_comms(p, comm);
  return error;
}

// ---------------------------------------------------------------------------------------------

using testing::uniform_problem;

bool adjacent_stages_share_a_rank(const Problem& p) {
  for (int s = 0; s + 1 < p.num_stages(); ++s) {
    if (p.rank_of_stage[s] == p.rank_of_stage[s + 1]) return true;
  }
  return false;
}

std::vector<std::string> row_tokens(const std::string& csv, int rank) {
  std::istringstream lines(csv);
  std::string line;
  for (int r = 0; r <= rank; ++r) std::getline(lines, line);
  std::vector<std::string> tokens;
  std::istringstream cells(line);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    if (!cell.empty()) tokens.push_back(cell);
  }
  return tokens;
}

TEST(ExportTorchCsv, OneFOneBIsOneRowPerRankWithIdleCells) {
  const Problem p = uniform_problem(2, 1, 2);
  const Schedule s = simulate(p, one_f_one_b_order(p), "1f1b");
  // BW is a full backward: B in the current dialect.
  EXPECT_EQ(export_torch_csv(p, s), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
}

TEST(ExportTorchCsv, SplitBackwardUsesIAndW) {
  const Problem p = uniform_problem(2, 1, 2);
  const Schedule s = simulate(p, zb_h1_order(p), "zb-h1");
  const std::string csv = export_torch_csv(p, s, TorchDialect::kTorch26);
  for (int r = 0; r < 2; ++r) {
    for (const std::string& t : row_tokens(csv, r)) {
      EXPECT_NE(t.find_first_of("FIW"), std::string::npos) << t;
      EXPECT_EQ(t.find('B'), std::string::npos) << t;
    }
  }
  EXPECT_EQ(check_torch_csv(p, csv, TorchDialect::kTorch26), "");
}

TEST(ExportTorchCsv, Dialect25SplitsFusedBackwardIntoBThenW) {
  const Problem p = uniform_problem(2, 1, 2);
  const Schedule s = simulate(p, one_f_one_b_order(p), "1f1b");
  const std::string csv = export_torch_csv(p, s, TorchDialect::kTorch25);
  EXPECT_EQ(csv, "0F0,0F1,,0B0,0W0,,0B1,0W1\n,1F0,1B0,1W0,1F1,1B1,1W1\n");
  EXPECT_EQ(check_torch_csv(p, csv, TorchDialect::kTorch25), "");
  // Read as 2.6, each B is a full backward and the W after it has no I: rejected.
  EXPECT_NE(check_torch_csv(p, csv, TorchDialect::kTorch26), "");
}

TEST(ExportTorchCsv, RowsKeepEachRanksComputeOrderAndLeaveTransfersOut) {
  Problem p = uniform_problem(2, 1, 3);
  const Schedule s = testing::offloading_1f1b(p);
  ASSERT_FALSE(validate(p, s));
  const std::string csv = export_torch_csv(p, s);
  for (int r = 0; r < p.ranks; ++r) {
    std::vector<std::string> expected;
    for (const Action& a : s.ranks[r]) {
      if (!is_compute(a.ref.op)) continue;
      const char* op = a.ref.op == Op::kForward ? "F" : "B";
      expected.push_back(std::to_string(a.ref.stage) + op + std::to_string(a.ref.microbatch));
    }
    EXPECT_EQ(row_tokens(csv, r), expected);
  }
  EXPECT_EQ(check_torch_csv(p, csv, TorchDialect::kTorch26), "");
}

TEST(ExportTorchCsv, RecomputesHaveNoToken) {
  Problem p = uniform_problem(3, 1, 4);
  const Schedule recomputing = testing::recomputing_1f1b(p, 100);
  ASSERT_FALSE(validate(p, recomputing));
  const Schedule plain = simulate(p, one_f_one_b_order(p), "1f1b");
  const std::string csv = export_torch_csv(p, recomputing);
  EXPECT_EQ(csv, export_torch_csv(p, plain));  // the same compute order, R left out
  EXPECT_EQ(check_torch_csv(p, csv, TorchDialect::kTorch26), "");
}

TEST(ExportTorchCsv, InterleavedUsesGlobalStageIds) {
  const Problem p = uniform_problem(2, 2, 4);
  const Schedule s = simulate(p, interleaved_1f1b_order(p), "interleaved-1f1b");
  const std::string csv = export_torch_csv(p, s);
  for (const std::string& t : row_tokens(csv, 1)) {
    EXPECT_TRUE(t[0] == '1' || t[0] == '3') << t;  // loop placement: stages 1 and 3 on rank 1
  }
  EXPECT_EQ(check_torch_csv(p, csv, TorchDialect::kTorch26), "");
  EXPECT_EQ(
      check_torch_csv(p, export_torch_csv(p, s, TorchDialect::kTorch25), TorchDialect::kTorch25),
      "");
}

TEST(ExportTorchCsv, EveryGeneratorConformsOnRandomProblems) {
  std::mt19937 rng(6);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Problem p = testing::random_problem(rng);
    for (const Generator& g : generators()) {
      if (!g.unsupported_reason(p).empty()) continue;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " " << g.name << " R=" << p.ranks
                                        << " v=" << p.chunks_per_rank << " m=" << p.microbatches
                                        << " placement=" << to_string(p.placement));
      const Schedule s = simulate(p, g.build(p), std::string(g.name));
      EXPECT_EQ(check_torch_csv(p, export_torch_csv(p, s), TorchDialect::kTorch26), "");
      if (!adjacent_stages_share_a_rank(p)) {
        EXPECT_EQ(check_torch_csv(p, export_torch_csv(p, s, TorchDialect::kTorch25),
                                  TorchDialect::kTorch25),
                  "");
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(ExportTorchCsv, CompiledExamplesConform) {
  const char* dir = std::getenv("OPTPIPE_SOURCE_DIR");
  ASSERT_NE(dir, nullptr);
  for (const char* name :
       {"gpt-4rank.json", "gpt-8rank.json", "gpt-8rank-vshape.json", "gpt-16rank.json"}) {
    SCOPED_TRACE(name);
    const Problem p = load_profile(std::string(dir) + "/examples/" + name);
    const Schedule s = compile(p, "auto").best.schedule;
    for (TorchDialect d : {TorchDialect::kTorch26, TorchDialect::kTorch25}) {
      if (d == TorchDialect::kTorch25 && adjacent_stages_share_a_rank(p)) continue;
      EXPECT_EQ(check_torch_csv(p, export_torch_csv(p, s, d), d), "") << to_string(d);
    }
  }
}

TEST(ExportTorchCsv, Dialect25RefusesAdjacentStagesOnOneRank) {
  const Problem p = uniform_problem(2, 2, 2, {}, PlacementKind::kVShape);
  const Schedule s = simulate(p, gpipe_order(p), "gpipe");
  EXPECT_THROW(export_torch_csv(p, s, TorchDialect::kTorch25), InputError);
  EXPECT_EQ(check_torch_csv(p, export_torch_csv(p, s), TorchDialect::kTorch26), "");
}

// The checker itself catches what the loader or the runtime would reject.
TEST(TorchCsvChecker, RejectsWrongRowCount) {
  const Problem p = uniform_problem(2, 1, 1);
  EXPECT_NE(check_torch_csv(p, "0F0,0B0\n", TorchDialect::kTorch26).find("number of ranks"),
            std::string::npos);
}

TEST(TorchCsvChecker, RejectsAMissingForwardAndABackwardBeforeItsForward) {
  const Problem p = uniform_problem(2, 1, 2);
  EXPECT_NE(check_torch_csv(p, "0F0,0B0,0B1\n1F0,1B0,1F1,1B1\n", TorchDialect::kTorch26), "");
  EXPECT_NE(check_torch_csv(p, "0F1,0F0,0B0,0B1\n1F0,1B0,1B1,1F1\n", TorchDialect::kTorch26), "");
}

TEST(TorchCsvChecker, RejectsStagesOnOtherRanksThanTheProfiles) {
  const Problem p = uniform_problem(2, 1, 1);
  EXPECT_NE(check_torch_csv(p, "1F0,1B0\n0F0,0B0\n", TorchDialect::kTorch26).find("profile"),
            std::string::npos);
}

TEST(TorchCsvChecker, RejectsInputsFromTheSameStep) {
  const Problem p = uniform_problem(2, 1, 1);
  EXPECT_NE(
      check_torch_csv(p, "0F0,,0B0\n1F0,1B0\n", TorchDialect::kTorch26).find("after its input"),
      std::string::npos);
}

TEST(TorchCsvChecker, FindsADeadlockInTheLoweredSchedule) {
  // Rank 1 waits for microbatch 1 first; rank 0 sends it only after microbatch 0's backward,
  // which waits for rank 1.
  const Problem p = uniform_problem(2, 1, 2);
  Rows rows;
  ASSERT_EQ(parse_rows("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", TorchDialect::kTorch26, rows), "");
  std::vector<std::vector<TorchAction>> comm;
  EXPECT_EQ(lower_send_recv(p, rows, comm),
            "Malformed compute schedule, can't schedule sends/recvs");
}

TEST(TorchDialect, ParsesKnownNamesOnly) {
  EXPECT_EQ(parse_torch_dialect("2.5"), TorchDialect::kTorch25);
  EXPECT_EQ(parse_torch_dialect("2.6"), TorchDialect::kTorch26);
  EXPECT_THROW(parse_torch_dialect("2.4"), InputError);
}

}  // namespace
}  // namespace optpipe

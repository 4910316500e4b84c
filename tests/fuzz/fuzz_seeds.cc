// Writes the fuzz targets' seeds into DIR: every generator's schedule of the 4-rank example (at
// its budget and at one that forces offloads), as optpipe.schedule/v1 JSON in DIR/json and as
// .opsched in DIR/opsched, and each tampered the ways a faulty writer or a hand edit would:
// reordered, dropped, duplicated, retimed, relabelled, a header field changed.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "formats/opsched.h"
#include "formats/profile.h"
#include "formats/schedule_json.h"
#include "formats/units.h"
#include "heuristics/registry.h"
#include "model/errors.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

json& actions(json& s, int rank) {
  return s["ranks"][rank]["actions"];
}

const std::vector<std::pair<const char*, std::function<void(json&)>>>& tamperings() {
  static const std::vector<std::pair<const char*, std::function<void(json&)>>> all = {
      {"reversed", [](json& s) { std::reverse(actions(s, 1).begin(), actions(s, 1).end()); }},
      {"swapped", [](json& s) { std::swap(actions(s, 0)[0], actions(s, 0)[1]); }},
      {"dropped", [](json& s) { actions(s, 2).erase(actions(s, 2).begin() + 3); }},
      {"duplicated", [](json& s) { actions(s, 3).push_back(actions(s, 3)[0]); }},
      {"retimed",
       [](json& s) {
         json& a = actions(s, 0)[2];
         a["start"] = a["start"].get<double>() + 1;
         a["end"] = a["end"].get<double>() + 1;
       }},
      {"relabelled", [](json& s) { actions(s, 1)[0]["op"] = "B"; }},
      {"other_stage", [](json& s) { actions(s, 1)[0]["stage"] = 2; }},
      {"time_unit", [](json& s) { s["time_unit"] = "us"; }},
      {"microbatches", [](json& s) { s["pipeline"]["microbatches"] = 8; }},
      {"makespan", [](json& s) { s["metrics"]["makespan"] = 1.0; }},
      {"peak", [](json& s) { s["ranks"][0]["peak_bytes"] = 0; }},
      {"far_times",
       [](json& s) {
         actions(s, 0).back()["start"] = 1e308;
         actions(s, 0).back()["end"] = 1e308;
       }},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds PROFILE.json DIR\n");
    return 2;
  }
  const fs::path dir = argv[2];
  fs::create_directories(dir / "json");
  fs::create_directories(dir / "opsched");
  const optpipe::Problem profile = optpipe::load_profile(argv[1]);
  int written = 0;
  for (const int64_t budget : {profile.budget_bytes[0], optpipe::parse_size("60GiB", "budget")}) {
    optpipe::Problem problem = profile;
    problem.budget_bytes.assign(problem.ranks, budget);
    for (const optpipe::Generator& generator : optpipe::generators()) {
      if (!generator.unsupported_reason(problem).empty()) continue;
      const std::string name = fmt::format("{}_{}", generator.name, budget >> 30);
      optpipe::Schedule schedule;
      try {
        schedule = optpipe::simulate_within_budget(problem, generator.build(problem),
                                                   std::string(generator.name));
      } catch (const optpipe::Error&) {
        continue;
      }
      if (optpipe::validate(problem, schedule)) continue;
      const json document =
          optpipe::schedule_to_json(problem, schedule, optpipe::compute_metrics(problem, schedule));
      write(dir / "json" / (name + ".json"), document.dump(1));
      write(dir / "opsched" / (name + ".opsched"), optpipe::encode_opsched(problem, schedule));
      written += 2;
      for (const auto& [change, apply] : tamperings()) {
        json tampered = document;
        apply(tampered);
        write(dir / "json" / (name + "_" + change + ".json"), tampered.dump(1));
        ++written;
      }
    }
  }
  std::printf("%d seeds written to %s\n", written, dir.c_str());
  return written > 0 ? 0 : 1;
}

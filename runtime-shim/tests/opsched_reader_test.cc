// The binary schedule: compiler writer -> shim reader round trip, and refusal of every damaged
// file (docs/opsched.md): every single-byte flip, every truncation, wrong version, wrong endian.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "formats/file_io.h"
#include "formats/opsched.h"
#include "formats/schedule_json.h"
#include "heuristics/one_f_one_b.h"
#include "heuristics/registry.h"
#include "model/errors.h"
#include "optpipe_opsched_format.h"
#include "optpipe_rt.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace {

using optpipe::Problem;
using optpipe::Schedule;

Schedule compile(const Problem& problem, std::string_view method) {
  const optpipe::Generator* generator = optpipe::find_generator(method);
  EXPECT_NE(generator, nullptr) << method;
  return optpipe::simulate(problem, generator->build(problem), std::string(method));
}

struct Opened {
  optpipe_rt_status status;
  optpipe_rt_schedule* schedule = nullptr;
  ~Opened() { optpipe_rt_schedule_close(schedule); }
};

optpipe_rt_status open_status(const std::string& bytes) {
  optpipe_rt_schedule* schedule = nullptr;
  const optpipe_rt_status status =
      optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &schedule);
  EXPECT_EQ(status == OPTPIPE_RT_OK, schedule != nullptr);
  optpipe_rt_schedule_close(schedule);
  return status;
}

void expect_same_actions(const Problem& problem, const Schedule& schedule,
                         optpipe_rt_schedule* opened) {
  optpipe_rt_schedule_info info;
  ASSERT_EQ(optpipe_rt_schedule_get_info(opened, &info), OPTPIPE_RT_OK);
  EXPECT_EQ(info.ranks, problem.ranks);
  EXPECT_EQ(info.stages, problem.num_stages());
  EXPECT_EQ(info.microbatches, problem.microbatches);
  EXPECT_EQ(info.chunks_per_rank, problem.chunks_per_rank);
  EXPECT_STREQ(info.method, schedule.method.c_str());
  for (int s = 0; s < problem.num_stages(); ++s) {
    optpipe_rt_stage_info st;
    ASSERT_EQ(optpipe_rt_schedule_get_stage(opened, s, &st), OPTPIPE_RT_OK);
    EXPECT_EQ(st.rank, problem.rank_of_stage[s]);
    EXPECT_EQ(st.forward, problem.stages[s].forward);
    EXPECT_EQ(st.activation_bytes, problem.stages[s].activation_bytes);
    EXPECT_EQ(st.offloadable_bytes, problem.stages[s].offloadable_bytes);
    EXPECT_EQ(st.recompute_forward, problem.stages[s].recompute_forward);
    EXPECT_EQ(st.checkpoint_bytes, problem.stages[s].checkpoint_bytes.value_or(-1));
  }
  for (int r = 0; r < problem.ranks; ++r) {
    optpipe_rt_rank_info ri;
    ASSERT_EQ(optpipe_rt_schedule_get_rank(opened, r, &ri), OPTPIPE_RT_OK);
    EXPECT_EQ(ri.budget_bytes, problem.budget_bytes[r]);
    EXPECT_EQ(ri.static_bytes, problem.static_bytes[r]);
    ASSERT_EQ(ri.action_count, static_cast<int>(schedule.ranks[r].size()));
    for (int i = 0; i < ri.action_count; ++i) {
      optpipe_rt_action a;
      ASSERT_EQ(optpipe_rt_schedule_get_action(opened, r, i, &a), OPTPIPE_RT_OK);
      const optpipe::Action& want = schedule.ranks[r][i];
      EXPECT_EQ(a.op, static_cast<int>(want.ref.op));
      EXPECT_EQ(a.stage, want.ref.stage);
      EXPECT_EQ(a.microbatch, want.ref.microbatch);
      EXPECT_EQ(a.start, want.start);  // bit-exact: f64 on both sides
      EXPECT_EQ(a.end, want.end);
      EXPECT_EQ(a.bytes, optpipe::is_transfer(want.ref.op) ? want.bytes : 0);
    }
    optpipe_rt_action a;
    EXPECT_EQ(optpipe_rt_schedule_get_action(opened, r, ri.action_count, &a),
              OPTPIPE_RT_E_INVALID_ARGUMENT);
  }
}

TEST(OpschedReader, RoundTripsEveryGeneratorOnRandomProblems) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const Problem problem = optpipe::testing::random_problem(rng);
    for (const optpipe::Generator& generator : optpipe::generators()) {
      if (!generator.unsupported_reason(problem).empty()) continue;
      const Schedule schedule = compile(problem, generator.name);
      const std::string bytes = optpipe::encode_opsched(problem, schedule);
      optpipe_rt_schedule* opened = nullptr;
      ASSERT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &opened), OPTPIPE_RT_OK)
          << optpipe_rt_last_error();
      expect_same_actions(problem, schedule, opened);
      optpipe_rt_schedule_close(opened);
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(OpschedReader, RoundTripsRecomputes) {
  optpipe::testing::UniformCosts costs;
  costs.checkpoint_bytes = 100;
  Problem problem = optpipe::testing::uniform_problem(3, 1, 5, costs);
  problem.stages[1].recompute_forward = 0.25;
  const Schedule schedule = optpipe::simulate(
      problem, optpipe::testing::recompute_all(optpipe::one_f_one_b_order(problem)), "r");
  // Stage 2 cannot recompute (C = -1 on disk): its R are dropped before writing.
  problem.stages[2].checkpoint_bytes.reset();
  Schedule written = schedule;
  std::erase_if(written.ranks[2],
                [](const optpipe::Action& a) { return a.ref.op == optpipe::Op::kRecompute; });
  const std::string bytes = optpipe::encode_opsched(problem, written);
  optpipe_rt_schedule* opened = nullptr;
  ASSERT_EQ(optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &opened), OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  expect_same_actions(problem, written, opened);
  int recomputes = 0;
  for (int i = 0; i < static_cast<int>(written.ranks[0].size()); ++i) {
    optpipe_rt_action a;
    ASSERT_EQ(optpipe_rt_schedule_get_action(opened, 0, i, &a), OPTPIPE_RT_OK);
    recomputes += a.op == OPTPIPE_RT_OP_R;
  }
  EXPECT_EQ(recomputes, problem.microbatches);
  optpipe_rt_schedule_close(opened);

  // An R on the stage without checkpoint bytes is refused by the reader.
  const std::string bad = optpipe::encode_opsched(problem, schedule);
  EXPECT_EQ(open_status(bad), OPTPIPE_RT_E_CORRUPT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("R on stage 2"), std::string::npos)
      << optpipe_rt_last_error();
}

TEST(OpschedReader, ReadsTheFileWrittenAtomically) {
  const Problem problem = optpipe::testing::uniform_problem(4, 1, 8);
  const Schedule schedule = compile(problem, "1f1b");
  const std::string path = ::testing::TempDir() + "/roundtrip.opsched";
  optpipe::write_opsched(path, problem, schedule);
  optpipe_rt_schedule* opened = nullptr;
  ASSERT_EQ(optpipe_rt_schedule_open(path.c_str(), &opened), OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  expect_same_actions(problem, schedule, opened);
  optpipe_rt_schedule_close(opened);
  std::remove(path.c_str());

  EXPECT_EQ(optpipe_rt_schedule_open((path + ".missing").c_str(), &opened), OPTPIPE_RT_E_IO);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find(".missing"), std::string::npos);
  EXPECT_EQ(opened, nullptr);
}

TEST(OpschedWriter, ConvertsAScheduleJsonGivenItsProfile) {
  Problem problem = optpipe::testing::uniform_problem(3, 2, 6);
  problem.profile_sha256 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  const Schedule schedule = compile(problem, "interleaved-1f1b");
  const std::string json_path = ::testing::TempDir() + "/convert.json";
  const std::string bin_path = ::testing::TempDir() + "/convert.opsched";
  optpipe::write_file_atomically(
      json_path,
      optpipe::schedule_to_json(problem, schedule, optpipe::compute_metrics(problem, schedule))
          .dump());
  optpipe::convert_schedule_json_to_opsched(json_path, problem, bin_path);
  optpipe_rt_schedule* opened = nullptr;
  ASSERT_EQ(optpipe_rt_schedule_open(bin_path.c_str(), &opened), OPTPIPE_RT_OK)
      << optpipe_rt_last_error();
  expect_same_actions(problem, schedule, opened);
  optpipe_rt_schedule_info info;
  ASSERT_EQ(optpipe_rt_schedule_get_info(opened, &info), OPTPIPE_RT_OK);
  EXPECT_EQ(info.profile_sha256[0], 0x00);
  EXPECT_EQ(info.profile_sha256[1], 0x11);
  EXPECT_EQ(info.profile_sha256[31], 0xff);
  optpipe_rt_schedule_close(opened);

  Problem other = problem;
  other.profile_sha256 = std::string(64, 'f');
  try {
    optpipe::convert_schedule_json_to_opsched(json_path, other, bin_path);
    ADD_FAILURE() << "converted a schedule of another profile";
  } catch (const optpipe::Error& e) {
    EXPECT_EQ(e.kind(), optpipe::ErrorKind::kInvalidSchedule);
  }
  std::remove(json_path.c_str());
  std::remove(bin_path.c_str());
}

// A small file: 2 ranks, 2 microbatches, with transfers, so every field kind is present.
std::string small_file() {
  optpipe::testing::UniformCosts costs;
  costs.activation_bytes = 4096;
  Problem problem = optpipe::testing::uniform_problem(2, 1, 2, costs);
  problem.offload = optpipe::OffloadLink{4096.0, 4096.0, optpipe::ChannelMode::kDuplex, {0, 1}};
  for (auto& s : problem.stages) s.offloadable_bytes = 4096;
  problem.profile_sha256 = std::string(64, 'a');
  optpipe::Order order{{{{optpipe::Op::kForward, 0, 0},
                         {optpipe::Op::kOffload, 0, 0},
                         {optpipe::Op::kForward, 0, 1},
                         {optpipe::Op::kReload, 0, 0},
                         {optpipe::Op::kBackwardInput, 0, 0},
                         {optpipe::Op::kBackwardWeight, 0, 0},
                         {optpipe::Op::kBackwardInput, 0, 1},
                         {optpipe::Op::kBackwardWeight, 0, 1}},
                        {{optpipe::Op::kForward, 1, 0},
                         {optpipe::Op::kBackwardInput, 1, 0},
                         {optpipe::Op::kForward, 1, 1},
                         {optpipe::Op::kBackwardInput, 1, 1},
                         {optpipe::Op::kBackwardWeight, 1, 0},
                         {optpipe::Op::kBackwardWeight, 1, 1}}}};
  return optpipe::encode_opsched(problem, optpipe::simulate(problem, order, "hand"));
}

optpipe_rt_status expected_for_flip(size_t at) {
  if (at < 8) return OPTPIPE_RT_E_BAD_MAGIC;
  if (at < 12) return OPTPIPE_RT_E_BAD_MAGIC;  // byte-order mark: one flip never reverses it
  if (at < 16) return OPTPIPE_RT_E_VERSION;
  return OPTPIPE_RT_E_CHECKSUM;  // header CRC or file CRC, trailer included
}

TEST(OpschedReader, RefusesEverySingleByteFlipWithItsCode) {
  const std::string good = small_file();
  ASSERT_EQ(open_status(good), OPTPIPE_RT_OK);
  for (size_t at = 0; at < good.size(); ++at) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ mask);
      ASSERT_EQ(open_status(bad), expected_for_flip(at))
          << "byte " << at << " mask " << int(mask) << ": " << optpipe_rt_last_error();
      ASSERT_STRNE(optpipe_rt_last_error(), "");
    }
  }
}

TEST(OpschedReader, RefusesEveryTruncation) {
  const std::string good = small_file();
  for (size_t length = 0; length < good.size(); ++length) {
    ASSERT_EQ(open_status(good.substr(0, length)), OPTPIPE_RT_E_TRUNCATED) << "length " << length;
  }
  EXPECT_EQ(open_status(good + std::string(1, '\0')), OPTPIPE_RT_E_CORRUPT);
}

void store_u32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

TEST(OpschedReader, RefusesWrongVersionAndWrongEndianEvenWithValidChecksums) {
  const std::string good = small_file();
  std::string v3 = good;
  store_u32(v3, OPSCHED_OFF_VERSION, 3);
  EXPECT_EQ(open_status(v3), OPTPIPE_RT_E_VERSION);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("version 3"), std::string::npos);

  // What a big-endian writer would put first: the mark's bytes reversed.
  std::string big = good;
  std::swap(big[OPSCHED_OFF_BOM], big[OPSCHED_OFF_BOM + 3]);
  std::swap(big[OPSCHED_OFF_BOM + 1], big[OPSCHED_OFF_BOM + 2]);
  EXPECT_EQ(open_status(big), OPTPIPE_RT_E_WRONG_ENDIAN);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("little-endian"), std::string::npos);

  EXPECT_EQ(open_status(std::string(300, 'x')), OPTPIPE_RT_E_BAD_MAGIC);
  EXPECT_EQ(open_status("{\"format\": \"optpipe.schedule/v1\"}"), OPTPIPE_RT_E_BAD_MAGIC);
}

void store_u64(std::string& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// `bytes` with both checksums computed again: what a faulty writer would produce.
std::string resealed(std::string bytes) {
  store_u32(bytes, OPSCHED_OFF_HEADER_CRC, 0);
  store_u32(bytes, OPSCHED_OFF_HEADER_CRC, opsched_crc32(0, bytes.data(), OPSCHED_HEADER_SIZE));
  const size_t body = bytes.size() - OPSCHED_TRAILER_SIZE;
  store_u32(bytes, body, opsched_crc32(0, bytes.data(), body));
  return bytes;
}

// small_file()'s layout: two stages, two ranks, then the actions.
constexpr size_t kRankTable = OPSCHED_HEADER_SIZE + 2 * OPSCHED_STAGE_RECORD_SIZE;
constexpr size_t kFirstAction = kRankTable + 2 * OPSCHED_RANK_RECORD_SIZE;

// A consistent CRC over inconsistent content (a faulty writer) is refused as corrupt.
TEST(OpschedReader, RefusesInconsistentContentWithValidChecksums) {
  const std::string good = small_file();
  ASSERT_EQ(open_status(resealed(good)), OPTPIPE_RT_OK);
  struct Damage {
    size_t at;
    uint32_t value;
  };
  for (const Damage d : {Damage{OPSCHED_OFF_STAGES, 3}, Damage{OPSCHED_OFF_RANKS, 0},
                         Damage{OPSCHED_OFF_MICROBATCHES, 0},
                         Damage{OPSCHED_HEADER_SIZE + OPSCHED_STAGE_OFF_RANK, 1},
                         Damage{kRankTable + OPSCHED_RANK_OFF_COUNT, 1000},
                         Damage{kFirstAction + OPSCHED_ACTION_OFF_OP, 9},
                         Damage{OPSCHED_HEADER_SIZE + OPSCHED_STAGE_OFF_CHECKPOINT, 0xfffffffe},
                         Damage{OPSCHED_OFF_VERSION, 1},  // version 1 has shorter stage records
                         Damage{kFirstAction + OPSCHED_ACTION_OFF_STAGE, 1},
                         Damage{kFirstAction + OPSCHED_ACTION_OFF_MICROBATCH, 2}}) {
    std::string bad = good;
    store_u32(bad, d.at, d.value);
    EXPECT_EQ(open_status(resealed(bad)), OPTPIPE_RT_E_CORRUPT) << "offset " << d.at;
  }
}

// Byte counts the host pool's sizing once added up unchecked (found by fuzzing the reader): a
// transfer that moves anything but its stage's O, or stage bytes above the profiles' 2^50, is
// corrupt, where they overflowed int64 or asked the pool for more than it can hold.
TEST(OpschedReader, RefusesTransferBytesOtherThanTheStagesOAndHugeStageBytes) {
  const std::string good = small_file();
  std::vector<size_t> transfers;
  for (size_t at = kFirstAction; at < good.size() - OPSCHED_TRAILER_SIZE;
       at += OPSCHED_ACTION_RECORD_SIZE) {
    const auto op = static_cast<uint8_t>(good[at + OPSCHED_ACTION_OFF_OP]);
    if (op == OPSCHED_OP_OFFLOAD || op == OPSCHED_OP_RELOAD) transfers.push_back(at);
  }
  ASSERT_EQ(transfers.size(), 2u);
  for (const uint64_t bytes : {uint64_t{4095}, uint64_t{1} << 62, uint64_t{INT64_MAX}}) {
    std::string bad = good;
    store_u64(bad, transfers[0] + OPSCHED_ACTION_OFF_BYTES, bytes);
    EXPECT_EQ(open_status(resealed(bad)), OPTPIPE_RT_E_CORRUPT) << bytes;
  }
  std::string huge = good;  // stage 0's O and both its transfers at 2^62: consistent, too large
  store_u64(huge, OPSCHED_HEADER_SIZE + OPSCHED_STAGE_OFF_OFFL, uint64_t{1} << 62);
  for (const size_t at : transfers)
    store_u64(huge, at + OPSCHED_ACTION_OFF_BYTES, uint64_t{1} << 62);
  EXPECT_EQ(open_status(resealed(huge)), OPTPIPE_RT_E_CORRUPT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("above 2^50"), std::string::npos)
      << optpipe_rt_last_error();
}

// Actions changed by a faulty writer, checksums computed again: the structure, not the CRC, is
// what refuses them, before anything runs.
TEST(OpschedReader, RefusesASchedulesStructureChangedWithValidChecksums) {
  const std::string good = small_file();
  const size_t actions_end = good.size() - OPSCHED_TRAILER_SIZE;
  std::vector<size_t> rank0;  // rank 0's action records, in file order
  for (size_t at = kFirstAction; at < actions_end; at += OPSCHED_ACTION_RECORD_SIZE) {
    if (good[at + OPSCHED_ACTION_OFF_STAGE] == 0) rank0.push_back(at);
  }
  ASSERT_EQ(rank0.size(), 8u);
  // rank 0's list: F(mb0), F(mb1), OFFLOAD(mb0), RELOAD(mb0), B, W, B, W.
  const uint8_t expected_ops[] = {OPSCHED_OP_F, OPSCHED_OP_F, OPSCHED_OP_OFFLOAD, OPSCHED_OP_RELOAD,
                                  OPSCHED_OP_B, OPSCHED_OP_W, OPSCHED_OP_B,       OPSCHED_OP_W};
  for (size_t i = 0; i < rank0.size(); ++i) {
    ASSERT_EQ(static_cast<uint8_t>(good[rank0[i] + OPSCHED_ACTION_OFF_OP]), expected_ops[i]) << i;
  }
  auto record = [&](const std::string& bytes, size_t at) {
    return bytes.substr(at, OPSCHED_ACTION_RECORD_SIZE);
  };
  struct Tampering {
    const char* name;
    std::function<void(std::string&)> change;
    const char* message;
  };
  const Tampering tamperings[] = {
      {"reordered",
       [&](std::string& b) {  // the two Fs swapped, times and all
         const std::string first = record(b, rank0[0]);
         b.replace(rank0[0], first.size(), record(b, rank0[1]));
         b.replace(rank0[1], first.size(), first);
       },
       "listed after an action that starts later"},
      {"duplicated microbatch",
       [&](std::string& b) { store_u32(b, rank0[1] + OPSCHED_ACTION_OFF_MICROBATCH, 0); },
       "listed twice"},
      {"F turned into B",
       [&](std::string& b) { b[rank0[0] + OPSCHED_ACTION_OFF_OP] = OPSCHED_OP_B; }, "listed twice"},
      {"W turned into BW",
       [&](std::string& b) { b[rank0[7] + OPSCHED_ACTION_OFF_OP] = OPSCHED_OP_BW; },
       "needs F, and B and W or BW, once each"},
      {"budget of one byte",
       [&](std::string& b) { store_u64(b, kRankTable + OPSCHED_RANK_OFF_BUDGET, 1); },
       "cannot hold"},
      {"static bytes above the budget",
       [&](std::string& b) {
         store_u64(b, kRankTable + OPSCHED_RANK_OFF_STATIC, (uint64_t{1} << 50) + (1 << 30));
       },
       "cannot hold"},
      {"overlapping compute",
       [&](std::string& b) {  // the second F moved onto the first, its duration kept
         double start = 0.25, end = 1.25;
         std::memcpy(&b[rank0[1] + OPSCHED_ACTION_OFF_START], &start, 8);
         std::memcpy(&b[rank0[1] + OPSCHED_ACTION_OFF_END], &end, 8);
       },
       "overlaps the compute op before it"},
  };
  for (const Tampering& t : tamperings) {
    std::string bad = good;
    t.change(bad);
    EXPECT_EQ(open_status(resealed(bad)), OPTPIPE_RT_E_CORRUPT) << t.name;
    EXPECT_NE(std::string(optpipe_rt_last_error()).find(t.message), std::string::npos)
        << t.name << ": " << optpipe_rt_last_error();
  }
  // A dropped action: the rank's count one less and its last record gone from its list.
  std::string dropped = good;
  store_u32(dropped, kRankTable + OPSCHED_RANK_OFF_COUNT, static_cast<uint32_t>(rank0.size() - 1));
  EXPECT_EQ(open_status(resealed(dropped)), OPTPIPE_RT_E_CORRUPT);
  EXPECT_NE(std::string(optpipe_rt_last_error()).find("needs F, and B and W or BW"),
            std::string::npos)
      << optpipe_rt_last_error();
}

TEST(OpschedReader, StatusCodesHaveMessages) {
  for (int s = OPTPIPE_RT_OK; s <= OPTPIPE_RT_E_INTERNAL; ++s) {
    EXPECT_STRNE(optpipe_rt_strerror(static_cast<optpipe_rt_status>(s)), "unknown status");
  }
  EXPECT_EQ(optpipe_rt_abi_version(), OPTPIPE_RT_ABI_VERSION);
}

}  // namespace

#include "formats/opsched.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "formats/file_io.h"
#include "formats/schedule_json.h"
#include "model/errors.h"
#include "runtime-shim/include/optpipe_opsched_format.h"

namespace optpipe {

namespace {

// Little-endian stores at fixed offsets, whatever the host's byte order.
class ByteWriter {
 public:
  explicit ByteWriter(size_t size) : bytes_(size, '\0') {}
  void u8(size_t at, uint8_t v) { bytes_[at] = static_cast<char>(v); }
  void u32(size_t at, uint32_t v) { store(at, v, 4); }
  void u64(size_t at, uint64_t v) { store(at, v, 8); }
  void i64(size_t at, int64_t v) { store(at, static_cast<uint64_t>(v), 8); }
  void f64(size_t at, double v) { store(at, std::bit_cast<uint64_t>(v), 8); }
  void raw(size_t at, const void* data, size_t size) {
    std::memcpy(bytes_.data() + at, data, size);
  }
  std::string& bytes() { return bytes_; }

 private:
  void store(size_t at, uint64_t v, int width) {
    for (int i = 0; i < width; ++i) bytes_[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string bytes_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 32 raw bytes of a lowercase-hex SHA-256; zeros when the problem has none (built in code).
std::array<uint8_t, 32> sha256_bytes(const std::string& hex) {
  std::array<uint8_t, 32> out{};
  if (hex.size() != 64) return out;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::array<uint8_t, 32>{};
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

std::vector<int> link_groups(const Problem& problem) {
  std::vector<int> group(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) group[r] = r;
  if (problem.offload &&
      static_cast<int>(problem.offload->link_group_of_rank.size()) == problem.ranks) {
    group = problem.offload->link_group_of_rank;
  }
  return group;
}

}  // namespace

std::string encode_opsched(const Problem& problem, const Schedule& schedule) {
  const int S = problem.num_stages();
  if (static_cast<int>(schedule.ranks.size()) != problem.ranks) {
    throw Error(ErrorKind::kInternal, fmt::format("opsched: schedule has {} ranks, the problem {}",
                                                  schedule.ranks.size(), problem.ranks));
  }
  size_t action_count = 0;
  for (const auto& actions : schedule.ranks) action_count += actions.size();
  const size_t stage_table = OPSCHED_HEADER_SIZE;
  const size_t rank_table = stage_table + size_t(S) * OPSCHED_STAGE_RECORD_SIZE;
  const size_t actions_at = rank_table + size_t(problem.ranks) * OPSCHED_RANK_RECORD_SIZE;
  const size_t trailer = actions_at + action_count * OPSCHED_ACTION_RECORD_SIZE;
  const size_t file_size = trailer + OPSCHED_TRAILER_SIZE;

  ByteWriter w(file_size);
  w.raw(OPSCHED_OFF_MAGIC, OPSCHED_MAGIC, 8);
  w.u32(OPSCHED_OFF_BOM, OPSCHED_BYTE_ORDER_MARK);
  w.u32(OPSCHED_OFF_VERSION, OPSCHED_VERSION);
  w.u32(OPSCHED_OFF_FLAGS, problem.offload ? 1u : 0u);
  w.u64(OPSCHED_OFF_FILE_SIZE, file_size);
  w.u32(OPSCHED_OFF_RANKS, problem.ranks);
  w.u32(OPSCHED_OFF_STAGES, S);
  w.u32(OPSCHED_OFF_MICROBATCHES, problem.microbatches);
  w.u32(OPSCHED_OFF_CHUNKS, problem.chunks_per_rank);
  w.u8(OPSCHED_OFF_TIME_UNIT, problem.time_unit == TimeUnit::kMicroseconds ? 1 : 0);
  w.u8(OPSCHED_OFF_PLACEMENT,
       static_cast<uint8_t>(problem.placement == PlacementKind::kLoop     ? 0
                            : problem.placement == PlacementKind::kVShape ? 1
                                                                          : 2));
  w.u8(OPSCHED_OFF_CHANNELS,
       problem.offload && problem.offload->channels == ChannelMode::kShared ? 0 : 1);
  w.u32(OPSCHED_OFF_STAGE_RECORD_SIZE, OPSCHED_STAGE_RECORD_SIZE);
  w.u32(OPSCHED_OFF_RANK_RECORD_SIZE, OPSCHED_RANK_RECORD_SIZE);
  w.u32(OPSCHED_OFF_ACTION_RECORD_SIZE, OPSCHED_ACTION_RECORD_SIZE);
  w.f64(OPSCHED_OFF_P2P_LATENCY, problem.p2p_latency);
  w.f64(OPSCHED_OFF_D2H_BW, problem.offload ? problem.offload->d2h_bytes_per_time : 0.0);
  w.f64(OPSCHED_OFF_H2D_BW, problem.offload ? problem.offload->h2d_bytes_per_time : 0.0);
  w.u64(OPSCHED_OFF_STAGE_TABLE, stage_table);
  w.u64(OPSCHED_OFF_RANK_TABLE, rank_table);
  const auto sha = sha256_bytes(problem.profile_sha256);
  w.raw(OPSCHED_OFF_SHA256, sha.data(), sha.size());
  // Method names are short ("zb-h1", "milp"); a longer one is cut, keeping a terminating NUL.
  w.raw(OPSCHED_OFF_METHOD, schedule.method.data(),
        std::min<size_t>(schedule.method.size(), OPSCHED_METHOD_SIZE - 1));

  for (int s = 0; s < S; ++s) {
    const size_t at = stage_table + size_t(s) * OPSCHED_STAGE_RECORD_SIZE;
    const StageCosts& c = problem.stages[s];
    w.u32(at + OPSCHED_STAGE_OFF_RANK, problem.rank_of_stage[s]);
    w.f64(at + OPSCHED_STAGE_OFF_FORWARD, c.forward);
    w.f64(at + OPSCHED_STAGE_OFF_BINPUT, c.backward_input);
    w.f64(at + OPSCHED_STAGE_OFF_BWEIGHT, c.backward_weight);
    w.i64(at + OPSCHED_STAGE_OFF_ACT, c.activation_bytes);
    w.i64(at + OPSCHED_STAGE_OFF_GRAD, c.weight_grad_bytes);
    w.i64(at + OPSCHED_STAGE_OFF_OFFL, c.offloadable_bytes);
    w.f64(at + OPSCHED_STAGE_OFF_RECOMPUTE, c.recompute_forward);
    w.i64(at + OPSCHED_STAGE_OFF_CHECKPOINT, c.checkpoint_bytes.value_or(-1));
  }
  const std::vector<int> group = link_groups(problem);
  size_t next_action = actions_at;
  for (int r = 0; r < problem.ranks; ++r) {
    const size_t at = rank_table + size_t(r) * OPSCHED_RANK_RECORD_SIZE;
    w.i64(at + OPSCHED_RANK_OFF_BUDGET, problem.budget_bytes[r]);
    w.i64(at + OPSCHED_RANK_OFF_STATIC, problem.static_bytes[r]);
    w.u32(at + OPSCHED_RANK_OFF_LINK_GROUP, group[r]);
    w.u32(at + OPSCHED_RANK_OFF_COUNT, static_cast<uint32_t>(schedule.ranks[r].size()));
    w.u64(at + OPSCHED_RANK_OFF_ACTIONS, next_action);
    for (const Action& a : schedule.ranks[r]) {
      if (a.ref.stage < 0 || a.ref.stage >= S || a.ref.microbatch < 0 ||
          a.ref.microbatch >= problem.microbatches) {
        throw Error(ErrorKind::kInternal,
                    fmt::format("opsched: rank {} action {} is out of range", r, describe(a.ref)));
      }
      w.u8(next_action + OPSCHED_ACTION_OFF_OP, static_cast<uint8_t>(a.ref.op));
      w.u32(next_action + OPSCHED_ACTION_OFF_STAGE, a.ref.stage);
      w.u32(next_action + OPSCHED_ACTION_OFF_MICROBATCH, a.ref.microbatch);
      w.f64(next_action + OPSCHED_ACTION_OFF_START, a.start);
      w.f64(next_action + OPSCHED_ACTION_OFF_END, a.end);
      w.i64(next_action + OPSCHED_ACTION_OFF_BYTES, is_transfer(a.ref.op) ? a.bytes : 0);
      next_action += OPSCHED_ACTION_RECORD_SIZE;
    }
  }
  std::string& bytes = w.bytes();
  w.u32(OPSCHED_OFF_HEADER_CRC, opsched_crc32(0, bytes.data(), OPSCHED_HEADER_SIZE));
  w.u32(trailer, opsched_crc32(0, bytes.data(), trailer));
  return std::move(bytes);
}

void write_opsched(const std::string& path, const Problem& problem, const Schedule& schedule) {
  write_file_atomically(path, encode_opsched(problem, schedule));
}

void convert_schedule_json_to_opsched(const std::string& schedule_json_path, const Problem& problem,
                                      const std::string& opsched_path) {
  const ScheduleFile file = load_valid_schedule(problem, "the profile", schedule_json_path);
  write_opsched(opsched_path, problem, file.schedule);
}

}  // namespace optpipe

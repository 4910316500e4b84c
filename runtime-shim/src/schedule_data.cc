#include "schedule_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "host_pool.h"
#include "issue_order.h"
#include "optpipe_opsched_format.h"

namespace optpipe::rt {

namespace {

// What a stage's byte counts may be at most: as in profiles (formats/profile.cc), 1024 TiB.
constexpr int64_t kMaxBytes = int64_t{1} << 50;

// Little-endian loads at fixed offsets; the caller has checked the bounds.
struct Bytes {
  const uint8_t* p;
  uint64_t load(size_t at, int width) const {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | p[at + i];
    return v;
  }
  uint8_t u8(size_t at) const { return p[at]; }
  uint32_t u32(size_t at) const { return static_cast<uint32_t>(load(at, 4)); }
  uint64_t u64(size_t at) const { return load(at, 8); }
  int64_t i64(size_t at) const { return static_cast<int64_t>(load(at, 8)); }
  double f64(size_t at) const {
    const uint64_t bits = load(at, 8);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
};

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

struct Refusal {
  optpipe_rt_status status;
  std::string message;
};

// What a rank's list must be for its runner to run it as the compiler planned (docs/opsched.md):
// each op of each of its activations once (F; B and W, or BW; a RELOAD for each OFFLOAD; R at
// most once, never with an OFFLOAD), in an order that runs each op after what it needs on the
// rank, by predicted start, with no two compute ops overlapping; memory that holds the static
// bytes and one activation of its largest stage. The checksums only say the bytes arrived as
// written; this says a writer wrote a schedule.
std::optional<std::string> structure_error(const ScheduleData& d, uint32_t r) {
  const auto& actions = d.actions[r];
  const int m = d.info.microbatches;
  std::vector<int> local(d.stages.size(), -1);  // stage -> index among this rank's stages
  int v = 0;
  int64_t largest_activation = 0;
  for (size_t s = 0; s < d.stages.size(); ++s) {
    if (d.stages[s].rank != static_cast<int32_t>(r)) continue;
    local[s] = v++;
    largest_activation = std::max(largest_activation, d.stages[s].activation_bytes);
  }
  const optpipe_rt_rank_info& ri = d.ranks[r];
  if (ri.static_bytes > ri.budget_bytes || ri.budget_bytes - ri.static_bytes < largest_activation) {
    return format(
        "rank %u: a budget of %lld bytes cannot hold its static %lld bytes and an "
        "activation of %lld",
        r, static_cast<long long>(ri.budget_bytes), static_cast<long long>(ri.static_bytes),
        static_cast<long long>(largest_activation));
  }
  constexpr int kOps = OPSCHED_OP_R + 1;
  // Position in the list + 1 of each (op, local stage, microbatch); 0: not listed.
  std::vector<uint32_t> position(size_t(kOps) * v * m, 0);
  auto at = [&](int op, int stage, int mb) -> uint32_t& {
    return position[(size_t(local[stage]) * m + mb) * kOps + op];
  };
  static const char* const kNames[] = {"F", "B", "W", "BW", "OFFLOAD", "RELOAD", "R"};
  double previous_start = 0, compute_end = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const optpipe_rt_action& a = actions[i];
    uint32_t& slot = at(a.op, a.stage, a.microbatch);
    if (slot) {
      return format("rank %u action %zu: %s of stage %d, microbatch %d is listed twice", r, i,
                    kNames[a.op], a.stage, a.microbatch);
    }
    slot = static_cast<uint32_t>(i + 1);
    const double slack = 1e-6 + 1e-9 * std::abs(a.start);
    if (a.start + slack < previous_start) {
      return format("rank %u action %zu: listed after an action that starts later", r, i);
    }
    previous_start = std::max(previous_start, a.start);
    if (is_compute_op(a.op)) {
      if (a.start + slack < compute_end) {
        return format("rank %u action %zu: %s overlaps the compute op before it", r, i,
                      kNames[a.op]);
      }
      compute_end = a.end;
    }
  }
  for (size_t s = 0; s < d.stages.size(); ++s) {
    if (local[s] < 0) continue;
    const int stage = static_cast<int>(s);
    for (int j = 0; j < m; ++j) {
      auto pos = [&](int op) { return at(op, stage, j); };
      auto where = [&] { return format("rank %u: stage %d, microbatch %d", r, stage, j); };
      const bool fused = pos(OPSCHED_OP_BW) != 0;
      const bool split = pos(OPSCHED_OP_B) != 0 || pos(OPSCHED_OP_W) != 0;
      if (!pos(OPSCHED_OP_F) || fused == split ||
          (split && (!pos(OPSCHED_OP_B) || !pos(OPSCHED_OP_W)))) {
        return where() + ": needs F, and B and W or BW, once each";
      }
      if ((pos(OPSCHED_OP_OFFLOAD) != 0) != (pos(OPSCHED_OP_RELOAD) != 0)) {
        return where() + ": an OFFLOAD needs its RELOAD, and a RELOAD its OFFLOAD";
      }
      if (pos(OPSCHED_OP_OFFLOAD) && pos(OPSCHED_OP_R)) {
        return where() + ": both offloaded and recomputed";
      }
      const uint32_t backward = fused ? pos(OPSCHED_OP_BW) : pos(OPSCHED_OP_B);
      // Each pair: the first must be listed before the second.
      const std::pair<uint32_t, uint32_t> order[] = {
          {pos(OPSCHED_OP_F), backward},
          {pos(OPSCHED_OP_F), pos(OPSCHED_OP_OFFLOAD)},
          {pos(OPSCHED_OP_OFFLOAD), pos(OPSCHED_OP_RELOAD)},
          {pos(OPSCHED_OP_RELOAD), backward},
          {pos(OPSCHED_OP_F), pos(OPSCHED_OP_R)},
          {pos(OPSCHED_OP_R), backward},
          {pos(OPSCHED_OP_B), pos(OPSCHED_OP_W)}};
      for (const auto& [first, second] : order) {
        if (first && second && first > second) return where() + ": its ops are listed out of order";
      }
      // A neighbouring stage on the same rank (V-shape's turn, several chunks): forwards go up
      // the stages, backwards down.
      if (s + 1 < d.stages.size() && local[s + 1] >= 0) {
        const uint32_t next_backward = at(OPSCHED_OP_BW, stage + 1, j)
                                           ? at(OPSCHED_OP_BW, stage + 1, j)
                                           : at(OPSCHED_OP_B, stage + 1, j);
        if (at(OPSCHED_OP_F, stage + 1, j) < pos(OPSCHED_OP_F) || backward < next_backward) {
          return where() + ": listed out of order with the next stage on the rank";
        }
      }
    }
  }
  return std::nullopt;
}

// Checks after both checksums matched: a file this inconsistent came from a faulty writer.
// Version 1 predates recompute: shorter stage records, no op R.
std::optional<Refusal> read_content(const Bytes& b, size_t size, uint32_t version,
                                    ScheduleData* out) {
  auto corrupt = [](std::string message) {
    return Refusal{OPTPIPE_RT_E_CORRUPT, ".opsched corrupt: " + std::move(message)};
  };
  const bool has_recompute = version != OPSCHED_VERSION_1;
  const uint32_t stage_record =
      has_recompute ? OPSCHED_STAGE_RECORD_SIZE : OPSCHED_STAGE_RECORD_SIZE_V1;
  const uint32_t last_op = has_recompute ? OPSCHED_OP_R : OPSCHED_OP_RELOAD;
  if (b.u32(OPSCHED_OFF_STAGE_RECORD_SIZE) != stage_record ||
      b.u32(OPSCHED_OFF_RANK_RECORD_SIZE) != OPSCHED_RANK_RECORD_SIZE ||
      b.u32(OPSCHED_OFF_ACTION_RECORD_SIZE) != OPSCHED_ACTION_RECORD_SIZE) {
    return corrupt(format("record sizes differ from version %u's", version));
  }
  optpipe_rt_schedule_info& info = out->info;
  const uint32_t flags = b.u32(OPSCHED_OFF_FLAGS);
  const uint32_t R = b.u32(OPSCHED_OFF_RANKS), S = b.u32(OPSCHED_OFF_STAGES);
  const uint32_t m = b.u32(OPSCHED_OFF_MICROBATCHES), v = b.u32(OPSCHED_OFF_CHUNKS);
  if (R < 1 || R > 4096 || v < 1 || v > 64 || m < 1 || m > 65536 || S != R * v) {
    return corrupt(format("pipeline shape R=%u S=%u m=%u v=%u is out of range", R, S, m, v));
  }
  if (flags > 1 || b.u8(OPSCHED_OFF_TIME_UNIT) > 1 || b.u8(OPSCHED_OFF_PLACEMENT) > 2 ||
      b.u8(OPSCHED_OFF_CHANNELS) > 1 || b.u8(OPSCHED_OFF_RESERVED0) != 0) {
    return corrupt("unknown flag, time unit, placement or channel code");
  }
  info.ranks = static_cast<int32_t>(R);
  info.stages = static_cast<int32_t>(S);
  info.microbatches = static_cast<int32_t>(m);
  info.chunks_per_rank = static_cast<int32_t>(v);
  info.time_unit = static_cast<optpipe_rt_time_unit>(b.u8(OPSCHED_OFF_TIME_UNIT));
  info.placement = static_cast<optpipe_rt_placement>(b.u8(OPSCHED_OFF_PLACEMENT));
  info.channel_mode = static_cast<optpipe_rt_channel_mode>(b.u8(OPSCHED_OFF_CHANNELS));
  info.has_offload_link = static_cast<int32_t>(flags & 1u);
  info.p2p_latency = b.f64(OPSCHED_OFF_P2P_LATENCY);
  info.d2h_bytes_per_time = b.f64(OPSCHED_OFF_D2H_BW);
  info.h2d_bytes_per_time = b.f64(OPSCHED_OFF_H2D_BW);
  if (!std::isfinite(info.p2p_latency) || info.p2p_latency < 0 ||
      !std::isfinite(info.d2h_bytes_per_time) || info.d2h_bytes_per_time < 0 ||
      !std::isfinite(info.h2d_bytes_per_time) || info.h2d_bytes_per_time < 0) {
    return corrupt("p2p latency or bandwidth is negative or not finite");
  }
  std::memcpy(info.profile_sha256, b.p + OPSCHED_OFF_SHA256, 32);
  std::memcpy(info.method, b.p + OPSCHED_OFF_METHOD, OPSCHED_METHOD_SIZE);
  if (info.method[OPSCHED_METHOD_SIZE - 1] != '\0') return corrupt("method name not terminated");

  const size_t body_end = size - OPSCHED_TRAILER_SIZE;
  const uint64_t stage_table = b.u64(OPSCHED_OFF_STAGE_TABLE);
  const uint64_t rank_table = b.u64(OPSCHED_OFF_RANK_TABLE);
  if (stage_table < OPSCHED_HEADER_SIZE || stage_table > body_end ||
      (body_end - stage_table) / stage_record < S) {
    return corrupt("stage table lies outside the file");
  }
  if (rank_table < OPSCHED_HEADER_SIZE || rank_table > body_end ||
      (body_end - rank_table) / OPSCHED_RANK_RECORD_SIZE < R) {
    return corrupt("rank table lies outside the file");
  }
  std::vector<int> stages_on_rank(R, 0);
  out->stages.resize(S);
  for (uint32_t s = 0; s < S; ++s) {
    const size_t at = stage_table + size_t(s) * stage_record;
    optpipe_rt_stage_info& st = out->stages[s];
    const uint32_t rank = b.u32(at + OPSCHED_STAGE_OFF_RANK);
    if (rank >= R) return corrupt(format("stage %u is placed on rank %u of %u", s, rank, R));
    ++stages_on_rank[rank];
    st.rank = static_cast<int32_t>(rank);
    st.forward = b.f64(at + OPSCHED_STAGE_OFF_FORWARD);
    st.backward_input = b.f64(at + OPSCHED_STAGE_OFF_BINPUT);
    st.backward_weight = b.f64(at + OPSCHED_STAGE_OFF_BWEIGHT);
    st.activation_bytes = b.i64(at + OPSCHED_STAGE_OFF_ACT);
    st.weight_grad_bytes = b.i64(at + OPSCHED_STAGE_OFF_GRAD);
    st.offloadable_bytes = b.i64(at + OPSCHED_STAGE_OFF_OFFL);
    st.recompute_forward = has_recompute ? b.f64(at + OPSCHED_STAGE_OFF_RECOMPUTE) : st.forward;
    st.checkpoint_bytes = has_recompute ? b.i64(at + OPSCHED_STAGE_OFF_CHECKPOINT) : -1;
    for (double t : {st.forward, st.backward_input, st.backward_weight, st.recompute_forward}) {
      if (!std::isfinite(t) || t < 0) return corrupt(format("stage %u has a bad time", s));
    }
    if (st.activation_bytes < 0 || st.weight_grad_bytes < 0 || st.offloadable_bytes < 0 ||
        st.checkpoint_bytes < -1) {
      return corrupt(format("stage %u has negative bytes", s));
    }
    for (int64_t bytes :
         {st.activation_bytes, st.weight_grad_bytes, st.offloadable_bytes, st.checkpoint_bytes}) {
      if (bytes > kMaxBytes) return corrupt(format("stage %u has bytes above 2^50", s));
    }
  }
  for (uint32_t r = 0; r < R; ++r) {
    if (stages_on_rank[r] != static_cast<int>(v)) {
      return corrupt(
          format("rank %u hosts %d stages, not chunks_per_rank = %u", r, stages_on_rank[r], v));
    }
  }
  out->ranks.resize(R);
  out->actions.resize(R);
  for (uint32_t r = 0; r < R; ++r) {
    const size_t at = rank_table + size_t(r) * OPSCHED_RANK_RECORD_SIZE;
    optpipe_rt_rank_info& ri = out->ranks[r];
    ri.budget_bytes = b.i64(at + OPSCHED_RANK_OFF_BUDGET);
    ri.static_bytes = b.i64(at + OPSCHED_RANK_OFF_STATIC);
    ri.link_group = static_cast<int32_t>(b.u32(at + OPSCHED_RANK_OFF_LINK_GROUP));
    const uint32_t count = b.u32(at + OPSCHED_RANK_OFF_COUNT);
    const uint64_t first = b.u64(at + OPSCHED_RANK_OFF_ACTIONS);
    if (b.u64(at + OPSCHED_RANK_OFF_RESERVED) != 0) return corrupt("reserved rank field set");
    if (ri.budget_bytes < 0 || ri.static_bytes < 0 || ri.link_group < 0) {
      return corrupt(format("rank %u has negative memory or link group", r));
    }
    if (first < OPSCHED_HEADER_SIZE || first > body_end ||
        (body_end - first) / OPSCHED_ACTION_RECORD_SIZE < count) {
      return corrupt(format("actions of rank %u lie outside the file", r));
    }
    ri.action_count = static_cast<int32_t>(count);
    auto& actions = out->actions[r];
    actions.resize(count);
    for (uint32_t i = 0; i < count; ++i) {
      const size_t a = first + size_t(i) * OPSCHED_ACTION_RECORD_SIZE;
      optpipe_rt_action& act = actions[i];
      const uint8_t op = b.u8(a + OPSCHED_ACTION_OFF_OP);
      const uint32_t stage = b.u32(a + OPSCHED_ACTION_OFF_STAGE);
      const uint32_t mb = b.u32(a + OPSCHED_ACTION_OFF_MICROBATCH);
      if (op > last_op) return corrupt(format("rank %u action %u: op code %u", r, i, op));
      if (b.u8(a + 1) || b.u8(a + 2) || b.u8(a + 3) || b.u32(a + OPSCHED_ACTION_OFF_RESERVED2)) {
        return corrupt(format("rank %u action %u: reserved bytes set", r, i));
      }
      if (stage >= S || mb >= m) {
        return corrupt(
            format("rank %u action %u: stage %u / microbatch %u out of range", r, i, stage, mb));
      }
      if (out->stages[stage].rank != static_cast<int32_t>(r)) {
        return corrupt(format("rank %u action %u: stage %u lives on rank %d", r, i, stage,
                              out->stages[stage].rank));
      }
      if (op == OPSCHED_OP_R && out->stages[stage].checkpoint_bytes < 0) {
        return corrupt(
            format("rank %u action %u: R on stage %u, which has no checkpoint bytes", r, i, stage));
      }
      act.op = static_cast<optpipe_rt_op>(op);
      act.stage = static_cast<int32_t>(stage);
      act.microbatch = static_cast<int32_t>(mb);
      act.start = b.f64(a + OPSCHED_ACTION_OFF_START);
      act.end = b.f64(a + OPSCHED_ACTION_OFF_END);
      act.bytes = b.i64(a + OPSCHED_ACTION_OFF_BYTES);
      if (!std::isfinite(act.start) || !std::isfinite(act.end) || act.end < act.start) {
        return corrupt(format("rank %u action %u: bad predicted times", r, i));
      }
      const bool transfer = op == OPSCHED_OP_OFFLOAD || op == OPSCHED_OP_RELOAD;
      if (act.bytes != (transfer ? out->stages[stage].offloadable_bytes : 0)) {
        return corrupt(
            format("rank %u action %u: bad byte count (a transfer moves its stage's "
                   "O, a compute op none)",
                   r, i));
      }
    }
  }
  for (uint32_t r = 0; r < R; ++r) {
    if (auto error = structure_error(*out, r)) return corrupt(std::move(*error));
  }
  for (uint32_t r = 0; r < R; ++r) {
    const std::optional<int64_t> pool = host_pool_bytes_for(*out, r);
    if (!pool) return corrupt(format("rank %u's offloads need more than 2^62 bytes of host", r));
    out->ranks[r].host_pool_bytes = *pool;
  }
  return std::nullopt;
}

}  // namespace

optpipe_rt_status parse_opsched(const uint8_t* data, size_t size, ScheduleData* out,
                                std::string* message) {
  auto refuse = [&](optpipe_rt_status status, std::string text) {
    *message = std::move(text);
    return status;
  };
  if (data == nullptr && size > 0) return refuse(OPTPIPE_RT_E_INVALID_ARGUMENT, "null data");
  if (size == 0) return refuse(OPTPIPE_RT_E_TRUNCATED, ".opsched truncated: the file is empty");
  const Bytes b{data};
  // A prefix that is not the magic is "not an .opsched file", whatever its length.
  if (std::memcmp(data, OPSCHED_MAGIC, std::min<size_t>(size, 8)) != 0) {
    return refuse(OPTPIPE_RT_E_BAD_MAGIC, "not an .opsched file (bad magic)");
  }
  if (size < OPSCHED_HEADER_SIZE + OPSCHED_TRAILER_SIZE) {
    return refuse(OPTPIPE_RT_E_TRUNCATED,
                  format(".opsched truncated: %zu bytes, shorter than its %u-byte header", size,
                         OPSCHED_HEADER_SIZE + OPSCHED_TRAILER_SIZE));
  }
  const uint32_t bom = b.u32(OPSCHED_OFF_BOM);
  if (bom == 0x04030201u) {
    return refuse(OPTPIPE_RT_E_WRONG_ENDIAN,
                  ".opsched written big-endian; the format is little-endian (rewrite it with "
                  "optpipe-compile --format bin)");
  }
  if (bom != OPSCHED_BYTE_ORDER_MARK) {
    return refuse(OPTPIPE_RT_E_BAD_MAGIC,
                  format("not an .opsched file (byte-order mark 0x%08x)", bom));
  }
  const uint32_t version = b.u32(OPSCHED_OFF_VERSION);
  if (version != OPSCHED_VERSION_1 && version != OPSCHED_VERSION) {
    return refuse(OPTPIPE_RT_E_VERSION,
                  format(".opsched version %u; this shim reads versions %u to %u (recompile the "
                         "schedule or update the shim)",
                         version, OPSCHED_VERSION_1, OPSCHED_VERSION));
  }
  uint8_t header[OPSCHED_HEADER_SIZE];
  std::memcpy(header, data, OPSCHED_HEADER_SIZE);
  std::memset(header + OPSCHED_OFF_HEADER_CRC, 0, 4);
  const uint32_t header_crc = opsched_crc32(0, header, OPSCHED_HEADER_SIZE);
  if (header_crc != b.u32(OPSCHED_OFF_HEADER_CRC)) {
    return refuse(OPTPIPE_RT_E_CHECKSUM,
                  format(".opsched header checksum mismatch (stored 0x%08x, computed 0x%08x): "
                         "the file is corrupted",
                         b.u32(OPSCHED_OFF_HEADER_CRC), header_crc));
  }
  const uint64_t declared = b.u64(OPSCHED_OFF_FILE_SIZE);
  if (declared > size) {
    return refuse(OPTPIPE_RT_E_TRUNCATED, format(".opsched truncated: %zu of %llu bytes", size,
                                                 static_cast<unsigned long long>(declared)));
  }
  if (declared < size) {
    return refuse(OPTPIPE_RT_E_CORRUPT,
                  format(".opsched corrupt: %zu bytes, %llu declared (trailing data)", size,
                         static_cast<unsigned long long>(declared)));
  }
  const size_t body_end = size - OPSCHED_TRAILER_SIZE;
  const uint32_t stored = b.u32(body_end);
  const uint32_t computed = opsched_crc32(0, data, body_end);
  if (stored != computed) {
    return refuse(OPTPIPE_RT_E_CHECKSUM,
                  format(".opsched checksum mismatch (stored 0x%08x, computed 0x%08x): the file "
                         "is corrupted",
                         stored, computed));
  }
  ScheduleData parsed;
  if (auto refusal = read_content(b, size, version, &parsed))
    return refuse(refusal->status, refusal->message);
  *out = std::move(parsed);
  message->clear();
  return OPTPIPE_RT_OK;
}

std::optional<int64_t> host_pool_bytes_for(const ScheduleData& data, int rank) {
  HostPool pool(int64_t{1} << 62);
  std::map<std::pair<int, int>, int64_t> slot;
  for (const size_t i : issue_order(data.actions[rank])) {
    const optpipe_rt_action& a = data.actions[rank][i];
    const auto key = std::make_pair(a.stage, a.microbatch);
    if (a.op == OPTPIPE_RT_OP_OFFLOAD) {
      if (slot.count(key)) continue;
      const std::optional<int64_t> offset = pool.allocate(a.bytes);
      if (!offset) return std::nullopt;
      slot[key] = *offset;
    } else if (a.op == OPTPIPE_RT_OP_B || a.op == OPTPIPE_RT_OP_BW) {
      if (auto it = slot.find(key); it != slot.end()) {
        pool.free(it->second);
        slot.erase(it);
      }
    }
  }
  return pool.high_water();
}

std::set<std::pair<int, int>> recomputed_activations(const ScheduleData& data, int rank) {
  std::set<std::pair<int, int>> recomputed;
  for (const optpipe_rt_action& a : data.actions[rank]) {
    if (a.op == OPTPIPE_RT_OP_R) recomputed.insert({a.stage, a.microbatch});
  }
  return recomputed;
}

}  // namespace optpipe::rt

// Writes a measured optpipe.profile/v1 (docs/profile.md) by hand: the shim has no JSON library,
// and output is easy to get right. Medians replace the schedule's predicted stage times.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "rank_runtime.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {

std::string number(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A stage that can recompute keeps that ability, with its (measured) recompute time.
std::string recompute_fields(const optpipe_rt_stage_info& st) {
  if (st.checkpoint_bytes < 0) return "";
  return ", \"recompute_forward\": " + number(st.recompute_forward) +
         ", \"checkpoint_bytes\": " + std::to_string(st.checkpoint_bytes);
}

// GB/s (10^9 bytes/s) from bytes per time unit, clamped to the profile's accepted range.
double gb_per_s(double bytes_per_time, int time_unit) {
  const double per_second = bytes_per_time * (time_unit == 1 ? 1e6 : 1e3);
  return std::fmin(1e6, std::fmax(0.001, per_second / 1e9));
}

}  // namespace

void write_measured_profile(const RankRuntime* const* ranks, size_t n, const char* name,
                            const char* path) {
  if (n == 0 || ranks == nullptr || ranks[0] == nullptr || path == nullptr) {
    throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT,
                  "write_measured_profile needs rank handles and a path");
  }
  const ScheduleData& data = *ranks[0]->schedule;
  for (size_t i = 0; i < n; ++i) {
    if (ranks[i] == nullptr ||
        std::memcmp(&ranks[i]->schedule->info, &data.info, sizeof data.info) != 0) {
      throw RtError(OPTPIPE_RT_E_INVALID_ARGUMENT, "rank handles of different schedules");
    }
  }
  const optpipe_rt_schedule_info& info = data.info;
  std::vector<optpipe_rt_stage_info> stages = data.stages;
  TransferStats d2h, h2d;
  for (size_t i = 0; i < n; ++i) {
    const TimingRecorder& rec = ranks[i]->recorder;
    for (int s = 0; s < info.stages; ++s) {
      optpipe_rt_stage_info& st = stages[s];
      if (auto [f, k] = rec.median(OPTPIPE_RT_OP_F, s); k > 0) st.forward = f;
      if (auto [r, k] = rec.median(OPTPIPE_RT_OP_R, s); k > 0) st.recompute_forward = r;
      const auto [b, kb] = rec.median(OPTPIPE_RT_OP_B, s);
      const auto [w, kw] = rec.median(OPTPIPE_RT_OP_W, s);
      if (kb > 0) st.backward_input = b;
      if (kw > 0) st.backward_weight = w;
      if (auto [bw, k] = rec.median(OPTPIPE_RT_OP_BW, s); k > 0 && kb == 0 && kw == 0) {
        // A fused BW is split in the schedule's predicted B:W ratio.
        const double predicted = data.stages[s].backward_input + data.stages[s].backward_weight;
        const double b_share = predicted > 0 ? data.stages[s].backward_input / predicted : 0.5;
        st.backward_input = bw * b_share;
        st.backward_weight = bw - st.backward_input;
      }
    }
    d2h.bytes += rec.d2h().bytes, d2h.seconds += rec.d2h().seconds, d2h.count += rec.d2h().count;
    h2d.bytes += rec.h2d().bytes, h2d.seconds += rec.h2d().seconds, h2d.count += rec.h2d().count;
  }
  const double unit = ranks[0]->seconds_to_time_unit();
  double d2h_bw = info.d2h_bytes_per_time, h2d_bw = info.h2d_bytes_per_time;
  if (d2h.count > 0 && d2h.seconds > 0) d2h_bw = d2h.bytes / (d2h.seconds * unit);
  if (h2d.count > 0 && h2d.seconds > 0) h2d_bw = h2d.bytes / (h2d.seconds * unit);

  std::string out = "{\n  \"format\": \"optpipe.profile/v1\",\n";
  out += "  \"name\": " + quoted(name && *name ? name : std::string(info.method) + "-measured") +
         ",\n";
  out += std::string("  \"time_unit\": \"") + (info.time_unit == 1 ? "us" : "ms") + "\",\n";
  out += "  \"pipeline\": { \"ranks\": " + std::to_string(info.ranks) +
         ", \"chunks_per_rank\": " + std::to_string(info.chunks_per_rank) + ", \"placement\": ";
  if (info.placement == 0) {
    out += "\"loop\"";
  } else if (info.placement == 1) {
    out += "\"vshape\"";
  } else {
    out += "[";
    for (int s = 0; s < info.stages; ++s) out += (s ? ", " : "") + std::to_string(stages[s].rank);
    out += "]";
  }
  out += ", \"microbatches\": " + std::to_string(info.microbatches) + " },\n  \"stages\": [\n";
  for (int s = 0; s < info.stages; ++s) {
    const optpipe_rt_stage_info& st = stages[s];
    out += "    { \"index\": " + std::to_string(s) + ", \"forward\": " + number(st.forward) +
           ", \"backward_input\": " + number(st.backward_input) +
           ", \"backward_weight\": " + number(st.backward_weight) +
           ", \"activation_bytes\": " + std::to_string(st.activation_bytes) +
           ", \"weight_grad_bytes\": " + std::to_string(st.weight_grad_bytes) +
           ", \"offloadable_bytes\": " + std::to_string(st.offloadable_bytes) +
           recompute_fields(st) + " }" + (s + 1 < info.stages ? ",\n" : "\n");
  }
  out += "  ],\n  \"p2p_latency\": " + number(info.p2p_latency) + ",\n";
  out += "  \"memory\": { \"per_rank\": [\n";
  for (int r = 0; r < info.ranks; ++r) {
    out += "    { \"rank\": " + std::to_string(r) +
           ", \"budget_bytes\": " + std::to_string(data.ranks[r].budget_bytes) +
           ", \"static_bytes\": " + std::to_string(data.ranks[r].static_bytes) + " }" +
           (r + 1 < info.ranks ? ",\n" : "\n");
  }
  out += "  ] }";
  if (info.has_offload_link) {
    std::map<int, std::vector<int>> groups;
    for (int r = 0; r < info.ranks; ++r) groups[data.ranks[r].link_group].push_back(r);
    out += ",\n  \"offload\": { \"d2h_gb_per_s\": " + number(gb_per_s(d2h_bw, info.time_unit)) +
           ", \"h2d_gb_per_s\": " + number(gb_per_s(h2d_bw, info.time_unit)) +
           ", \"channels\": " + (info.channel_mode == 0 ? "\"shared\"" : "\"duplex\"") +
           ", \"link_groups\": [";
    bool first = true;
    for (const auto& [group, members] : groups) {
      out += first ? "[" : ", [";
      first = false;
      for (size_t i = 0; i < members.size(); ++i)
        out += (i ? ", " : "") + std::to_string(members[i]);
      out += "]";
    }
    out += "] }";
  }
  out += "\n}\n";

  const std::string temp = std::string(path) + ".tmp";
  FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) throw RtError(OPTPIPE_RT_E_IO, std::string("cannot write ") + path);
  const bool written = std::fwrite(out.data(), 1, out.size(), file) == out.size();
  if (std::fclose(file) != 0 || !written || std::rename(temp.c_str(), path) != 0) {
    std::remove(temp.c_str());
    throw RtError(OPTPIPE_RT_E_IO, std::string("cannot write ") + path);
  }
}

}  // namespace optpipe::rt

// Fuzz target: the shim's .opsched reader on any bytes, as given and with both checksums computed
// again, so that the structure, not the CRC, is what refuses a faulty writer's file. A file that
// opens is opened on every rank (CPU backend, a small host pool limit). Nothing may crash.
#include <cstdint>
#include <string>

#include "optpipe_opsched_format.h"
#include "optpipe_rt.h"

namespace {

void store_u32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string resealed(std::string bytes) {
  if (bytes.size() < OPSCHED_HEADER_SIZE + OPSCHED_TRAILER_SIZE) return bytes;
  store_u32(bytes, OPSCHED_OFF_HEADER_CRC, 0);
  store_u32(bytes, OPSCHED_OFF_HEADER_CRC, opsched_crc32(0, bytes.data(), OPSCHED_HEADER_SIZE));
  const size_t body = bytes.size() - OPSCHED_TRAILER_SIZE;
  store_u32(bytes, body, opsched_crc32(0, bytes.data(), body));
  return bytes;
}

void open_everything(const std::string& bytes) {
  optpipe_rt_schedule* schedule = nullptr;
  if (optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &schedule) != OPTPIPE_RT_OK) {
    return;
  }
  optpipe_rt_schedule_info info;
  if (optpipe_rt_schedule_get_info(schedule, &info) == OPTPIPE_RT_OK) {
    for (int r = 0; r < info.ranks && r < 8; ++r) {
      optpipe_rt_config config;
      optpipe_rt_config_init(&config);
      config.backend = OPTPIPE_RT_BACKEND_CPU;
      config.host_pool_limit_bytes = int64_t{1} << 26;
      optpipe_rt_rank* rank = nullptr;
      if (optpipe_rt_rank_open(schedule, r, &config, &rank) == OPTPIPE_RT_OK) {
        optpipe_rt_rank_close(rank);
      }
    }
  }
  optpipe_rt_schedule_close(schedule);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  open_everything(bytes);
  open_everything(resealed(bytes));
  return 0;
}

// Fuzz target: the schedule JSON reader, the validator and the header checks on any bytes, for
// the 4-rank example profile. Nothing may crash, hang or read out of bounds; a refusal is an
// Error with its kind.
#include <cstdint>
#include <string_view>

#include "formats/profile.h"
#include "formats/schedule_json.h"
#include "model/errors.h"
#include "timing/validator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const optpipe::Problem problem =
      optpipe::load_profile(OPTPIPE_SOURCE_DIR "/examples/gpt-4rank.json");
  try {
    const optpipe::ScheduleFile file = optpipe::parse_schedule_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    if (optpipe::validate(problem, file.schedule)) return 0;
    (void)optpipe::header_mismatch(problem, file);
  } catch (const optpipe::Error&) {
    // A refusal: what the reader and the checks are for.
  }
  return 0;
}

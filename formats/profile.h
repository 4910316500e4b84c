// Reading `optpipe.profile/v1` (schemas/profile.schema.json, docs/profile.md) into a Problem.
// Every field is checked; a bad one throws InputError with ONE line:
//   "<source>: <json.path>: <what is wrong>, got <value>" plus the fix where it is not obvious.
#pragma once

#include <string>
#include <string_view>

#include "model/problem.h"

namespace optpipe {

// `source` names the input in messages (usually the file path).
Problem parse_profile(std::string_view json_text, const std::string& source);
Problem load_profile(const std::string& path);

}  // namespace optpipe

// optpipe's version (the project's in CMakeLists.txt): what `--version` prints, and part of what
// a compiled schedule depends on (the schedule cache's key).
#pragma once

namespace optpipe {

const char* optpipe_version();

}  // namespace optpipe

#include "model/version.h"

namespace optpipe {

const char* optpipe_version() { return OPTPIPE_VERSION; }

}  // namespace optpipe

"""Whether torch can be imported. Under ctest (OPTPIPE_REQUIRE_TORCH set) a missing torch fails
the run instead of skipping the torch tests."""

import os

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    if os.environ.get("OPTPIPE_REQUIRE_TORCH"):
        raise
    HAVE_TORCH = False

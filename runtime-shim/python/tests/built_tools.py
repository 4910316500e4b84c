"""The optpipe tools the Python tests run: from OPTPIPE_BIN_DIR (ctest sets it), else the first
build*/bin of the repository; a test that needs one that is not built is skipped."""

import glob
import os
import unittest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_TESTS)))


def tool(name):
    directory = os.environ.get("OPTPIPE_BIN_DIR")
    if directory:
        return os.path.join(directory, name)
    found = sorted(glob.glob(os.path.join(_REPO, "build*", "bin", name)))
    if not found:
        raise unittest.SkipTest(f"{name} is not built")
    return found[0]

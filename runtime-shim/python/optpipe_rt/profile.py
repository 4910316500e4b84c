"""python -m optpipe_rt.profile MODULE:FUNCTION --microbatches M [--budget SIZE] -o PROFILE

Writes an `optpipe.profile/v1` measured from a PyTorch model: FUNCTION (imported from MODULE,
called with no arguments) returns (stages, example_input), a list of torch.nn.Module, one per
pipeline stage in model order, and one microbatch of the first stage's input. See
optpipe_rt.torch.profile_stages and docs/runtime-shim.md, "Measuring a profile from PyTorch"."""

import argparse
import importlib
import os
import sys


def _size(text):
    return int(text) if text.isdigit() else text      # a size string is checked by optpipe


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m optpipe_rt.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builder", help="MODULE:FUNCTION returning (stages, example_input)")
    parser.add_argument("--microbatches", type=int, required=True)
    parser.add_argument("--budget", type=_size, default=None,
                        help="per-rank memory budget, e.g. 40GiB (default: the CUDA device's "
                             "memory; required on CPU)")
    parser.add_argument("--chunks-per-rank", type=int, default=1)
    parser.add_argument("--placement", default="loop", choices=["loop", "vshape"])
    parser.add_argument("--p2p-latency", type=float, default=0.05, help="ms (default 0.05)")
    parser.add_argument("--offload-gbps", type=float, default=None,
                        help="host link GB/s each way (default: no offload section)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--name", default=None, help="profile name (default: FUNCTION's module)")
    parser.add_argument("-o", "--output", required=True, help="profile JSON to write")
    args = parser.parse_args(argv)

    module_name, sep, function_name = args.builder.partition(":")
    if not sep or not module_name or not function_name:
        parser.error(f"builder: expected MODULE:FUNCTION, got {args.builder!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 (a bad builder is bad input: exit 2, one line)
        return _fail(f"builder: cannot import {module_name}: {type(err).__name__}: {err}")
    source = getattr(module, "__file__", None)
    if source and os.path.exists(args.output) and os.path.samefile(source, args.output):
        return _fail(f"-o {args.output}: is the builder's own source ({module_name}); name "
                     "another file")
    builder = getattr(module, function_name, None)
    if not callable(builder):
        return _fail(f"builder: {module_name} has no function {function_name}")
    try:
        built = builder()
    except Exception as err:  # noqa: BLE001
        return _fail(f"builder: {args.builder}() failed: {type(err).__name__}: {err}")
    if not isinstance(built, (tuple, list)) or len(built) != 2:
        return _fail(f"builder: {args.builder} must return (stages, example_input)")
    from .torch_profile import profile_stages
    try:
        profile_stages(built[0], built[1], microbatches=args.microbatches,
                       budget_bytes=args.budget, chunks_per_rank=args.chunks_per_rank,
                       placement=args.placement, p2p_latency=args.p2p_latency,
                       offload_gb_per_s=args.offload_gbps, warmup=args.warmup,
                       iterations=args.iterations, name=args.name or module_name,
                       output=args.output)
    except ValueError as err:
        return _fail(str(err))
    print(f"wrote {args.output}")
    return 0


def _fail(message):
    """Exit 2 with one line on stderr (control characters escaped)."""
    line = message.replace("\n", " ").encode("unicode_escape").decode("ascii")
    print(f"optpipe_rt.profile: {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

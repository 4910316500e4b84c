"""An `optpipe.profile/v1` measured from the user's PyTorch stages (docs/runtime-shim.md,
"Measuring a profile from PyTorch").

    from optpipe_rt.torch import profile_stages
    profile = profile_stages(stages, example_input, microbatches=16, budget_bytes="40GiB",
                             output="profile.json")

`stages` is a list of torch.nn.Module, one per pipeline stage in model order, already on their
device; `example_input` is one microbatch of the first stage's input (a tensor or a tuple of
tensors). Each stage runs on the previous stage's output. Each stage is measured as torch's
pipeline runtime runs it under `optpipe_rt.torch.PipelineSchedule`, with the same saved-tensor
store (optpipe_rt.saved_activations), so that the profile says what training will do; per stage,
after `warmup` iterations, the medians of `iterations` runs give:

- forward: the stage's forward (grad enabled), its saved tensors held by the store;
- backward_input / backward_weight: torch's split backward (`stage_backward_input`, then
  `stage_backward_weight` from the gradients it kept at the weight-consuming nodes). The first
  stage gets no input gradient (its input is the batch: token ids, or data that needs no grad), so
  torch's runtime skips its B and its W runs the whole backward: B = 0, W = the full backward;
- activation_bytes A: what the forward saved, weights and buffers excluded, each storage's bytes
  once, as an offload moves them (one segment per storage, OffloadEngine's packing);
- weight_grad_bytes G: what stays after B: the saved tensors that a node of the weight backward
  reads (the store drops the rest after B, as the runtime does). A first stage keeps all of A;
- checkpoint_bytes C: what a recomputed forward keeps (the saved copies of the stage inputs, at
  most A); recompute_forward is left to default to forward (R runs the forward again);
- static bytes per rank: its stages' parameters and buffers, gradients in the parameters' dtype,
  Adam's two fp32 moments and an fp32 master copy of parameters that are not fp32 (16 bytes per
  parameter for fp32 and for bf16 weights).
"""

import contextlib
import json
import math
import os
import re
import statistics
import time

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from .saved_activations import SavedActivations

_DEFAULT_P2P_MS = 0.05


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _tensors(values):
    return [v for v in values if isinstance(v, torch.Tensor)]


def _describe(values):
    parts = [f"{tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" if isinstance(v, torch.Tensor)
             else type(v).__name__ for v in values]
    return ", ".join(parts)


def _fresh_inputs(values, first):
    """A copy of the stage inputs with their own storages. A later stage's floating inputs require
    grad (they arrive from the previous stage); the first stage's do not: torch's pipeline feeds
    it the batch as data."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.detach().clone()
            if not first and (v.is_floating_point() or v.is_complex()):
                v.requires_grad_(True)
        out.append(v)
    return tuple(out)


def _static_bytes(module):
    total = 0
    for p in module.parameters():
        n = p.numel()
        total += 2 * p.numel() * p.element_size() + 8 * n       # weights, grads, Adam moments
        if p.dtype != torch.float32:
            total += 4 * n                                      # fp32 master weights
    total += sum(b.numel() * b.element_size() for b in module.buffers())
    return total


class _Clock:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def now(self):
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def _measure_stage(module, inputs, first, grads, clock, warmup, iterations):
    """Runs the stage as torch's pipeline runtime does under optpipe_rt.torch.PipelineSchedule
    (its forward under the SavedActivations hooks; B as `stage_backward_input`, after which the
    store drops what the weight backward does not read; W as `stage_backward_weight`; a first
    stage skips B and runs the whole backward as W, as torch's runtime does) and returns the medians
    of (F, B, W) in ms, A (bytes the forward saved, as an offload moves them), G (bytes left after
    B) and C (bytes a recomputed forward keeps)."""
    params = [p for p in module.parameters() if p.requires_grad]
    times = {"F": [], "B": [], "W": []}
    activation = kept = 0
    with contextlib.closing(SavedActivations({0: module})) as store:
        # C: what a recomputed forward keeps (the saved copies of the stage inputs).
        with store.forward(0, -1, recompute=True):
            module(*_fresh_inputs(inputs, first))
        checkpoint = store.held_bytes(0, -1)
        store.forget(0, -1)
        for it in range(warmup + iterations):
            x = _fresh_inputs(inputs, first)
            diff_inputs = [v for v in _tensors(x) if v.requires_grad]
            t0 = clock.now()
            with store.forward(0, it):
                outputs = [o for o in _tensors(_as_tuple(module(*x))) if o.requires_grad]
            t1 = clock.now()
            activation = max(activation, store.held_bytes(0, it))
            out_grads = list(grads[:len(outputs)])
            if first:
                t2 = clock.now()
                torch.autograd.backward(outputs, out_grads)
                kept = activation
            else:
                _, param_groups = stage_backward_input(outputs, out_grads, diff_inputs,
                                                       iter(params))
                store.release_after_input_backward(0, it, param_groups)
                t2 = clock.now()
                kept = max(kept, store.held_bytes(0, it))
                stage_backward_weight(iter(params), param_groups)
            t3 = clock.now()
            store.forget(0, it)
            for p in params:
                p.grad = None
            if it >= warmup:
                times["F"].append((t1 - t0) * 1e3)
                times["B"].append(0.0 if first else (t2 - t1) * 1e3)
                times["W"].append((t3 - t2) * 1e3)
    medians = tuple(statistics.median(times[k]) for k in "FBW")
    return medians, activation, kept, checkpoint


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_MAX_BYTES = 2**50
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _check_size(field, value):
    """A size as docs/profile.md accepts it: 1 to 2^50 bytes, an integer or "40GiB"."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{field}: must be an integer number of bytes or a size such as "
                         f"\"40GiB\", got {value!r}")
    nbytes = value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"{field}: not a size: {value!r} (a number and an optional unit: "
                             "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB; e.g. \"40GiB\")")
        nbytes = float(match.group(1)) * _UNITS[match.group(2)]
    if not 1 <= nbytes <= _MAX_BYTES:
        raise ValueError(f"{field}: must be 1 byte to 1024TiB, got {value!r}")
    return value


def _check_number(field, value, low, high, unit=""):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{field}: must be a number from {low:g} to {high:g}{unit}, "
                         f"got {value!r}")


def _check_name(name):
    if not isinstance(name, str) or any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or
                                        c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                                        for c in name):
        raise ValueError(f"name: must be text without control characters (escape codes, line "
                         f"breaks, tabs, direction overrides), got {name!r}")


def _placement_ranks(placement, ranks, chunks):
    stages = ranks * chunks
    if placement == "loop":
        return [s % ranks for s in range(stages)]
    if placement == "vshape":
        if chunks != 2:
            raise ValueError(f"placement: \"vshape\" needs chunks_per_rank = 2, got {chunks}")
        return [s if s < ranks else 2 * ranks - 1 - s for s in range(stages)]
    if isinstance(placement, (list, tuple)) and len(placement) == stages and \
            all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < ranks
                for r in placement) and \
            all(list(placement).count(r) == chunks for r in range(ranks)):
        return list(placement)
    raise ValueError(f"placement: must be \"loop\", \"vshape\" or a list of {stages} ranks "
                     f"from 0 to {ranks - 1}, each {chunks} times, got {placement!r}")


def profile_stages(stages, example_input, *, microbatches, budget_bytes=None, chunks_per_rank=1,
                   placement="loop", p2p_latency=_DEFAULT_P2P_MS, offload_gb_per_s=None,
                   warmup=3, iterations=10, name="measured", output=None):
    """Measure `stages` (torch.nn.Module per pipeline stage, model order) on one microbatch
    `example_input` and return an `optpipe.profile/v1` dict (also written to `output` if given).
    `budget_bytes`: per-rank memory budget (int or size string such as "40GiB"); default the CUDA
    device's total memory, required on CPU. `offload_gb_per_s`: host link bandwidth each way;
    None leaves the `offload` section out."""
    stages = list(stages) if stages is not None else []
    if not stages:
        raise ValueError("stages: empty; give one torch.nn.Module per pipeline stage, in model order")
    for s, module in enumerate(stages):
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"stages[{s}]: must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or \
            not 1 <= microbatches <= 65536:
        raise ValueError(f"microbatches: must be an integer from 1 to 65536, got {microbatches!r}")
    if isinstance(chunks_per_rank, bool) or not isinstance(chunks_per_rank, int) or \
            not 1 <= chunks_per_rank <= 64 or len(stages) % chunks_per_rank:
        raise ValueError(f"chunks_per_rank: must be 1 to 64 and divide the number of stages "
                         f"({len(stages)}), got {chunks_per_rank!r}")
    if len(stages) // chunks_per_rank > 4096:
        raise ValueError(f"stages: {len(stages)} stages of {chunks_per_rank} per rank are more "
                         "than 4096 ranks")
    _check_name(name)
    if warmup < 0 or iterations < 1:
        raise ValueError(f"iterations: must be >= 1 (warmup >= 0), got {iterations}, {warmup}")
    ranks = len(stages) // chunks_per_rank
    stage_rank = _placement_ranks(placement, ranks, chunks_per_rank)
    inputs = _as_tuple(example_input)
    if not _tensors(inputs):
        raise ValueError("example_input: must be a tensor or a tuple of tensors (one microbatch "
                         f"of the first stage's input), got {_describe(inputs)}")
    device = _tensors(inputs)[0].device
    if budget_bytes is None:
        if device.type != "cuda":
            raise ValueError("budget_bytes: required when the stages are not on a CUDA device "
                             "(the per-rank memory budget, e.g. \"40GiB\")")
        budget_bytes = torch.cuda.get_device_properties(device).total_memory
    _check_size("budget_bytes", budget_bytes)
    _check_number("p2p_latency", p2p_latency, 0, 1e12, " ms")
    if offload_gb_per_s is not None:
        _check_number("offload_gb_per_s", offload_gb_per_s, 0.001, 1e6, " GB/s")

    clock = _Clock(device)
    entries, static = [], [0] * ranks
    for s, module in enumerate(stages):
        x = _fresh_inputs(inputs, s == 0)
        try:
            with torch.enable_grad():
                out = _as_tuple(module(*x))
        except Exception as err:  # noqa: BLE001 (reported with the stage named)
            what = "example_input" if s == 0 else f"stage {s - 1}'s output"
            raise ValueError(f"stages[{s}]: does not accept {what} ({_describe(inputs)}): "
                             f"{type(err).__name__}: {err}") from err
        outputs = [o for o in _tensors(out) if o.requires_grad]
        if not outputs:
            raise ValueError(f"stages[{s}]: its output ({_describe(out)}) does not require grad, "
                             "so no backward can run through it")
        grads = tuple(torch.randn_like(o) for o in outputs)
        (f, b, w), act, kept, checkpoint = _measure_stage(module, inputs, s == 0, grads, clock,
                                                          warmup, iterations)
        entries.append({"index": s, "forward": round(f, 6), "backward_input": round(b, 6),
                        "backward_weight": round(w, 6), "activation_bytes": act,
                        "weight_grad_bytes": kept, "checkpoint_bytes": min(checkpoint, act)})
        static[stage_rank[s]] += _static_bytes(module)
        inputs = tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in out)

    profile = {
        "format": "optpipe.profile/v1",
        "name": name,
        "time_unit": "ms",
        "pipeline": {"ranks": ranks, "chunks_per_rank": chunks_per_rank,
                     "placement": list(placement) if isinstance(placement, (list, tuple))
                     else placement, "microbatches": microbatches},
        "stages": entries,
        "p2p_latency": p2p_latency,
        "memory": {"budget_bytes": budget_bytes,
                   "per_rank": [{"rank": r, "static_bytes": static[r]} for r in range(ranks)]},
    }
    if offload_gb_per_s is not None:
        profile["offload"] = {"d2h_gb_per_s": offload_gb_per_s, "h2d_gb_per_s": offload_gb_per_s}
    if output is not None:
        _write_atomically(output, json.dumps(profile, indent=2, allow_nan=False) + "\n")
    return profile


def _write_atomically(path, text):
    """Writes `text` to `path` whole or not at all (a temporary file beside it, renamed over)."""
    path = os.fspath(path)
    scratch = os.path.join(os.path.dirname(os.path.abspath(path)),
                           f".{os.path.basename(path)}.tmp.{os.getpid()}")
    try:
        with open(scratch, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(scratch, path)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)

"""An `optpipe.profile/v1` measured from the user's PyTorch stages (docs/runtime-shim.md,
"Measuring a profile from PyTorch").

    from optpipe_rt.torch import profile_stages
    profile = profile_stages(stages, example_input, microbatches=16, budget_bytes="40GiB",
                             output="profile.json")

`stages` is a list of torch.nn.Module, one per pipeline stage in model order, already on their
device; `example_input` is one microbatch of the first stage's input (a tensor or a tuple of
tensors). Each stage runs on the previous stage's output. Per stage, after `warmup` iterations,
the medians of `iterations` runs give:

- forward: the stage's forward (grad enabled);
- backward_input / backward_weight: torch's split backward as torch.distributed.pipelining runs
  it (`stage_backward_input`, then `stage_backward_weight` from the gradients it kept at the
  weight-consuming nodes); without it, B is `torch.autograd.grad(outputs, inputs,
  retain_graph=True)` and W the fused backward's time less B;
- activation_bytes A: the storages autograd saves in the forward (saved_tensors_hooks), each
  storage once, weights and buffers excluded;
- weight_grad_bytes G: the part of A saved by the autograd nodes that compute a weight gradient
  (a node with an edge to a parameter, directly or through nodes that save nothing, such as the
  transpose of a Linear's weight): the inputs W reads again, e.g. a Linear's input;
- checkpoint_bytes C: the stage input's bytes (at most A), so that a schedule may recompute;
  recompute_forward is left to default to forward (R runs the forward again);
- static bytes per rank: its stages' parameters and buffers, gradients in the parameters' dtype,
  Adam's two fp32 moments and an fp32 master copy of parameters that are not fp32 (16 bytes per
  parameter for fp32 and for bf16 weights).
"""

import json
import statistics
import time

import torch

_DEFAULT_P2P_MS = 0.05


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _tensors(values):
    return [v for v in values if isinstance(v, torch.Tensor)]


def _describe(values):
    parts = [f"{tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" if isinstance(v, torch.Tensor)
             else type(v).__name__ for v in values]
    return ", ".join(parts)


def _fresh_inputs(values):
    """A copy of the stage inputs with their own storages; floating tensors require grad."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.detach().clone()
            if v.is_floating_point() or v.is_complex():
                v.requires_grad_(True)
        out.append(v)
    return tuple(out)


def _weight_storages(module):
    return {t.untyped_storage().data_ptr()
            for t in list(module.parameters()) + list(module.buffers())}


def _saved_tensors_of(node):
    """The tensors an autograd node saved (its `_saved_*` attributes)."""
    found = []
    for name in dir(node):
        if not name.startswith("_saved_") or name.endswith(("_sym_sizes", "_sym_strides")):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError:      # already freed
            continue
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            if isinstance(v, torch.Tensor):
                found.append(v)
    return found


def _graph_nodes(outputs):
    seen, stack, order = set(), [o.grad_fn for o in outputs if o.grad_fn is not None], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        order.append(node)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return order


def _weight_grad_nodes(nodes, params):
    """Nodes that compute a weight gradient: an edge to a parameter's AccumulateGrad, directly or
    through nodes that save no tensors (views, transposes, casts)."""
    param_ids = {id(p) for p in params}
    memo = {}

    def reaches_param(node):
        if node in memo:
            return memo[node]
        memo[node] = False
        variable = getattr(node, "variable", None)
        if variable is not None:
            result = id(variable) in param_ids
        elif _saved_tensors_of(node):
            result = False
        else:
            result = any(n is not None and reaches_param(n) for n, _ in node.next_functions)
        memo[node] = result
        return result

    return [node for node in nodes if getattr(node, "variable", None) is None
            and any(n is not None and reaches_param(n) for n, _ in node.next_functions)]


def _saved_bytes(module, inputs):
    """(outputs, A, G, storage of each saved tensor) of one forward of `module` on `inputs`."""
    weights = _weight_storages(module)
    saved = {}                               # storage data_ptr -> nbytes

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in weights and t.device.type != "meta":
            saved[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _as_tuple(module(*inputs))
    outputs = [o for o in _tensors(out) if o.requires_grad]
    nodes = _graph_nodes(outputs)
    kept_for_w = set()
    for node in _weight_grad_nodes(nodes, list(module.parameters())):
        for t in _saved_tensors_of(node):
            key = t.untyped_storage().data_ptr()
            if key in saved:
                kept_for_w.add(key)
    return out, sum(saved.values()), sum(saved[k] for k in kept_for_w)


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


def _split_backward():
    try:
        from torch.distributed.pipelining._backward import (stage_backward_input,
                                                            stage_backward_weight)
        return stage_backward_input, stage_backward_weight
    except ImportError:
        return None


def _time_stage(module, inputs, grads, clock, warmup, iterations):
    """Median (F, B, W) in ms of one stage."""
    params = [p for p in module.parameters() if p.requires_grad]
    split = _split_backward()
    times = {"F": [], "B": [], "W": []}
    for it in range(warmup + iterations):
        x = _fresh_inputs(inputs)
        diff_inputs = [v for v in _tensors(x) if v.requires_grad]
        t0 = clock.now()
        outputs = [o for o in _tensors(_as_tuple(module(*x))) if o.requires_grad]
        t1 = clock.now()
        out_grads = grads[:len(outputs)]
        if split is not None:
            backward_input, backward_weight = split
            _, param_groups = backward_input(outputs, list(out_grads), diff_inputs, iter(params))
            t2 = clock.now()
            backward_weight(iter(params), param_groups)
            t3 = clock.now()
            w = t3 - t2
        else:
            if diff_inputs:
                torch.autograd.grad(outputs, diff_inputs, out_grads, retain_graph=True,
                                    allow_unused=True)
            t2 = clock.now()
            x = _fresh_inputs(inputs)
            outputs = [o for o in _tensors(_as_tuple(module(*x))) if o.requires_grad]
            t4 = clock.now()
            torch.autograd.backward(outputs, out_grads)
            w = max(clock.now() - t4 - (t2 - t1), 0.0)
        for p in params:
            p.grad = None
        if it >= warmup:
            times["F"].append((t1 - t0) * 1e3)
            times["B"].append((t2 - t1) * 1e3)
            times["W"].append(w * 1e3)
    return tuple(statistics.median(times[k]) for k in "FBW")


def _placement_ranks(placement, ranks, chunks):
    stages = ranks * chunks
    if placement == "loop":
        return [s % ranks for s in range(stages)]
    if placement == "vshape":
        if chunks != 2:
            raise ValueError(f"placement: \"vshape\" needs chunks_per_rank = 2, got {chunks}")
        return [s if s < ranks else 2 * ranks - 1 - s for s in range(stages)]
    if isinstance(placement, (list, tuple)) and len(placement) == stages:
        return list(placement)
    raise ValueError(f"placement: must be \"loop\", \"vshape\" or a list of {stages} ranks, "
                     f"got {placement!r}")


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
    if not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"microbatches: must be an integer >= 1, got {microbatches!r}")
    if not isinstance(chunks_per_rank, int) or chunks_per_rank < 1 \
            or len(stages) % chunks_per_rank:
        raise ValueError(f"chunks_per_rank: must divide the number of stages ({len(stages)}), "
                         f"got {chunks_per_rank!r}")
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
    if p2p_latency < 0:
        raise ValueError(f"p2p_latency: must be >= 0 (ms), got {p2p_latency}")
    if offload_gb_per_s is not None and offload_gb_per_s <= 0:
        raise ValueError(f"offload_gb_per_s: must be > 0, got {offload_gb_per_s}")

    clock = _Clock(device)
    entries, static = [], [0] * ranks
    for s, module in enumerate(stages):
        x = _fresh_inputs(inputs)
        try:
            out, act, kept = _saved_bytes(module, x)
        except Exception as err:  # noqa: BLE001 (reported with the stage named)
            what = "example_input" if s == 0 else f"stage {s - 1}'s output"
            raise ValueError(f"stages[{s}]: does not accept {what} ({_describe(inputs)}): "
                             f"{type(err).__name__}: {err}") from err
        outputs = [o for o in _tensors(out) if o.requires_grad]
        if not outputs and s < len(stages) - 1:
            raise ValueError(f"stages[{s}]: its output ({_describe(out)}) does not require grad, "
                             "so no backward can run through it")
        grads = tuple(torch.randn_like(o) for o in outputs)
        f, b, w = _time_stage(module, inputs, grads, clock, warmup, iterations)
        checkpoint = min(sum(t.numel() * t.element_size() for t in _tensors(inputs)), act)
        entries.append({"index": s, "forward": round(f, 6), "backward_input": round(b, 6),
                        "backward_weight": round(w, 6), "activation_bytes": act,
                        "weight_grad_bytes": kept, "checkpoint_bytes": checkpoint})
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
        with open(output, "w", encoding="utf-8") as f:
            json.dump(profile, f, indent=2)
            f.write("\n")
    return profile
